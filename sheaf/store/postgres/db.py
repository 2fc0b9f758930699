"""The one way to reach the Postgres index: psycopg 3 connections, errors as envelopes, retries.

Only this package imports psycopg, and only a `postgresql://` `SHEAF_INDEX_URL` reaches this
package (`sheaf.store.select`): the SQLite default never loads it.

Every failure to reach or use the server becomes ``BACKEND_UNAVAILABLE`` naming the host and
the database (never the password) with a hint; a write that lost a race with another writer
(a short id taken meanwhile, a deadlock, a serialization failure) is retried whole.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from pgvector.psycopg import register_vector
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from sheaf.core.envelope import SheafError
from sheaf.core.settings import redact_url

__all__ = ["psycopg", "Where", "build_lock", "connect", "one", "unavailable", "retrying", "snapshot", "RETRYABLE"]

T = TypeVar("T")

#: A write that loses a race with another writer is retried whole (after a rollback).
RETRYABLE = (pg_errors.UniqueViolation, pg_errors.DeadlockDetected, pg_errors.SerializationFailure,
             pg_errors.LockNotAvailable)
MAX_ATTEMPTS = 8
#: The session advisory lock one `sheaf build` at a time holds on a Postgres index (any machine).
LOCK_BUILD = 0x5E4F0003


class Where:
    """Host, port and database of a URL, and the URL fit to show (no password)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.shown = redact_url(url)
        try:
            d = conninfo_to_dict(url)
        except psycopg.ProgrammingError as e:
            raise SheafError("BAD_INPUT", f"SHEAF_INDEX_URL is not a Postgres URL: {self.scrub(str(e))}",
                             {"url": self.shown}, hint="postgresql://user@host:port/database") from None
        self.password = d.get("password") or None
        self.host = d.get("host") or "localhost"
        self.port = d.get("port") or "5432"
        self.dbname = d.get("dbname") or d.get("user") or "postgres"

    def scrub(self, text: str) -> str:
        """`text` with the password (if any) replaced."""
        if self.password:
            text = text.replace(str(self.password), "***")
        return text.replace(self.url, self.shown)

    def details(self) -> dict[str, Any]:
        return {"backend": "postgres", "host": self.host, "port": self.port, "database": self.dbname,
                "url": self.shown}


def one(cur: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    """The row of a query that always returns one (a count, an aggregate, a lock attempt)."""
    row = cur.fetchone()
    if row is None:  # pragma: no cover - SQL that always yields a row
        raise RuntimeError("the query returned no row")
    return tuple(row)


def unavailable(where: Where, e: BaseException | str, hint: str | None = None) -> SheafError:
    """BACKEND_UNAVAILABLE for a failure reaching or using the server at `where`."""
    msg = where.scrub(str(e).strip().replace("\n", " ")) if not isinstance(e, str) else e
    if hint is None:
        low = msg.lower()
        if "password" in low or "role" in low or "authentication" in low:
            hint = "check the user and password of SHEAF_INDEX_URL (or ~/.pgpass, PGPASSWORD)"
        elif "does not exist" in low and "database" in low:
            hint = f"create the database first (createdb {where.dbname}), or fix SHEAF_INDEX_URL"
        else:
            hint = "start the Postgres server, or fix SHEAF_INDEX_URL; unset it to use the SQLite file"
    return SheafError("BACKEND_UNAVAILABLE",
                      f"the Postgres index at {where.host}:{where.port}, database {where.dbname}, is "
                      f"unavailable: {msg}", where.details(), hint=hint)


#: The sessions' ``work_mem``: a claim's some-words ranking at 100k passages sorts ~60,000 postings
#: (8 MB), which spilled to disk under the server's default of 4 MB.
WORK_MEM = "64MB"


def connect(where: Where, *, connect_timeout: int = 10, vectors: bool = True) -> psycopg.Connection:
    """An autocommit connection (reads run in `snapshot`, writes in `retrying` transactions);
    pgvector's types registered when the extension is there (`vectors`)."""
    try:
        conn = psycopg.connect(where.url, autocommit=True, connect_timeout=connect_timeout,
                               application_name="sheaf")
    except psycopg.Error as e:
        raise unavailable(where, e) from None
    try:  # a ranking sorts a few 10k postings: in memory, not in temp files (the default 4 MB spills)
        conn.execute(f"SET work_mem = '{WORK_MEM}'")
        # A ranking's statement is the same text for every query of as many terms: psycopg prepares
        # it after 5 runs, and Postgres would then plan it once for any terms (a term list's rows
        # unknown: plans fit for "the" used for a code that holds 3 rows, or the other way round).
        conn.execute("SET plan_cache_mode = force_custom_plan")
    except psycopg.Error as e:
        conn.close()
        raise unavailable(where, e) from None
    if vectors:
        try:
            register_vector(conn)
        except psycopg.ProgrammingError:  # no vector type yet: the schema step creates it
            pass
        except psycopg.Error as e:
            conn.close()
            raise unavailable(where, e) from None
    return conn


@contextmanager
def snapshot(conn: psycopg.Connection, where: Where) -> Iterator[psycopg.Connection]:
    """One read-only REPEATABLE READ transaction: several statements see one state of the index
    (a paper's old rows or its new rows, never a mix). Nested use joins the outer one."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        yield conn
        return
    try:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield conn
    except psycopg.OperationalError as e:
        raise unavailable(where, e) from None


def retrying(conn: psycopg.Connection, where: Where, body: Callable[[psycopg.Connection], T],
             hook: Callable[[str], None] | None = None) -> T:
    """`body(conn)` in one READ COMMITTED transaction, committed once; rolled back and run again
    (a few times, with a short random wait) when it lost a race with another writer."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            with conn.transaction():
                out = body(conn)
                if hook is not None:
                    hook("before_commit")
            return out
        except RETRYABLE:
            if attempt == MAX_ATTEMPTS:
                raise
            time.sleep(random.uniform(0.005, 0.05) * attempt)
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            raise unavailable(where, e) from None
    raise AssertionError("unreachable")  # pragma: no cover


@contextmanager
def build_lock(url: str, holder: str, say: Callable[[str], None], *, poll: float = 0.5) -> Iterator[None]:
    """Hold the index's build lock (a session advisory lock, on a connection of its own named
    `holder`) for the block, waiting while another build holds it: one build at a time per Postgres
    index and so per Dagster instance, whichever machine or home it runs from. The server drops
    the lock when the holder's connection goes, so a killed build never blocks the next one."""
    where = Where(url)
    try:
        conn = psycopg.connect(where.url, autocommit=True, connect_timeout=10, application_name=holder[:63])
    except psycopg.Error as e:
        raise unavailable(where, e) from None
    try:
        said = False
        while not one(conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_BUILD,)))[0]:
            if not said:
                row = conn.execute(
                    "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid::bigint = %s "
                    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                    (LOCK_BUILD,)).fetchone()
                say(f"another sheaf build is running on the Postgres index at {where.host}:{where.port}, database "
                    f"{where.dbname} ({row[0] if row and row[0] else 'holder unknown'}); waiting…")
                said = True
            time.sleep(poll)
        yield
    except psycopg.Error as e:
        raise unavailable(where, e) from None
    finally:
        conn.close()
