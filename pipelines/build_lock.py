"""Crash safety around `sheaf build` (and `sheaf doctor --repair`).

- **One build at a time** per SHEAF_HOME: `build_lock` holds an exclusive `flock` on
  ``<SHEAF_HOME>/.sheaf-build.lock`` for the whole build. A second build prints
  "another sheaf build is running (pid N); waiting…" and waits; the kernel drops the lock
  when its holder dies, even by kill -9, so a dead build never blocks the next one.
- **Dead runs**: a build killed mid-run leaves its Dagster run STARTED forever (in-process
  runs have no monitor). Runs carry `sheaf/pid` and `sheaf/pid_start` tags (`run_tags`); the
  next build reports every unfinished run whose process is gone as FAILED ("the process
  died") and frees the concurrency-pool slots it held (else the `sheaf_index` pool, limit 1,
  would block the next index write forever).
- **Leftovers**: temp files of interrupted atomic writes (``.<name>.<random>`` beside an
  artifact, ``.stats.*``, half-exported model folders of dead processes) are swept.
- **Storage faults**: before writing, the build checks that the index, artifacts and Dagster
  folders are writable (a clear error naming the path: read-only, or no space left), and
  that the index file is usable; a damaged index is moved aside and rebuilt from the
  artifacts (`prepare_index`). A storage error during the runs is turned into the same kind
  of clear error (`storage_error`).
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError
from sheaf.store.artifact_store import ArtifactStore, artifact_store
from sheaf.store.health import StorageFailure, storage_problem
from sheaf.store.select import index_build_lock
from sheaf.store.select import prepare_index as select_prepare_index

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

LOCK_NAME = ".sheaf-build.lock"


# --- process identity and the build lock --------------------------------------------------

def proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return stat.rsplit(")", 1)[1].split()[19]
    except IndexError:
        return None


def run_tags() -> dict[str, str]:
    """Tags naming this process (and host) on every run a build launches."""
    pid = os.getpid()
    host = socket.gethostname()
    # `user` is the tag the Dagster UI shows as a run's launcher (else "Manually launched")
    tags = {"user": f"sheaf build on {host}", "sheaf/pid": str(pid), "sheaf/host": host}
    start = proc_start(pid)
    if start:
        tags["sheaf/pid_start"] = start
    return tags


def process_alive(pid: int, start: str | None = None) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if start is not None:
        now = proc_start(pid)
        if now is not None and now != start:
            return False  # the pid was reused by another process
        if now is None and Path("/proc").is_dir() and not Path(f"/proc/{pid}").exists():
            return False
    state = _proc_state(pid)
    return state not in ("Z", "X")  # a zombie has finished: it holds no run


def _proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def lock_path(home: Path) -> Path:
    return Path(home) / LOCK_NAME


def lock_holder(home: Path) -> int | None:
    """The pid of the build holding the lock, or None when no build runs."""
    p = lock_path(home)
    if not p.exists():
        return None
    try:
        fd = os.open(p, os.O_RDWR)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(p) or -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def idle_state(dead_runs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The live state of a home where no build runs (`pipelines.build.live.build_state`): `dead_runs`,
    the unfinished runs of builds that died."""
    return {"status": "idle", "pid": None, "run_ids": [], "started_at": None, "current": 0, "total": 0,
            "paper_id": None, "stage": None, "embeddings_computed": 0, "dead_runs": list(dead_runs or [])}


def build_holder(home: Path) -> tuple[int | None, str | None, float | None]:
    """(pid, its start ticks, when it took the lock) of the build holding the lock, else Nones."""
    pid = lock_holder(home)
    if pid is None:
        return None, None, None
    p = lock_path(home)
    start: str | None = None
    taken: float | None = None
    for _ in range(10):  # the holder writes "pid start" right after taking the lock
        try:
            parts = p.read_text().split()
            taken = p.stat().st_mtime
        except OSError:
            parts = []
        if parts and parts[0].isdigit():
            pid = int(parts[0])
            start = parts[1] if len(parts) > 1 else None
            break
        time.sleep(0.05)
    return (pid if pid and pid > 0 else None), start, taken


