"""`sheaf build` and `sheaf status` on the Dagster side: plan from materialization metadata,
then materialize missing and stale papers in chunked in-process runs.

A paper is *built* when every asset of its chain has a materialization whose code version
is current, whose OCR hash is the paper's current one, and whose vectors are of the
configured model; otherwise it is *missing*, *stale* (with reasons) or *failed* (its
latest materialization recorded an error and its input has not changed since).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, Definitions

from pipelines.automation import MAX_PARTITIONS_PER_RUN
from pipelines.partitions import papers_partitions
from pipelines.state import EventInfo, latest_events, latest_observed_versions
from pipelines.sync import SyncPlan, apply_sync, plan_sync
from sheaf.settings import Settings

#: Dagster's console logger at WARNING: `sheaf build` prints its own per-paper progress.
QUIET_RUN_CONFIG: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

CHAIN: tuple[str, ...] = ("ocr_blocks", "fulltext_markdown", "render_map", "structure_tree",
                          "body_units", "object_units", "fts_tables", "vector_collections")


@dataclass(slots=True)
class PaperStatus:
    key: str
    state: str  # built | stale | missing | failed
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # from the last vector/units steps


@dataclass(slots=True)
class BuildReport:
    sync: dict[str, Any]
    planned: dict[str, list[str]]  # key -> reasons
    runs: list[dict[str, Any]]
    statuses: dict[str, PaperStatus]
    embeddings_computed: int = 0
    seconds: float = 0.0
    interrupted: bool = False


def ensure_dagster_home(settings: Settings) -> Path:
    """The Dagster home (DAGSTER_HOME or <SHEAF_HOME>/dagster_home), with our dagster.yaml."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        cfg.write_text(
            "# Written by sheaf: one writer at a time for the SQLite index pool.\n"
            "concurrency:\n  pools:\n    default_limit: 1\n"
            "telemetry:\n  enabled: false\n"
        )
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def get_instance(settings: Settings) -> DagsterInstance:
    ensure_dagster_home(settings)
    return DagsterInstance.get()


def current_code_versions(defs: Definitions) -> dict[str, str | None]:
    graph = defs.resolve_asset_graph()
    out: dict[str, str | None] = {}
    for name in CHAIN:
        from dagster import AssetKey

        out[name] = graph.get(AssetKey(name)).code_version
    return out


def paper_statuses(instance: DagsterInstance, defs: Definitions, settings: Settings,
                   keys: list[str] | None = None, observed: dict[str, str] | None = None) -> dict[str, PaperStatus]:
    """Per paper: built / stale (why) / missing / failed, from materialization metadata alone."""
    keys = list(keys if keys is not None else instance.get_dynamic_partitions(papers_partitions.name))
    observed = observed if observed is not None else latest_observed_versions(instance)
    code = current_code_versions(defs)
    events: dict[str, dict[str, EventInfo]] = {a: latest_events(instance, a, partitions=keys) for a in CHAIN}
    out: dict[str, PaperStatus] = {}
    for key in keys:
        st = PaperStatus(key, "built")
        evs = {a: events[a].get(key) for a in CHAIN}
        missing = [a for a, e in evs.items() if e is None]
        errors = [(a, e.metadata["error"]) for a, e in evs.items() if e is not None and "error" in e.metadata]
        first = evs["ocr_blocks"]
        if first is not None and observed.get(key) and first.metadata.get("ocr_result_hash") not in (None, observed[key]):
            st.reasons.append("OCR changed")
        elif first is not None and observed.get(key, "").startswith("unreadable:") and "error" not in first.metadata:
            st.reasons.append("OCR changed")
        changed = [a for a, e in evs.items() if e is not None and code[a] and e.code_version != code[a]]
        if changed:
            st.reasons.append("code changed: " + ", ".join(changed))
        vec = evs["vector_collections"]
        if vec is not None and "error" not in vec.metadata and vec.metadata.get("model") not in (None, _model_name(settings)):
            st.reasons.append(f"model changed: {vec.metadata.get('model')} → {_model_name(settings)}")
        order = [evs[a].storage_id for a in CHAIN if evs[a] is not None]
        if not missing and any(b < a for a, b in zip(order, order[1:])):
            st.reasons.append("upstream rebuilt")
        if errors:
            st.state, st.error = "failed", errors[0][1]
        elif missing:
            st.state = "missing"
            st.reasons.insert(0, "never built" if len(missing) == len(CHAIN) else "missing: " + ", ".join(missing))
        elif st.reasons:
            st.state = "stale"
        if errors and st.reasons and "OCR changed" not in st.reasons and not changed:
            st.reasons = []  # a failed paper is retried only when its input or code changed
        if vec is not None:
            st.metadata = {k: vec.metadata.get(k) for k in ("passages", "embeddings_computed", "model") if k in vec.metadata}
        units = evs["body_units"]
        if units is not None:
            st.metadata.update({k: units.metadata.get(k) for k in ("body_units", "object_units", "tokens") if k in units.metadata})
        out[key] = st
    return out


def _model_name(settings: Settings) -> str:
    from sheaf.embed import resolve_model_path

    return resolve_model_path(settings.embedding_model)[0]


def needs_build(st: PaperStatus) -> bool:
    if st.state == "built":
        return False
    if st.state == "failed":
        return bool(st.reasons)
    return True


