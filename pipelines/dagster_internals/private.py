"""Every use of a private Dagster API lives here, so an upgrade has one place to check.

It defines no asset, so importing it emits none of Dagster's definition-time warnings
(`quiet_dagster_warnings` must run before the asset modules are imported). It also holds the
event log storage classes Sheaf's `dagster.yaml` names (`SheafEventLogStorage`).
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sheaf.core.lazy import lazy_module

#: `dagster-postgres` (the `sheaf[postgres]` extra), imported only when a dagster.yaml names one of
#: the Postgres storages below: the SQLite default never loads it.
_dagster_postgres = lazy_module("dagster_postgres")


@contextmanager
def deferred_interrupts() -> Iterator[list[bool]]:
    """Hold back Ctrl-C while the block runs (one paper); afterwards `flag[0]` tells whether
    one arrived, so the caller can stop at the paper boundary instead of mid-transaction."""
    from dagster._utils.interrupts import capture_interrupts, check_captured_interrupt

    flag = [False]
    with capture_interrupts():
        try:
            yield flag
        finally:
            flag[0] = check_captured_interrupt()


def quiet_dagster_warnings() -> None:
    """Silence Dagster's own warnings (Beta/Preview APIs we use knowingly, e.g.
    `observable_source_asset`) for a command that prints its own progress (`sheaf build`)."""
    import warnings

    warnings.filterwarnings("ignore", module="dagster")
    quiet_beta_warnings()


def quiet_beta_warnings() -> None:
    """Silence Dagster's Beta and Preview warnings, and only those: our knowing use of such APIs
    (`observable_source_asset`, `backfill_policy`, partitioned asset checks) warned once per
    definition in every process that loads the code location (`dagster dev`'s code server and
    each run), dozens of lines of its log. Called by `pipelines.definitions` before it imports
    the asset modules. Other warnings (deprecations among them) still show."""
    import warnings

    try:
        from dagster._utils.warnings import BetaWarning, PreviewWarning
    except ImportError:  # pragma: no cover - renamed in another Dagster version
        return
    warnings.filterwarnings("ignore", category=BetaWarning)
    warnings.filterwarnings("ignore", category=PreviewWarning)


def latest_storage_ids(instance: Any, asset_key: Any, event_type: Any,
                       partitions: Iterable[str] | None = None) -> Mapping[str, int]:
    """{partition: storage id of its latest event of `event_type`} for one asset (one query;
    `DagsterInstance.get_latest_storage_id_by_partition`, not public in Dagster 1.13)."""
    wanted = set(partitions) if partitions is not None else None
    return instance.get_latest_storage_id_by_partition(asset_key, event_type, wanted)


def stored_events(instance: Any, storage_ids: Sequence[int]) -> list[tuple[int, str]]:
    """(storage id, the event as Dagster stored it: serdes JSON) of each of `storage_ids`, in one
    query of the event log's index table (no public read returns the stored text)."""
    if not storage_ids:
        return []
    T = SqlEventLogStorageTable
    with instance.event_log_storage.index_connection() as conn:
        return [(int(i), e) for i, e in conn.execute(select(T.c.id, T.c.event).where(T.c.id.in_(list(storage_ids))))]


#: The metadata values read from an event's stored JSON without Dagster's deserializer: each
#: one's storage name (`whitelist_for_serdes(storage_name=...)` in Dagster 1.13) and the field
#: holding what its `MetadataValue.value` returns. Any other kind sends the event through Dagster.
_PLAIN_VALUES = {"TextMetadataEntryData": "text", "IntMetadataEntryData": "value", "FloatMetadataEntryData": "value",
                 "BoolMetadataEntryData": "value", "JsonMetadataEntryData": "data", "MarkdownMetadataEntryData": "md_str",
                 "UrlMetadataEntryData": "url", "PathMetadataEntryData": "path"}
_EMPTY_AS_NONE = {"TextMetadataEntryData", "MarkdownMetadataEntryData", "UrlMetadataEntryData"}
_ASSET_EVENTS = {"ASSET_MATERIALIZATION": ("StepMaterializationData", "materialization", "AssetMaterialization"),
                 "ASSET_OBSERVATION": ("AssetObservationData", "asset_observation", "AssetObservation")}


