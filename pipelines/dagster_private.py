"""Every use of a private Dagster API lives here, so an upgrade has one place to check.

Dagster is imported inside each function: this module stays importable before Dagster is
(`quiet_dagster_warnings` must run before the asset modules are imported).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any


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
    from dagster._core.storage.event_log.base import PartitionKeyFilter

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
