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
from pipelines.reliability import run_tags
from pipelines.state import EventInfo, latest_events, latest_observed_versions
from pipelines.sync import SyncPlan, apply_sync, plan_sync
from sheaf.core.progress import interactive_build, stop_requested
from sheaf.core.settings import Settings

#: Dagster's console logger at WARNING: `sheaf build` prints its own per-paper progress.
QUIET_RUN_CONFIG: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

CHAIN: tuple[str, ...] = ("ocr_blocks", "fulltext_markdown", "render_map", "structure_tree",
                          "body_units", "object_units", "fts_tables", "vector_collections")
#: Assets computed by one multi-asset step: a rebuild starting at either starts at the first.
_STEP_START = {"render_map": "fulltext_markdown", "object_units": "body_units"}


def chain_from(asset: str) -> tuple[str, ...]:
    """`asset` and every chain asset below it (the chain is in topological order)."""
    return CHAIN[CHAIN.index(_STEP_START.get(asset, asset)):]


@dataclass(slots=True)
class PaperStatus:
    key: str
    state: str  # built | stale | missing | failed
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # from the last vector/units steps
    #: The first chain asset to rebuild (it and everything below it); None when nothing is due.
    rebuild_from: str | None = None


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
        # Where a rebuild starts: a code bump of structure_tree rebuilds it and below, not the
        # parse above it (as `code_version_changed()` does under the automation sensor).
        if errors or missing and evs["ocr_blocks"] is None or "OCR changed" in st.reasons:
            due = ["ocr_blocks"] if (st.reasons or not errors) else []
        else:
            due = list(missing) + changed
            if vec is not None and any(r.startswith("model changed") for r in st.reasons):
                due.append("vector_collections")
            if "upstream rebuilt" in st.reasons:
                due += [CHAIN[i + 1] for i, (a, b) in enumerate(zip(order, order[1:])) if b < a][:1]
        if due and st.state != "built":
            st.rebuild_from = _STEP_START.get(min(due, key=CHAIN.index), min(due, key=CHAIN.index))
        if vec is not None:
            st.metadata = {k: vec.metadata.get(k) for k in ("passages", "embeddings_computed", "model") if k in vec.metadata}
        units = evs["body_units"]
        if units is not None:
            st.metadata.update({k: units.metadata.get(k) for k in ("body_units", "object_units", "tokens") if k in units.metadata})
        out[key] = st
    return out


def _model_name(settings: Settings) -> str:
    from sheaf.vectors.identity import resolve_model_path

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


def chunk_targets(ordered: list[str], starts: dict[str, str], max_per_run: int) -> list[tuple[str, list[str]]]:
    """(first asset, partition keys) per run: papers grouped by where their rebuild starts
    (upstream first), each group cut into contiguous partition ranges."""
    out: list[tuple[str, list[str]]] = []
    for first in sorted(set(starts.values()), key=CHAIN.index):
        group = {k for k, s in starts.items() if s == first}
        out += [(first, keys) for _, _, keys in partition_ranges(ordered, group, max_per_run)]
    return out


