"""Celery workers, 1 against 2, on this machine: the same library built by a backfill over
`deploy/local_cluster.py`'s cluster (each worker in a network namespace, one step at a time, one
torch/onnxruntime thread), from the backfill's launch to its last run's end.

    sudo .venv/bin/python -m bench.build.cluster [--library PATH] [--papers-per-run 2]

Reported per worker count: the wall time, papers per minute, the steps' own time (what the
workers' logs say each step took, summed) and what the cluster spent around them per paper
(wall x workers - steps, over the papers); the speed-up of 2 workers over 1 and its parallel
efficiency; and the same library built by one `sheaf build` process (one thread), the cluster's
own cost per paper being the difference. Needs root, `redis-server` and `ip netns` (as the cluster does). Writes
bench/results/cluster.json and its section of docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, machine, write_docs_section
from deploy.local_cluster import dagster_cli as dagster
from deploy.local_cluster import instance_value as query
from deploy.local_cluster import runs_settled

SCRIPT = ROOT / "deploy" / "local_cluster.py"
BEGIN, END = "<!-- cluster:begin -->", "<!-- cluster:end -->"


def until(ok: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ok():
            return
        time.sleep(1)
    raise SystemExit(f"{what}: not within {timeout:.0f} s")


def one(workers: int, library: Path, papers_per_run: int, d: Path) -> dict[str, Any]:
    up = subprocess.run([sys.executable, str(SCRIPT), "up", "--dir", str(d), "--no-daemon", "--workers", str(workers),
                         "--library", str(library), "--papers-per-run", str(papers_per_run)],
                        capture_output=True, text=True)
    if up.returncode:
        raise SystemExit(up.stderr[-2000:])
    try:
        dagster(d, "sensor", "stop", "sheaf_automation")
        subprocess.run([sys.executable, str(SCRIPT), "daemon", "--dir", str(d)], check=True, capture_output=True)
        n = {"papers": 0}

        def discovered() -> bool:
            n["papers"] = len(query(d, "i.get_dynamic_partitions('papers')"))
            return n["papers"] > 0 and query(d, "len([r for r in i.get_runs() if not r.is_finished])") == 0

        until(discovered, 600, "discovery")
        logs = [d / "logs" / f"worker{w}.log" for w in range(1, workers + 1)]
        start = [log.stat().st_size for log in logs]  # the steps of the backfill are those logged after
        t0 = time.monotonic()
        dagster(d, "job", "backfill", "-j", "paper_chain", "--all", "all", "--noprompt")

        until(lambda: runs_settled(d, allow_failed=True), 7200, "the backfill")
        wall = time.monotonic() - t0
        runs = query(d, "[str(r.status) for r in i.get_runs() if r.job_name == 'paper_chain']")
        events = query(d, "sum(len(i.all_logs(r.run_id)) for r in i.get_runs() if r.job_name == 'paper_chain')")
        steps = 0.0
        for log, offset in zip(logs, start):
            with log.open("rb") as f:
                f.seek(offset)
                text = f.read().decode("utf-8", "replace")
            steps += sum(float(x) for x in re.findall(r"succeeded in ([0-9.]+)s", text))
        papers = n["papers"]
        return {"workers": workers, "papers": papers, "runs": len(runs),
                "failed_runs": sum(not s.endswith("SUCCESS") for s in runs), "wall_s": round(wall, 1),
                "papers_per_min": round(60 * papers / wall, 2), "steps_s": round(steps, 1),
                "around_steps_per_paper_s": round((wall * workers - steps) / papers, 2),
                "events_per_paper": round(events / papers, 1)}
    finally:
        subprocess.run([sys.executable, str(SCRIPT), "down", "--dir", str(d)], capture_output=True)


def single(library: Path, d: Path) -> dict[str, Any]:
    """The same library built by one `sheaf build` process on a fresh home (SQLite, in-process
    executor, one torch/onnxruntime thread as each worker has): what the cluster's runs, steps and
    messages add is the difference."""
    import shutil

    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("SHEAF_INDEX_URL", "SHEAF_ARTIFACTS_URL")}
    env.update(SHEAF_HOME=str(d / "home"), SHEAF_LIBRARY=str(library), DAGSTER_HOME=str(d / "home" / "dagster_home"),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", SHEAF_EMBED_THREADS="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
    t0 = time.monotonic()
    proc = subprocess.run([str(Path(sys.executable).parent / "sheaf"), "build", "--json"], env=env,
                          capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - t0
    try:
        data = json.loads(proc.stdout)["data"]
    except (ValueError, KeyError):
        raise SystemExit(f"sheaf build failed ({proc.returncode}):\n{proc.stderr[-2000:]}") from None
    papers = len(data["papers"])
    return {"workers": "single process", "papers": papers, "runs": len(data["runs"]), "failed_runs": 0,
            "wall_s": round(wall, 1), "papers_per_min": round(60 * papers / wall, 2)}


def render(res: dict[str, Any]) -> str:
    rows = "\n".join(f"| {r['workers']} | {r['papers']} | {r['runs']} | {r['wall_s']} | {r['papers_per_min']} | "
                     f"{r.get('steps_s', '')} | {r.get('around_steps_per_paper_s', '')} | {r.get('events_per_paper', '')} |"
                     for r in res["results"] + ([res["single"]] if "single" in res else []))
    one_worker = res["results"][0]
    extra = ""
    if "single" in res:
        per = (one_worker["wall_s"] - res["single"]["wall_s"]) / one_worker["papers"]
        extra = (f"\nThe cluster's own cost: 1 worker took {one_worker['wall_s'] / res['single']['wall_s']:.2f}x the single "
                 f"process's wall time, **{per:.1f} s more per paper**, most of it inside the steps ({one_worker['steps_s']} s "
                 f"of step time against {res['single']['wall_s']} s for the single process's whole build).\n")
    m = res["machine"]
    return f"""{BEGIN}
