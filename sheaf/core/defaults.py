"""The query commands' choices and defaults, in one place for the library (`sheaf.search.retriever`)
and the CLI's parser (which must stay light: nothing is imported here)."""
from __future__ import annotations

__all__ = ["MODES", "KINDS", "DEFAULT_LIMIT", "DEFAULT_PER_PAPER", "DEFAULT_WINDOW"]

MODES = ("lexical", "semantic", "hybrid")
KINDS = ("body", "object", "all")
DEFAULT_LIMIT = 10
DEFAULT_PER_PAPER = 2
DEFAULT_WINDOW = 2