def run_chain(instance: DagsterInstance, defs: Definitions, keys: list[str],
              start: str = CHAIN[0]) -> dict[str, Any]:
    """One in-process run of the paper chain, from asset `start` down, over a contiguous
    range of partitions."""
    from dagster import AssetKey

    job = defs.resolve_job_def("paper_chain")
    t0 = time.perf_counter()
    tags = run_tags()  # sheaf/pid (+ start time): a later build marks the run failed if we die
    quiet = QUIET_RUN_CONFIG
    selection = None if start == CHAIN[0] else [AssetKey(a) for a in chain_from(start)]
    if len(keys) == 1:
        res = job.execute_in_process(instance=instance, partition_key=keys[0], raise_on_error=False,
                                     tags=tags, run_config=quiet, asset_selection=selection)
    else:
        res = job.execute_in_process(instance=instance, raise_on_error=False, run_config=quiet, tags={
            **tags, "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
            asset_selection=selection)
    failures = [e.message for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    errors = [str(getattr(e.event_specific_data, "error", "") or "") for e in res.all_events
              if e.event_type_value == "STEP_FAILURE"]
    interrupted = any("StopRequested" in x or "Interrupted" in x for x in errors)
    return {"run_id": res.run_id, "papers": keys, "from": start, "success": res.success, "interrupted": interrupted,
            "seconds": round(time.perf_counter() - t0, 2), "failures": failures, "errors": errors}


def _export_hash(settings: Settings, plan: SyncPlan) -> str:
    import hashlib

    h = hashlib.sha256()
    for f in plan.scan.discovery.metadata_files:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def build(settings: Settings, defs: Definitions, papers: list[str] | None = None, full: bool = False,
          progress: Callable[[str], None] = lambda s: None) -> BuildReport:
    """Discover, then materialize missing and stale papers (all of them with `full`).

    Crash safety (`pipelines/reliability.py`): one build at a time per SHEAF_HOME (a second
    one waits); runs of a build that died are marked failed; temp files it left are swept; a
    read-only or full disk, or a damaged index, is a clear error naming the path (a damaged
    index is moved aside and rebuilt from the artifacts)."""
    from pipelines.reliability import (
        build_lock, check_writable, prepare_index, reap_dead_runs, storage_error, sweep_leftovers,
    )
    from sheaf.core.envelope import SheafError
    from sheaf.store.sqlite.integrity import storage_problem

    paths = [settings.index_path.parent, settings.artifacts_dir, settings.dagster_home]
    with build_lock(settings.home, progress):
        try:
            check_writable(paths)
            instance = get_instance(settings)
            reaped = reap_dead_runs(instance)
            for r in reaped:
                progress(f"! run {r['run_id'][:8]} ({r['job']}) of a sheaf build that died (pid {r['pid']}) "
                         "marked failed")
            swept = sweep_leftovers(settings.home, settings.artifacts_dir)
            prepared = prepare_index(settings, full=full, say=progress)
            rep = _build(settings, defs, papers, full, progress, instance)
        except SheafError:
            raise
        except Exception as e:
            if storage_problem(e):
                raise storage_error(e, [settings.index_path, *paths]) from e
            raise
        for run in rep.runs:
            for err in run.get("errors", []):
                if storage_problem(err):
                    raise storage_error(err, [settings.index_path, *paths])
        rep.sync.update({"dead_runs_failed": reaped, "leftovers_removed": swept, "index_recovery": prepared})
        return rep


def _build(settings: Settings, defs: Definitions, papers: list[str] | None, full: bool,
           progress: Callable[[str], None], instance: DagsterInstance) -> BuildReport:
    t0 = time.perf_counter()
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
    from pipelines.doctor import metadata_missing

    if full or last_hash != _export_hash(settings, plan) or metadata_missing(settings, last):
        res = defs.resolve_job_def("library_job").execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=[AssetKey("library_metadata")],
            run_config=QUIET_RUN_CONFIG, tags=run_tags())
        progress("library metadata loaded" if res.success else "library metadata FAILED")

    ordered = list(instance.get_dynamic_partitions(papers_partitions.name))
    wanted = [k for k in ordered if papers is None or k in papers]
    unknown = sorted(set(papers or []) - set(ordered))
    for k in unknown:
        progress(f"! {k}: not a paper of this library")
    statuses = paper_statuses(instance, defs, settings, wanted)
    if not full:  # index rows / artifacts that disagree with the event log: rebuild from there
        from pipelines.doctor import apply_index_drift

        for k, why in apply_index_drift(settings, instance, statuses).items():
            progress(f"! {k}: {'; '.join(why)}")
    targets = {k: (["--full"] if full else st.reasons) for k, st in statuses.items() if full or needs_build(st)}
    starts = {k: CHAIN[0] if full else (statuses[k].rebuild_from or CHAIN[0]) for k in targets}
    interrupted = False
    computed = 0
    if targets:
        progress(f"building {len(targets)} of {len(wanted)} papers")

    def on_paper(step: str, key: str, meta: dict[str, Any]) -> None:
        nonlocal computed
        if "error" in meta:
            progress(f"✗ {key}: {step}: {meta['error']}")
        elif step == "vector_collections":
            computed += int(meta.get("embeddings_computed") or 0)
            progress(f"✓ {key}: {meta.get('passages', 0)} passages, {meta.get('embeddings_computed', 0)} embedded")

    with interactive_build(on_paper):
        try:
            for first, keys in chunk_targets(ordered, starts, MAX_PARTITIONS_PER_RUN):
                runs.append(run_chain(instance, defs, keys, first))
                if stop_requested() or runs[-1]["interrupted"]:
                    if not runs[-1]["success"]:
                        instance.report_run_canceled(instance.get_run_by_id(runs[-1]["run_id"]),
                                                     message="sheaf build stopped by Ctrl-C at a paper boundary")
                    interrupted = True
                    break
        except KeyboardInterrupt:
            interrupted = True
            _cancel_running(instance)
    if interrupted:
        progress("interrupted: the next `sheaf build` carries on with what is left")
    if runs and not interrupted:
        res = defs.resolve_job_def("library_job").execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=[AssetKey("library_report")],
            run_config=QUIET_RUN_CONFIG, tags=run_tags())
        progress("library report updated" if res.success else "library report FAILED")
    if runs:  # only the papers the runs touched changed state: read theirs again
        ran = [k for k in wanted if k in targets]
        final = {**statuses, **paper_statuses(instance, defs, settings, ran)}
        final = {k: final[k] for k in wanted}
        from pipelines.doctor import apply_index_drift

        apply_index_drift(settings, instance, {k: final[k] for k in ran})
    else:  # nothing ran: the plan's statuses are final (a no-op build reads the event log once)
        final = statuses
    return BuildReport(sync, targets, runs, final, computed, round(time.perf_counter() - t0, 2), interrupted)


def _cancel_running(instance: DagsterInstance) -> None:
    """Mark this process's unfinished runs as canceled (not left 'running' forever)."""
    from dagster import DagsterRunStatus, RunsFilter

    for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING,
                                                       DagsterRunStatus.NOT_STARTED])):
        if run.tags.get("sheaf/pid") == str(os.getpid()):
            instance.report_run_canceled(run, message="sheaf build interrupted (Ctrl-C)")
