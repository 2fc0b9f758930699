"""What Dagster alone costs a paper of Sheaf's chain: the floor under "orchestration ≤ 30 ms a paper".

The same graph as `pipelines.definitions` (one dynamic partition per paper; six steps writing the
eight chain assets: `ocr_blocks`, `fulltext_markdown_and_render_map` → `fulltext_markdown` +
`render_map`,
`structure_tree`, `body_units_and_object_units` → `body_units` + `object_units`, `fts_tables`,
`vector_collections`; the five per-paper checks in one step), run the way `sheaf build` runs it:
Sheaf's dagster.yaml (its event log storage, batched event writes), runs of 100 papers through
`execute_in_process` with a partition range, each step's papers through `assets._batch.run_per_paper`
(per-paper metadata in one call), the checks' evaluations logged per paper as one batch with their
target materializations (`log_check_evaluations`). Every event and every metadata entry a Sheaf
paper records is recorded, with values of the same kinds and sizes; but no step does any work (no
parse, no index write, no encode) and the IO manager keeps its outputs in memory.

So a run's time a paper here is what Dagster's public surface costs a paper of this chain on this
machine, with Sheaf's own event-storage cuts: Sheaf's orchestration-only rebuild minus this is
Sheaf's own work (parsing, rendering, writing artifacts and index rows, the vector step's
tokenizing). It measures a first build of `--papers` papers on an empty instance, then a rebuild
of `--rebuild` of them (the instance then holds the first build's history, as a real rebuild's does).

    .venv/bin/python -m bench.build.dagster_floor [--papers 1000] [--rebuild 200] [--repeat 3] [--json out.json]

Results: docs/benchmarks.md, "Dagster's floor".
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetExecutionContext,
    AssetIn,
    AssetOut,
    AssetSelection,
    DagsterInstance,
    Definitions,
    IOManager,
    asset,
    define_asset_job,
    in_process_executor,
    io_manager,
    multi_asset,
    multi_asset_check,
)

from assets._batch import run_per_paper
from assets.checks import SPECS, _evaluations
from pipelines.build.runs import QUIET_RUN_CONFIG
from pipelines.dagster_internals.home_files import EVENT_BATCH_ENV, EVENT_BATCH_SIZE, dagster_yaml
from pipelines.dagster_internals.steps import log_check_evaluations
from pipelines.dagster_internals.storage_base import partitions_snapshot
from pipelines.partitions import papers_partitions
from pipelines.planning.events import latest_events
from pipelines.planning.policy import MAX_PARTITIONS_PER_RUN
from sheaf.transform.checks import CheckOutcome

ROOT = Path(__file__).resolve().parents[2]

HASH = "adf44f083c3de38b5b74ce3067ef3493b2a1c0d9e8f7a6b5c4d3e2f1a0b9c8d7"
# Each step's per-paper metadata: the keys Sheaf records, values of the same kinds and sizes
# (read from a built home's events).
META = {
    "ocr_blocks": {"title": "CLASPs link focal adhesion-associated microtubule capture to cell migration",
                   "first_author": "A. Author", "year": 2001, "ocr_result_hash": HASH, "source_format": "markdown",
                   "adapter": "markdown/1", "blocks": 8, "warnings": [], "output_hash": HASH},
    "fulltext_markdown_and_render_map": {"ocr_result_hash": HASH, "headings": 3, "emitted_blocks": 8,
                                         "markdown_lines": 19, "output_hash": HASH},
    "structure_tree": {"ocr_result_hash": HASH, "sections": 4, "depth": 1, "output_hash": HASH},
    "body_units_and_object_units": {"ocr_result_hash": HASH, "body_units": 3, "object_units": 0, "tokens": 770,
                                    "output_hash": HASH + ":" + HASH[:16]},
    "fts_tables": {"body_units": 3, "object_units": 0, "rows_unchanged": False, "replace_ms": 1.5},
    "vector_collections": {"passages": 7, "embeddings_computed": 0, "embeddings_reused": 7,
                           "model": "sentence-transformers/all-MiniLM-L6-v2", "model_identity": "a3b6abd534f5",
                           "embed_backend": "onnx", "embed_device": "cpu", "embed_ms": 0.0},
}


class _Memory(IOManager):
    """Outputs kept in memory for the run (Sheaf's own IO manager writes files)."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], Any] = {}

    def handle_output(self, context, obj) -> None:
        for key in context.asset_partition_keys:
            if key in (obj or {}):
                self.values[(context.asset_key.path[-1], key)] = obj[key]

    def load_input(self, context) -> dict[str, Any]:
        asset_name = context.asset_key.path[-1]
        return {k: self.values[(asset_name, k)] for k in context.asset_partition_keys
                if (asset_name, k) in self.values}


@io_manager
def memory_io_manager(_):
    return _Memory()


def _step(context: AssetExecutionContext, step: str, outputs: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The step's papers through Sheaf's per-paper wrapper, each giving a tiny output."""
    return run_per_paper(context, context.partition_keys,
                         lambda key: ({o: {"paper_id": key} for o in outputs}, dict(META[step])),
                         outputs)


def _out() -> AssetOut:
    return AssetOut(io_manager_key="artifacts")


COMMON: dict[str, Any] = dict(partitions_def=papers_partitions)


@asset(io_manager_key="artifacts", **COMMON)
def ocr_blocks(context: AssetExecutionContext) -> dict[str, Any]:
    return _step(context, "ocr_blocks", ("ocr_blocks",)).get("ocr_blocks", {})


@multi_asset(outs={"fulltext_markdown": _out(), "render_map": _out()}, ins={"ocr_blocks": AssetIn()}, **COMMON)
def fulltext_markdown_and_render_map(context: AssetExecutionContext, ocr_blocks: dict[str, Any]):
    res = _step(context, "fulltext_markdown_and_render_map", ("fulltext_markdown", "render_map"))
    return res.get("fulltext_markdown", {}), res.get("render_map", {})


@asset(ins={"render_map": AssetIn(), "ocr_blocks": AssetIn()}, io_manager_key="artifacts", **COMMON)
def structure_tree(context: AssetExecutionContext, render_map: dict[str, Any], ocr_blocks: dict[str, Any]):
    return _step(context, "structure_tree", ("structure_tree",)).get("structure_tree", {})


@multi_asset(outs={"body_units": _out(), "object_units": _out()},
             ins={"structure_tree": AssetIn(), "ocr_blocks": AssetIn()}, **COMMON)
def body_units_and_object_units(context: AssetExecutionContext, structure_tree: dict[str, Any],
                                ocr_blocks: dict[str, Any]):
    res = _step(context, "body_units_and_object_units", ("body_units", "object_units"))
    return res.get("body_units", {}), res.get("object_units", {})


@asset(ins={"body_units": AssetIn(), "object_units": AssetIn()}, **COMMON)
def fts_tables(context: AssetExecutionContext, body_units: dict[str, Any], object_units: dict[str, Any]) -> None:
    run_per_paper(context, context.partition_keys, lambda key: ({}, dict(META["fts_tables"])))


@asset(ins={"body_units": AssetIn(), "object_units": AssetIn(), "ocr_blocks": AssetIn()}, deps=["fts_tables"],
       **COMMON)
def vector_collections(context: AssetExecutionContext, body_units: dict[str, Any], object_units: dict[str, Any],
                       ocr_blocks: dict[str, Any]) -> None:
    run_per_paper(context, context.partition_keys, lambda key: ({}, dict(META["vector_collections"])))


@multi_asset_check(specs=list(SPECS), can_subset=True, name="paper_checks")
def paper_checks(context: AssetCheckExecutionContext):
    """Every paper passes every check; each evaluation is logged per paper with its target, as
    Sheaf's `paper_checks` logs them, plus each check's run-wide result."""
    keys = list(context.partition_keys)
    selected = [s for s in SPECS if AssetCheckKey(s.asset_key, s.name) in context.selected_asset_check_keys]
    latest: dict[str, Any] = {}
    for s in selected:
        name = s.asset_key.path[-1]
        if name not in latest:
            latest[name] = latest_events(context.instance, name, partitions=keys)
        outcomes = {k: CheckOutcome(True, None, {"units": 3}) for k in keys}
        log_check_evaluations(context, _evaluations(name, s.name, outcomes, latest[name]))
        yield AssetCheckResult(asset_key=s.asset_key, check_name=s.name, passed=True,
                               description=f"0 of {len(keys)} papers failed (each paper has its own result)",
                               metadata={"papers_checked": len(keys), "failed_papers": {}})


def floor_definitions() -> Definitions:
    assets = [ocr_blocks, fulltext_markdown_and_render_map, structure_tree, body_units_and_object_units, fts_tables,
              vector_collections]
    job = define_asset_job("paper_chain", selection=AssetSelection.assets(*assets))
    return Definitions(assets=assets, asset_checks=[paper_checks], jobs=[job],
                       resources={"artifacts": memory_io_manager}, executor=in_process_executor)


def _runs(instance: DagsterInstance, defs: Definitions, keys: list[str], per_run: int) -> dict[str, Any]:
    job = defs.resolve_job_def("paper_chain")
    t0 = time.perf_counter()
    runs = []
    for i in range(0, len(keys), per_run):
        part = keys[i:i + per_run]
        with partitions_snapshot(instance):
            res = job.execute_in_process(instance=instance, raise_on_error=False, run_config=QUIET_RUN_CONFIG, tags={
                "dagster/asset_partition_range_start": part[0], "dagster/asset_partition_range_end": part[-1]})
        if not res.success:
            raise SystemExit(f"a floor run failed: {res.run_id}")
        runs.append(res)
    wall = time.perf_counter() - t0
    events = sum(len(r.all_events) for r in runs)
    return {"papers": len(keys), "runs": len(runs), "wall_s": round(wall, 2),
            "ms_a_paper": round(wall / len(keys) * 1000, 1), "step_events_a_paper": round(events / len(keys), 1)}


def measure(papers: int, rebuild: int, per_run: int, sheaf_yaml: bool = True) -> dict[str, Any]:
    """A first build of `papers` on a fresh instance, then a rebuild of the first `rebuild`."""
    with tempfile.TemporaryDirectory(prefix="sheaf-floor-") as home:
        if sheaf_yaml:
            Path(home, "dagster.yaml").write_text(dagster_yaml())
        os.environ["DAGSTER_HOME"] = home
        os.environ.setdefault(EVENT_BATCH_ENV, str(EVENT_BATCH_SIZE))
        keys = [f"P{i:05d}X" for i in range(papers)]
        defs = floor_definitions()
        with DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("papers", keys)
            first = _runs(instance, defs, keys, per_run)
            again = _runs(instance, defs, keys[:rebuild], per_run)
            counts = {}
            for name in ("ocr_blocks", "vector_collections"):
                counts[name] = len(latest_events(instance, name, partitions=keys))
        if counts["vector_collections"] != papers:  # every paper materialized: the floor did the whole chain
            raise SystemExit(f"expected {papers} materializations, got {counts}")
        size = sum(f.stat().st_size for f in Path(home).rglob("*") if f.is_file())
    return {"first_build": first, "rebuild": again, "dagster_home_kb_a_paper": round(size / papers / 1000, 1),
            "dagster_yaml": "sheaf" if sheaf_yaml else "dagster's default"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--papers", type=int, default=1000)
    ap.add_argument("--rebuild", type=int, default=200)
    ap.add_argument("--per-run", type=int, default=MAX_PARTITIONS_PER_RUN)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--default-instance", action="store_true",
                    help="also measure Dagster's default instance (no dagster.yaml), once")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rounds = []
    for i in range(args.repeat):
        r = measure(args.papers, args.rebuild, args.per_run)
        print(json.dumps(r), flush=True)
        rounds.append(r)
    out: dict[str, Any] = {"papers": args.papers, "rebuild": args.rebuild, "per_run": args.per_run, "rounds": rounds,
                           "first_build_ms_a_paper_median": statistics.median(
                               r["first_build"]["ms_a_paper"] for r in rounds),
                           "rebuild_ms_a_paper_median": statistics.median(r["rebuild"]["ms_a_paper"] for r in rounds)}
    if args.default_instance:
        out["default_instance"] = measure(args.papers, args.rebuild, args.per_run, sheaf_yaml=False)
        print(json.dumps(out["default_instance"]), flush=True)
    print(json.dumps({k: v for k, v in out.items() if k != "rounds"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