def plain_asset_event(stored: str, event_type: str) -> dict[str, Any] | None:
    """An asset materialization or observation (`event_type`: "ASSET_MATERIALIZATION" or
    "ASSET_OBSERVATION") as stored, read as plain JSON: {"partition", "timestamp", "run_id",
    "metadata" (each value as `MetadataValue.value` gives it), "tags"}; None when it holds
    anything this reader does not know (the caller then deserializes it with Dagster's
    `deserialize_value`). Dagster's deserializer builds every object of the event (~2 ms a paper
    for a status read here); this reads the JSON the event was stored as."""
    try:
        entry = json.loads(stored)
        event = entry["dagster_event"]
        data_cls, field, event_cls = _ASSET_EVENTS[event_type]
        data = event["event_specific_data"]
        if (entry.get("__class__") != "EventLogEntry" or event.get("event_type_value") != event_type
                or data.get("__class__") != data_cls or data[field].get("__class__") != event_cls):
            return None
        body = data[field]
        metadata: dict[str, Any] = {}
        for item in body["metadata_entries"]:
            value = item["entry_data"]
            cls = value.get("__class__")
            if item.get("__class__") != "EventMetadataEntry" or cls not in _PLAIN_VALUES:
                return None
            v = value.get(_PLAIN_VALUES[cls])
            if cls in _EMPTY_AS_NONE and v is None:
                v = ""
            elif cls == "JsonMetadataEntryData" and _has_serdes_marker(v):
                return None  # stored by an old Dagster with objects inside: Dagster's reader erases them
            elif cls != "JsonMetadataEntryData" and isinstance(v, (dict, list)):
                return None
            metadata[item["label"]] = v
        tags = body.get("tags") or {}
        if not all(isinstance(k, str) and isinstance(t, str) for k, t in tags.items()):
            return None
        return {"partition": body.get("partition"), "timestamp": float(entry["timestamp"]), "run_id": entry["run_id"],
                "metadata": metadata, "tags": dict(tags)}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _has_serdes_marker(value: Any) -> bool:
    """Whether JSON `value` holds a serdes object (a dict with a `__class__`, `__set__`, ... key)."""
    if isinstance(value, dict):
        return any(k.startswith("__") for k in value) or any(_has_serdes_marker(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_serdes_marker(v) for v in value)
    return False


def free_pool_slots(instance: Any, run_id: str) -> bool:
    """Free the concurrency-pool slots a (dead) run holds; True when it held any. Best effort:
    storages without global concurrency limits, or an error, free nothing."""
    storage = instance.event_log_storage
    if not getattr(storage, "supports_global_concurrency_limits", False):
        return False
    try:
        held = run_id in storage.get_concurrency_run_ids()
        storage.free_concurrency_slots_for_run(run_id)
    except Exception:  # noqa: BLE001 - best effort; the caller fails the run either way
        return False
    return held


def check_status(instance: Any, asset: str, check: str, partition: str) -> str:
    """The latest execution status of asset check `asset/check` for one partition
    ("SUCCEEDED", "FAILED", ...), or "NONE" when it never ran for that partition."""
    from dagster import AssetCheckKey, AssetKey

    hist = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey(asset), check), limit=1, partition_filter=PartitionKeyFilter(key=partition))
    return hist[0].status.value if hist else "NONE"


def stale_causes(instance: Any, asset_graph: Any, asset: str, partitions: Iterable[str]) -> dict[str, list[str]]:
    """Dagster's own staleness of one asset per partition (`CachingStaleStatusResolver`, no
    public per-partition API): {partition: ["<category>: <reason>", ...]} for stale ones."""
    from dagster import AssetKey
    from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._time import get_current_datetime

    view = AssetGraphView(temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
                          instance=instance, asset_graph=asset_graph)
    resolver = CachingStaleStatusResolver(instance=instance, asset_graph=asset_graph, loading_context=view)
    key = AssetKey(asset)
    out: dict[str, list[str]] = {}
    for pk in partitions:
        if resolver.get_status(key, pk) == StaleStatus.STALE:
            out[pk] = [f"{c.category.value}: {c.reason}" for c in resolver.get_stale_causes(key, pk)]
    return out


