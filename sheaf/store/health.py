"""What both index backends report about their health: the result of a check, the kind of a
storage failure (disk full, read-only, corrupt), and the digest of a paper's units that the
doctor compares with its artifacts."""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: Substrings of SQLite errors that mean the file itself is damaged (not a lock, not a full disk).
CORRUPTION_MARKERS = ("file is not a database", "database disk image is malformed", "malformed",
                      "file is encrypted", "database corrupt", "vtable constructor failed",
                      "no such table: vec_", "no such table: passages_")


@dataclass(slots=True)
class IndexHealth:
    """What `check_index` found. `state`: ok | missing | empty | not_sqlite | corrupt | schema |
    damaged_collections | unreadable."""

    path: str
    state: str
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    damaged_collections: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.state in ("ok", "missing", "empty")

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "state": self.state, "message": self.message, "details": self.details,
                "damaged_collections": self.damaged_collections}


def artifact_unit_digest(body_rows: Iterable[dict[str, Any]], object_rows: Iterable[dict[str, Any]]) -> str:
    """`unit_digest` computed from the units artifacts (Parquet rows)."""
    h = hashlib.sha256()
    for r in sorted(body_rows, key=lambda r: r["unit_id"]):
        h.update(f"{r['unit_id']}\0{r['text']}\0".encode())
    for r in sorted(object_rows, key=lambda r: r["unit_id"]):
        h.update(("\0".join(x or "" for x in (r["unit_id"], r["caption"], r["table_text"], r["nearby_text"]))
                  + "\0").encode())
    return h.hexdigest()


def zero_filled(stats: dict[str, dict[str, int]], collection_key: str | None) -> dict[str, dict[str, int]]:
    """`stats` with every count `paper_index_stats` reports present (0 where a paper has none)."""
    for s in stats.values():
        for k in ("body_units", "object_units", "body_fts", "object_fts"):
            s.setdefault(k, 0)
        if collection_key:
            for k in ("passages", "vectors", "dangling_passages"):
                s.setdefault(k, 0)
    return stats


DISK_FULL_MARKERS = ("database or disk is full", "no space left on device", "errno 28", "disk i/o error",
                     "file too large", "errno 27")


READONLY_MARKERS = ("attempt to write a readonly database", "read-only file system", "readonly database",
                    "errno 30", "permission denied", "errno 13", "operation not permitted", "errno 1]")


def is_corruption(exc: BaseException | str) -> bool:
    text = str(exc).lower()
    return any(m in text for m in CORRUPTION_MARKERS)


def storage_problem(exc: BaseException | str) -> str | None:
    """'disk full' / 'read-only' / 'corrupt' when an error (or its message) is a storage fault."""
    text = str(exc).lower()
    if any(m in text for m in DISK_FULL_MARKERS):
        return "disk full"
    if any(m in text for m in READONLY_MARKERS):
        return "read-only"
    if is_corruption(text):
        return "corrupt"
    return None


class StorageFailure(Exception):
    """The index's storage failed at `paths` (a full or read-only disk, a file that cannot be
    read): the caller says so, naming them."""

    def __init__(self, problem: BaseException | str, paths: list[Any]) -> None:
        super().__init__(str(problem))
        self.problem = problem
        self.paths = paths
