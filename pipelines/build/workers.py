"""`sheaf build --workers N`: the planned papers built by N worker processes at once.

Why our own processes, not Dagster's run queue or its multiprocess executor (measured and
reasoned in docs/dagster.md, Parallel builds):

- the multiprocess executor runs the *steps* of one run in processes; the chain of a paper is a
  line of steps, so it parallelises almost nothing, and every step process imports Dagster and
  loads the model again (~1 s a step here);
- the run queue (QueuedRunCoordinator + `dagster-daemon`, `max_concurrent_runs`) launches each
  run in a fresh process through a code-location server: a daemon and a gRPC server for a
  command-line build, and the model loaded once per run instead of once per worker.

So each worker is one spawned process that loads the definitions, the instance and the model
once, then pulls work from a shared queue and builds it as ordinary in-process runs
(`pipelines.build.runs.run_chain`), exactly as a one-process build does. Work is handed out in
contiguous partition ranges that shrink as the queue empties (`chunk_sizes`), one at a time, so
no worker idles while another holds a long queue, and the last chunks finish together.

What stays with the build process (the parent): the lock, the plan, the events (workers send
each paper they finish; the parent emits `progress` for every paper and keeps the live tags),
the stop (the first Ctrl-C reaches every worker of the terminal's process group; a SIGTERM from
`sheaf stop` reaches the parent, which passes it on; each worker stops at its next paper
boundary and marks its run canceled), and a worker that dies: its runs are marked failed at once
(`reap_dead_runs`, by the run's `sheaf/pid`), its papers are left to the next build, and the
build exits 1. A worker never outlives its build (PR_SET_PDEATHSIG on Linux).

Runs of a worker carry `sheaf/pid` (the worker, for the dead-run check) and `sheaf/build_pid`
(the build, for `sheaf status` and `sheaf stop`).
"""
from __future__ import annotations

import ctypes
import math
import multiprocessing
import os
import queue
import signal
import sys
from collections.abc import Callable
from typing import Any

from dagster import DagsterInstance, Definitions

from pipelines.build.live import BUILD_PID_TAG, LiveProgress, reap_dead_runs
from pipelines.build.runs import cancel_running, run_chain, with_embedder
from pipelines.planning.policy import MAX_PARTITIONS_PER_RUN
from pipelines.planning.statuses import Chain, chain_of
from sheaf.core.progress import interactive_build, stop_reason, stop_requested
from sheaf.core.settings import Settings
from sheaf.vectors.embedder import Embedder

__all__ = ["chunk_sizes", "chunks_for_workers", "run_parallel", "threads_per_worker"]

#: Chunk sizes shrink as the queue empties (guided self-scheduling): each chunk is the remaining
#: papers / (2 x workers), at most `MAX_CHUNK` (a run's size in a one-process build) and at least
#: `MIN_CHUNK` (or an equal share, for a small build). A run costs Dagster ~2-4 s of its own here
#: whatever its size (docs/benchmarks.md, Pipeline: 1 paper per run ~4 s/paper against ~0.6 at 100), so
#: the first chunks are large; the last are small, so the workers finish within a few papers of each other.
MAX_CHUNK = MAX_PARTITIONS_PER_RUN
MIN_CHUNK = 4
#: The metadata of a finished paper a worker sends to the build (what progress and events read).
_META_KEYS = ("error", "passages", "embeddings_computed")
_PR_SET_PDEATHSIG = 1


def threads_per_worker(settings: Settings, workers: int) -> int:
    """The encoder threads of each of `workers` processes: `SHEAF_EMBED_THREADS` when set, else the
    cores this process may run on shared out (at least 1). Left to their default, each worker's
    runtime would start a thread per core, N workers x all cores on the same cores."""
    if settings.embed_threads:
        return settings.embed_threads
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(workers, 1))


def chunk_sizes(targets: int, workers: int) -> list[int]:
    """The sizes of the chunks `targets` papers are handed out in (see `MIN_CHUNK`), largest first."""
    low = min(MIN_CHUNK, math.ceil(targets / max(workers, 1)))
    out, left = [], targets
    while left > 0:
        size = min(left, MAX_CHUNK, max(low, math.ceil(left / (2 * workers))))
        out.append(size)
        left -= size
    return out


def chunks_for_workers(runs: list[tuple[str, list[str]]], workers: int) -> list[tuple[str, list[str]]]:
    """The planned runs (first asset, contiguous papers) cut into chunks of `chunk_sizes`, in order
    (a chunk never spans two planned runs: one first asset and one contiguous range each)."""
    sizes = iter(chunk_sizes(sum(len(keys) for _, keys in runs), workers))
    out: list[tuple[str, list[str]]] = []
    for first, keys in runs:
        i = 0
        while i < len(keys):
            n = next(sizes, MIN_CHUNK)
            out.append((first, keys[i:i + n]))
            i += n
    return out


# --- the worker -------------------------------------------------------------------------------------

