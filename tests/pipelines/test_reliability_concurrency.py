"""Concurrent writers and readers.

- Two `sheaf build` processes started at once on one SHEAF_HOME: the second waits for the
  first ("another sheaf build is running (pid N); waiting…"), then finds nothing to do; both
  succeed, nothing is "database is locked", the index equals a clean build's.
- A build that changes, removes and adds papers while `sheaf serve` answers queries, query
  commands run locally, and reader processes check every read transaction: no query fails,
  no reader ever sees a half-replaced paper (units of one version with the FTS rows of the
  same units and either no passages or exactly that version's, one vector per passage), no
  "database is locked", and the final index equals a clean build of the new library.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kits import reliability as kit

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.e2e,
              pytest.mark.skipif(not kit.fork_supported(), reason="needs fork (Linux)")]

LOCKED = ("database is locked", "database table is locked", "SQLITE_BUSY")


def test_two_builds_at_once_one_waits_then_skips():
    refs = kit.references()
    root = kit.fast_root("sheaf-two-")
    lib = kit.make_library(root / "lib", kit.LIB_A)
    home = root / "home"
    kit.seed_models(home, refs["A"]["home"])
    env = kit.env_for(home, lib)
    z = kit.zygote()
    first = z.spawn(["build", "--json"], env, root, root / "first.log")
    time.sleep(0.3)
    second = z.spawn(["build", "--json"], env, root, root / "second.log")
    codes = (z.wait(first, 300), z.wait(second, 300))
    out1, out2 = (root / "first.log").read_text(), (root / "second.log").read_text()
    assert codes == (0, 0), (out1[-2000:], out2[-2000:])
    assert f"another sheaf build is running (pid {first}); waiting…" in out2, out2[-2000:]
    for text in (out1, out2):
        assert not any(m in text for m in LOCKED), text[-2000:]
    env1, env2 = kit.envelope(out1), kit.envelope(out2)
    assert env1["data"]["states"] == {"built": 4} and env2["data"]["states"] == {"built": 4}
    assert len(env1["data"]["planned"]) == 4 and env2["data"]["planned"] == {}  # the second had nothing left
    assert not kit.diff_snapshots(kit.snapshot(home / "index" / "sheaf.db"), refs["A"]["snapshot"])
    runs = kit.dagster_runs(home / "dagster_home")
    assert all(r["status"] == "SUCCESS" for r in runs), [(r["job"], r["status"]) for r in runs]
    kit.report("concurrency-two-builds", {"exit_codes": codes, "waited": True, "second_planned": env2["data"]["planned"],
                                          "locked": 0})
    shutil.rmtree(root, ignore_errors=True)


def _wait_for(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.05)


def _health(home: Path) -> dict:
    import urllib.request

    d = json.loads((home / "serve.json").read_text())
    req = urllib.request.Request(f"http://{d['host']}:{d['port']}/v1/health", headers={"X-Sheaf-Token": d["token"]})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_build_while_serve_search_and_readers_query():
    refs = kit.references()
    root = kit.fast_root("sheaf-readers-")
    home, lib = kit.clone_home(refs["A"], root)
    env = kit.env_for(home, lib)
    z = kit.zygote()
    db = home / "index" / "sheaf.db"
    expected = root / "expected.json"
    expected.write_text(json.dumps(kit.paper_versions({"A": refs["A"]["snapshot"], "B": refs["B"]["snapshot"]})))
    stop = root / "stop"
    # the server, warm
    server = z.spawn(["serve"], env, root, root / "serve.log")
    _wait_for(home / "serve.json", 60)
    # two reader processes checking every read transaction
    code = "import sys; from tests.kits.reliability import reader_loop; reader_loop(*sys.argv[1:])"
    readers = [subprocess.Popen([sys.executable, "-c", code, str(db), str(expected), str(stop),
                                 str(root / f"reader{i}.json")], cwd=str(kit.ROOT)) for i in range(2)]
    try:
        # the library changes: one paper edited, one removed, one added; then a --full on top
        kit.set_library(lib, kit.LIB_B, kit.EDIT_B)
        builds = [z.spawn(["build", "--json"], env, root, root / "build.log")]
        queries: list[tuple[list[str], int, str]] = []
        n = 0
        while True:
            if z.poll(builds[-1]) is not None:
                if len(builds) == 1:
                    builds.append(z.spawn(["build", "--full", "--json"], env, root, root / "build_full.log"))
                else:
                    break
            argv = [["retrieve", "lichen growth curve uncertainty", "--json"],
                    ["search", "pollinator elevation", "--json"],
                    ["retrieve", "soil moisture Sentinel-1", "--mode", "lexical", "--no-server", "--json"],
                    ["grep", "lichenometry", "--json"]][n % 4]
            log = root / f"q{n:03d}.log"
            code, text = z.run(argv, env, root, log, timeout=60)
            queries.append((argv, code, text))
            n += 1
            time.sleep(0.2)  # a user's pace, not a load test: leave the CPU to the build
        codes = [z.wait(b, 10) for b in builds]
        served = _health(home)
    finally:
        stop.write_text("stop")
        for r in readers:
            r.wait(timeout=60)
        os.kill(server, signal.SIGINT)
        z.wait(server, 30)
    build_text = (root / "build.log").read_text() + (root / "build_full.log").read_text()
    assert codes == [0, 0], build_text[-3000:]
    failed = [(a, c, t[-500:]) for a, c, t in queries if c != 0 or not kit.envelope(t)["ok"]]
    assert not failed, failed[:3]
    assert len(queries) >= 8, len(queries)
    for text in [build_text] + [t for _, _, t in queries]:
        assert not any(m in text for m in LOCKED), text[-1500:]
    stats = [json.loads((root / f"reader{i}.json").read_text()) for i in range(2)]
    for s in stats:
        assert not s["errors"], s["errors"][:5]
        assert not s["violations"], s["violations"][:5]
        assert s["reads"] >= 20, s
    assert not kit.diff_snapshots(kit.snapshot(db), refs["B"]["snapshot"])
    kit.report("concurrency-readers", {
        "queries": len(queries), "queries_failed": len(failed), "reader_reads": [s["reads"] for s in stats],
        "violations": sum(len(s["violations"]) for s in stats), "reader_errors": sum(len(s["errors"]) for s in stats),
        "served": served.get("requests"), "build_seconds": None})
    shutil.rmtree(root, ignore_errors=True)