# --- the event log storage Sheaf's dagster.yaml names ----------------------------------------------

from dagster import DagsterEventType  # noqa: E402
from dagster._core.storage.event_log.sqlite.consolidated_sqlite_event_log import (  # noqa: E402
    SQLITE_EVENT_LOG_FILENAME,
    ConsolidatedSqliteEventLogStorage,
)
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage  # noqa: E402
from dagster._core.storage.event_log.base import PartitionKeyFilter  # noqa: E402,F401 - for check history filters
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage  # noqa: E402
from dagster._core.storage.event_log.schema import (  # noqa: E402 - the tables the batched writes and reads use
    AssetCheckExecutionsTable,
    SqlEventLogStorageMetadata,
    SqlEventLogStorageTable,
)
from sqlalchemy import and_, bindparam, select, text  # noqa: E402

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


def _known_table(storage: Any, table_name: str, ask: Any) -> bool:
    """Whether the storage's database has the table, asked (`ask`) until the answer is yes: a
    table, once there, stays."""
    known = storage.__dict__.setdefault("_sheaf_tables", set())
    if table_name not in known and ask(table_name):
        known.add(table_name)
    return table_name in known


class _PartitionsSnapshot:
    """A run resolves its range of papers against one read of the dynamic partitions.

    Dagster turns a run's partition range into keys by reading every key of the partitions
    definition, again at each step, input and output: 68 reads for one run of the chain, each
    of the whole library (10,000 rows at 10,000 papers: 2.2 s of a 100-paper run, a cost per
    paper that grew with the library). Inside `partitions_snapshot` the first read of a
    definition is kept and served to the rest; adding or deleting a partition through this
    storage drops it. Keys of a range do not move when another process adds papers (new keys
    go to the end), and a run that sees one list cannot resolve its range two ways."""

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        snapshot = self.__dict__.get("_sheaf_partitions")
        if snapshot is None:
            return super().get_dynamic_partitions(partitions_def_name)  # type: ignore[misc]
        if partitions_def_name not in snapshot:
            keys = super().get_dynamic_partitions(partitions_def_name)  # type: ignore[misc]
            snapshot[partitions_def_name] = tuple(keys)
        return list(snapshot[partitions_def_name])

    def _drop_snapshot(self) -> None:
        if self.__dict__.get("_sheaf_partitions") is not None:
            self.__dict__["_sheaf_partitions"] = {}

    def add_dynamic_partitions(self, partitions_def_name: str, partition_keys: Sequence[str]) -> None:
        self._drop_snapshot()
        super().add_dynamic_partitions(partitions_def_name, partition_keys)  # type: ignore[misc]

    def delete_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> None:
        self._drop_snapshot()
        super().delete_dynamic_partition(partitions_def_name, partition_key)  # type: ignore[misc]


@contextmanager
def partitions_snapshot(instance: Any) -> Iterator[None]:
    """Within the block, the instance's event log storage serves each partitions definition's keys
    from one read (`_PartitionsSnapshot`; other storages read as before)."""
    storage = instance.event_log_storage
    if not isinstance(storage, _PartitionsSnapshot) or storage.__dict__.get("_sheaf_partitions") is not None:
        yield
        return
    storage.__dict__["_sheaf_partitions"] = {}
    try:
        yield
    finally:
        storage.__dict__["_sheaf_partitions"] = None


class _PooledSqlite(_PartitionsSnapshot, _EngineCache):
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
        return _known_table(self, table_name, super().has_table)  # type: ignore[misc]

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
        if _one_kind_of_asset_event(events):
            with self.index_transaction() as conn:
                ids = self._sheaf_insert_events(conn, events)
                self._store_asset_event_tags(conn, events, ids)
                self._store_asset_event(conn, events[-1], ids[-1])
            return
        if _partition_evaluations(events):
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


