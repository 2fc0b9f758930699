"""Writing a file whole or not at all; holding a file lock."""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def locked(path: Path, poll: Callable[[], None] | None = None, interval: float = 0.1) -> Iterator[None]:
    """An exclusive ``fcntl`` lock on the file `path` (made if missing), held for the block.
    While another process holds it, `poll` (a build's stop check) is called every `interval`
    seconds: what it raises ends the wait. The lock goes with its process, however that ends."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if poll is not None:
                    poll()
                time.sleep(interval)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
