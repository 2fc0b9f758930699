"""Running a per-paper function over a run's partitions, isolating each paper's failure."""

import time
from collections.abc import Callable, Iterable
from typing import Any

from dagster import AssetExecutionContext, Failure, MetadataValue

from sheaf.envelope import SheafError
from sheaf.models import IngestError


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
    as metadata of its partition and its outputs are left out. When every paper of the
    run failed, the step fails with their messages (so a one-paper rerun shows as failed).
    """
    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    keys = list(keys)
    names = asset_keys or tuple(k.path[-1] for k in context.selected_asset_keys)
    for key in keys:
        t0 = time.perf_counter()
        try:
            outputs, meta = fn(key)
        except (IngestError, SheafError, FileNotFoundError) as e:
            errors[key] = str(e)
            context.log.error(str(e))
            meta = {"error": str(e)}
            outputs = {}
        meta["duration_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        for name, value in outputs.items():
            results.setdefault(name, {})[key] = value
        md = {k: _meta_value(v) for k, v in meta.items()}
        for name in names:
            context.add_asset_metadata(md, asset_key=name, partition_key=key)
    if errors and len(errors) == len(keys):
        raise Failure(
            description="; ".join(f"{k}: {v}" for k, v in errors.items()),
            metadata={"failed_papers": MetadataValue.json(sorted(errors))},
        )
    return results
