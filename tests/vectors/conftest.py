"""Each test of the embedding layer gets a machine cache of its own (`sheaf.vectors.machine_cache`):
nothing a test exports or measures (with an injected measurer, made-up rates among them) reaches the
user's cache folder or another test."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_machine_cache(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.mktemp("machine-cache")
    monkeypatch.setenv("SHEAF_CACHE_DIR", str(root / "sheaf"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))  # the default folder, for settings read from no environment
    return root / "sheaf"
