"""Sheaf: incremental indexing and retrieval for a paper library (Dagster-free core)."""

__version__ = "0.1.0"
