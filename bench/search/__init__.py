"""Benchmarks of the queries: speed, retrieval quality, known items."""