## Celery workers on one machine

What: the library built by a backfill (`dagster job backfill -j paper_chain --all all`) over
`deploy/local_cluster.py`'s cluster, each worker in a network namespace of its own, one step at a
time, one torch/onnxruntime thread; 1 worker against 2, from the launch to the last run's end.
"Steps" sums what the workers' logs say each step took; "around the steps" is wall x workers -
steps, per paper (the orchestration, the idle worker while the other finishes a run's chain);
the events are those of the backfill's runs in Dagster's event log.
Library: {res['library']}; papers per run: {res['papers_per_run']}. Machine: {m.get('cpu')}, {m.get('cores')} cores.
Rerun: `sudo .venv/bin/python -m bench.build.cluster --library PATH`.

| workers | papers | runs | wall (s) | papers/min | steps (s) | around the steps per paper (s) | Dagster events per paper |
|---|---|---|---|---|---|---|---|
{rows}

Speed-up of 2 workers over 1: **{res['speedup']}x** (parallel efficiency {res['efficiency']}).
{extra}{END}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--library", type=Path, default=ROOT / "data" / "sample-library")
    ap.add_argument("--papers-per-run", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/sheaf-cluster-bench"))
    ap.add_argument("--label", help="the library as the docs name it (default: its folder's name)")
    ap.add_argument("--no-docs", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (the cluster's network namespaces)")
    results = [one(n, a.library.resolve(), a.papers_per_run, a.dir / f"{n}-workers") for n in (1, 2)]
    speedup = results[0]["wall_s"] / results[1]["wall_s"]
    alone = single(a.library.resolve(), a.dir / "single")
    info = machine()
    res = {"library": a.label or a.library.name, "papers_per_run": a.papers_per_run, "results": results,
           "speedup": round(speedup, 2), "efficiency": round(speedup / 2, 2), "single": alone,
           "machine": {"cpu": info.get("cpu"), "cores": info.get("cores")}}
    out = ROOT / "bench" / "results" / "cluster.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    if not a.no_docs:
        write_docs_section(render(res), BEGIN, END)


if __name__ == "__main__":
    main()
