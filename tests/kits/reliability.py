"""Helpers for the reliability tests: real `sheaf` processes that can be killed with SIGKILL,
fault injection inside them, and an exact snapshot of what an index holds.

**The zygote.** Importing sentence-transformers + torch + Dagster costs ~8 s of CPU per
process on these machines, which would make 20+ kill trials unaffordable. A zygote process
imports them once and then forks one child per `sheaf` command. Each child is a real,
separate process (its own pid, its own Dagster instance, its own SQLite connections) that
runs exactly what the console script runs, ``sheaf.cli.app.main(argv)``, with its own
environment and working directory; the tests kill it with a real ``kill -9``. The embedding
model itself is *not* preloaded: each child loads it (~0.5 s), as a real build does.

**Faults** (`faults=` of `spawn`) make the child SIGKILL itself at a precise point that a
random delay would rarely hit (`hook`: inside a `sheaf.store.sqlite.writer` write transaction; `before` /
`after` / `timer_in`: around the nth call of any function; `gate`: wait after each call until
the test opens a gate file; `atomic_write`: between an
artifact's write and its rename), limit its file sizes (`rlimit_fsize`: a disk-full stand-in
without mount rights), or switch a safeguard off for a negative control (`noop`,
`nullcontext`).
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sheaf.core import home_record

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample-library"
PYTHON = sys.executable

_ZYGOTE_SRC = r'''
import json, os, signal, sys, threading, traceback
os.environ["HF_HUB_OFFLINE"] = "1"; os.environ["TRANSFORMERS_OFFLINE"] = "1"
import warnings; warnings.filterwarnings("ignore")
import torch, sentence_transformers, tokenizers, pyarrow, pyarrow.parquet, duckdb  # noqa: F401
import dagster  # noqa: F401
import sheaf.cli.app, sheaf.store.sqlite.schema, sheaf.store.sqlite.writer, sheaf.vectors.embedder, sheaf.search.retriever  # noqa: F401
import pipelines.build.command, pipelines.build.doctor, pipelines.definitions, assets.index, io_managers.parquet  # noqa: F401

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def resolve(target):
    mod, _, path = target.partition(":")
    obj = __import__(mod, fromlist=["_"])
    parts = path.split(".")
    for p in parts[:-1]:
        obj = getattr(obj, p)
    return obj, parts[-1]

def rebind(owner, name, orig, new):
    """Patch `owner.name` and every module that imported the same object by name."""
    setattr(owner, name, new)
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith(("sheaf", "assets", "pipelines", "io_managers")):
            if getattr(mod, name, None) is orig:
                setattr(mod, name, new)

def install(f):
    kind = f["kind"]
    nth = int(f.get("nth", 1))
    seen = [0]
    if kind == "hook":  # SIGKILL inside a sheaf.store.sqlite.writer write, at hook step `step`, nth time
        import sheaf.store.sqlite.writer as ix  # the writes the assets call (sheaf.store.sqlite.writer)
        orig = getattr(ix, f["func"])
        def patched(*a, **kw):
            user = kw.pop("hook", None)
            def hook(step):
                if user: user(step)
                if step == f["step"]:
                    seen[0] += 1
                    if seen[0] == nth: die()
            return orig(*a, hook=hook, **kw)
        rebind(ix, f["func"], orig, patched)
    elif kind in ("before", "after", "timer_in"):  # around the nth call of module:attr
        owner, name = resolve(f["target"])
        orig = getattr(owner, name)
        delay = float(f.get("delay", 0.0))
        def wrapped(*a, **kw):
            seen[0] += 1
            if seen[0] == nth:
                if kind == "before": die()
                if kind == "timer_in": threading.Timer(delay, die).start()
            out = orig(*a, **kw)
            if kind == "after" and seen[0] == nth: die()
            return out
        rebind(owner, name, orig, wrapped)
    elif kind == "gate":  # after each call of module:attr (whose first argument is `arg0`, if given),
        # wait until the file `<path>.<n>` exists (n: the call's number) or a stop was asked for:
        # the test decides when the build moves on (a paper boundary, for sheaf.core.progress:notify)
        import time
        from sheaf.core.progress import stop_requested
        owner, name = resolve(f["target"])
        orig = getattr(owner, name)
        def gated(*a, **kw):
            out = orig(*a, **kw)
            if "arg0" not in f or (a and a[0] == f["arg0"]):
                seen[0] += 1
                gate = f"{f['path']}.{seen[0]}"
                deadline = time.monotonic() + float(f.get("timeout", 120))
                while not os.path.exists(gate) and not stop_requested() and time.monotonic() < deadline:
                    time.sleep(0.05)
            return out
        rebind(owner, name, orig, gated)
    elif kind == "noop":  # replace a function by one that returns `returns` (negative controls)
        owner, name = resolve(f["target"])
        value = f.get("returns")
        rebind(owner, name, getattr(owner, name), lambda *a, **kw: value)
    elif kind == "nullcontext":  # replace a context manager by one that does nothing
        import contextlib
        owner, name = resolve(f["target"])
        rebind(owner, name, getattr(owner, name), lambda *a, **kw: contextlib.nullcontext())
    elif kind == "rlimit_fsize":  # no file may grow past `bytes` (EFBIG): a disk-full stand-in
        import resource
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(f["bytes"]), int(f["bytes"])))
    elif kind == "atomic_write":  # between an artifact's temp write and its rename
        import sheaf.store.artifact_store as iop
        from pathlib import Path
        import tempfile
        def aw(path, data, prefix=None):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            seen[0] += 1
            if seen[0] == nth: die()
            os.replace(tmp, path)
        iop.write_atomic = aw  # the name the artifact store writes through
    else:
        raise ValueError(kind)

children = {}
for line in sys.stdin:
    req = json.loads(line)
    op = req["op"]
    if op == "spawn":
        pid = os.fork()
        if pid == 0:
            code = 99
            try:
                os.setpgid(0, 0)
                null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0)
                fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1); os.dup2(fd, 2)
                sys.stdout = open(1, "w", buffering=1, closefd=False)
                sys.stderr = open(2, "w", buffering=1, closefd=False)
                os.chdir(req["cwd"])
                os.environ.clear(); os.environ.update(req["env"])
                signal.signal(signal.SIGINT, signal.default_int_handler)
                for f in req.get("faults") or []:
                    install(f)
                code = sheaf.cli.app.main(req["argv"])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                traceback.print_exc()
                code = 98
            finally:
                try:
                    sys.stdout.flush(); sys.stderr.flush()
                finally:
                    os._exit(int(code or 0))
        children[pid] = None
        print(json.dumps({"pid": pid}), flush=True)
    elif op == "poll":
        pid = req["pid"]
        if children.get(pid) is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children[pid] = os.waitstatus_to_exitcode(status)
        print(json.dumps({"code": children.get(pid)}), flush=True)
    elif op == "quit":
        break
'''


class Zygote:
    """A warm process that forks `sheaf` commands (see the module docstring)."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_"))}
        env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen([PYTHON, "-c", _ZYGOTE_SRC], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     cwd=str(ROOT), env=env, text=True, bufsize=1)
        self._lock = threading.Lock()

    def _ask(self, req: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            assert self.proc.stdin and self.proc.stdout
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the zygote died")
        return json.loads(line)

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path,
              faults: list[dict[str, Any]] | None = None) -> int:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_"))}
        base.update(env)
        return int(self._ask({"op": "spawn", "argv": argv, "env": base, "cwd": str(cwd), "log": str(log),
                              "faults": faults or []})["pid"])

    def poll(self, pid: int) -> int | None:
        return self._ask({"op": "poll", "pid": pid})["code"]

    def wait(self, pid: int, timeout: float = 300) -> int:
        deadline = time.monotonic() + timeout
        while True:
            code = self.poll(pid)
            if code is not None:
                return code
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                raise TimeoutError(f"sheaf process {pid} still running after {timeout} s")
            time.sleep(0.05)

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path,
            faults: list[dict[str, Any]] | None = None, timeout: float = 300) -> tuple[int, str]:
        pid = self.spawn(argv, env, cwd, log, faults)
        code = self.wait(pid, timeout)
        return code, log.read_text(errors="replace")

    def close(self) -> None:
        try:
            self._ask({"op": "quit"}) if False else None
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.proc.kill()


