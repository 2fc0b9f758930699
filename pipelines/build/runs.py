"""One in-process run of the paper chain, and the Dagster home and instance it runs on: what a
`sheaf build` and each of its worker processes (`pipelines.build.workers`) share.
"""
from __future__ import annotations

import os
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, DagsterRunStatus, Definitions, RunsFilter

from pipelines.build_lock import run_tags
from pipelines.dagster_internals.home_files import (
    EVENT_BATCH_ENV,
    EVENT_BATCH_SIZE,
    POSTGRES_URL_ENV,
    YAML_HEADER,
    dagster_yaml,
    postgres_dagster_yaml,
    stock_dagster_yaml,
)
from pipelines.dagster_internals.storage_base import partitions_snapshot
from pipelines.planning.statuses import Chain, chain_of, selection_from
from sheaf.core.envelope import SheafError
from sheaf.core.settings import Settings
from sheaf.vectors.embedder import Embedder

__all__ = ["QUIET_RUN_CONFIG", "cancel_running", "dagster_env", "ensure_dagster_home", "get_instance", "run_chain",
           "with_embedder"]

#: Dagster's console logger at CRITICAL: `sheaf build` prints its own per-paper progress and says
#: each failure itself (a paper's error, a stop at a paper boundary); a failed step's ERROR line
#: with its stack trace (a stopped build printed one) stays in the run's event log, for the UI.
QUIET_RUN_CONFIG: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


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
        elif settings.dagster_storage == "stock":
            want = stock_dagster_yaml(home.resolve() / "history")
        else:
            want = dagster_yaml(sharded=(home / "history" / "runs" / "index.db").exists())
        if current != want:
            cfg.write_text(want)
    dagster_env(settings)
    return home


def dagster_env(settings: Settings) -> None:
    """The environment the home's instance is loaded with: DAGSTER_HOME, and on Postgres the
    database URL its dagster.yaml reads (`POSTGRES_URL_ENV`, in the form SQLAlchemy takes), after
    checking that dagster-postgres is installed. Also Dagster's event batching
    (`DAGSTER_EVENT_BATCH_SIZE`, unless set): a step's materializations of a range of papers are
    stored as one batch (`SheafEventLogStorage.store_event_batch`; Dagster's Postgres storage
    has its own), not one write and one asset-row update per paper."""
    os.environ["DAGSTER_HOME"] = str(settings.dagster_home)
    os.environ.setdefault(EVENT_BATCH_ENV, str(EVENT_BATCH_SIZE))
    if settings.index_backend != "postgres":
        return
    if find_spec("dagster_postgres") is None:
        raise SheafError("BAD_INPUT", "the index is on Postgres (SHEAF_INDEX_URL) but dagster-postgres, which keeps "
                         "Dagster's instance there too, is not installed", {"index": settings.index_location},
                         hint="pip install 'sheaf[postgres]' (dagster-postgres 0.29.27, for Dagster 1.13.27)")
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
              chain: Chain | None = None, tags: dict[str, str] | None = None) -> dict[str, Any]:
    """One in-process run of the paper chain, from asset `start` (default: the first) down,
    over a contiguous range of partitions; `tags` added to the run's own."""
    chain = chain or chain_of(defs)
    start = start or chain.first
    job = defs.resolve_job_def("paper_chain")
    t0 = time.perf_counter()
    tags = {**run_tags(), **(tags or {})}  # sheaf/pid (+ start time): a later build marks the run failed if we die
    selection = selection_from(chain, start)
    with partitions_snapshot(instance):  # the run's range resolved against one read of the papers
        res = _execute(job, instance, keys, tags, selection)
    failures = [e.message for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    errors = [error_messages(getattr(e.event_specific_data, "error", None)) for e in res.all_events
              if e.event_type_value == "STEP_FAILURE"]
    interrupted = any("StopRequested" in x or "Interrupted" in x for x in errors)
    return {"run_id": res.run_id, "papers": keys, "from": start, "success": res.success, "interrupted": interrupted,
            "seconds": round(time.perf_counter() - t0, 2), "failures": failures, "errors": errors}


def error_messages(error: Any) -> str:
    """A step's error as its messages, the error's and each cause's (class and text), one a line:
    what a build reports (and matches a full disk or a stop in); the stack traces stay in the
    run's event log, for the UI."""
    out: list[str] = []
    while error is not None:  # a SerializableErrorInfo: its message, then its cause's (or context's)
        out.append(error.message.strip())
        error = error.cause or error.context
    return "\n".join(m for m in out if m)


def _execute(job: Any, instance: DagsterInstance, keys: list[str], tags: dict[str, str], selection: Any) -> Any:
    if len(keys) == 1:
        return job.execute_in_process(instance=instance, partition_key=keys[0], raise_on_error=False,
                                      tags=tags, run_config=QUIET_RUN_CONFIG, asset_selection=selection)
    return job.execute_in_process(instance=instance, raise_on_error=False, run_config=QUIET_RUN_CONFIG, tags={
        **tags, "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
        asset_selection=selection)


def cancel_running(instance: DagsterInstance) -> None:
    """Mark this process's unfinished runs as canceled (not left 'running' forever)."""
    for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING,
                                                       DagsterRunStatus.NOT_STARTED])):
        if run.tags.get("sheaf/pid") == str(os.getpid()):
            instance.report_run_canceled(run, message="sheaf build interrupted (Ctrl-C)")
