"""`sheaf build` on the Dagster side: plan from materialization metadata (`pipelines.planner`),
then materialize missing and stale papers in chunked in-process runs.

The embedding model is loaded at most once per build: the build makes one embedder and
hands it to each of its runs as the `embedder` resource (`assets.resources`).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from dagster import AssetKey, DagsterInstance, DagsterRunStatus, Definitions, RunsFilter

from pipelines.automation import MAX_PARTITIONS_PER_RUN
from pipelines.dagster_files import POSTGRES_URL_ENV, YAML_HEADER, dagster_yaml, postgres_dagster_yaml
from pipelines.drift import metadata_missing
from pipelines.live import Events, LiveProgress, reap_dead_runs
from pipelines.partitions import papers_partitions
from pipelines.plan import BuildReport, needs_build, with_warning_events
from pipelines.planner import (
    Chain, PaperStatus, apply_index_drift, chain_of, chunk_targets, paper_statuses, selection_from,
)
from pipelines.record import chain_cursor, load_record, same_statuses, statuses_from, write_record
from pipelines.reliability import build_lock, check_writable, prepare_index, run_tags, storage_error, sweep_leftovers
from pipelines.sync import SyncPlan, apply_sync, plan_sync
from sheaf.core.envelope import SheafError
from sheaf.core.progress import interactive_build, stop_reason, stop_requested
from sheaf.core.settings import Settings
from sheaf.ingest.metadata import export_hash
from sheaf.store.sqlite.integrity import storage_problem
from sheaf.vectors.embedder import Embedder

__all__ = ["BuildReport", "PaperStatus", "build", "ensure_dagster_home", "get_instance", "paper_statuses",
           "run_chain", "with_embedder"]

#: Dagster's console logger at WARNING: `sheaf build` prints its own per-paper progress.
QUIET_RUN_CONFIG: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

def ensure_dagster_home(settings: Settings) -> Path:
    """The Dagster home (DAGSTER_HOME or <SHEAF_HOME>/dagster_home), with our dagster.yaml
    (written when missing; brought up to date when Sheaf wrote it). A home that already holds
    Dagster's per-run event databases keeps that layout, and so its build history. With the
    index on Postgres the instance is there too (`postgres_dagster_yaml`)."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    current = cfg.read_text() if cfg.exists() else None
    if current is None or current.startswith(YAML_HEADER):
        if settings.index_backend == "postgres":
            want = postgres_dagster_yaml()
        else:
            want = dagster_yaml(sharded=(home / "history" / "runs" / "index.db").exists())
        if current != want:
            cfg.write_text(want)
    dagster_env(settings)
    return home


def dagster_env(settings: Settings) -> None:
    """The environment the home's instance is loaded with: DAGSTER_HOME, and on Postgres the
    database URL its dagster.yaml reads (`POSTGRES_URL_ENV`, in the form SQLAlchemy takes), after
    checking that dagster-postgres is installed."""
    os.environ["DAGSTER_HOME"] = str(settings.dagster_home)
    if settings.index_backend != "postgres":
        return
    if find_spec("dagster_postgres") is None:
        raise SheafError("BAD_INPUT", "the index is on Postgres (SHEAF_INDEX_URL) but dagster-postgres, which keeps "
                         "Dagster's instance there too, is not installed", {"index": settings.index_location},
                         hint="pip install 'sheaf[postgres]' (dagster-postgres==0.29.27, the release of Dagster 1.13.27)")
    url = str(settings.index_url)
    os.environ[POSTGRES_URL_ENV] = "postgresql://" + url[len("postgres://"):] if url.startswith("postgres://") else url


def get_instance(settings: Settings) -> DagsterInstance:
    ensure_dagster_home(settings)
    return DagsterInstance.get()


def with_embedder(defs: Definitions, embedder: Embedder) -> Definitions:
    """`defs` with `embedder` as the `embedder` resource of every run (the same object each
    time, so its model loads at most once however many runs use it)."""
    return Definitions(assets=defs.assets, asset_checks=defs.asset_checks, jobs=defs.jobs, sensors=defs.sensors,
                       schedules=defs.schedules, resources={**(defs.resources or {}), "embedder": embedder},
                       executor=defs.executor, loggers=defs.loggers, metadata=defs.metadata)


def run_chain(instance: DagsterInstance, defs: Definitions, keys: list[str], start: str | None = None,
              chain: Chain | None = None) -> dict[str, Any]:
    """One in-process run of the paper chain, from asset `start` (default: the first) down,
    over a contiguous range of partitions."""
    chain = chain or chain_of(defs)
    start = start or chain.first
    job = defs.resolve_job_def("paper_chain")
    t0 = time.perf_counter()
    tags = run_tags()  # sheaf/pid (+ start time): a later build marks the run failed if we die
    quiet = QUIET_RUN_CONFIG
    selection = selection_from(chain, start)
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
    return export_hash(plan.scan.discovery.metadata_files)


