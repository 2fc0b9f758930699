"""`sheaf build` on the Dagster side: plan from materialization metadata (`pipelines.planning.statuses`),
then materialize missing and stale papers in chunked in-process runs.

The embedding model is loaded at most once per build: the build makes one embedder and
hands it to each of its runs as the `embedder` resource (`pipelines.resources`).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dagster import AssetKey, DagsterInstance, Definitions

from pipelines.build.live import Events, LiveProgress, reap_dead_runs
from pipelines.build.runs import (
    QUIET_RUN_CONFIG,
    cancel_running,
    ensure_dagster_home,
    get_instance,
    run_chain,
    with_embedder,
)
from pipelines.build.sync import SyncPlan, apply_sync, plan_sync
from pipelines.build.workers import chunks_for_workers, run_parallel
from pipelines.build_lock import (
    build_lock,
    check_workers,
    check_writable,
    index_lock,
    prepare_index,
    run_tags,
    storage_error,
    sweep_leftovers,
)
from pipelines.partitions import papers_partitions
from pipelines.planning.drift import metadata_missing
from pipelines.planning.plan import BuildReport, Record, needs_build, with_warning_events
from pipelines.planning.policy import MAX_PARTITIONS_PER_RUN
from pipelines.planning.recorded_plan import chain_cursor, load_record, same_statuses, statuses_from, write_record
from pipelines.planning.statuses import (
    Chain,
    PaperStatus,
    apply_index_drift,
    chain_of,
    chunk_targets,
    paper_statuses,
)
from sheaf.core.envelope import SheafError
from sheaf.core.progress import interactive_build, phase, stop_reason, stop_requested
from sheaf.core.settings import Settings
from sheaf.library.metadata import export_hash
from sheaf.library.sources import SourceScan
from sheaf.store.health import storage_problem
from sheaf.vectors.embedder import Embedder

__all__ = ["BuildReport", "PaperStatus", "build", "ensure_dagster_home", "get_instance", "paper_statuses",
           "run_chain", "with_embedder"]


def _export_hash(settings: Settings, plan: SyncPlan) -> str:
    return export_hash(plan.scan.discovery.metadata_files)


def build(settings: Settings, defs: Definitions, papers: list[str] | None = None, full: bool = False,
          progress: Callable[[str], None] = lambda s: None, embedder: Embedder | None = None,
          events: Events | None = None, workers: int = 1, scan: SourceScan | None = None,
          record: Record | None = None, exact_progress: bool = True,
          load_definitions: Callable[[Settings], Definitions] | None = None) -> BuildReport:
    """Discover, then materialize missing and stale papers (all of them with `full`).

    Crash safety (`pipelines/build_lock.py`): one build at a time per SHEAF_HOME (a second
    one waits); runs of a build that died are marked failed; temp files it left are swept; a
    read-only or full disk, or a damaged index, is a clear error naming the path (a damaged
    index is moved aside and rebuilt from the artifacts).

    `embedder`: the model for every run of this build (default: one made here, loaded on the
    first passage to embed); the runs get it as their `embedder` resource (`with_embedder`).

    `events`: structured progress for programs (`sheaf build --events`, `pipelines.build.live`):
    `start` once planned, `progress` per paper done, `warning` per problem (each "! ..." line
    of `progress` too).

    `workers`: more than 1 builds the planned papers in that many processes (`pipelines.build.workers`;
    only with the index on Postgres); each builds the home's own Definitions with its own model,
    so `defs` and `embedder` then serve this process only (library metadata and report);
    `load_definitions` is how a worker makes them (`pipelines.entry.open_for_build`, passed in by
    the caller, since the build cannot import the composition root above it).

    `scan`, `record`: the library scan and the last recorded plan the no-op proof read moments
    before (`pipelines.planning.noop`), reused instead of made again (the record still checked current).

    `exact_progress`: a program reads `events`, so the running run's progress tags are written
    before each paper's event; False: at most once a second (`pipelines.build.live.TAG_EVERY`)."""
    check_workers(settings, workers)
    if workers > 1 and load_definitions is None:
        raise ValueError("a build with workers needs load_definitions (pipelines.entry.open_for_build)")
    progress, events = with_warning_events(progress, events or (lambda e: None))
    paths = [settings.index_path.parent, settings.artifacts_dir, settings.dagster_home]
    with build_lock(settings.home, progress), index_lock(settings, progress):
        try:
            check_writable(paths)
            instance = get_instance(settings)
            reaped = reap_dead_runs(instance)
            for r in reaped:
                progress(f"! run {r['run_id'][:8]} ({r['job']}) of a sheaf build that died (pid {r['pid']}) "
                         "marked failed")
            swept = sweep_leftovers(settings.home, settings.artifacts_dir)
            prepared = prepare_index(settings, full=full, say=progress)
            embedder = embedder if embedder is not None else Embedder.from_settings(settings)
            embedder.export_ahead()  # a home's first build: the model's export runs beside the parse
            defs = with_embedder(defs, embedder)
            rep = _build(settings, defs, papers, full, progress, instance, events, workers, scan, record,
                         exact_progress, load_definitions)
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
           progress: Callable[[str], None], instance: DagsterInstance, events: Events,
           workers: int = 1, scan: SourceScan | None = None, known: Record | None = None,
           exact_progress: bool = True,
           load_definitions: Callable[[Settings], Definitions] | None = None) -> BuildReport:
    t0 = time.perf_counter()
    chain = chain_of(defs)
    # The last build's record, while provably current (pipelines/planning/recorded_plan.py): papers whose OCR
    # hash it holds keep its status, and no paper's events are read for them.
    record = None if full else load_record(instance, chain, known)
    phase("scanning the library")
    plan = plan_sync(instance, settings, observed=record.versions if record is not None else None, scan=scan)
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

    def stopped(where: str, statuses: dict[str, PaperStatus] | None = None) -> BuildReport:
        """A stop asked for while the build planned: it ends here, before any paper's run, with
        the papers' statuses when they were read already."""
        progress("interrupted while planning: the next `sheaf build` carries on with what is left")
        return BuildReport(sync, {}, [], statuses or {}, 0, round(time.perf_counter() - t0, 2), True,
                           {"stopped": where})

    if stop_requested():
        return stopped("after the library scan")
    # library metadata: when the export changed (or never loaded)
    last = instance.get_latest_materialization_event(AssetKey("library_metadata"))
    loaded = {k: getattr(v, "value", v) for k, v in last.asset_materialization.metadata.items()} \
        if last is not None and last.asset_materialization is not None else {}
    if full or loaded.get("export_hash") != _export_hash(settings, plan) or metadata_missing(settings, loaded.get("papers")):
        phase("loading the library's metadata")
        res = defs.resolve_job_def("library_job").execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=[AssetKey("library_metadata")],
            run_config=QUIET_RUN_CONFIG, tags=run_tags())
        progress("library metadata loaded" if res.success else "library metadata FAILED")

    if stop_requested():
        return stopped("after the library metadata")
    ordered = list(instance.get_dynamic_partitions(papers_partitions.name))
    wanted = [k for k in ordered if papers is None or k in papers]
    unknown = sorted(set(papers or []) - set(ordered))
    for k in unknown:
        progress(f"! {k}: not a paper of this library")
    # --full rebuilds every paper whatever its status: read once, after the runs
    phase("planning")
    statuses, read = ({}, 0) if full else statuses_from(instance, chain, wanted, plan.versions, record)
    how = {"record": "skipped (--full)" if full else ("current" if record is not None else "none or stale"),
           "papers_read": read, "dagster": True}
    planned = dict(statuses)  # the plan as recorded: apply_index_drift replaces what it marks, never changes it
    if not full:  # index rows / artifacts that disagree with the event log: rebuild from there
        for k, why in apply_index_drift(settings, instance, statuses, chain).items():
            progress(f"! {k}: {'; '.join(why)}")
    if stop_requested():
        return stopped("after reading the papers' statuses", statuses)
    targets = ({k: ["--full"] for k in wanted} if full
               else {k: st.reasons for k, st in statuses.items() if needs_build(st)})
    starts = {k: chain.first if full else (statuses[k].rebuild_from or chain.first) for k in targets}
    interrupted = False
    computed = 0
    if targets:
        progress(f"building {len(targets)} of {len(wanted)} papers")
    events({"event": "start", "total": len(targets), "considered": len(wanted), "planned": targets, "sync": sync})
    parallel = workers > 1 and len(targets) > 1
    live = LiveProgress(instance, len(targets), chain.assets[-1], events, by_build=parallel, exact=exact_progress)
    if workers > 1:  # the one-process default reports exactly what it always did
        how["workers"] = min(workers, len(targets)) if parallel else 1

    finished: dict[str, int] = {}  # step -> papers that finished it in this build

    def on_paper(step: str, key: str, meta: dict[str, Any]) -> None:
        nonlocal computed
        finished[step] = finished.get(step, 0) + 1
        phase(f"{STEP_WORDS.get(step, step)} {finished[step]}/{len(targets)}")
        if "error" in meta:
            progress(f"✗ {key}: {step}: {meta['error']}")
        elif step == "vector_collections":
            computed += int(meta.get("embeddings_computed") or 0)
            progress(f"✓ {key}: {meta.get('passages', 0)} passages, {meta.get('embeddings_computed', 0)} embedded")
        live.paper(step, key, meta)

    planned_runs = chunk_targets(chain, ordered, starts, MAX_PARTITIONS_PER_RUN)
    with interactive_build(on_paper):
        if parallel and stop_requested():
            interrupted = True
        elif parallel:
            ran, interrupted, died = run_parallel(settings, instance, chain, chunks_for_workers(planned_runs, workers),
                                                  workers, live, on_paper, progress, load_definitions)
            runs += ran
            how["workers_died"] = died
        else:
            interrupted = _run_serially(instance, defs, chain, planned_runs, live, runs)
        live.end()  # the counters a throttled write left out; finished runs name no paper
    if interrupted:
        progress("interrupted: the next `sheaf build` carries on with what is left")
    # a stop that came after the last paper: the build is finished; the report is left to the
    # automation sensor (`REPORT_CONDITION`) so the stop settles now
    if runs and not interrupted and not stop_requested() and report_due(instance, len(targets), len(ordered)):
        res = defs.resolve_job_def("library_job").execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=[AssetKey("library_report")],
            run_config=QUIET_RUN_CONFIG, tags=run_tags())
        progress("library report updated" if res.success else "library report FAILED")
    cursor = chain_cursor(instance, chain)
    if runs:  # only the papers the runs touched changed state: read theirs again
        ran = [k for k in wanted if k in targets]
        fresh = paper_statuses(instance, chain, settings, ran, observed=plan.versions)
        recorded = {k: fresh[k] if k in fresh else planned[k] for k in wanted}
        final = {k: fresh[k] if k in fresh else statuses[k] for k in wanted}
        checked = {k: final[k] for k in ran}
        apply_index_drift(settings, instance, checked, chain)
        final.update(checked)
    elif full:  # --full stopped before its first run: its papers' statuses were not read yet
        final = recorded = paper_statuses(instance, chain, settings, wanted, observed=plan.versions)
    else:  # nothing ran: the plan's statuses are final (a no-op build reads no paper's events)
        final, recorded = statuses, planned
    if papers is None and not interrupted and chain_cursor(instance, chain) == cursor and (
            record is None or record.cursor != cursor or not same_statuses(record.statuses, recorded)):
        write_record(instance, chain, recorded, plan.versions, cursor, plan.scan.discovery.metadata_files)
    return BuildReport(sync, targets, runs, final, computed, round(time.perf_counter() - t0, 2), interrupted, how)