def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the build that spawned it dies (no orphan keeps
    building behind the next build's back); its run is then reaped like any dead run."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        if os.getppid() == 1:
            os._exit(1)


def worker_main(settings: Settings, load_definitions: Callable[[Settings], Definitions], tasks: Any, results: Any,
                build_pid: int, threads: int | None = None) -> None:
    """One worker: load the definitions (with `load_definitions`, passed in), instance and model
    once (the encoder on `threads` threads), then build chunks from `tasks` (None: no more work)
    until none is left or a stop was asked for; report to `results`."""
    _die_with_parent()
    pid = os.getpid()
    defs = load_definitions(settings)
    instance = DagsterInstance.get()
    defs = with_embedder(defs, Embedder.from_settings(settings, threads=threads))
    chain = chain_of(defs)
    tags = {BUILD_PID_TAG: str(build_pid)}

    def on_paper(step: str, key: str, meta: dict[str, Any]) -> None:
        results.put(("paper", pid, step, key, {k: meta[k] for k in _META_KEYS if k in meta}))

    results.put(("ready", pid))
    try:
        with interactive_build(on_paper):
            try:
                while not stop_requested():
                    task = tasks.get()
                    if task is None:
                        break
                    first, keys = task
                    results.put(("run", pid, keys))
                    rep = run_chain(instance, defs, keys, first, chain, tags=tags)
                    stopped = stop_requested() or rep["interrupted"]
                    if stopped and not rep["success"]:
                        instance.report_run_canceled(instance.get_run_by_id(rep["run_id"]),
                                                     message=f"sheaf build stopped by {stop_reason()} at a paper "
                                                             "boundary")
                    results.put(("ran", pid, rep))
                    if stopped:
                        results.put(("stopped", pid))
                        break
            except KeyboardInterrupt:
                cancel_running(instance)
                results.put(("stopped", pid))
    finally:
        results.put(("done", pid))


# --- the build's side ------------------------------------------------------------------------------

def run_parallel(settings: Settings, instance: DagsterInstance, chain: Chain, chunks: list[tuple[str, list[str]]],
                 workers: int, live: LiveProgress, on_paper: Callable[[str, str, dict[str, Any]], None],
                 progress: Callable[[str], None], load_definitions: Callable[[Settings], Definitions],
                 ) -> tuple[list[dict[str, Any]], bool, list[dict[str, Any]]]:
    """Build `chunks` with `workers` processes: (the runs' reports, interrupted, dead workers).
    Each worker makes its own Definitions with `load_definitions` (a module-level function: it is
    sent to the spawned process).
    `on_paper` is called in this process for every paper a worker finishes (every step)."""
    ctx = multiprocessing.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    for chunk in chunks:
        tasks.put(chunk)
    n = min(workers, len(chunks))
    for _ in range(n):
        tasks.put(None)
    threads = threads_per_worker(settings, n)
    procs = [ctx.Process(target=worker_main, args=(settings, load_definitions, tasks, results, os.getpid(), threads), daemon=True,
                         name=f"sheaf-worker-{i + 1}") for i in range(n)]
    for p in procs:
        p.start()
    progress(f"{n} workers ({threads} encoder thread{'s' if threads > 1 else ''} each) building "
             f"{sum(len(k) for _, k in chunks)} papers in {len(chunks)} chunks")
    runs: list[dict[str, Any]] = []
    died: list[dict[str, Any]] = []
    done: set[int] = set()
    held: dict[int, list[str]] = {}
    interrupted = forwarded = False
    try:
        while len(done) < n:
            if stop_requested() and not forwarded:  # Ctrl-C or `sheaf stop`: every worker stops at a paper
                forwarded = interrupted = True
                for p in procs:
                    if p.is_alive():
                        os.kill(p.pid, signal.SIGTERM)
            try:
                msg = results.get(timeout=0.2)
            except queue.Empty:
                for p in procs:
                    if p.pid not in done and not p.is_alive() and results.empty():
                        done.add(p.pid)
                        if forwarded and p.exitcode == -signal.SIGTERM and p.pid not in held:
                            continue  # stopped while starting, before it handled signals: nothing of its own ran
                        died.append(_worker_died(instance, p, held.get(p.pid, []), progress))
                continue
            kind, pid = msg[0], msg[1]
            if kind == "paper":
                on_paper(msg[2], msg[3], msg[4])
            elif kind == "run":
                held[pid] = msg[2]
                live.new_run()
            elif kind == "ran":
                held.pop(pid, None)
                runs.append(msg[2])
            elif kind == "stopped":
                interrupted = True
            elif kind == "done":
                done.add(pid)
    except KeyboardInterrupt:  # a second Ctrl-C: the workers got it too and cancel their own runs
        interrupted = True
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
        tasks.cancel_join_thread()  # chunks nobody took (a stop, dead workers) must not hold this process
        tasks.close()
        results.close()
    return runs, interrupted, died


def _worker_died(instance: DagsterInstance, proc: Any, papers: list[str], progress: Callable[[str], None]) -> dict:
    """A worker that exited without saying so (killed, crashed): its runs marked failed now."""
    reaped = [r for r in reap_dead_runs(instance) if r["pid"] == proc.pid]
    how = f"signal {-proc.exitcode}" if (proc.exitcode or 0) < 0 else f"exit code {proc.exitcode}"
    what = f"{papers[0]}..{papers[-1]}" if len(papers) > 1 else (papers[0] if papers else "no paper")
    progress(f"! worker pid {proc.pid} died ({how}) while building {what}: its run is marked failed; "
             "run `sheaf build` again to rebuild its papers")
    return {"pid": proc.pid, "exit": proc.exitcode, "papers": papers, "runs_failed": [r["run_id"] for r in reaped]}