def partition_ranges(ordered: list[str], targets: set[str], max_per_run: int) -> list[tuple[str, str, list[str]]]:
    """Contiguous runs of target keys in the partition order, at most `max_per_run` each."""
    ranges: list[list[str]] = []
    current: list[str] = []
    for k in ordered:
        if k in targets and len(current) < max_per_run:
            current.append(k)
            continue
        if current:
            ranges.append(current)
            current = []
        if k in targets:
            current.append(k)
    if current:
        ranges.append(current)
    return [(r[0], r[-1], r) for r in ranges]


def run_chain(instance: DagsterInstance, defs: Definitions, keys: list[str]) -> dict[str, Any]:
    """One in-process run of the paper chain over a contiguous range of partitions."""
    job = defs.resolve_job_def("paper_chain")
    t0 = time.perf_counter()
    tags = {"sheaf/pid": str(os.getpid())}
    quiet = QUIET_RUN_CONFIG
    if len(keys) == 1:
        res = job.execute_in_process(instance=instance, partition_key=keys[0], raise_on_error=False,
                                     tags=tags, run_config=quiet)
    else:
        res = job.execute_in_process(instance=instance, raise_on_error=False, run_config=quiet, tags={
            **tags, "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
    failures = [e.message for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    return {"run_id": res.run_id, "papers": keys, "success": res.success,
            "seconds": round(time.perf_counter() - t0, 2), "failures": failures}


def _export_hash(settings: Settings, plan: SyncPlan) -> str:
    import hashlib

    h = hashlib.sha256()
    for f in plan.scan.discovery.metadata_files:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def build(settings: Settings, defs: Definitions, papers: list[str] | None = None, full: bool = False,
          progress: Callable[[str], None] = lambda s: None) -> BuildReport:
    """Discover, then materialize missing and stale papers (all of them with `full`)."""
    t0 = time.perf_counter()
    instance = get_instance(settings)
    plan = plan_sync(instance, settings)
    apply_sync(instance, settings, plan)
    sync = {"added": plan.added, "removed": plan.removed, "changed": sorted(plan.changed),
            "invalid_keys": plan.invalid_keys, "unreadable": plan.errors}
    for k in plan.added:
        progress(f"+ {k}: new paper")
    for k in plan.removed:
        progress(f"- {k}: removed (partition, artifacts and index rows deleted)")
    for k in plan.invalid_keys:
        progress(f"! invalid paper key refused: {k!r}")
    runs: list[dict[str, Any]] = []

    # library metadata: when the export changed (or never loaded)
    from dagster import AssetKey

    last = instance.get_latest_materialization_event(AssetKey("library_metadata"))
    last_hash = None
    if last is not None and last.asset_materialization is not None:
        v = last.asset_materialization.metadata.get("export_hash")
        last_hash = getattr(v, "value", v)
    if full or last_hash != _export_hash(settings, plan):
        res = defs.resolve_job_def("library_job").execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=[AssetKey("library_metadata")],
            run_config=QUIET_RUN_CONFIG)
        progress("library metadata loaded" if res.success else "library metadata FAILED")

    ordered = list(instance.get_dynamic_partitions(papers_partitions.name))
    wanted = [k for k in ordered if papers is None or k in papers]
    unknown = sorted(set(papers or []) - set(ordered))
    for k in unknown:
        progress(f"! {k}: not a paper of this library")
    statuses = paper_statuses(instance, defs, settings, wanted)
    targets = {k: (["--full"] if full else st.reasons) for k, st in statuses.items() if full or needs_build(st)}
    interrupted = False
    computed = 0
    if targets:
        progress(f"building {len(targets)} of {len(wanted)} papers")
    try:
        for start, end, keys in partition_ranges(ordered, set(targets), MAX_PARTITIONS_PER_RUN):
            r = run_chain(instance, defs, keys)
            runs.append(r)
            after = paper_statuses(instance, defs, settings, keys)
            for k in keys:
                st = after[k]
                computed += int(st.metadata.get("embeddings_computed") or 0) if st.state == "built" else 0
                what = (f"{st.metadata.get('body_units', '?')} units, {st.metadata.get('passages', '?')} passages, "
                        f"{st.metadata.get('embeddings_computed', 0)} embedded") if st.state == "built" else (st.error or st.state)
                progress(f"{'✓' if st.state == 'built' else '✗'} {k}: {what}")
    except KeyboardInterrupt:
        interrupted = True
        _cancel_running(instance)
        progress("interrupted: the next `sheaf build` carries on with what is left")
    if runs and not interrupted:
        res = defs.resolve_job_def("library_job").execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=[AssetKey("library_report")],
            run_config=QUIET_RUN_CONFIG)
        progress("library report updated" if res.success else "library report FAILED")
    final = paper_statuses(instance, defs, settings, wanted)
    return BuildReport(sync, targets, runs, final, computed, round(time.perf_counter() - t0, 2), interrupted)


def _cancel_running(instance: DagsterInstance) -> None:
    """Mark this process's unfinished runs as canceled (not left 'running' forever)."""
    from dagster import DagsterRunStatus, RunsFilter

    for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING,
                                                       DagsterRunStatus.NOT_STARTED])):
        if run.tags.get("sheaf/pid") == str(os.getpid()):
            instance.report_run_canceled(run, message="sheaf build interrupted (Ctrl-C)")
