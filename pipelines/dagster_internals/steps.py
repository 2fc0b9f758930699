"""What a run's steps do through Dagster's private API: hold Ctrl-C back for a paper, quiet
Dagster's warnings, free a dead run's pool slots, and log a step's events (per-paper metadata,
check evaluations, run-less observations) as batches.

It defines no asset, so importing it emits none of Dagster's definition-time warnings
(`quiet_dagster_warnings` must run before the asset modules are imported).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
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


def log_check_evaluations(context: Any, evaluations: Sequence[Any]) -> None:
    """`context.log_event(evaluation)` for each of a check's per-paper `evaluations`, sent to the
    instance as one batch (what Dagster does for a step's materializations, not for logged
    events): with `DAGSTER_EVENT_BATCH_SIZE` set, `SheafEventLogStorage` stores them in one
    transaction instead of two each (the event, then its row of the check's executions)."""
    from dagster import DagsterEventType
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
    from dagster import DagsterEventType
    from dagster._core.events import (
        AssetObservationData,
        DagsterEvent,
        DagsterEventBatchMetadata,
        generate_event_batch_id,
    )
    from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID

    batch, last = generate_event_batch_id(), len(observations) - 1
    for i, obs in enumerate(observations):
        instance.report_dagster_event(
            DagsterEvent(event_type_value=DagsterEventType.ASSET_OBSERVATION.value,
                         event_specific_data=AssetObservationData(obs), job_name=RUNLESS_JOB_NAME),
            run_id=RUNLESS_RUN_ID, batch_metadata=DagsterEventBatchMetadata(batch, i == last))


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
