"""The one way to open the SQLite index: pysqlite3 + sqlite-vec + pragmas (docs/index-and-embeddings.md, "One file").

The stdlib `sqlite3` of these machines is built without extension loading, so every
connection goes through `connect()`, which uses `pysqlite3` (bundled SQLite with FTS5),
loads sqlite-vec, and sets WAL, `busy_timeout` and foreign keys. Connections are opened in
autocommit mode (`isolation_level=None`): writers use `transaction()` for explicit
`BEGIN IMMEDIATE ... COMMIT`, never the driver's implicit transactions.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:  # pysqlite3 ships no types; it has the stdlib module's API, so its types check
    import sqlite3
else:
    import pysqlite3.dbapi2 as sqlite3

from sheaf.core.envelope import SheafError

__all__ = ["sqlite3", "connect", "transaction", "read_snapshot", "connected_to", "DEFAULT_BUSY_TIMEOUT_MS", "varints"]

DEFAULT_BUSY_TIMEOUT_MS = 10_000
PAGE_SIZE = 8192

Connection: TypeAlias = sqlite3.Connection

_VEC_PATH: str | None = None


def vec_extension_path() -> str:
    """The sqlite-vec loadable extension, located without importing the `sqlite_vec` package
    (its `__init__` imports numpy, ~50-130 ms: too much for a cold `sheaf search`)."""
    global _VEC_PATH
    if _VEC_PATH is None:
        from importlib.util import find_spec

        spec = find_spec("sqlite_vec")
        if spec is None or not spec.submodule_search_locations:  # pragma: no cover
            raise SheafError("BACKEND_UNAVAILABLE", "the sqlite-vec package is not installed",
                             hint="pip install sqlite-vec")
        _VEC_PATH = str(Path(next(iter(spec.submodule_search_locations))) / "vec0")
    return _VEC_PATH


def connect(
    path: str | Path,
    *,
    create: bool = True,
    readonly: bool = False,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
) -> sqlite3.Connection:
    """Open the index file with sqlite-vec loaded, WAL, `busy_timeout` and foreign keys on.

    `path` may be ``":memory:"``. With `create=False` (or `readonly=True`) a missing file
    raises `SheafError(INDEX_NOT_FOUND)` instead of creating an empty database.
    """
    memory = str(path) == ":memory:"
    if not memory:
        p = Path(path)
        if not p.exists():
            if readonly or not create:
                raise SheafError(
                    "INDEX_NOT_FOUND", f"no index at {p}", {"path": str(p)},
                    hint="build the index first (sheaf build)",
                )
            p.parent.mkdir(parents=True, exist_ok=True)
    if readonly and not memory:
        uri = Path(path).resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None,
                               timeout=busy_timeout_ms / 1000, check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), isolation_level=None,
                               timeout=busy_timeout_ms / 1000, check_same_thread=False)
    try:
        conn.enable_load_extension(True)
        conn.load_extension(vec_extension_path())  # = sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        if not readonly and not memory:
            if conn.execute("PRAGMA page_count").fetchone()[0] == 0:
                # A new file: 8 KiB pages hold five 1.5 KB vectors of the embedding cache
                # where 4 KiB pages hold two (-25% size); must precede WAL.
                conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
    except Exception:
        conn.close()
        raise
    return conn


@functools.lru_cache(maxsize=64)
def _resolved(path: str) -> Path:
    return Path(path).resolve()


def connected_to(conn: Any, path: Path) -> bool:
    """Whether `conn`'s main database is the file `path` (resolved): the server's in-memory
    copies answer only for their own index file."""
    try:
        row = conn.execute("PRAGMA database_list").fetchone()
    except Exception:  # noqa: BLE001 - a closed or foreign connection: not ours
        return False
    return bool(row and row[2]) and _resolved(row[2]) == path


@contextmanager
def read_snapshot(conn: Any) -> Iterator[None]:
    """One read transaction around several statements (a ranking, then the base rows it names),
    so they see one state of the index; nothing when the caller already has one open."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


@contextmanager
def transaction(conn: sqlite3.Connection, *, immediate: bool = True) -> Iterator[sqlite3.Connection]:
    """`BEGIN IMMEDIATE` ... `COMMIT`, or `ROLLBACK` when the body raises (then re-raise).

    Nested use is refused: SQLite has no nested transactions and a silent join would commit
    the outer work early.
    """
    if conn.in_transaction:
        raise RuntimeError("transaction() called inside an open transaction")
    conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


def varints(blob: bytes) -> list[int]:
    """SQLite/FTS5 varints (big-endian 7-bit groups; a 9th byte holds 8 bits)."""
    out: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        v = 0
        for j in range(9):
            c = blob[i]
            i += 1
            if j == 8:
                v = (v << 8) | c
                break
            v = (v << 7) | (c & 0x7F)
            if c < 0x80:
                break
        out.append(v)
    return out
