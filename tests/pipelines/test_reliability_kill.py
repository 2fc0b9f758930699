"""Kill -9 a `sheaf build` at random moments and at chosen points (mid-transaction,
mid-embedding, between an artifact's write and its rename, between Dagster events, right
after an index commit that Dagster never heard of). After every kill a plain `sheaf build`
must complete and leave the index equal to a clean build's (same units, FTS rows and vectors
per paper; nothing orphaned, nothing duplicated), the artifacts equal too (no temp file left),
and Dagster must show the killed run as FAILURE ("process died"), never as running.

Two lanes run side by side (one per core), each a Sheaf home on tmpfs: a kill -9 loses no
page-cache data, so fsync latency (what a disk adds) is irrelevant to what is tested and
only slows the trials. Children are forked from a warm zygote (see tests/kits/reliability.py).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.kits import reliability as kit
from tests.kits.dagster_private import HANDLE_NEW_EVENT

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.e2e,
              pytest.mark.skipif(not kit.fork_supported(), reason="needs fork (Linux)")]

LIB_A, LIB_B, EDIT_B = kit.LIB_A, kit.LIB_B, kit.EDIT_B
RANDOM_KILLS = 11  # plus the 10 targeted ones below: 21 kills in all
SEED = int(os.environ.get("SHEAF_KILL_SEED", "20261129"))

#: (scenario, fault) kills at chosen points; `fault` is a zygote fault spec.
TARGETED: list[tuple[str, str, dict[str, Any]]] = [
    # fresh builds: a `--full` rebuild of an unchanged library finds every paper's index rows as
    # they should be and writes none (`replace_paper` / `replace_paper_vectors` leave them alone)
    ("fresh", "mid-transaction: replace_paper, old rows deleted, new not yet inserted",
     {"kind": "hook", "func": "replace_paper", "step": "after_delete", "nth": 2}),
    ("fresh", "mid-transaction: replace_paper, everything written, before COMMIT",
     {"kind": "hook", "func": "replace_paper", "step": "before_commit", "nth": 3}),
    ("fresh", "right after replace_paper committed (vectors dropped), before Dagster records it",
     {"kind": "after", "target": "sheaf.store.sqlite.writer:replace_paper", "nth": 1}),
    ("fresh", "mid-transaction: replace_paper_vectors, passages written, vectors not",
     {"kind": "hook", "func": "replace_paper_vectors", "step": "after_passages", "nth": 2}),
    ("toggle", "mid-transaction: remove_paper of a removed paper",
     {"kind": "hook", "func": "remove_paper", "step": "after_units", "nth": 1}),
    ("toggle", "mid-transaction: upsert_papers (library metadata)",
     {"kind": "hook", "func": "upsert_papers", "step": "before_commit", "nth": 1}),
    ("fresh", "mid-embedding: while the model encodes",
     {"kind": "timer_in", "target": "sheaf.vectors.embedder:Embedder.encode", "nth": 1, "delay": 0.3}),
    ("fresh", "after the embedding cache committed, before the vectors are written",
     {"kind": "after", "target": "sheaf.store.sqlite.writer:cache_put", "nth": 1}),
    # a fresh build: a `--full` rebuild of an unchanged library writes no artifact (the same bytes stay)
    ("fresh", "between an artifact's temp write and its rename",
     {"kind": "atomic_write", "nth": 5}),
    ("full", "between two Dagster events of a run",
     {"kind": "before", "target": HANDLE_NEW_EVENT, "nth": 45}),
]


class Lane:
    """One Sheaf home and library that trials run in, one after another."""

    def __init__(self, name: str, root: Path, refs: dict[str, Any]) -> None:
        self.name, self.root, self.refs = name, root, refs
        self.lib = root / "lib"
        self.home = root / "home"
        self.current = "A"
        kit.clone_home(refs["A"], root)
        self.log_n = 0
        self.results: list[dict[str, Any]] = []

    def env(self) -> dict[str, str]:
        return kit.env_for(self.home, self.lib)

    def log(self) -> Path:
        self.log_n += 1
        return self.root / f"{self.log_n:03d}.log"

    def prepare(self, scenario: str) -> list[str]:
        """Set the lane up for a scenario; returns the build's arguments."""
        if scenario == "toggle":
            self.current = "B" if self.current == "A" else "A"
            keys, edits = (LIB_B, EDIT_B) if self.current == "B" else (LIB_A, {})
            kit.set_library(self.lib, keys, edits)
            return ["build"]
        if scenario == "fresh":
            for sub in ("dagster_home", "artifacts", "index"):
                shutil.rmtree(self.home / sub, ignore_errors=True)
            return ["build"]
        return ["build", "--full"]

    def trial(self, scenario: str, *, delay: float | None = None, fault: dict[str, Any] | None = None,
              label: str = "") -> dict[str, Any]:
        z = kit.zygote()
        argv = self.prepare(scenario)
        t0 = time.monotonic()
        log = self.log()
        pid = z.spawn(argv, self.env(), self.root, log, [fault] if fault else None)
        if delay is not None:
            while time.monotonic() - t0 < delay:
                if z.poll(pid) is not None:
                    break
                time.sleep(0.02)
            else:
                os.kill(pid, signal.SIGKILL)
        code = z.wait(pid, timeout=180)
        killed = code == -signal.SIGKILL
        at = round(time.monotonic() - t0, 2)
        # recovery: a plain build must complete
        rlog = self.log()
        rcode, rout = z.run(["build", "--json"], self.env(), self.root, rlog, timeout=240)
        result = {"lane": self.name, "scenario": scenario, "label": label or f"random kill at {at} s",
                  "killed": killed, "pid": pid, "at": at, "recovery_exit": rcode}
        result.update(self.verify(pid, rcode, rout, killed))
        self.results.append(result)
        return result

    def verify(self, pid: int, rcode: int, rout: str, killed: bool) -> dict[str, Any]:
        problems: list[str] = []
        if rcode != 0:
            problems.append(f"recovery build exited {rcode}: {rout[-1500:]}")
        else:
            env = kit.envelope(rout)
            states = env["data"]["states"]
            if states != {"built": len(self.refs[self.current]["keys"])}:
                problems.append(f"states after recovery: {states}")
        ref = self.refs[self.current]
        db = self.home / "index" / "sheaf.db"
        if not db.exists():  # nothing to compare: say so, with what the recovery build printed
            return {"problems": problems + [f"no index after the recovery build (exit {rcode}): {rout[-1500:]}"],
                    "stage": "", "runs_marked_failed": 0, "rows_lost": 0, "rows_extra": 0}
        snap = kit.snapshot(db)
        problems += kit.diff_snapshots(snap, ref["snapshot"])
        files = kit.artifact_files(self.home)
        if files != ref["artifacts"]:
            extra = sorted(set(files) - set(ref["artifacts"]))
            missing = sorted(set(ref["artifacts"]) - set(files))
            changed = sorted(k for k in set(files) & set(ref["artifacts"]) if files[k] != ref["artifacts"][k])
            problems.append(f"artifacts differ: extra {extra[:5]}, missing {missing[:5]}, changed {changed[:5]}")
        runs, stage = kit.runs_and_stage(self.home / "dagster_home", pid, killed)
        unfinished = [r for r in runs if r["status"] in ("STARTED", "STARTING", "NOT_STARTED", "QUEUED", "CANCELING")]
        if unfinished:
            problems.append(f"runs still shown running: {[(r['job'], r['status']) for r in unfinished]}")
        mine = [r for r in runs if r["tags"].get("sheaf/pid") == str(pid)]
        failed_died = [r for r in mine if r["status"] == "FAILURE" and r["message"] and "died" in r["message"]]
        wrong = [r for r in mine if r["status"] != "SUCCESS" and r not in failed_died]
        if wrong:  # every run of the killed process either finished, or shows FAILURE "process died"
            problems.append(f"killed runs not marked failed: {[(r['job'], r['status'], r['message']) for r in wrong]}")
        rows = sum(len(p["body"]) + len(p["objects"]) + len(p["passages"]) for p in snap["papers"].values())
        want_rows = sum(len(p["body"]) + len(p["objects"]) + len(p["passages"]) for p in ref["snapshot"]["papers"].values())
        return {"problems": problems, "stage": stage, "runs_marked_failed": len(failed_died),
                "rows_lost": max(0, want_rows - rows), "rows_extra": max(0, rows - want_rows)}


