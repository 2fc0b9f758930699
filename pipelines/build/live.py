"""A running `sheaf build` seen and stopped from any process, with no state of its own.

- **Writer** (`LiveProgress`, inside the build): each paper that finishes the chain emits a
  structured `progress` event (the NDJSON stream of `sheaf build --events`), its first error a
  `warning` event, and the build's counters are written as tags of the Dagster run that is
  running (`sheaf/current`, `sheaf/total`, `sheaf/current_paper`, `sheaf/stage`, `sheaf/embedded`):
  a run-storage update (`SheafRunStorage` keeps its engine), no event-log write. When a program
  reads the events (`exact=True`: `--events`), the tags are written before each paper's event,
  so a poller that saw the event reads at least that far; otherwise (a person's progress bar,
  `--json`) at most once every `TAG_EVERY` seconds and at the end of each run. Dagster's
  `add_run_tags` reads and rewrites the run's body: 2.4-2.9 ms a paper here, ~7% of the 42 ms of
  a paper's orchestration it was measured in, for counts nobody but a poller reads. The paper
  being worked on is a tag only while its run runs: a finished run's `sheaf/current_paper` is
  emptied (`end`), so no run of many papers is labelled with one of them in the UI.
- **Reader** (`build_state`): the build lock says whether a build runs and which process
  (`pipelines.build_lock.lock_holder`, a flock the kernel drops when its holder dies, so it
  never goes stale); that process's runs (`sheaf/pid` + `sheaf/pid_start` tags) give the run
  ids and the counters. A lock nobody holds reads as idle, and unfinished runs whose process
  is gone are reported as dead (the next build or `sheaf stop` marks them failed).
- **Stop** (`stop_build`): SIGTERM to the lock holder, which the build turns into a stop at the
  next paper boundary (`sheaf.core.progress`); then wait until the lock is free. A holder
  that died instead has its runs marked failed (`reap_dead_runs`).
"""
from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from pipelines.build_lock import STOP_TAG, idle_state, lock_holder, proc_start, process_alive, running_state
from pipelines.build_lock import build_holder as _holder
from pipelines.dagster_internals.steps import free_pool_slots

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

__all__ = ["BUILD_PID_TAG", "LiveProgress", "PAPER_TAG", "PROGRESS_TAGS", "build_state", "dead_runs", "reap_dead_runs",
           "stop_build"]

DIED_MESSAGE = "the sheaf process (pid {pid}) running this run died (killed or crashed) before it finished"

Events = Callable[[dict[str, Any]], None]

#: The run tags the build keeps current while it runs.
PROGRESS_TAGS = ("sheaf/current", "sheaf/total", "sheaf/current_paper", "sheaf/stage", "sheaf/embedded")
#: The paper the build is at, while its run runs (`LiveProgress.end` empties it).
PAPER_TAG = "sheaf/current_paper"
#: Seconds between two writes of the progress tags when no program reads the build's events.
TAG_EVERY = 1.0
#: The build process (the lock holder) a worker's run belongs to (`pipelines.build.workers`); its own
#: `sheaf/pid` is the worker's.
BUILD_PID_TAG = "sheaf/build_pid"
_UNFINISHED = [DagsterRunStatus.STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.NOT_STARTED,
               DagsterRunStatus.CANCELING, DagsterRunStatus.QUEUED]


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def _quiet(event: dict[str, Any]) -> None:
    pass