_ZYGOTE: Zygote | None = None


def zygote() -> Zygote:
    """The process-wide zygote (started on first use, closed at exit)."""
    global _ZYGOTE
    if _ZYGOTE is None or _ZYGOTE.proc.poll() is not None:
        _ZYGOTE = Zygote()
        atexit.register(_ZYGOTE.close)
    return _ZYGOTE


def fork_supported() -> bool:
    return hasattr(os, "fork") and sys.platform.startswith("linux")


# --- libraries and homes ---------------------------------------------------------------------------

def make_library(dest: Path, keys: tuple[str, ...], *, edits: dict[str, str] | None = None) -> Path:
    """A plain library with `keys` copied from the sample library, and a library.json listing
    exactly those papers. `edits` appends text to a Markdown paper (a changed OCR output)."""
    (dest / "papers").mkdir(parents=True, exist_ok=True)
    for k in keys:
        if not (dest / "papers" / k).exists():
            shutil.copytree(SAMPLE / "papers" / k, dest / "papers" / k)
    meta = json.loads((SAMPLE / "library.json").read_text())
    meta["items"] = [i for i in meta["items"] if i.get("key") in keys]
    (dest / "library.json").write_text(json.dumps(meta))
    for k, extra in (edits or {}).items():
        md = dest / "papers" / k / "paper.md"
        md.write_text((SAMPLE / "papers" / k / "paper.md").read_text() + extra)
    return dest