def _check_evaluations(events: Sequence[Any]) -> bool:
    """True for two or more evaluations of asset checks, all within a run."""
    return len(events) > 1 and all(e.is_dagster_event and e.run_id and e.dagster_event_type
                                   == DagsterEventType.ASSET_CHECK_EVALUATION for e in events)


def _partition_evaluations(events: Sequence[Any]) -> bool:
    """`_check_evaluations`, each of one partition (what `log_check_evaluations` sends)."""
    return _check_evaluations(events) and all(e.dagster_event.event_specific_data.partition is not None
                                              for e in events)


def log_check_evaluations(context: Any, evaluations: Sequence[Any]) -> None:
    """`context.log_event(evaluation)` for each of a check's per-paper `evaluations`, sent to the
    instance as one batch (what Dagster does for a step's materializations, not for logged
    events): with `DAGSTER_EVENT_BATCH_SIZE` set, `SheafEventLogStorage` stores them in one
    transaction instead of two each (the event, then its row of the check's executions)."""
    from dagster._core.events import DagsterEvent, DagsterEventBatchMetadata, generate_event_batch_id

    op = context.op_execution_context
    step = op._step_execution_context
    batch, last = generate_event_batch_id(), len(evaluations) - 1
    for i, ev in enumerate(evaluations):
        message = (f"Asset check '{ev.check_name}' on '{ev.asset_key.to_user_string()}' "
                   + ("" if ev.partition is None else f"for paper {ev.partition} ")
                   + ("passed." if ev.passed else "did not pass.")
                   + ("" if ev.description is None else f" Description: '{ev.description}'"))
        op._events.append(DagsterEvent.from_step(
            event_type=DagsterEventType.ASSET_CHECK_EVALUATION, step_context=step, event_specific_data=ev,
            message=message, batch_metadata=DagsterEventBatchMetadata(batch, i == last)))


def report_runless_observations(instance: Any, observations: Sequence[Any]) -> None:
    """`instance.report_runless_asset_event(obs)` for each of `observations`, sent as one batch:
    with `DAGSTER_EVENT_BATCH_SIZE` set, the observations of one asset (a build's new or changed
    papers' `ocr_result`) are stored in one transaction (`SheafEventLogStorage.store_event_batch`;
    Dagster's Postgres storage batches them itself) instead of a transaction and an asset-row
    update each. Unset, Dagster stores them one by one, as the public call does. The events are
    the public call's: run-less, of Dagster's run-less job."""
    from dagster._core.events import (
        AssetObservationData, DagsterEvent, DagsterEventBatchMetadata, generate_event_batch_id,
    )
    from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID

    batch, last = generate_event_batch_id(), len(observations) - 1
    for i, obs in enumerate(observations):
        instance.report_dagster_event(
            DagsterEvent(event_type_value=DagsterEventType.ASSET_OBSERVATION.value,
                         event_specific_data=AssetObservationData(obs), job_name=RUNLESS_JOB_NAME),
            run_id=RUNLESS_RUN_ID, batch_metadata=DagsterEventBatchMetadata(batch, i == last))


def _one_kind_of_asset_event(events: Sequence[Any]) -> bool:
    """True for two or more events of one asset, all materializations or all observations (only
    then is the asset's row the last event's, as if they were stored one by one)."""
    if len(events) < 2 or not all(e.is_dagster_event and e.dagster_event.asset_key for e in events):
        return False
    kinds = {e.dagster_event_type for e in events}
    return len({e.dagster_event.asset_key for e in events}) == 1 and kinds in (
        {DagsterEventType.ASSET_MATERIALIZATION}, {DagsterEventType.ASSET_OBSERVATION})


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


