"""Running a per-paper function over a run's partitions, isolating each paper's failure."""

import time
from collections.abc import Callable, Iterable
from typing import Any

from dagster import AssetExecutionContext, MetadataValue

from pipelines.dagster_internals.steps import add_partitions_metadata, deferred_interrupts
from sheaf.core.envelope import SheafError
from sheaf.core.models import IngestError, unreadable_reason
from sheaf.core.progress import check_stop, notify, request_stop


def _meta_value(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return MetadataValue.json(list(v))
    return v


def run_per_paper(
    context: AssetExecutionContext,
    keys: Iterable[str],
    fn: Callable[[str], tuple[dict[str, Any], dict[str, Any]]],
    asset_keys: tuple[str, ...] | None = None,
) -> dict[str, dict[str, Any]]:
    """Call `fn(key) -> (outputs by asset name, metadata)` for each paper.

    A paper whose input is bad (IngestError / SheafError) fails alone: its error is recorded
    as metadata of its partition and its outputs are left out (its old artifacts and index
    rows are removed downstream). This holds however papers are batched into runs: a
    one-paper run whose paper fails still records the error (a step Failure would record
    nothing, leaving the paper "stale" with its old artifacts, retried by every build); the
    partition's asset checks then fail. Errors that are not per paper still fail the step.
    """
    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    keys = list(keys)
    run_keys = set(context.partition_keys)
    if not set(keys) <= run_keys:
        raise ValueError(f"papers outside this run: {sorted(set(keys) - run_keys)[:5]}")
    names = asset_keys or tuple(k.path[-1] for k in context.selected_asset_keys)
    metadata: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        for key in keys:
            check_stop()  # Ctrl-C in `sheaf build`: the step fails here, at a paper boundary
            _one(context, key, fn, names, results, errors, metadata)
    finally:  # the papers done before a stop keep their metadata (their outputs are not stored)
        add_partitions_metadata(context, metadata)
    if errors:
        context.log.warning(f"{len(errors)} of {len(keys)} papers failed: {', '.join(sorted(errors))}")
    return results


def _one(context: AssetExecutionContext, key: str, fn: Callable[[str], tuple[dict[str, Any], dict[str, Any]]],
         names: tuple[str, ...], results: dict[str, dict[str, Any]], errors: dict[str, str],
         metadata: dict[tuple[str, str], dict[str, Any]]) -> None:
    """One paper: its outputs into `results`, its metadata for every asset of the step."""
    t0 = time.perf_counter()
    try:
        with deferred_interrupts() as interrupted:
            outputs, meta = fn(key)
        if interrupted[0]:
            request_stop()
    except (IngestError, SheafError, FileNotFoundError) as e:
        errors[key] = str(e)
        unreadable = unreadable_reason(e)
        if unreadable is None:
            context.log.error(str(e))
            meta = {"error": str(e)}
        else:  # the file, not the code: a state of the paper (`unreadable`), said once as a warning
            context.log.warning(f"{key}: unreadable: {unreadable}")
            meta = {"error": str(e), "unreadable": unreadable}
        if getattr(e, "ocr_result_hash", None):  # the input that failed: a changed one is built again
            meta["ocr_result_hash"] = e.ocr_result_hash
        outputs = {}
    meta["duration_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    for name, value in outputs.items():
        results.setdefault(name, {})[key] = value
    md = {k: _meta_value(v) for k, v in meta.items()}
    for name in names:
        metadata[(name, key)] = md
    notify(names[-1], key, meta)
