"""Store layer: the index (SQLite implementation in `sqlite/`) and the per-paper artifacts."""
