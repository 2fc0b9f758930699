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
from sheaf.store.sqlite.backend import SqliteIndex
from sheaf.store.sqlite.integrity import check_index, probe_file
from sheaf.store.health import IndexHealth

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.core.settings import Settings
    from sheaf.store.backend import IndexBackend

_pg = lazy_module("sheaf.store.postgres.backend")  # only for a postgresql:// URL
_pg_db = lazy_module("sheaf.store.postgres.db")

__all__ = ["open_backend", "open_url", "is_postgres_url", "check_backend", "index_build_lock", "probe_index_file",
           "memory_engines"]


def check_backend(settings: Settings, *, deep: bool = False) -> IndexHealth:
    """Can the configured index be used? (`sheaf.store.sqlite.integrity.check_index` for the
    SQLite file; for Postgres: reachable, of this schema, every collection readable.)"""
    if settings.index_backend == "postgres":
        return _pg.check(settings.index_url)
    return check_index(settings.index_path, deep=deep)


def index_build_lock(settings: Settings, holder: str, say: Callable[[str], None]) -> AbstractContextManager[Any]:
    """The index's own build lock, beside the home's flock: on Postgres, one build at a time for
    every home and machine sharing the index (and the Dagster instance in it); nothing on SQLite,
    whose file belongs to one home."""
    if settings.index_backend == "postgres":
        return _pg_db.build_lock(settings.index_url, holder, say)
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
    if settings.index_backend == "postgres":
        return _pg.PostgresIndex.open(settings.index_url, readonly=readonly)
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


_memory_bm25 = lazy_module("sheaf.store.sqlite.memory_bm25")  # numpy: only a warm server loads them
_memory_vectors = lazy_module("sheaf.store.sqlite.memory_vectors")


def memory_engines(settings: Settings, warm_weights: dict[str, Any]) -> tuple[Any, Any]:
    """The in-memory engines a long-lived query process keeps beside a SQLite index file:
    (FTS5's bm25 over a copy of the full-text tables, ranking each table with `warm_weights` ready
    at load; the vector matrix). Each answers exactly what SQLite would, or declines."""
    busy = settings.sqlite_busy_timeout_ms
    return (_memory_bm25.Bm25Accelerator(settings.index_path, busy_timeout_ms=busy, warm_weights=warm_weights),
            _memory_vectors.MatrixAccelerator(settings.index_path, busy_timeout_ms=busy))