def set_library(dest: Path, keys: tuple[str, ...], edits: dict[str, str] | None = None) -> None:
    """Make `dest` hold exactly `keys` (with `edits`), touching only what differs."""
    papers = dest / "papers"
    for d in list(papers.iterdir()) if papers.exists() else []:
        if d.name not in keys:
            shutil.rmtree(d)
    make_library(dest, keys)
    for k in keys:
        md = papers / k / "paper.md"
        if md.exists():
            want = (SAMPLE / "papers" / k / "paper.md").read_text() + (edits or {}).get(k, "")
            if md.read_text() != want:
                md.write_text(want)


def env_for(home: Path, library: Path) -> dict[str, str]:
    return {"SHEAF_HOME": str(home), "SHEAF_LIBRARY": str(library), "PYTHONUNBUFFERED": "1"}


def seed_models(home: Path, template: Path | None) -> None:
    """Reuse a built home's exported ONNX query encoder (a hard-link copy) so a fresh home does
    not export it again (~7 s); the export is the same for every home of one model."""
    if template is None or not (template / "models").is_dir():
        return
    dst = home / "models"
    if dst.exists():
        return
    from sheaf.vectors.onnx_export import link_export

    for export in (template / "models").iterdir():
        if export.is_dir() and not export.name.startswith("."):
            link_export(export, home)


def sheaf_cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real console script (a fresh interpreter), for tests where fidelity beats speed."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_"))}
    full.update(env)
    exe = Path(PYTHON).with_name("sheaf")
    cmd = [str(exe)] if exe.exists() else [PYTHON, "-m", "sheaf.cli"]
    return subprocess.run(cmd + args, env=full, cwd=str(cwd), capture_output=True, text=True, timeout=timeout,
                          check=False)