def add_partitions_metadata(context: Any, metadata: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
    """`context.add_asset_metadata(md, asset_key=a, partition_key=k)` for every `(a, k): md`, in one
    step, without that call's check that `k` is a partition of the run: it reads every paper's
    partition from the instance each time (~17 ms a call at 200 papers, O(library); 1,600 calls
    were 27 of 154 s of a 200-paper rebuild). The caller passes only keys of `context.partition_keys`."""
    from dagster import AssetKey
    from dagster._core.execution.context.metadata_logging import AssetMetadataHandle, OutputMetadataAccumulator

    step = context.op_execution_context._step_execution_context
    merged = dict(step._metadata_accumulator.per_output_metadata)
    for (asset, key), md in metadata.items():
        handle = AssetMetadataHandle(asset_key=AssetKey(asset), partition_key=key)
        merged[handle] = {**merged.get(handle, {}), **md}
    step._metadata_accumulator = OutputMetadataAccumulator(per_output_metadata=merged)


# --- asset checks per partition ---------------------------------------------------------------------

def check_target(storage_id: int, run_id: str, timestamp: float) -> Any:
    """The `target_materialization_data` of an `AssetCheckEvaluation`: the materialization it
    checked. Dagster's partition status of a check counts an evaluation only while it targets
    the partition's latest materialization (`AssetCheckPartitionInfo.is_current`); one logged
    without it is treated as out of date and the partition reads "Missing". (The class is not
    exported from `dagster` in 1.13.)"""
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )

    return AssetCheckEvaluationTargetMaterializationData(storage_id=storage_id, run_id=run_id, timestamp=timestamp)


def check_partition_statuses(instance: Any, asset: str, check: str, partitions_def: Any) -> dict[str, list[str]]:
    """{resolved status ("SUCCEEDED", "FAILED", "IN_PROGRESS", ...): partitions} of one
    partitioned asset check, as the UI's check Partitions tab computes it (`AssetCheckState`)."""
    from dagster import AssetCheckKey, AssetKey

    from dagster import partition_loading_context

    key = AssetCheckKey(AssetKey(asset), check)
    with partition_loading_context(dynamic_partitions_store=instance):
        state = instance.event_log_storage.get_asset_check_state([(key, partitions_def)])[key]
    return {status.value: sorted(subset.subset_value.get_partition_keys())
            for status, subset in state.subsets.items() if not subset.is_empty}


# --- the Postgres storages of Sheaf's dagster.yaml on Postgres (`dagster_files.postgres_dagster_yaml`) ---

#: Connections each Postgres storage keeps open for the process (plus this many more at a burst).
#: Dagster nests connections (an event's insert, then its asset rows): with one kept, every nested
#: one was a new server connection, opened and closed (410 for a 50-paper rebuild; now 9).
_PG_POOL_SIZE = 4
_PG_POOL_OVERFLOW = 4