#: The run tags a running build keeps current (`pipelines.build.live.LiveProgress`) and the stop mark.
STOP_TAG = "sheaf/stop_requested"


def running_state(pid: int, taken_iso: str | None, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The live state of a running build (`pipelines.build.live.build_state`, and its Dagster-free
    reader `pipelines.planning.noop.running_without_dagster`) from its runs, oldest first, each
    `{run_id, status, job, tags}` (`status`: Dagster's run status name)."""
    state = idle_state()
    state.update(status="running", pid=pid, run_ids=[r["run_id"] for r in runs], started_at=taken_iso,
                 stage="planning")
    with_progress = [r for r in runs if "sheaf/current" in r["tags"] or "sheaf/stage" in r["tags"]]
    if with_progress:
        tags = with_progress[-1]["tags"]
        state.update(current=_int(tags.get("sheaf/current")), total=_int(tags.get("sheaf/total")),
                     paper_id=tags.get("sheaf/current_paper") or None, stage=tags.get("sheaf/stage") or None,
                     embeddings_computed=_int(tags.get("sheaf/embedded")))
    elif runs:
        state["stage"] = runs[-1]["job"]
    if runs and (any(STOP_TAG in r["tags"] for r in runs) or runs[-1]["status"] == "CANCELED"):
        state["status"] = "stopping"
    state["runs"] = [{"run_id": r["run_id"], "status": r["status"], "job": r["job"]} for r in runs]
    return state


def _int(v: str | None) -> int:
    return int(v) if v and v.isdigit() else 0


def _read_pid(p: Path) -> int | None:
    try:
        return int(p.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


_HELD: dict[str, int] = {}  # home -> depth: the lock is re-entrant within a process


@contextmanager
def build_lock(home: Path, say: Callable[[str], None] | None = None, *,
               timeout: float | None = None) -> Iterator[None]:
    """Hold the SHEAF_HOME build lock (exclusive flock) for the block; wait for another build.
    Re-entrant within one process (`sheaf doctor --repair` builds while holding it)."""
    home = Path(home)
    ident = str(home.resolve())
    if _HELD.get(ident):
        _HELD[ident] += 1
        try:
            yield
        finally:
            _HELD[ident] -= 1
        return
    try:
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path(home), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise storage_error(e, [home]) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(lock_path(home))
            msg = f"another sheaf build is running (pid {holder if holder else '?'}); waiting…"
            print(msg, file=sys.stderr, flush=True)
            if say is not None:
                say(msg)
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if deadline is not None else 0))
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:  # type: ignore[operator]
                        raise SheafError("TIMEOUT", f"another sheaf build is still running (pid {holder})",
                                         {"pid": holder, "lock": str(lock_path(home))}) from None
                    time.sleep(0.2)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {proc_start(os.getpid()) or ''}\n".encode(), 0)
        except OSError:
            pass  # a full disk must not stop us from holding the lock
        _HELD[ident] = 1
        try:
            yield
        finally:
            _HELD.pop(ident, None)
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


# --- parallel builds ------------------------------------------------------------------------------

def check_workers(settings: Settings, workers: int) -> None:
    """Refuse more than one worker on the SQLite index: one writer at a time, and the embedding
    runs inside the writer's step (the `sheaf_index` pool), so workers would wait for each other."""
    if workers < 1:
        raise SheafError("BAD_INPUT", f"--workers must be at least 1 (got {workers})", {"workers": workers},
                         hint="--workers 1 (the default) builds in this process")
    if workers > 1 and settings.index_backend != "postgres":
        raise SheafError("BAD_INPUT", f"--workers {workers} needs the index on Postgres: the SQLite index at "
                         f"{settings.index_path} takes one writer at a time", {"workers": workers,
                                                                             "index": settings.index_location},
                         hint="set SHEAF_INDEX_URL=postgresql://... (`sheaf index copy --to URL` copies this index), "
                              "or build with --workers 1")


@contextmanager
def index_lock(settings: Settings, say: Callable[[str], None] | None = None) -> Iterator[None]:
    """After `build_lock`: the index's own lock (`sheaf.store.select.index_build_lock`), so that
    builds from other homes or machines sharing a Postgres index and its Dagster instance wait for
    each other, as two builds of one home do; a no-op on SQLite."""
    def waiting(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)
        if say is not None:
            say(msg)

    with index_build_lock(settings, f"sheaf build pid {os.getpid()} on {socket.gethostname()}", waiting):
        yield


# --- leftovers of interrupted writes --------------------------------------------------------

_TMP_MODEL = re.compile(r"^\.(?P<key>[0-9a-f]+)\.tmp-(?P<pid>\d+)-\d+$")


def sweep_leftovers(home: Path, artifacts: ArtifactStore | Path | str) -> list[str]:
    """Delete temp files of writes a dead process left behind (`artifacts`: the artifact store, or
    its local folder or URL: an object store's single puts leave none); call with the build lock held."""
    gone = artifact_store(artifacts).sweep_temp()
    models = Path(home) / "models"
    if models.is_dir():
        for d in models.iterdir():
            m = _TMP_MODEL.match(d.name)
            if m and d.is_dir() and not process_alive(int(m["pid"])):
                shutil.rmtree(d, ignore_errors=True)
                gone.append(str(d))
    return gone


# --- storage faults -----------------------------------------------------------------------------

def _free_bytes(path: Path) -> int | None:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def storage_error(exc: BaseException | str, paths: list[Path]) -> SheafError:
    """A clear error for a storage fault (disk full, read-only, damaged index) naming the path."""
    kind = storage_problem(exc) or "storage error"
    text = str(exc)
    named = getattr(exc, "filename", None)
    path: Path | None = Path(named) if named else None
    if path is not None and path.name.startswith(".sheaf-probe."):
        path = path.parent
    if path is None:
        for p in paths:  # a path the message names, else the first that is not writable
            if str(p) in text:
                path = p
                break
    if path is None and ("sqlalchemy" in text or "(sqlite3." in text):  # Dagster's own storage
        path = next((p for p in paths if "dagster" in str(p)), None)
    if path is None:
        for p in paths:
            if _probe_writable(p) is not None:
                path = p
                break
    if path is None:
        path = paths[0] if paths else Path(".")
    free = _free_bytes(path)
    if kind == "disk full":
        msg = f"no space left on the device holding {path}"
        hint = ("free some disk space (or move SHEAF_HOME), then run `sheaf build` again; the previous index is "
                "unchanged")
    elif kind == "read-only":
        msg = f"cannot write to {path}: it is read-only"
        hint = "make the folder writable (or point SHEAF_HOME elsewhere); the previous index is unchanged"
    elif kind == "corrupt":
        msg = f"the index at {path} is damaged"
        hint = "run `sheaf build --full` (it moves the damaged file aside and rebuilds) or `sheaf doctor --repair`"
    else:
        msg = f"storage error at {path}"
        hint = "check the disk and folder permissions"
    return SheafError("BACKEND_UNAVAILABLE", f"{msg} ({text.strip().splitlines()[0][:300] if text.strip() else kind})",
                      {"path": str(path), "problem": kind, "free_bytes": free}, hint=hint)


def _probe_writable(directory: Path) -> OSError | None:
    """Create, write, fsync and delete a small file in `directory`; the OSError if that fails."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".sheaf-probe.", dir=d)
    except OSError as e:
        return e
    try:
        os.write(fd, b"\0" * 4096)
        os.fsync(fd)
        return None
    except OSError as e:
        return e
    finally:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass


def check_writable(paths: list[Path]) -> None:
    """Raise a clear SheafError naming the first folder that cannot be written (or is full)."""
    for p in paths:
        err = _probe_writable(p)
        if err is not None:
            raise storage_error(err, [p])


def prepare_index(settings: Settings, *, full: bool, say: Callable[[str], None]) -> dict[str, Any]:
    """Make sure the index can take writes (`sheaf.store.select.prepare_index`: a damaged SQLite
    file moved aside and rebuilt, a damaged collection dropped, a Postgres server that must
    answer); a disk that is full, read-only or unreadable is a clear error naming the path."""
    try:
        return select_prepare_index(settings, full=full, say=say)
    except StorageFailure as e:
        raise storage_error(e.problem, e.paths) from None