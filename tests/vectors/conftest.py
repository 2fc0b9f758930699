"""Each test of the embedding layer gets a machine cache of its own (`sheaf.vectors.machine_cache`):
nothing a test exports or measures (with an injected measurer, made-up rates among them) reaches the
user's cache folder or another test (the session's own cache, for every test: tests/conftest.py)."""
from __future__ import annotations

import pytest


def _point_at(mp: pytest.MonkeyPatch, root) -> None:
    mp.setenv("SHEAF_CACHE_DIR", str(root / "sheaf"))
    mp.setenv("XDG_CACHE_HOME", str(root))  # the default folder, for settings read from no environment


@pytest.fixture(autouse=True)
def _own_machine_cache(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.mktemp("machine-cache")
    _point_at(monkeypatch, root)
    return root / "sheaf"
