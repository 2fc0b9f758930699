"""Reading Sheaf's build state from the Dagster instance: the latest materialization or
observation of each paper's partition, with its metadata and tags.

There is no build_state table: what was built, from which OCR hash, with which code and
model, is the materialization metadata. Storage-level reads live here (the one private
query, latest storage ids per partition, in `pipelines.dagster_private`).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dagster import AssetKey, AssetRecordsFilter, DagsterEventType, DagsterInstance

from pipelines.dagster_private import latest_storage_ids

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
    """Latest materialization (or observation) per partition of `asset`."""
    key = AssetKey(asset)
    event_type = (DagsterEventType.ASSET_MATERIALIZATION if kind == "materialization"
                  else DagsterEventType.ASSET_OBSERVATION)
    ids = latest_storage_ids(instance, key, event_type, partitions)
    out: dict[str, EventInfo] = {}
    id_list = sorted(ids.values())
    fetch = instance.fetch_materializations if kind == "materialization" else instance.fetch_observations
    for i in range(0, len(id_list), FETCH_LIMIT):
        chunk = id_list[i:i + FETCH_LIMIT]
        res = fetch(AssetRecordsFilter(asset_key=key, storage_ids=chunk), limit=len(chunk))
        for r in res.records:
            ev = r.asset_materialization if kind == "materialization" else r.asset_observation
            if ev is None or r.partition_key is None:
                continue
            out[r.partition_key] = EventInfo(
                partition=r.partition_key, storage_id=r.storage_id, timestamp=r.timestamp,
                run_id=r.run_id, metadata={k: _plain(v) for k, v in (ev.metadata or {}).items()},
                tags=dict(ev.tags or {}),
            )
    return out


def latest_observed_versions(instance: DagsterInstance, asset: str = "ocr_result") -> dict[str, str]:
    """The last recorded data version (ocr_result_hash) of each paper."""
    return {k: v.data_version for k, v in latest_events(instance, asset, "observation").items()
            if v.data_version}