def build(settings: Settings, defs: Definitions, papers: list[str] | None = None, full: bool = False,
          progress: Callable[[str], None] = lambda s: None, embedder: Embedder | None = None,
          events: Events | None = None) -> BuildReport:
    """Discover, then materialize missing and stale papers (all of them with `full`).

    Crash safety (`pipelines/reliability.py`): one build at a time per SHEAF_HOME (a second
    one waits); runs of a build that died are marked failed; temp files it left are swept; a
    read-only or full disk, or a damaged index, is a clear error naming the path (a damaged
    index is moved aside and rebuilt from the artifacts).

    `embedder`: the model for every run of this build (default: one made here, loaded on the
    first passage to embed); the runs get it as their `embedder` resource (`with_embedder`).

    `events`: structured progress for programs (`sheaf build --events`, `pipelines.live`):
    `start` once planned, `progress` per paper done, `warning` per problem (each "! ..." line
    of `progress` too)."""
    progress, events = with_warning_events(progress, events or (lambda e: None))
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
            defs = with_embedder(defs, embedder if embedder is not None else Embedder.from_settings(settings))
            rep = _build(settings, defs, papers, full, progress, instance, events)
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
           progress: Callable[[str], None], instance: DagsterInstance, events: Events) -> BuildReport:
    t0 = time.perf_counter()
    chain = chain_of(defs)
    # The last build's record, while provably current (pipelines/record.py): papers whose OCR
    # hash it holds keep its status, and no paper's events are read for them.
    record = None if full else load_record(instance, chain)
    plan = plan_sync(instance, settings, observed=record.versions if record is not None else None)
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
    last = instance.get_latest_materialization_event(AssetKey("library_metadata"))
    loaded = {k: getattr(v, "value", v) for k, v in last.asset_materialization.metadata.items()} \
        if last is not None and last.asset_materialization is not None else {}
    if full or loaded.get("export_hash") != _export_hash(settings, plan) or metadata_missing(settings, loaded.get("papers")):
        res = defs.resolve_job_def("library_job").execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=[AssetKey("library_metadata")],
            run_config=QUIET_RUN_CONFIG, tags=run_tags())
        progress("library metadata loaded" if res.success else "library metadata FAILED")

    ordered = list(instance.get_dynamic_partitions(papers_partitions.name))
    wanted = [k for k in ordered if papers is None or k in papers]
    unknown = sorted(set(papers or []) - set(ordered))
    for k in unknown:
        progress(f"! {k}: not a paper of this library")
    statuses, read = statuses_from(instance, chain, wanted, plan.versions, record)
    how = {"record": "skipped (--full)" if full else ("current" if record is not None else "none or stale"),
           "papers_read": read, "dagster": True}
    planned = {k: replace(st, reasons=list(st.reasons), metadata=dict(st.metadata)) for k, st in statuses.items()}
    if not full:  # index rows / artifacts that disagree with the event log: rebuild from there
        for k, why in apply_index_drift(settings, instance, statuses, chain).items():
            progress(f"! {k}: {'; '.join(why)}")
    targets = {k: (["--full"] if full else st.reasons) for k, st in statuses.items() if full or needs_build(st)}
    starts = {k: chain.first if full else (statuses[k].rebuild_from or chain.first) for k in targets}
    interrupted = False
    computed = 0
    if targets:
        progress(f"building {len(targets)} of {len(wanted)} papers")
    events({"event": "start", "total": len(targets), "considered": len(wanted), "planned": targets, "sync": sync})
    live = LiveProgress(instance, len(targets), chain.assets[-1], events)

    def on_paper(step: str, key: str, meta: dict[str, Any]) -> None:
        nonlocal computed
        if "error" in meta:
            progress(f"✗ {key}: {step}: {meta['error']}")
        elif step == "vector_collections":
            computed += int(meta.get("embeddings_computed") or 0)
            progress(f"✓ {key}: {meta.get('passages', 0)} passages, {meta.get('embeddings_computed', 0)} embedded")
        live.paper(step, key, meta)

    with interactive_build(on_paper):
        try:
            for first, keys in chunk_targets(chain, ordered, starts, MAX_PARTITIONS_PER_RUN):
                if stop_requested():  # asked before this run began: launch no run only to cancel it
                    interrupted = True
                    break
                live.new_run()
                runs.append(run_chain(instance, defs, keys, first, chain))
                if stop_requested() or runs[-1]["interrupted"]:
                    if not runs[-1]["success"]:
                        instance.report_run_canceled(instance.get_run_by_id(runs[-1]["run_id"]),
                                                     message=f"sheaf build stopped by {stop_reason()} at a paper boundary")
                    interrupted = True
                    break
        except KeyboardInterrupt:
            interrupted = True
            _cancel_running(instance)
    if interrupted:
        progress("interrupted: the next `sheaf build` carries on with what is left")
    if runs and not interrupted and report_due(instance, len(targets), len(ordered)):
        res = defs.resolve_job_def("library_job").execute_in_process(
            instance=instance, raise_on_error=False, asset_selection=[AssetKey("library_report")],
            run_config=QUIET_RUN_CONFIG, tags=run_tags())
        progress("library report updated" if res.success else "library report FAILED")
    cursor = chain_cursor(instance, chain)
    if runs:  # only the papers the runs touched changed state: read theirs again
        ran = [k for k in wanted if k in targets]
        fresh = paper_statuses(instance, chain, settings, ran, observed=plan.versions)
        recorded = {k: fresh.get(k, planned[k]) for k in wanted}
        final = {**statuses, **{k: replace(st, reasons=list(st.reasons)) for k, st in fresh.items()}}
        final = {k: final[k] for k in wanted}
        apply_index_drift(settings, instance, {k: final[k] for k in ran}, chain)
    else:  # nothing ran: the plan's statuses are final (a no-op build reads no paper's events)
        final, recorded = statuses, planned
    if papers is None and not interrupted and chain_cursor(instance, chain) == cursor and (
            record is None or record.cursor != cursor or not same_statuses(record.statuses, recorded)):
        write_record(instance, chain, recorded, plan.versions, cursor)
    return BuildReport(sync, targets, runs, final, computed, round(time.perf_counter() - t0, 2), interrupted, how)


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


def _cancel_running(instance: DagsterInstance) -> None:
    """Mark this process's unfinished runs as canceled (not left 'running' forever)."""
    for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING,
                                                       DagsterRunStatus.NOT_STARTED])):
        if run.tags.get("sheaf/pid") == str(os.getpid()):
            instance.report_run_canceled(run, message="sheaf build interrupted (Ctrl-C)")
