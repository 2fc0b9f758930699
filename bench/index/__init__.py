"""Benchmarks of the index: writing it, and the Postgres backend against SQLite."""