@pytest.fixture(scope="module")
def refs():
    """The clean reference builds of libraries A and B (tests.kits.reliability.references), and
    the time of one `build --full` (x1.3: the lanes run side by side) to spread the random
    kills over the whole of a build whatever this machine's speed."""
    out = dict(kit.references())
    root = kit.fast_root("sheaf-cal-")
    home_a, lib_a = kit.clone_home(out["A"], root / "a")
    t0 = time.monotonic()
    code, text = kit.zygote().run(["build", "--full"], kit.env_for(home_a, lib_a), root, root / "a.log", timeout=300)
    out["full_seconds_measured"] = time.monotonic() - t0
    out["full_seconds"] = 1.3 * out["full_seconds_measured"]
    assert code == 0, text[-3000:]
    shutil.rmtree(root, ignore_errors=True)
    return out


def test_kill_minus_nine_at_random_moments_and_chosen_points(refs):
    rng = random.Random(SEED)
    root = kit.fast_root("sheaf-kill-")
    lanes = [Lane(f"lane{i}", root / f"lane{i}", refs) for i in range(2)]
    # random kills: a scenario and a uniform delay over the scenario's typical duration
    full = refs["full_seconds"]
    durations = {"full": full, "toggle": 0.8 * full, "fresh": 1.6 * full}
    plan: list[list[tuple[str, dict[str, Any]]]] = [[], []]
    for i in range(RANDOM_KILLS):
        scenario = ("full", "toggle", "full", "fresh", "toggle")[i % 5]
        plan[i % 2].append((scenario, {"delay": round(rng.uniform(0.05, 1.0) * durations[scenario], 2)}))
    for i, (scenario, label, fault) in enumerate(TARGETED):
        plan[i % 2].append((scenario, {"fault": fault, "label": label}))
    for p in plan:
        rng.shuffle(p)

    errors: list[BaseException] = []

    def work(lane: Lane, items: list[tuple[str, dict[str, Any]]]) -> None:
        try:
            for scenario, kw in items:
                lane.trial(scenario, **kw)
                delay = kw.get("delay")
                for _ in range(3):  # finished before the kill: try again, earlier
                    if delay is None or lane.results[-1]["killed"]:
                        break
                    delay = round(delay * 0.5, 2)
                    lane.trial(scenario, delay=delay)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    t0 = time.monotonic()
    threads = [threading.Thread(target=work, args=(lane, plan[i])) for i, lane in enumerate(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - t0
    if errors:
        raise errors[0]
    results = [r for lane in lanes for r in lane.results]
    report = {"seconds": round(seconds, 1), "trials": len(results), "full_build_seconds": round(refs["full_seconds_measured"], 2),
              "kills": sum(r["killed"] for r in results),
              "targeted_kills": sum(r["killed"] for r in results if not r["label"].startswith("random")),
              "random_kills": sum(r["killed"] for r in results if r["label"].startswith("random")),
              "rows_lost": sum(r["rows_lost"] for r in results), "rows_extra": sum(r["rows_extra"] for r in results),
              "runs_marked_failed": sum(r["runs_marked_failed"] for r in results),
              "stages": sorted({r["stage"] for r in results if r["killed"]}),
              "results": results}
    kit.report("kill", report)
    bad = [(r["label"], r["scenario"], r["problems"]) for r in results if r["problems"]]
    assert not bad, json.dumps(bad, indent=1, default=str)[:6000]
    assert report["kills"] >= 20, report
    targeted = [r for r in results if not r["label"].startswith("random")]
    assert all(r["killed"] for r in targeted), [r["label"] for r in targeted if not r["killed"]]
    assert report["rows_lost"] == 0 and report["rows_extra"] == 0
    shutil.rmtree(root, ignore_errors=True)
