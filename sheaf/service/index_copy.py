"""`sheaf index copy --to URL`: the configured index copied into another backend (SQLite ↔ Postgres),
embedding cache included, so switching `SHEAF_INDEX_URL` (or switching back) re-embeds nothing."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sheaf.core.envelope import SheafError, ok
from sheaf.core.settings import redact_url
from sheaf.service.requests import Outcome
from sheaf.store.copy import copy_index
from sheaf.store.select import open_backend, open_url

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

__all__ = ["copy"]


def copy(settings: Settings, to: str, *, source: str | None = None, progress: Callable[[str], None] = lambda m: None) -> Outcome:
    """Copy the configured index (or `source`, a URL) into `to` (``postgresql://...`` or
    ``sqlite:PATH``); idempotent. Then compare both (bench/index/parity.py) before switching."""
    if not to.startswith(("postgresql://", "postgres://", "sqlite:")):
        raise SheafError("BAD_QUERY", f"--to must be postgresql://... or sqlite:PATH, not {redact_url(to)!r}",
                         {"to": redact_url(to)}, hint="sheaf index copy --to postgresql://user@host:5432/sheaf")
    src = open_url(source, readonly=True) if source else open_backend(settings, readonly=True)
    try:
        dst = open_url(to)
        try:
            if dst.location == src.location:
                raise SheafError("BAD_QUERY", "the source and the destination are the same index",
                                 {"index": src.location}, hint="give another --to")
            progress(f"copying {src.location} → {dst.location}")
            stats = copy_index(src, dst, progress=progress)
        finally:
            dst.close()
    finally:
        src.close()
    data = {"from": src.location, "to": dst.location, "from_backend": src.kind, "to_backend": dst.kind, **stats}
    return Outcome(ok("index", data, count=stats["papers"], next_actions=[
        "compare both before switching: python -m bench.index.parity (or query both)",
        f"then set SHEAF_INDEX_URL={dst.location}" + (" (with its password)" if "***" in dst.location else "")]))
