"""Sheaf's Dagster home on disk: the dagster.yaml it writes, and `DagsterFiles`, which reads
the few facts the no-op proof (`pipelines.planning.noop`) needs from that home's SQLite storage
without importing Dagster.

`DagsterFiles` is the one place besides Sheaf's storages (`pipelines.dagster_internals`) that depends on what
Dagster does not promise: its storage schema. It reads only, only a home whose dagster.yaml
is the one Sheaf writes and only with the Dagster release it knows; anything unexpected
raises `CannotTell`, and the caller goes the Dagster way.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

#: The first line of a dagster.yaml Sheaf wrote (a file without it is the user's and left alone).
YAML_HEADER = "# Written by sheaf"


def dagster_yaml(sharded: bool = False) -> str:
    """Sheaf's dagster.yaml: one writer at a time for the index pool, no telemetry, and the event
    log storage of `pipelines.dagster_internals.sqlite_storage` (Dagster's SQLite storage with engines kept open;
    `sharded`: Dagster's per-run layout, for a home that already holds one)."""
    cls = "SheafShardedEventLogStorage" if sharded else "SheafEventLogStorage"
    return (f"{YAML_HEADER}: one writer at a time for the SQLite index pool; Dagster's SQLite event\n"
            "# log with its connections kept open (pipelines/dagster_internals/sqlite_storage.py). Rewritten by sheaf\n"
            "# while this header stays; delete the header to keep your own edits.\n"
            "concurrency:\n  pools:\n    default_limit: 1\n"
            "telemetry:\n  enabled: false\n"
            f"event_log_storage:\n  module: pipelines.dagster_internals.sqlite_storage\n  class: {cls}\n"
            "run_storage:\n  module: pipelines.dagster_internals.sqlite_storage\n  class: SheafRunStorage\n")


def stock_dagster_yaml(history: Path) -> str:
    """The dagster.yaml of `SHEAF_DAGSTER_STORAGE=stock`: Dagster's own storage classes (no Sheaf
    subclass) on the same files as `dagster_yaml()` (`history/event_log.db`, `history/runs.db`),
    so a home switches either way and keeps its build history. Correct on any Dagster release the
    public API supports; expected slower (events written one by one, connections opened per
    write), not measured."""
    return (f"{YAML_HEADER}: one writer at a time for the SQLite index pool; Dagster's own SQLite\n"
            "# storages (SHEAF_DAGSTER_STORAGE=stock). Rewritten by sheaf while this header stays;\n"
            "# delete the header to keep your own edits.\n"
            "concurrency:\n  pools:\n    default_limit: 1\n"
            "telemetry:\n  enabled: false\n"
            "event_log_storage:\n  module: dagster._core.storage.event_log\n  class: ConsolidatedSqliteEventLogStorage\n"
            f"  config:\n    base_dir: {json.dumps(str(history))}\n"
            "run_storage:\n  module: dagster._core.storage.runs\n  class: SqliteRunStorage\n"
            f"  config:\n    base_dir: {json.dumps(str(history))}\n")


#: The environment variable a Postgres dagster.yaml reads its database URL from (so no password is
#: ever written into the file): the index's own, Dagster's tables living beside the index's.
POSTGRES_URL_ENV = "SHEAF_INDEX_URL"

#: Dagster's switch for batched event writes, and the batch Sheaf's processes use (a run covers at
#: most a few hundred papers, so a step's materializations are one batch). Set it in the
#: environment of `dagster dev` / the code location too for the UI's runs to batch (docs/deploy.md).
EVENT_BATCH_ENV = "DAGSTER_EVENT_BATCH_SIZE"
EVENT_BATCH_SIZE = 1000


def postgres_dagster_yaml(url_env: str = POSTGRES_URL_ENV) -> str:
    """Sheaf's dagster.yaml when the index is on Postgres: run, event log and schedule storage in
    the index's database (dagster-postgres, URL read from `url_env`), so that every worker, every
    machine and `dagster dev` / `dagster-daemon` share one instance. No pool limit: Postgres index
    writers of different papers retry their own conflicts, so the `sheaf_index` pool admits as many
    writers as runs (one per worker)."""
    url = f"    postgres_url:\n      env: {url_env}\n"
    return (f"{YAML_HEADER}: Dagster's run, event log and schedule storage on Postgres, in the index's\n"
            f"# database (the URL comes from ${url_env}: export it for `dagster dev` and `dagster-daemon`).\n"
            "# Rewritten by sheaf while this header stays; delete the header to keep your own edits.\n"
            "telemetry:\n  enabled: false\n"
            f"run_storage:\n  module: pipelines.dagster_internals.postgres_storage\n  class: SheafPostgresRunStorage\n  config:\n{url}"
            "event_log_storage:\n  module: pipelines.dagster_internals.postgres_storage\n  class: SheafPostgresEventLogStorage\n"
            f"  config:\n{url}"
            "schedule_storage:\n  module: pipelines.dagster_internals.postgres_storage\n  class: SheafPostgresScheduleStorage\n"
            f"  config:\n{url}")


# --- reading the home without Dagster ------------------------------------------------------------

#: The Dagster release whose storage layout `DagsterFiles` reads (pyproject.toml pins it).
DAGSTER_VERSION = "1.13.27"
_UNFINISHED = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


class CannotTell(Exception):
    """The files do not answer the question as this reader knows them: go the Dagster way."""


def _payload(entry_data: Any) -> Any:
    """The value of one serialized metadata entry (`IntMetadataEntryData` → value, `Json…` → data, …)."""
    if not isinstance(entry_data, dict):
        raise CannotTell("a metadata entry of an unknown shape")
    for k in ("value", "data", "text", "md_str", "path", "url"):
        if k in entry_data:
            return entry_data[k]
    return None


class DagsterFiles:
    """Read-only answers from the SQLite storage of a Dagster home that Sheaf set up (one
    `history/event_log.db`, `history/runs.db`: the dagster.yaml of `dagster_yaml()`), without
    importing Dagster. It reads Dagster's private schema: every method raises `CannotTell`
    when the files are not as Dagster `DAGSTER_VERSION` writes them, and
    tests/pipelines/test_noop.py checks each answer against Dagster's own API on a real home."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        try:
            installed = version("dagster")
        except PackageNotFoundError:
            installed = None
        if installed != DAGSTER_VERSION:
            raise CannotTell(f"dagster {installed} is installed; this reader knows {DAGSTER_VERSION}")
        cfg = self.home / "dagster.yaml"
        try:
            text = cfg.read_text()
        except OSError:
            raise CannotTell(f"no dagster.yaml in {self.home}") from None
        if text == postgres_dagster_yaml():
            raise CannotTell("the Dagster instance is on Postgres (this reader knows only the SQLite files)")
        if text == dagster_yaml(sharded=False):
            self.storage = "sheaf"
        elif text == stock_dagster_yaml(self.home.resolve() / "history"):
            self.storage = "stock"  # the same files, read the same way
        else:
            raise CannotTell("the dagster.yaml is not the one this Sheaf writes")
        self._events = self._open(self.home / "history" / "event_log.db")
        self._runs = self._open(self.home / "history" / "runs.db")
        # one snapshot of the event log for every answer: a build committing meanwhile is
        # either wholly seen or not at all (the record and the cursors agree with each other)
        self._rows(self._events, "BEGIN")

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        if not path.is_file():
            raise CannotTell(f"{path} does not exist")
        try:
            return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        except sqlite3.Error as e:
            raise CannotTell(f"cannot open {path}: {e}") from None

    def close(self) -> None:
        self._events.rollback()
        self._events.close()
        self._runs.close()

    def __enter__(self) -> DagsterFiles:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _rows(self, conn: sqlite3.Connection, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise CannotTell(f"Dagster's storage did not answer: {e}") from None

    def unfinished_runs(self) -> int:
        """Runs not finished (queued, starting, started, canceling), whoever launched them."""
        marks = ",".join("?" * len(_UNFINISHED))
        return int(self._rows(self._runs, f"SELECT count(*) FROM runs WHERE status IN ({marks})", _UNFINISHED)[0][0])

    def runs_tagged(self, tags: dict[str, str]) -> list[dict[str, Any]]:
        """Runs carrying any one of `tags` (key: value), oldest first: `{run_id, status, job,
        created (epoch s, UTC), tags}` (what `DagsterInstance.get_run_records` gives)."""
        if not tags:
            return []
        cond = " OR ".join("(key = ? AND value = ?)" for _ in tags)
        args = tuple(x for kv in tags.items() for x in kv)
        rows = self._rows(self._runs, "SELECT run_id, status, pipeline_name, "
                          "(julianday(create_timestamp) - 2440587.5) * 86400.0 "
                          f"FROM runs WHERE run_id IN (SELECT run_id FROM run_tags WHERE {cond}) ORDER BY id", args)
        out = []
        for run_id, status, job, created in rows:
            tag_rows = self._rows(self._runs, "SELECT key, value FROM run_tags WHERE run_id = ? ORDER BY id", (run_id,))
            out.append({"run_id": run_id, "status": status, "job": job, "created": float(created or 0),
                        "tags": dict(tag_rows)})
        return out

    def partitions(self, name: str) -> list[str]:
        """The dynamic partitions of `name`, in the order Dagster lists them."""
        return [r[0] for r in self._rows(
            self._events, "SELECT partition FROM dynamic_partitions WHERE partitions_def_name = ? ORDER BY id", (name,))]

    def _asset_rows(self, assets: Iterable[str]) -> dict[str, tuple]:
        keys = {json.dumps([a]): a for a in assets}
        marks = ",".join("?" * len(keys))
        rows = self._rows(self._events, "SELECT asset_key, asset_details, "
                          "json_extract(last_materialization, '$.storage_id') FROM asset_keys "
                          f"WHERE asset_key IN ({marks})", tuple(keys))
        out = {keys[r[0]]: r for r in rows}
        if any(r[1] for r in out.values()):  # a wipe leaves its mark here: Dagster filters by it
            raise CannotTell("an asset's materializations were wiped")
        return out

    def cursor(self, assets: Iterable[str]) -> int:
        """The newest storage id among `assets`' latest materializations (what
        `DagsterInstance.get_asset_records` gives as `last_materialization_storage_id`)."""
        rows = self._asset_rows(assets)
        ids = [r[2] for r in rows.values()]
        if any(i is None for i in ids):
            raise CannotTell("an asset row without its latest materialization's storage id")
        return max(ids, default=0)

    def newest_observation(self, asset: str) -> int:
        """The storage id of `asset`'s newest observation (0: never observed)."""
        self._asset_rows([asset])
        row = self._rows(self._events, "SELECT max(id) FROM event_logs WHERE asset_key = ? AND "
                         "dagster_event_type = 'ASSET_OBSERVATION'", (json.dumps([asset]),))
        return int(row[0][0] or 0)

    def latest_metadata(self, asset: str) -> dict[str, Any] | None:
        """The metadata of `asset`'s latest materialization, plain values ({label: value});
        None when it has none."""
        self._asset_rows([asset])
        rows = self._rows(self._events, "SELECT last_materialization FROM asset_keys WHERE asset_key = ?",
                          (json.dumps([asset]),))
        if not rows or not rows[0][0]:
            return None
        try:
            rec = json.loads(rows[0][0])
            mat = rec["event_log_entry"]["dagster_event"]["event_specific_data"]["materialization"]
            entries = mat["metadata_entries"]
        except (ValueError, KeyError, TypeError):
            raise CannotTell(f"the latest materialization of {asset} has an unknown shape") from None
        if not isinstance(entries, list):
            raise CannotTell(f"the metadata of {asset} has an unknown shape")
        return {e.get("label"): _payload(e.get("entry_data")) for e in entries if isinstance(e, dict)}
