"""Which index backend a command opens: `SHEAF_INDEX_URL` unset (or ``sqlite:PATH``) → the SQLite
file as always; ``postgresql://...`` → Postgres + pgvector.

The Postgres package (and psycopg with it) is reached only through `_pg`, a module imported on
first use: the SQLite default never loads it, whatever command runs.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError
from sheaf.core.lazy import lazy_module
from sheaf.core.settings import where
from sheaf.store.health import IndexHealth, StorageFailure
from sheaf.store.sqlite.backend import SqliteIndex
from sheaf.store.sqlite.db import sqlite3
from sheaf.store.sqlite.integrity import check_index, drop_collection, probe_file, quarantine_index, salvage_cache
from sheaf.store.sqlite.schema import SCHEMA_VERSION as SQLITE_SCHEMA_VERSION
from sheaf.store.sqlite.schema import open_index

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.core.settings import Settings
    from sheaf.store.backend import IndexBackend

if TYPE_CHECKING:
    import sheaf.store.postgres.backend as _pg
    import sheaf.store.postgres.db as _pg_db
    import sheaf.store.sqlite.memory_bm25 as _memory_bm25
    import sheaf.store.sqlite.memory_vectors as _memory_vectors
else:
    _pg = lazy_module("sheaf.store.postgres.backend")  # only for a postgresql:// URL
    _pg_db = lazy_module("sheaf.store.postgres.db")
    # numpy: only a warm server loads them
    _memory_bm25 = lazy_module("sheaf.store.sqlite.memory_bm25")
    _memory_vectors = lazy_module("sheaf.store.sqlite.memory_vectors")

__all__ = ["open_backend", "open_url", "is_postgres_url", "check_backend", "index_build_lock", "probe_index_file",
           "memory_engines", "prepare_index",
           "fresh_index_file", "SQLITE_SCHEMA_VERSION"]


def postgres_url(settings: Settings) -> str | None:
    """The index's Postgres URL, or None when the index is a SQLite file."""
    url = settings.index_url
    return url if url and settings.index_backend == "postgres" else None


def check_backend(settings: Settings, *, deep: bool = False) -> IndexHealth:
    """Can the configured index be used? (`sheaf.store.sqlite.integrity.check_index` for the
    SQLite file; for Postgres: reachable, of this schema, every collection readable.)"""
    if (url := postgres_url(settings)) is not None:
        return _pg.check(url)
    return check_index(settings.index_path, deep=deep)


def index_build_lock(settings: Settings, holder: str, say: Callable[[str], None]) -> AbstractContextManager[Any]:
    """The index's own build lock, beside the home's flock: on Postgres, one build at a time for
    every home and machine sharing the index (and the Dagster instance in it); nothing on SQLite,
    whose file belongs to one home."""
    if (url := postgres_url(settings)) is not None:
        return _pg_db.build_lock(url, holder, say)
    return nullcontext()


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("postgresql://", "postgres://"))


def open_url(url: str, *, readonly: bool = False, busy_timeout_ms: int = 10_000) -> IndexBackend:
    """The index at `url`: ``postgresql://...`` or ``sqlite:PATH`` (a bare path is a SQLite file)."""
    if is_postgres_url(url):
        return _pg.PostgresIndex.open(url, readonly=readonly)
    path = Path(url[len("sqlite:"):] if url.startswith("sqlite:") else url).expanduser()
    if readonly and not path.exists():
        raise SheafError("INDEX_NOT_FOUND", f"no index at {path}", {"path": str(path.absolute())},
                         hint="build the index first (sheaf build)")
    return SqliteIndex.open(path, readonly=readonly, busy_timeout_ms=busy_timeout_ms)


def open_backend(settings: Settings, *, readonly: bool = False, lexical_engine: Any = None,
                 vector_engine: Any = None) -> IndexBackend:
    """The configured index. Read-only and nothing built yet: INDEX_NOT_FOUND (saying where it
    was looked for); unreadable, unreachable or of another schema: BACKEND_UNAVAILABLE. The
    engines (a warm server's in-memory copies of a SQLite file) apply to the SQLite backend."""
    if (url := postgres_url(settings)) is not None:
        return _pg.PostgresIndex.open(url, readonly=readonly)
    path = Path(settings.index_path)
    if readonly and not path.exists():
        raise SheafError("INDEX_NOT_FOUND", f"no index at {path} (looked at {where(settings, 'index')})",
                         {"path": str(path.absolute()), "home": str(Path(settings.home).absolute())},
                         hint="run `sheaf build` to make it, or point SHEAF_HOME (or SHEAF_INDEX_FILE) at "
                              "the folder holding the index you built")
    return SqliteIndex.open(path, readonly=readonly, busy_timeout_ms=settings.sqlite_busy_timeout_ms,
                            lexical_engine=lexical_engine, vector_engine=vector_engine)