#: What the heartbeat of a piped build calls each step of the chain (`sheaf.core.progress.phase`);
#: a step of several assets reports under its last one (`assets._batch.run_per_paper`).
STEP_WORDS = {"ocr_blocks": "parse", "render_map": "render", "structure_tree": "structure",
              "object_units": "units", "fts_tables": "full-text index", "vector_collections": "embed"}


#: `sheaf build` refreshes the library report itself when it rebuilt at least this share of the
#: library (or the report was never made); smaller changes leave it to the automation sensor
#: (`REPORT_CONDITION`), since the report reads every paper's artifacts (0.87 s for 200 papers
#: measured here: ~45 s at 10,000 papers by extrapolation, for a one-paper edit). `sheaf report` always reads the artifacts afresh.
REPORT_SHARE = 0.1


def report_due(instance: DagsterInstance, rebuilt: int, papers: int) -> bool:
    """Whether this build refreshes `library_report` (see `REPORT_SHARE`)."""
    if instance.get_latest_materialization_event(AssetKey("library_report")) is None:
        return True
    return rebuilt >= REPORT_SHARE * max(papers, 1)


def _run_serially(instance: DagsterInstance, defs: Definitions, chain: Chain, planned: list[tuple[str, list[str]]],
                  live: LiveProgress, runs: list[dict[str, Any]]) -> bool:
    """The planned runs one after another in this process (the default); appends to `runs`.
    Returns whether the build was interrupted."""
    try:
        for i, (first, keys) in enumerate(planned):
            if stop_requested():  # asked before this run began: launch no run only to cancel it
                return True
            live.new_run()
            runs.append(run_chain(instance, defs, keys, first, chain))
            if runs[-1]["interrupted"] or (stop_requested() and not (
                    runs[-1]["success"] and i == len(planned) - 1)):  # a stop after the last paper: a finished build
                if not runs[-1]["success"]:
                    instance.report_run_canceled(instance.get_run_by_id(runs[-1]["run_id"]),
                                                 message=f"sheaf build stopped by {stop_reason()} at a paper boundary")
                return True
    except KeyboardInterrupt:
        cancel_running(instance)
        return True
    return False
