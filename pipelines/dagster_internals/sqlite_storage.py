"""The SQLite storages Sheaf's dagster.yaml names (`SheafEventLogStorage`, `SheafRunStorage`, and
`SheafShardedEventLogStorage` for homes in Dagster's per-run layout): Dagster's own, with engines
kept for the process and a step's events written as one transaction."""
from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from dagster._core.storage.event_log.schema import (  # the tables the batched writes use
    AssetCheckExecutionsTable,
    SqlEventLogStorageMetadata,
    SqlEventLogStorageTable,
)
from dagster._core.storage.event_log.sqlite.consolidated_sqlite_event_log import (
    SQLITE_EVENT_LOG_FILENAME,
    ConsolidatedSqliteEventLogStorage,
)
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from sqlalchemy import and_, bindparam, text

from pipelines.dagster_internals.storage_base import (
    PartitionsSnapshot,
    known_table,
    one_kind_of_asset_event,
    partition_evaluations,
)

#: Engines kept per database file: the index (or the one consolidated file) and recent run shards.
_ENGINES_KEPT = 8


class _EngineCache:
    """One SQLAlchemy engine per database file for the life of the process (Dagster's SQLite
    storages create one per connection), its connections with `synchronous=NORMAL`."""

    _sheaf_engines: dict[str, Any]
    _sheaf_engines_pid: int = 0

    def _sheaf_engine(self, conn_string: str) -> Any:
        from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
        from sqlalchemy import create_engine, event

        if getattr(self, "_sheaf_engines_pid", 0) != os.getpid():  # a forked child gets engines of its own
            self._sheaf_engines, self._sheaf_engines_pid = {}, os.getpid()
        engine = self._sheaf_engines.get(conn_string)
        if engine is None:
            engine = create_engine(conn_string, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS,
                                                              "check_same_thread": False})

            @event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.close()

            while len(self._sheaf_engines) >= _ENGINES_KEPT:
                self._sheaf_engines.pop(next(iter(self._sheaf_engines))).dispose()
            self._sheaf_engines[conn_string] = engine
        return engine

    def _sheaf_dispose_engines(self) -> None:
        for engine in getattr(self, "_sheaf_engines", {}).values():
            engine.dispose()
        self._sheaf_engines = {}


class _PooledSqlite(PartitionsSnapshot, _EngineCache):
    """Dagster's SQLite event log storages with one engine per database file for the life of
    the process, instead of a new engine (connect, compile every statement afresh, close, which
    checkpoints the WAL) for each of the ~7 connections an event takes. Measured on a 200-paper
    orchestration-only rebuild: that open/compile/close cycle was ~60 of the 99 s spent storing
    events. Connections run with `synchronous=NORMAL` (WAL): a commit no longer waits for an
    fsync; a power cut can lose the last events (never corrupt the file), which makes their
    papers read as not built, so the next build redoes them.

    The storage's folder comes from the instance it is registered with (`<DAGSTER_HOME>/history`),
    so a copied or moved home keeps working: dagster.yaml names no path.
    """

    _sheaf_subdir = "history"

    def __init__(self, inst_data: Any = None, base_dir: str | None = None) -> None:
        self._sheaf_inst_data = inst_data
        if base_dir is not None:
            self._sheaf_init(base_dir)

    def _sheaf_init(self, base_dir: str) -> None:
        super().__init__(base_dir, inst_data=self._sheaf_inst_data)  # type: ignore[call-arg]

    def register_instance(self, instance: Any) -> None:
        if not hasattr(self, "_base_dir"):
            self._sheaf_init(os.path.join(instance.root_directory, self._sheaf_subdir))
        super().register_instance(instance)  # type: ignore[misc]

    @classmethod
    def config_type(cls) -> Any:
        from dagster import Field, StringSource

        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> Any:
        return cls(inst_data=inst_data, **config_value)

    def has_table(self, table_name: str) -> bool:
        """Dagster asks this on every asset event (a new engine each time)."""
        return known_table(self, table_name, super().has_table)  # type: ignore[misc]

    @property
    def supports_partition_subset_in_asset_materialization_planned_events(self) -> bool:
        """One planned event per asset for a run over a range of papers, not one per paper (what
        `DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS` turns on; a paper's failure is
        recorded in its own materialization's metadata, so per-paper planned events add nothing)."""
        return True

    def dispose(self) -> None:
        super().dispose()  # type: ignore[misc]
        self._sheaf_dispose_engines()


