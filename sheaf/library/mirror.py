"""What Sheaf keeps of a library it reads in place (a Zotero data directory, a folder of PDFs):
small JSON files in its own home, written atomically, and a temporary folder for a process that
must not write the home (`sheaf status`)."""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

_SCRATCH: dict[str, str] = {}


def scratch_dir(name: str) -> Path:
    """A temporary folder for this process, removed at its exit (one per `name`)."""
    if name not in _SCRATCH:
        _SCRATCH[name] = tempfile.mkdtemp(prefix=f"sheaf-{name}-")
        atexit.register(shutil.rmtree, _SCRATCH[name], True)
    return Path(_SCRATCH[name])


def read_json(path: Path) -> Any:
    """A JSON file's value, or None when it is absent or damaged (a cache is then rebuilt)."""
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def file_hash(file: Path | str, cache: dict[str, list], seen: dict[str, list]) -> list | None:
    """[size, mtime_ns, sha256] of a file, hashed only when its size or mtime moved since `cache`
    (`seen` collects what this reading used); None when it cannot be read."""
    key = str(file)
    try:
        st = os.stat(file)
    except OSError:
        return None
    old = cache.get(key)
    if old and old[0] == st.st_size and old[1] == st.st_mtime_ns:
        seen[key] = old
        return old
    h = hashlib.sha256()
    try:
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    seen[key] = [st.st_size, st.st_mtime_ns, h.hexdigest()]
    return seen[key]