class LiveProgress:
    """The build's side: per-paper events and the running run's progress tags.

    `paper(step, key, meta)` is called for every paper finishing every step (the
    `sheaf.core.progress` listener); a paper counts as done when it finishes `last` (the
    chain's last asset, which every run of the chain ends with), failed or not. `by_build`: the runs
    are the workers' (`pipelines.build.workers`), found by their `sheaf/build_pid` tag. `exact`: a
    program reads `events`, so the tags are written before each paper's event; else at most
    every `TAG_EVERY` seconds, and what is left by `flush` (a new run, the build's end)."""

    def __init__(self, instance: DagsterInstance, total: int, last: str, events: Events | None = None,
                 by_build: bool = False, exact: bool = True) -> None:
        self.instance, self.total, self.last = instance, total, last
        self.events = events or _quiet
        self.current = 0
        self.embedded = 0
        self.stage: str | None = None
        self.failed: set[str] = set()
        self._run_id: str | None = None
        self._pid = str(os.getpid())
        self._tag_key = BUILD_PID_TAG if by_build else "sheaf/pid"
        self.exact = exact
        self._written_at = float("-inf")
        self._unwritten: str | None = None  # the paper of counters not written yet (throttled)

    def new_run(self) -> None:
        """A new run of the chain is about to start (its id is found on its first paper)."""
        self.flush()
        self._clear_paper(self._run_id)
        self._run_id = None

    def end(self) -> None:
        """The build's runs are over: the counters left out, and no finished run of this build
        (a worker's included) still names the paper it was at."""
        self.flush()
        try:
            for run in self.instance.get_runs(RunsFilter(tags={self._tag_key: self._pid}), limit=500):
                if run.tags.get(PAPER_TAG):
                    self._clear_paper(run.run_id)
        except Exception:  # noqa: BLE001 - progress for other processes must never fail the build
            pass

    def _clear_paper(self, run_id: str | None) -> None:
        if run_id is None:
            return
        try:
            self.instance.add_run_tags(run_id, {PAPER_TAG: ""})
        except Exception:  # noqa: BLE001 - as above
            pass

    def flush(self) -> None:
        """Write the counters a throttled write left out, to the run they belong to."""
        if self._unwritten is not None:
            self._tag(self._unwritten)

    def _running_run(self) -> str | None:
        if self._run_id is None:
            runs = self.instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED],
                                                     tags={self._tag_key: self._pid}), limit=1)
            self._run_id = runs[0].run_id if runs else None
        return self._run_id

    def _tag(self, key: str | None, throttled: bool = False) -> None:
        """The counters as tags of the running run (one run-storage write): a poller
        that has seen a paper's event reads at least that far. `throttled`: left for a later
        write or `flush` when the last write was less than `TAG_EVERY` seconds ago (the run is
        found now, while it runs, so a `flush` after it ended still writes to it)."""
        run_id = self._running_run()
        if run_id is None:
            return
        now = time.monotonic()
        if throttled and now - self._written_at < TAG_EVERY:
            self._unwritten = key or ""
            return
        self._unwritten, self._written_at = None, now
        try:
            self.instance.add_run_tags(run_id, {
                "sheaf/current": str(self.current), "sheaf/total": str(self.total),
                PAPER_TAG: key or "", "sheaf/stage": self.stage or "", "sheaf/embedded": str(self.embedded)})
        except Exception:  # noqa: BLE001 - progress for other processes must never fail the build
            pass

    def paper(self, step: str, key: str, meta: dict[str, Any]) -> None:
        if "error" in meta and key not in self.failed:
            self.failed.add(key)
            self.events({"event": "warning", "item_id": key, "stage": step, "message": f"{key}: {step}: {meta['error']}"})
        if step != self.last:
            if step != self.stage:  # a new step of the run: say so to pollers, once
                self.stage = step
                self._tag(key)
            return
        self.stage = step
        self.current += 1
        self.embedded += int(meta.get("embeddings_computed") or 0)
        self._tag(key, throttled=not self.exact)  # before the event: a poller that saw it reads at least this far
        self.events({"event": "progress", "current": self.current, "total": self.total, "item_id": key,
                     "stage": step, "ok": "error" not in meta, "passages": int(meta.get("passages") or 0),
                     "embeddings_computed": self.embedded})


# --- reading the state of a build from any process ----------------------------------------------

def _build_runs(instance: DagsterInstance, pid: int, start: str | None, since: float | None) -> list[Any]:
    """The runs of the build process `pid` (oldest first), launched since it took the lock: its own
    and its workers' (`BUILD_PID_TAG`)."""
    recs = [*instance.get_run_records(RunsFilter(tags={"sheaf/pid": str(pid)}), limit=500),
            *instance.get_run_records(RunsFilter(tags={BUILD_PID_TAG: str(pid)}), limit=500)]
    out = []
    for rec in recs:
        tags = rec.dagster_run.tags
        if start and tags.get("sheaf/pid_start") not in (None, start) and BUILD_PID_TAG not in tags:
            continue
        if since is not None and rec.create_timestamp.timestamp() < since - 1:
            continue
        out.append(rec)
    return sorted(out, key=lambda r: r.create_timestamp)