#: Page size of a new events database (SQLite's default is 4 KiB). Dagster's events are 1-3.5 KB
#: of JSON each: in 4 KiB pages a 2.8 KB materialization takes a page nearly alone (the 1.2 KB
#: left fits no other such row), and a check's execution row, inserted small when the check is
#: planned and rewritten ~1.8 KB when it is evaluated, splits the pages it grows in. A
#: 1,000-paper first build, the same build into each (docs/benchmarks.md): 75.6 MB of events in
#: 4 KiB pages, 57.5 MB in 16 KiB, 55.9 MB in 64 KiB. 16 KiB keeps most of the gain; larger pages
#: would make each small commit write larger WAL frames (reasoned, not measured).
EVENTS_PAGE_SIZE = 16384


def _new_events_file(base_dir: str) -> None:
    """Create the events database of `base_dir` with `EVENTS_PAGE_SIZE` pages, if it is not there
    yet or is empty (a process killed before SQLite wrote its first page): a database's page size
    is fixed when its first page is written, and Dagster would create the file with the default.
    An existing file keeps its pages (a WAL database cannot change them)."""
    path = os.path.join(base_dir, f"{SQLITE_EVENT_LOG_FILENAME}.db")
    if os.path.exists(path) and os.path.getsize(path) > 0:
        return
    os.makedirs(base_dir, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.execute(f"PRAGMA page_size={EVENTS_PAGE_SIZE}")
        conn.execute("PRAGMA journal_mode=WAL")  # writes the first page, as Dagster's `_init_db` sets it
    finally:
        conn.close()


class SheafEventLogStorage(_PooledSqlite, ConsolidatedSqliteEventLogStorage):
    """One events database, `<DAGSTER_HOME>/history/event_log.db` (Dagster's consolidated layout:
    each asset event is written once, not to a run shard and again to an index shard).

    Dagster creates the file's tables only when the file does not exist; a process killed while
    creating them (one table, then its indexes, then the next) leaves a file with some of them,
    which every later process would fail on ("NoSuchTableError: asset_keys", seen in CI). Here a
    file missing any of Dagster's tables is initialised again (Dagster's `_init_db` creates the
    missing ones), and an index missing from a table that is there is created. (Dagster's alembic
    stamp cannot tell: `_init_db` never commits it, so no file of this storage carries one.)"""

    def _sheaf_init(self, base_dir: str) -> None:
        _new_events_file(base_dir)
        super()._sheaf_init(base_dir)
        missing_tables, missing_indexes = self._sheaf_missing_schema()
        if missing_tables:
            self._init_db()
            missing_tables, missing_indexes = self._sheaf_missing_schema()
        engine = self._sheaf_engine(self._conn_string)
        for index in missing_indexes:
            index.create(bind=engine, checkfirst=True)

    def _sheaf_missing_schema(self) -> tuple[list[str], list[Any]]:
        """(the tables of Dagster's event log schema missing from the file, the indexes missing
        from tables that are there); one catalogue read."""
        with self._connect() as conn:
            names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
        tables = SqlEventLogStorageMetadata.tables
        missing_tables = [t for t in tables if t not in names]
        return missing_tables, [ix for t, table in tables.items() if t in names
                                for ix in table.indexes if ix.name and ix.name not in names]

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        shared = self.__dict__.get("_sheaf_shared")
        if shared is not None and shared[0] == threading.get_ident():  # inside a batch of this thread
            yield shared[1]
            return
        with self._sheaf_engine(self._conn_string).connect() as conn, conn.begin():
            yield conn

    def store_event_batch(self, events: Sequence[Any]) -> None:
        """A batch in one transaction, where Dagster's SQLite storage writes a batch event by event
        (a transaction each, two for a check's evaluation: the event, then the check's execution
        row). A step's materializations (or observations) of many papers: the asset's latest entry
        written once, with the last of them, as Dagster's Postgres storage does with a batch. A
        check's evaluations of many papers (`log_check_evaluations`): see
        `_sheaf_store_check_evaluations`. Any other batch (the planned events of a run): each
        event stored by Dagster's own `store_event`, on the batch's connection. Dagster sends
        batches when `DAGSTER_EVENT_BATCH_SIZE` is set (`pipelines.build.runs.dagster_env`); if a batch
        fails, nothing of it is written and Dagster stores its events one by one."""
        if one_kind_of_asset_event(events):
            with self.index_transaction() as conn:
                ids = self._sheaf_insert_events(conn, events)
                self._store_asset_event_tags(conn, events, ids)
                self._store_asset_event(conn, events[-1], ids[-1])
            return
        if partition_evaluations(events):
            with self.index_transaction() as conn:
                self._sheaf_store_check_evaluations(conn, events)
            return
        with self._connect() as conn:
            self.__dict__["_sheaf_shared"] = (threading.get_ident(), conn)
            try:
                for e in events:
                    self.store_event(e)
            finally:
                self.__dict__["_sheaf_shared"] = None


    def _sheaf_insert_events(self, conn: Any, events: Sequence[Any]) -> list[int]:
        """Insert `events` (their storage ids, in event order); see `_sheaf_insert_rows`."""
        return self._sheaf_insert_rows(conn, [self._event_to_row(e) for e in events])

    def _sheaf_insert_rows(self, conn: Any, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        """Insert events' `rows` (Dagster's `_event_to_row`) as one statement run for all of
        them: SQLAlchemy's "insertmanyvalues" sends them as multi-row INSERTs of its cached
        one-row statement (as Dagster's Postgres storage inserts a batch), not a statement each.
        Their storage ids, in row order (`sort_by_parameter_order`). A multi-row `values(rows)`
        statement, compiled anew for each batch, took ~0.25 ms a row to compile; this ~0.09."""
        if not rows:
            return []
        T = SqlEventLogStorageTable
        ids = [int(r[0]) for r in conn.execute(T.insert().returning(T.c.id, sort_by_parameter_order=True), list(rows))]
        if len(ids) != len(rows):  # pragma: no cover - SQLite returns a row per inserted row
            raise RuntimeError(f"{len(rows)} events inserted, {len(ids)} ids returned")
        return ids

    def _store_asset_check_evaluation_planned(self, event: Any, event_id: int | None) -> None:
        """Dagster's: a row of the check's executions for each paper of the run, PLANNED, each
        holding the planned event. Two changes:

        - Dagster serialises that event again for each paper's row and compiles a multi-row
          statement (~0.55 s a run of 100 papers for the chain's five checks under cProfile); here
          it is serialised once and the rows inserted as one statement run for all;
        - a row holds the planned event without the run's partitions (each row names its own, and
          the event log keeps the whole event): with them, a row of a run of 200 papers held
          ~2.9 KB that its evaluation (~1.8 KB) later overwrote in place, and the table's pages
          stayed 40% empty (a 1,000-paper first build: 16.5 KB a paper of file for 9.9 of rows;
          12.1 with these rows). Nothing reads a planned row's partitions: Dagster's
          record keeps its event for its step and run (and accepts none at all)."""
        from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
        from dagster_shared.serdes import serialize_value

        planned = event.dagster_event.event_specific_data
        keys = planned.partitions_subset.get_partition_keys() if planned.partitions_subset else [None]
        if planned.partitions_subset is not None:
            event = event._replace(dagster_event=event.dagster_event._replace(
                event_specific_data=type(planned)(asset_key=planned.asset_key, check_name=planned.check_name)))
        common = dict(asset_key=planned.asset_key.to_string(), check_name=planned.check_name, run_id=event.run_id,
                      execution_status=AssetCheckExecutionRecordStatus.PLANNED.value,
                      evaluation_event=serialize_value(event),
                      evaluation_event_timestamp=self._event_insert_timestamp(event),
                      evaluation_event_storage_id=event_id)
        with self.index_connection() as conn:
            conn.execute(AssetCheckExecutionsTable.insert(), [dict(common, partition=k) for k in keys])

    def _sheaf_store_check_evaluations(self, conn: Any, events: Sequence[Any]) -> None:
        """A check's evaluations of a run's papers: the events inserted as one statement, and each
        paper's planned execution row resolved by one UPDATE run for all (an executemany), with
        the event's text serialised once for both. Dagster's `store_event` does the same row by
        row: its insert, then `_update_asset_check_evaluation` (a statement compiled and the
        event serialised again each time). A row that was not planned (Dagster then inserts it)
        or was planned twice fails the batch, which Dagster then stores event by event."""
        from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

        T = AssetCheckExecutionsTable
        rows = [self._event_to_row(e) for e in events]
        ids = self._sheaf_insert_rows(conn, rows)
        update = T.update().where(and_(
            T.c.asset_key == bindparam("k_asset"), T.c.check_name == bindparam("k_check"),
            T.c.run_id == bindparam("k_run"), T.c.partition == bindparam("k_partition"),
        )).values(execution_status=bindparam("v_status"), evaluation_event=bindparam("v_event"),
                  evaluation_event_timestamp=bindparam("v_timestamp"), evaluation_event_storage_id=bindparam("v_id"),
                  materialization_event_storage_id=bindparam("v_target"))
        params = []
        for e, row, event_id in zip(events, rows, ids):
            ev = e.dagster_event.event_specific_data
            params.append({
                "k_asset": ev.asset_key.to_string(), "k_check": ev.check_name, "k_run": e.run_id,
                "k_partition": ev.partition,
                "v_status": (AssetCheckExecutionRecordStatus.SUCCEEDED if ev.passed
                             else AssetCheckExecutionRecordStatus.FAILED).value,
                "v_event": row["event"], "v_timestamp": row["timestamp"], "v_id": event_id,
                "v_target": ev.target_materialization_data.storage_id if ev.target_materialization_data else None,
            })
        updated = conn.execute(update, params).rowcount
        if updated != len(params):
            raise _CheckRowsMismatch(f"{updated} planned check rows for {len(params)} evaluations")


class _CheckRowsMismatch(RuntimeError):
    """A batch of check evaluations whose planned rows are not one each: stored event by event."""


class SheafShardedEventLogStorage(_PooledSqlite, SqliteEventLogStorage):
    """Dagster's default layout (a database per run plus `index.db`, in `<DAGSTER_HOME>/history/runs`),
    for homes built before Sheaf chose the consolidated one, so their history is kept."""

    _sheaf_subdir = "history/runs"

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Any]:
        with self._db_lock:
            engine = self._sheaf_engine(self.conn_string_for_shard(shard))
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn


class SheafRunStorage(_EngineCache, SqliteRunStorage):
    """Dagster's SQLite run storage (`<DAGSTER_HOME>/history/runs.db`, the default file) with its
    engine kept for the process: a run-tag write (the live progress of `sheaf build`, one a
    paper) took 20 ms a write under cProfile on a 200-paper rebuild with an engine made and a
    connection opened and closed each time. Its
    folder comes from the instance it is registered with, as for `SheafEventLogStorage`."""

    def __init__(self, inst_data: Any = None, base_dir: str | None = None) -> None:
        self._sheaf_inst_data = inst_data
        if base_dir is not None:
            self._sheaf_init(base_dir)

    def _sheaf_init(self, base_dir: str) -> None:
        made = SqliteRunStorage.from_local(base_dir)  # creates or migrates the file
        SqliteRunStorage.__init__(self, made._conn_string, inst_data=self._sheaf_inst_data)

    def register_instance(self, instance: Any) -> None:
        if not hasattr(self, "_conn_string"):
            self._sheaf_init(os.path.join(instance.root_directory, "history"))
        super().register_instance(instance)

    @classmethod
    def config_type(cls) -> Any:
        from dagster import Field, StringSource

        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> Any:  # type: ignore[override]
        return cls(inst_data=inst_data, **config_value)

    @contextmanager
    def connect(self) -> Iterator[Any]:
        with self._sheaf_engine(self._conn_string).connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        super().dispose()
        self._sheaf_dispose_engines()