def envelope(text: str) -> dict[str, Any]:
    """The last JSON envelope line of a command's output."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{") and '"ok"' in line:
            return json.loads(line)
    raise AssertionError(f"no JSON envelope in output:\n{text[-2000:]}")


# --- index snapshots -------------------------------------------------------------------------------

def _sha(x: Any) -> str:
    return hashlib.sha256(x if isinstance(x, bytes) else str(x).encode()).hexdigest()[:16]


def snapshot(db: Path) -> dict[str, Any]:
    """Everything the index holds, per paper, in a comparable form, plus global orphan counts.

    Vectors are kept as float32 arrays (compared with a tolerance: a passage encoded in a
    different batch can differ in the last bits); everything else exactly."""
    import numpy as np

    from sheaf.store.sqlite.integrity import global_orphans
    from sheaf.store.sqlite.schema import collections, open_index

    conn = open_index(db, readonly=True)
    try:
        papers: dict[str, dict[str, Any]] = {}

        def p(pid: str) -> dict[str, Any]:
            return papers.setdefault(pid, {"body": [], "objects": [], "body_fts": 0, "object_fts": 0,
                                           "passages": [], "vectors": {}, "meta": None})

        for pid, title, has_meta, authors, year in conn.execute(
                "SELECT paper_id, title, has_metadata, authors, year FROM papers"):
            p(pid)["meta"] = (title, has_meta, authors, year)
        for pid, uid, path, text, kind, part in conn.execute(
                "SELECT paper_id, unit_id, section_path, text, unit_kind, part_ordinal FROM body_units"):
            p(pid)["body"].append((uid, path, _sha(text), kind, part))
        for pid, uid, cap, tt, near in conn.execute(
                "SELECT paper_id, unit_id, caption, table_text, nearby_text FROM object_units"):
            p(pid)["objects"].append((uid, _sha(cap), _sha(tt), _sha(near)))
        for pid, n in conn.execute("SELECT b.paper_id, count(*) FROM body_units_fts f JOIN body_units b "
                                   "ON b.unit_rowid = f.rowid GROUP BY b.paper_id"):
            p(pid)["body_fts"] = n
        for pid, n in conn.execute("SELECT o.paper_id, count(*) FROM object_units_fts f JOIN object_units o "
                                   "ON o.unit_rowid = f.rowid GROUP BY o.paper_id"):
            p(pid)["object_fts"] = n
        cols = collections(conn)
        for key, ident in cols.items():
            for pid, psg, sha, emb in conn.execute(
                    f"SELECT p.paper_id, p.passage_id, p.text_sha256, v.embedding FROM {ident.passages_table} p "
                    f"JOIN {ident.vec_table} v ON v.passage_rowid = p.passage_rowid"):
                p(pid)["passages"].append((key, psg, sha))
                p(pid)["vectors"][(key, psg)] = np.frombuffer(emb, dtype=np.float32)
        for d in papers.values():
            for k in ("body", "objects", "passages"):
                d[k].sort()
        totals = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("papers", "papers_fts", "body_units", "body_units_fts", "object_units", "object_units_fts")}
        for key, ident in cols.items():
            totals[ident.passages_table] = conn.execute(f"SELECT count(*) FROM {ident.passages_table}").fetchone()[0]
            totals[ident.vec_table] = conn.execute(f"SELECT count(*) FROM {ident.vec_table}").fetchone()[0]
        return {"papers": papers, "orphans": global_orphans(conn), "totals": totals,
                "collections": sorted(cols)}
    finally:
        conn.close()


def diff_snapshots(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """Human-readable differences (empty when the index equals the reference)."""
    import numpy as np

    out: list[str] = []
    if got["collections"] != want["collections"]:
        out.append(f"collections {got['collections']} != {want['collections']}")
    for kind, n in got["orphans"].items():
        if n:
            out.append(f"orphans: {n} {kind}")
    if got["totals"] != want["totals"]:
        out.append(f"table totals {got['totals']} != {want['totals']}")
    gp, wp = got["papers"], want["papers"]
    for pid in sorted(set(gp) | set(wp)):
        if pid not in gp:
            out.append(f"{pid}: missing from the index")
            continue
        if pid not in wp:
            out.append(f"{pid}: in the index but not in the reference")
            continue
        g, w = gp[pid], wp[pid]
        for k in ("meta", "body", "objects", "body_fts", "object_fts", "passages"):
            if g[k] != w[k]:
                gl = len(g[k]) if isinstance(g[k], list) else g[k]
                wl = len(w[k]) if isinstance(w[k], list) else w[k]
                out.append(f"{pid}: {k} differ ({gl} vs {wl})")
        if set(g["vectors"]) != set(w["vectors"]):
            out.append(f"{pid}: vector ids differ")
        else:
            for k, v in g["vectors"].items():
                if v.shape != w["vectors"][k].shape or not np.allclose(v, w["vectors"][k], atol=1e-4):
                    out.append(f"{pid}: vector {k[1]} differs")
                    break
    return out


def artifact_files(home: Path) -> dict[str, str]:
    """Every file under artifacts/ (relative path → content hash), the stat cache excluded."""
    import pyarrow.parquet as pq

    root = home / "artifacts"
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for f in sorted(root.rglob("*")):
        if not f.is_file() or f.name == "_source_stats.json":
            continue
        rel = str(f.relative_to(root))
        if f.suffix == ".parquet" and not f.name.startswith("."):
            t = pq.read_table(f)
            out[rel] = _sha(json.dumps(t.to_pylist(), sort_keys=True, default=str))
        else:
            out[rel] = _sha(f.read_bytes())
    return out


def _runs(inst: Any) -> list[dict[str, Any]]:
    from dagster import DagsterEventType

    out = []
    for r in inst.get_runs():
        msg = None
        if r.status.value == "FAILURE":
            logs = inst.all_logs(r.run_id, of_type=DagsterEventType.RUN_FAILURE)
            if logs:
                msg = logs[-1].dagster_event.message
        out.append({"run_id": r.run_id, "status": r.status.value, "tags": dict(r.tags), "message": msg,
                    "job": r.job_name})
    return out


def _stage(inst: Any, run_ids: set[str]) -> str:
    if not run_ids:
        return "sync/plan (before any run)"
    runs = sorted((inst.get_run_record_by_id(r) for r in run_ids), key=lambda rec: rec.create_timestamp)
    last = runs[-1].dagster_run
    started, ended = [], set()
    for e in inst.all_logs(last.run_id):
        de = e.dagster_event
        if de is None:
            continue
        if de.event_type_value == "STEP_START":
            started.append(de.step_key)
        elif de.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
            ended.add(de.step_key)
    open_steps = [s for s in started if s not in ended]
    if open_steps:
        return f"{last.job_name}: in step {open_steps[-1]}"
    return f"{last.job_name}: between steps" if started else f"{last.job_name}: starting"


def _instance(dagster_home: Path) -> Any:
    from dagster import DagsterInstance

    from tests.kits.dagster_private import InstanceRef

    return DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home)))


def dagster_runs(dagster_home: Path) -> list[dict[str, Any]]:
    """Every run of a Dagster home (status, tags, failure message), read from its storage."""
    inst = _instance(dagster_home)
    try:
        return _runs(inst)
    finally:
        inst.dispose()


def runs_and_stage(dagster_home: Path, pid: int, killed: bool) -> tuple[list[dict[str, Any]], str]:
    """`dagster_runs`, and where the killed process `pid` was: the step that started and never
    ended in its last run, or 'sync/plan (before any run)' (one instance for both)."""
    inst = _instance(dagster_home)
    try:
        runs = _runs(inst)
        mine = {r["run_id"] for r in runs if r["tags"].get("sheaf/pid") == str(pid)}
        return runs, (_stage(inst, mine) if killed else "finished")
    finally:
        inst.dispose()


# --- reference builds (once per process) -----------------------------------------------------------

LIB_A = ("L2YSNC8V", "M3FJ9PLC", "P9KE3UHB", "W6TB4YRS")
LIB_B = ("D2LPA7XK", "L2YSNC8V", "M3FJ9PLC", "P9KE3UHB")  # W6TB4YRS removed, D2LPA7XK added
EDIT_B = {"L2YSNC8V": "\n\nAddendum. Growth-curve residuals should be reported with every lichenometric age.\n"}
_REFS: dict[str, Any] = {}


def fast_root(prefix: str = "sheaf-rel-") -> Path:
    """A scratch folder on tmpfs when there is one (a kill -9 loses nothing of the page
    cache, so fsync latency only slows the tests), else in the temp folder."""
    import tempfile

    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def references() -> dict[str, Any]:
    """Clean builds of library A and of library B (a changed, a removed and an added paper),
    done once per test process: {"A"|"B": {lib, home, keys, snapshot, artifacts}}."""
    if _REFS:
        return _REFS
    root = fast_root("sheaf-refs-")
    z = zygote()
    out: dict[str, Any] = {"root": root}
    for name, keys, edits in (("A", LIB_A, {}), ("B", LIB_B, EDIT_B)):
        out[name] = {"lib": make_library(root / f"lib{name}", keys, edits=edits), "home": root / f"home{name}",
                     "keys": keys}
        if name == "B":
            seed_models(out["B"]["home"], out["A"]["home"])
        code, text = z.run(["build"], env_for(out[name]["home"], out[name]["lib"]), root, root / f"ref{name}.log",
                           timeout=400)
        assert code == 0, text[-3000:]
        out[name]["snapshot"] = snapshot(out[name]["home"] / "index" / "sheaf.db")
        out[name]["artifacts"] = artifact_files(out[name]["home"])
    atexit.register(shutil.rmtree, root, True)
    _REFS.update(out)
    return _REFS


def clone_home(ref: dict[str, Any], dest: Path) -> tuple[Path, Path]:
    """A copy of a reference's home and library under `dest`: (home, library)."""
    home, lib = dest / "home", dest / "lib"
    shutil.copytree(ref["home"], home, ignore=lambda d, names: ["models"] if Path(d) == Path(ref["home"]) else [])
    seed_models(home, Path(ref["home"]))  # hard links where it can: the ONNX export is 88 MB
    shutil.copytree(ref["lib"], lib)
    rec = home_record.read_record(home)
    if rec is not None:  # the copy's library is the copied one (as a user's --switch-library would say)
        home_record.write_record(home, lib, rec.layout)
    return home, lib


