"""Reads of Dagster's event log that its public API does not offer: latest storage ids per
partition, events as stored (read as plain JSON), asset-check status per partition, and
Dagster's own staleness per partition."""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dagster._core.storage.event_log.base import PartitionKeyFilter
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from sqlalchemy import select


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


def check_partition_statuses(instance: Any, asset: str, check: str, partitions_def: Any) -> dict[str, list[str]]:
    """{resolved status ("SUCCEEDED", "FAILED", "IN_PROGRESS", ...): partitions} of one
    partitioned asset check, as the UI's check Partitions tab computes it (`AssetCheckState`)."""
    from dagster import AssetCheckKey, AssetKey, partition_loading_context

    key = AssetCheckKey(AssetKey(asset), check)
    with partition_loading_context(dynamic_partitions_store=instance):
        state = instance.event_log_storage.get_asset_check_state([(key, partitions_def)])[key]
    return {status.value: sorted(subset.subset_value.get_partition_keys())
            for status, subset in state.subsets.items() if not subset.is_empty}
