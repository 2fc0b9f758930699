"""Core layer: typed records, settings, errors and the result envelope (imports nothing of ours)."""