def build_state(settings: Settings, instance: DagsterInstance) -> dict[str, Any]:
    """idle | running | stopping, with pid, run ids, started_at, current / total / paper_id
    (and stage, embeddings computed) of the running build; `dead_runs`: unfinished runs whose
    `sheaf build` process is gone (a build killed by kill -9 or a crash)."""
    pid, start, taken = _holder(Path(settings.home))
    dead = [{"run_id": run.run_id, "pid": p, "job": run.job_name} for run, p in dead_runs(instance)]
    if pid is None:
        return idle_state(dead)
    runs = [{"run_id": r.dagster_run.run_id, "status": r.dagster_run.status.value, "job": r.dagster_run.job_name,
             "tags": r.dagster_run.tags} for r in _build_runs(instance, pid, start, taken)]
    state = running_state(pid, _iso(taken), runs)
    state["dead_runs"] = dead
    return state


# --- dead runs -------------------------------------------------------------------------------

def dead_runs(instance: Any) -> Iterator[tuple[Any, int]]:
    """Unfinished runs started by a `sheaf build` process (``sheaf/pid`` tag) of this machine
    that is gone: (run, pid). Runs of other launchers are their own monitor's business."""
    unfinished = [DagsterRunStatus.STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.NOT_STARTED,
                  DagsterRunStatus.CANCELING]
    for run in instance.get_runs(RunsFilter(statuses=unfinished)):
        pid_tag = run.tags.get("sheaf/pid")
        if not pid_tag or not pid_tag.isdigit():
            continue  # not ours (the daemon, `dagster asset materialize`)
        pid = int(pid_tag)
        host = run.tags.get("sheaf/host")
        if host and host != socket.gethostname():
            continue  # another machine's build (shared storage): its pid means nothing here
        if pid != os.getpid() and not process_alive(pid, run.tags.get("sheaf/pid_start")):
            yield run, pid


def reap_dead_runs(instance: Any) -> list[dict[str, Any]]:
    """Report every unfinished run whose sheaf process is gone as FAILED, and free the
    concurrency slots it held. Returns what was reaped."""
    reaped: list[dict[str, Any]] = []
    for run, pid in dead_runs(instance):
        message = DIED_MESSAGE.format(pid=pid) + "; the next `sheaf build` redoes its papers"
        instance.report_run_failed(run, message=message)
        held = free_pool_slots(instance, run.run_id)  # else the next index write waits forever
        reaped.append({"run_id": run.run_id, "pid": pid, "job": run.job_name, "pool_slots_freed": held})
    return reaped


# --- stopping it -------------------------------------------------------------------------------------

def stop_build(settings: Settings, instance: DagsterInstance, *, timeout: float = 300.0,
               say: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Ask the running build to stop at the next paper boundary and wait until it has (the
    lock is free). Returns what happened: `outcome` = `idle` (nothing ran), `died` (no build
    held the lock but a dead build's runs were left: marked failed now), `stopped` (the build
    exited; its runs with their final status), or `timeout` (still running after `timeout` s)."""
    home = Path(settings.home)
    pid, start, taken = _holder(home)
    if pid is None:
        reaped = reap_dead_runs(instance)
        return {"outcome": "died" if reaped else "idle", "pid": reaped[0]["pid"] if reaped else None,
                "runs": [{"run_id": r["run_id"], "status": "FAILURE", "job": r["job"]} for r in reaped],
                "waited_s": 0.0}
    t0 = time.monotonic()
    for rec in _build_runs(instance, pid, start, taken):
        if rec.dagster_run.status in _UNFINISHED:
            try:
                instance.add_run_tags(rec.dagster_run.run_id, {STOP_TAG: _iso(time.time()) or ""})
            except Exception:  # noqa: BLE001 - the tag only lets `status` say "stopping" sooner
                pass
    os.kill(pid, signal.SIGTERM)  # PermissionError / ProcessLookupError: the caller reports them
    say(f"asked the build (pid {pid}) to stop at the next paper boundary; waiting…")
    deadline = t0 + timeout
    while lock_holder(home) is not None:
        if time.monotonic() > deadline:
            return {"outcome": "timeout", "pid": pid, "runs": [], "waited_s": round(time.monotonic() - t0, 2)}
        if start and not process_alive(pid, start) and proc_start(pid) != start:
            break  # the process is gone (the lock goes with it)
        time.sleep(0.2)
    waited = round(time.monotonic() - t0, 2)
    reaped = {r["run_id"] for r in reap_dead_runs(instance)}  # it died instead of exiting
    runs = _build_runs(instance, pid, start, taken)
    return {"outcome": "stopped", "pid": pid, "waited_s": waited, "process_died": bool(reaped),
            "runs": [{"run_id": r.dagster_run.run_id, "status": r.dagster_run.status.value,
                      "job": r.dagster_run.job_name} for r in runs]}