# --- a reader that checks every paper is whole, in every read transaction ------------------------------

def paper_versions(ref_snapshots: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """For each paper and reference version: its units and passages as JSON-comparable lists."""
    out: dict[str, dict[str, Any]] = {}
    for version, snap in ref_snapshots.items():
        for pid, p in snap["papers"].items():
            out.setdefault(pid, {})[version] = {
                "units": [list(x) for x in p["body"]] + [list(x) for x in p["objects"]],
                "passages": [list(x) for x in p["passages"]]}
    return out


def _whole_units(got: list[list[Any]], want: list[list[Any]]) -> bool:
    """Every unit that has passages has exactly its passages of the version `want` (a unit's
    vectors are all there or all absent: absent while the vector step has yet to run)."""
    def by_unit(rows: list[list[Any]]) -> dict[tuple[str, str], list[list[Any]]]:
        out: dict[tuple[str, str], list[list[Any]]] = {}
        for key, psg, sha in rows:
            out.setdefault((key, psg.rsplit("#", 1)[0]), []).append([key, psg, sha])
        return {k: sorted(v) for k, v in out.items()}

    w = by_unit(want)
    return all(w.get(u) == ps for u, ps in by_unit(got).items())


def reader_loop(db: str, expected_file: str, stop_file: str, out_file: str) -> None:
    """Read the index in a loop until `stop_file` exists; in each read transaction every paper
    must be one whole version: its units those of one reference version, its FTS rows equal to
    its units, each unit's passages either absent or exactly that version's, one vector per
    passage.
    Writes {reads, violations[], errors[]} to `out_file`."""
    from sheaf.store.sqlite.schema import collections, open_index

    expected = json.loads(Path(expected_file).read_text())
    stats: dict[str, Any] = {"reads": 0, "violations": [], "errors": [], "papers_seen": 0}
    conn = open_index(db, readonly=True)
    try:
        while not Path(stop_file).exists():
            try:
                conn.execute("BEGIN")
                papers: dict[str, dict[str, Any]] = {}

                def p(pid: str, papers: dict[str, dict[str, Any]] = papers) -> dict[str, Any]:
                    return papers.setdefault(pid, {"units": [], "passages": [], "fts": 0, "n": 0, "vec": 0})

                for pid, uid, path, text, kind, part in conn.execute(
                        "SELECT paper_id, unit_id, section_path, text, unit_kind, part_ordinal FROM body_units"):
                    p(pid)["units"].append([uid, path, _sha(text), kind, part])
                for pid, uid, cap, tt, near in conn.execute(
                        "SELECT paper_id, unit_id, caption, table_text, nearby_text FROM object_units"):
                    p(pid)["units"].append([uid, _sha(cap), _sha(tt), _sha(near)])
                for t, base in (("body_units_fts", "body_units"), ("object_units_fts", "object_units")):
                    for pid, n in conn.execute(f"SELECT b.paper_id, count(*) FROM {t} f JOIN {base} b "
                                               "ON b.unit_rowid = f.rowid GROUP BY b.paper_id"):
                        p(pid)["fts"] += n
                for key, ident in collections(conn).items():
                    for pid, psg, sha in conn.execute(f"SELECT paper_id, passage_id, text_sha256 FROM "
                                                      f"{ident.passages_table}"):
                        p(pid)["passages"].append([key, psg, sha])
                    for pid, n in conn.execute(f"SELECT paper_id, count(*) FROM {ident.vec_table} GROUP BY paper_id"):
                        p(pid)["vec"] += n
                conn.execute("COMMIT")
            except Exception as e:  # noqa: BLE001 - a reader error is what the test counts
                stats["errors"].append(f"{type(e).__name__}: {e}")
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                time.sleep(0.01)
                continue
            stats["reads"] += 1
            stats["papers_seen"] = max(stats["papers_seen"], len(papers))
            for pid, got in papers.items():
                units = sorted(got["units"])
                passages = sorted(got["passages"])
                versions = expected.get(pid, {})
                match = [v for v, want in versions.items() if sorted(want["units"]) == units]
                if units and not match:
                    stats["violations"].append(f"{pid}: units match no version ({len(units)} units)")
                    continue
                if got["fts"] != len(units):
                    stats["violations"].append(f"{pid}: {got['fts']} FTS rows for {len(units)} units")
                if passages and not any(_whole_units(passages, versions[v]["passages"]) for v in match):
                    stats["violations"].append(f"{pid}: passages of another version or a unit's partly "
                                               f"({len(passages)})")
                if got["vec"] != len(passages):
                    stats["violations"].append(f"{pid}: {got['vec']} vectors for {len(passages)} passages")
            if len(stats["violations"]) > 50:
                break
            time.sleep(0.02)  # leave the CPU to the build (2 cores)
    finally:
        conn.close()
        Path(out_file).write_text(json.dumps(stats))


# --- mounts (root only; tests fall back or skip without them) ------------------------------------------

def _run(*cmd: str) -> bool:
    return subprocess.run(list(cmd), capture_output=True, check=False).returncode == 0


def mount_tmpfs(path: Path, size_bytes: int) -> bool:
    """A tmpfs of `size_bytes` at `path` (a real "no space left on device"); False if not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    return os.geteuid() == 0 and _run("mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path))


def mount_readonly(path: Path) -> bool:
    """Bind-mount `path` read-only over itself (root ignores chmod); False if not allowed."""
    if os.geteuid() != 0 or not _run("mount", "--bind", str(path), str(path)):
        return False
    if _run("mount", "-o", "remount,ro,bind", str(path)):
        return True
    _run("umount", str(path))
    return False


def umount(path: Path) -> None:
    for _ in range(20):
        if _run("umount", str(path)):
            return
        time.sleep(0.1)
    _run("umount", "-l", str(path))


def fill_disk(folder: Path, leave_bytes: int) -> Path:
    """A file that takes all free space of `folder`'s filesystem but `leave_bytes`."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    filler = folder / "filler.bin"
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, max(0, free - leave_bytes))
    return filler


def report(name: str, data: Any) -> None:
    """Save a test's numbers as `<SHEAF_RELIABILITY_REPORT_DIR>/<name>.json` (for
    bench/build/reliability.py, which writes the Reliability section of docs/benchmarks.md)."""
    folder = os.environ.get("SHEAF_RELIABILITY_REPORT_DIR")
    if not folder:
        return
    p = Path(folder) / f"{name}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
