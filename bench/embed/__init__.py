"""Benchmarks of the embedding backends: speed and retrieval quality."""
