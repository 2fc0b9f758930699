"""`sheaf index copy`: one index copied into another, through the `IndexBackend` protocol only, so
any backend copies to any other (SQLite → Postgres to switch, Postgres → SQLite to switch back).

Copied: the library metadata, every paper's units (with their short ids) and its passages with
their vectors in every collection, and the whole embedding cache, so nothing is re-embedded on
the other side. Each paper is one `replace_paper` (one transaction); papers are written in the
order the source wrote them, so ties in a ranking break the same way on both. Idempotent: a
second copy rewrites the same rows, and papers the destination holds but the source does not
are removed, so afterwards the destination holds what the source holds.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sheaf.store.backend import IndexBackend

__all__ = ["copy_index"]


def copy_index(src: IndexBackend, dst: IndexBackend, *, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Copy `src` into `dst` (see the module docstring); returns what was copied."""
    say = progress or (lambda m: None)
    t0 = time.perf_counter()
    metas = src.export_papers()
    stats: dict[str, Any] = {"papers_with_metadata": len(metas)}
    stats["metadata"] = dst.upsert_papers(metas)
    cols = list(src.collections().values())
    order = src.papers_in_write_order()
    passages = 0
    for i, pid in enumerate(order, 1):
        body, objects = src.paper_units(pid)
        eps = [src.paper_passages(pid, ident) for ident in cols]
        st = dst.replace_paper(pid, body, objects, eps or None)  # every collection anew
        passages += st.passages
        if i % 50 == 0 or i == len(order):
            say(f"{i}/{len(order)} papers")
    keep = set(order) | {m.key for m in metas}
    gone = [pid for pid in dst.paper_ids() if pid not in keep]
    for pid in gone:
        dst.remove_paper(pid, prune_cache=False)
    stats["metadata"].update(dst.prune_metadata([m.key for m in metas]))
    stats.update(papers=len(order), passages=passages, removed=len(gone),
                 cache_entries=dst.put_cache_rows(src.cache_rows()),
                 collections=[c.key for c in cols], seconds=round(time.perf_counter() - t0, 2))
    return stats