def probe_index_file(settings: Settings) -> dict[str, Any]:
    """The SQLite index file as `sheaf status` reports it, without opening a backend
    (`sheaf.store.sqlite.integrity.probe_file`): a problem is a field, never raised."""
    return probe_file(settings)


def memory_engines(settings: Settings, warm_weights: dict[str, Any]) -> tuple[Any, Any]:
    """The in-memory engines a long-lived query process keeps beside a SQLite index file:
    (FTS5's bm25 over a copy of the full-text tables, ranking each table with `warm_weights` ready
    at load; the vector matrix). Each answers exactly what SQLite would, or declines."""
    busy = settings.sqlite_busy_timeout_ms
    return (_memory_bm25.Bm25Accelerator(settings.index_path, busy_timeout_ms=busy, warm_weights=warm_weights),
            _memory_vectors.MatrixAccelerator(settings.index_path, busy_timeout_ms=busy))


def prepare_index(settings: Settings, *, full: bool, say: Callable[[str], None]) -> dict[str, Any]:
    """Make sure the index file can take writes. A file that is not a readable SQLite database
    is moved aside (``sheaf.db.corrupt-<ts>``) and its embedding cache salvaged; a damaged
    vector collection is dropped (its vectors are rebuilt from the cache); with `full`, SQLite's
    quick_check runs too and an index of a refused schema is also moved aside. Returns what
    was done (empty when nothing was). A storage problem (full, read-only, unreadable) is a
    `StorageFailure` naming its paths."""
    if settings.index_backend == "postgres":  # nothing to move aside: the server must answer
        health = check_backend(settings)
        if health.state in ("unavailable", "schema"):
            raise SheafError("BACKEND_UNAVAILABLE", health.message, health.details,
                             hint=health.details.get("hint") or "start the Postgres server, or fix SHEAF_INDEX_URL")
        return {}
    path = Path(settings.index_path)
    health = check_index(path, deep=full)
    out: dict[str, Any] = {"state": health.state}
    if health.state in ("not_sqlite", "corrupt") or (full and health.state == "schema"):
        reason = "corrupt" if health.state != "schema" else f"schema{health.details.get('found', '')}"
        moved = quarantine_index(path, reason)
        out.update(moved_to=str(moved), problem=health.message)
        say(f"! the index at {path} was unusable ({health.message}); moved it aside to {moved.name} "
            "and rebuilding it from the artifacts")
        try:
            conn = open_index(path, settings=settings)
        except sqlite3.DatabaseError as e:
            raise StorageFailure(e, [path.parent]) from None
        try:
            n = salvage_cache(moved, conn) if health.state != "schema" else 0
        finally:
            conn.close()
        out["embeddings_salvaged"] = n
        if n:
            say(f"  {n} cached embeddings salvaged from the damaged file")
    elif health.state == "schema":
        raise SheafError("BACKEND_UNAVAILABLE", health.message + f" ({path})", {"path": str(path), **health.details},
                         hint="run `sheaf build --full` to move it aside and rebuild, or use the Sheaf that wrote it")
    elif health.state == "unreadable":
        raise StorageFailure(health.message, [path])
    elif health.state == "damaged_collections":
        conn = open_index(path, settings=settings)
        try:
            for key in health.damaged_collections:
                drop_collection(conn, key)
        finally:
            conn.close()
        out["collections_dropped"] = health.damaged_collections
        say(f"! {health.message}: dropped {', '.join(health.damaged_collections)}; its vectors are rebuilt "
            "from the embedding cache")
    return out if len(out) > 1 else {}


def fresh_index_file(path: Path, say: Callable[[str], None]) -> SqliteIndex:
    """A new, empty SQLite index file at `path` (an evaluation's own), keeping the embedding cache of the one it replaces
    (vectors are content-addressed: still valid). Never rebuilt in place, so results never
    depend on the cache's history (schema 2's ``contentless_delete=1`` FTS tables kept
    replaced rows in the bm25 statistics; schema 3 deletes exactly, but rowids, which break
    score ties, still follow the history)."""

    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.with_name(path.name + ".old")
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists():
            p.replace(Path(str(old) + suffix))
    conn = open_index(path)
    if old.exists():  # an unreadable old file salvages nothing: embed afresh
        kept = salvage_cache(old, conn)
        say(f"kept {kept} cached vectors of the previous eval index")
    for suffix in ("", "-wal", "-shm"):
        Path(str(old) + suffix).unlink(missing_ok=True)
    return SqliteIndex(conn, path)