def _postgres_storages() -> dict[str, type]:
    """Dagster's Postgres run, event log and schedule storages, made on first use (so importing this
    module never imports dagster-postgres), with two changes:

    - the psycopg2 driver, which dagster-postgres depends on, named in the URL: SQLAlchemy 2.1 takes
      psycopg 3 for a plain ``postgresql://`` URL, and dagster-postgres' connection set-up (``with
      conn:``) closes a psycopg 3 connection (every statement then fails: "the connection is closed");
    - a connection pool kept for the process: Dagster's own open a new server connection (NullPool)
      for every statement outside the webserver, and a connection is a server process started.

    The event log also plans one event per asset for a run over a range of papers, as `_PooledSqlite`."""
    pg = _dagster_postgres
    utils = lazy_module("dagster_postgres.utils")

    def driver(url: str) -> str:
        for scheme in ("postgresql://", "postgres://"):
            if url.startswith(scheme):
                return "postgresql+psycopg2://" + url[len(scheme):]
        return url

    def pooled(storage: Any) -> None:
        storage._engine = utils.create_pg_engine(storage.postgres_url, storage._token_provider,
                                                 isolation_level="AUTOCOMMIT", pool_size=_PG_POOL_SIZE,
                                                 pool_recycle=3600, max_overflow=_PG_POOL_OVERFLOW,
                                                 pool_pre_ping=True)

    def init(base: type) -> Any:
        def __init__(self: Any, postgres_url: str, *args: Any, **kwargs: Any) -> None:
            base.__init__(self, driver(postgres_url), *args, **kwargs)
            pooled(self)
        return __init__

    def from_config(cls: Any, inst_data: Any, config_value: Mapping[str, Any]) -> Any:
        return cls(utils.pg_url_from_config(config_value), inst_data=inst_data,
                   should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                   token_provider=utils.get_token_provider_from_config(config_value))

    def for_webserver(self: Any, statement_timeout: int, pool_recycle: int, max_overflow: int) -> None:
        pooled(self)  # already pooled; Dagster's version would set a timeout through ``with conn:``

    def planned_subsets(self: Any) -> bool:
        return True

    def has_table(self: Any, table_name: str) -> bool:
        """Asked on every asset event (a catalogue query each time: 1.8 s of a 50-paper rebuild)."""
        return _known_table(self, table_name, lambda name: pg.PostgresEventLogStorage.has_table(self, name))

    def store_event_batch(self: Any, events: Sequence[Any]) -> None:
        """Dagster's Postgres batch writer takes materializations and observations only (another
        batch fails its check, then goes event by event with a message on stderr): a batch of check
        evaluations (`log_check_evaluations`) goes event by event here."""
        if _check_evaluations(events):
            for e in events:
                self.store_event(e)
            return
        pg.PostgresEventLogStorage.store_event_batch(self, events)

    made: dict[str, type] = {}
    for name, base in (("SheafPostgresEventLogStorage", pg.PostgresEventLogStorage),
                       ("SheafPostgresRunStorage", pg.PostgresRunStorage),
                       ("SheafPostgresScheduleStorage", pg.PostgresScheduleStorage)):
        body: dict[str, Any] = {"__init__": init(base), "from_config_value": classmethod(from_config),
                                "optimize_for_webserver": for_webserver, "__module__": __name__}
        if base is pg.PostgresEventLogStorage:
            body["supports_partition_subset_in_asset_materialization_planned_events"] = property(planned_subsets)
            body["has_table"] = has_table
            body["store_event_batch"] = store_event_batch
        made[name] = type(name, (_PartitionsSnapshot, base) if base is pg.PostgresEventLogStorage else (base,), body)
    return made


_PG_STORAGES = ("SheafPostgresEventLogStorage", "SheafPostgresRunStorage", "SheafPostgresScheduleStorage")


def __getattr__(name: str) -> Any:
    """The Postgres storage classes, by name (how Dagster's instance loader reads a dagster.yaml's
    `module` + `class`), made on first access."""
    if name in _PG_STORAGES:
        globals().update(_postgres_storages())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- deploy/: configs checked by Dagster's own schemas ------------------------------------------------

def instance_config_errors(folder: str, filename: str = "dagster.yaml") -> list[str]:
    """What Dagster finds wrong in an instance config file (`folder`/`filename`): its schema
    (`dagster_instance_config`, as `DagsterInstance.get()` loads it) and, for each section naming
    a class (run coordinator, run launcher, storages, compute logs), that class's own config schema.
    Nothing connects and no environment variable is read (``{env: NAME}`` is checked for shape)."""
    from dagster._config import validate_config
    from dagster._core.errors import DagsterInvalidConfigError
    from dagster._core.instance.config import dagster_instance_config
    from dagster._serdes.config_class import class_from_code_pointer

    try:
        config, _ = dagster_instance_config(folder, filename)
    except DagsterInvalidConfigError as e:
        return [str(e)]
    errors: list[str] = []
    for section, value in config.items():
        if isinstance(value, Mapping) and "module" in value and "class" in value:
            try:
                klass = class_from_code_pointer(value["module"], value["class"])
            except Exception as e:  # noqa: BLE001 - a module or class that does not import
                errors.append(f"{section}: {e}")
                continue
            result = validate_config(klass.config_type(), value.get("config") or {})
            errors += [f"{section} ({value['class']}): {e.message}" for e in result.errors or []]
    return errors


def executor_config_errors(executor: Any, config: Mapping[str, Any]) -> list[str]:
    """What Dagster finds wrong in an executor's config (`execution: config:` of a run config)."""
    from dagster._config import validate_config

    result = validate_config(executor.config_schema.config_type, config)
    return [e.message for e in result.errors or []]
