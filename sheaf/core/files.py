"""Writing a file whole or not at all."""
from __future__ import annotations

import os
from pathlib import Path

from sheaf.core.lazy import lazy_module

tempfile = lazy_module("tempfile")  # (and shutil, random, bz2, lzma with it): only a write needs it


def write_atomic(path: Path, data: bytes, prefix: str | None = None) -> None:
    """`data` to a temp file beside `path` (named `prefix`..., default `.<name>.`), through the
    descriptor that created it, then renamed over `path` (atomic on POSIX). The payload is
    serialized before the temp file exists, so a failed serialization leaves nothing behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix if prefix is not None else f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
