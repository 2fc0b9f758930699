"""Shared fixtures. Keep this small: heavy things are session-scoped and lazy."""
from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (real test data); tests using it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real test data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def embedder():
    """The default embedding model (offline MiniLM), loaded once per test session."""
    from sheaf.embed import Embedder

    e = Embedder(batch_size=32)
    e.load()
    return e
