"""Reading Sheaf's build state from the Dagster instance: the latest materialization or
observation of each paper's partition, with its metadata and tags.

There is no build_state table: what was built, from which OCR hash, with which code and
model, is the materialization metadata. Storage-level reads live here (the one private
query, latest storage ids per partition, in `pipelines.dagster_internals.event_reads`).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dagster import AssetKey, DagsterEventType, DagsterInstance, EventLogEntry, deserialize_value

from pipelines.dagster_internals.event_reads import latest_storage_ids, plain_asset_event, stored_events

FETCH_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class EventInfo:
    """The latest event of one asset partition."""

    partition: str
    storage_id: int
    timestamp: float
    run_id: str
    metadata: dict[str, Any]
    tags: dict[str, str]

    @property
    def data_version(self) -> str | None:
        return self.tags.get("dagster/data_version")

    @property
    def code_version(self) -> str | None:
        return self.tags.get("dagster/code_version")


def _plain(v: Any) -> Any:
    return getattr(v, "value", v)


def latest_events(instance: DagsterInstance, asset: str, kind: str = "materialization",
                  partitions: Iterable[str] | None = None) -> dict[str, EventInfo]:
    """Latest materialization (or observation) per partition of `asset`: the latest storage id
    of each partition, then those events as stored (`stored_events`, one query a chunk), each
    read as plain JSON (`plain_asset_event`) or, when it holds what that reader does not know,
    by Dagster's own deserializer."""
    key = AssetKey(asset)
    event_type = (DagsterEventType.ASSET_MATERIALIZATION if kind == "materialization"
                  else DagsterEventType.ASSET_OBSERVATION)
    ids = latest_storage_ids(instance, key, event_type, partitions)
    out: dict[str, EventInfo] = {}
    id_list = sorted(ids.values())
    for i in range(0, len(id_list), FETCH_LIMIT):
        for storage_id, stored in stored_events(instance, id_list[i:i + FETCH_LIMIT]):
            got = plain_asset_event(stored, event_type.value)
            if got is None:
                got = _deserialized(stored, kind)
            if got is None or got["partition"] is None:
                continue
            out[got["partition"]] = EventInfo(partition=got["partition"], storage_id=storage_id,
                                              timestamp=got["timestamp"], run_id=got["run_id"],
                                              metadata=got["metadata"], tags=got["tags"])
    return out


def _deserialized(stored: str, kind: str) -> dict[str, Any] | None:
    """What `plain_asset_event` reads, through Dagster's deserializer (any event it can read)."""
    entry = deserialize_value(stored, EventLogEntry)
    ev = entry.asset_materialization if kind == "materialization" else entry.asset_observation
    if ev is None:
        return None
    return {"partition": ev.partition, "timestamp": entry.timestamp, "run_id": entry.run_id,
            "metadata": {k: _plain(v) for k, v in (ev.metadata or {}).items()}, "tags": dict(ev.tags or {})}


def latest_observed_versions(instance: DagsterInstance, asset: str = "ocr_result") -> dict[str, str]:
    """The last recorded data version (ocr_result_hash) of each paper."""
    return {k: v.data_version for k, v in latest_events(instance, asset, "observation").items()
            if v.data_version}
