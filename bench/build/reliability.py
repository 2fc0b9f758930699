"""Reliability: run the fault-injection tests (tests/pipelines/test_reliability_*.py) and write their
numbers to the "Reliability" section of docs/benchmarks.md.

The tests inject the faults for real (kill -9 of `sheaf build` at random moments and chosen
points, two builds at once, a build under readers and `sheaf serve`, a full tmpfs, a read-only
bind mount, damaged index files, hostile input for every adapter, planted drift for
`sheaf doctor`); each saves its numbers through `tests.kits.reliability.report` into a folder
this script reads.

    .venv/bin/python -m bench.build.reliability --write-docs
    .venv/bin/python -m bench.build.reliability --from-json /tmp/rel.json --write-docs   # re-render
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from bench.common import write_docs_section

ROOT = Path(__file__).resolve().parents[2]

DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:reliability:begin -->", "<!-- bench:reliability:end -->"


def run() -> dict[str, Any]:
    out_dir = Path(tempfile.mkdtemp(prefix="sheaf-rel-report-"))
    junit = out_dir / "junit.xml"
    env = dict(os.environ, SHEAF_RELIABILITY_REPORT_DIR=str(out_dir))
    t0 = time.perf_counter()
    r0 = os.times()
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/pipelines/test_reliability_fuzz.py",
                           "tests/pipelines/test_reliability_kill.py", "tests/pipelines/test_reliability_concurrency.py",
                           "tests/pipelines/test_reliability_storage.py", "tests/pipelines/test_reliability_doctor.py",
                           "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    r1 = os.times()
    tests = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        failed = any(c.tag in ("failure", "error") for c in case)
        skipped = any(c.tag == "skipped" for c in case)
        tests.append({"name": f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}",
                      "seconds": float(case.get("time", 0)),
                      "outcome": "failed" if failed else "skipped" if skipped else "passed"})
    reports = {p.stem: json.loads(p.read_text()) for p in out_dir.glob("*.json")}
    shutil.rmtree(out_dir, ignore_errors=True)
    load = os.getloadavg()
    return {"wall_seconds": round(wall, 1),
            "cpu_seconds": round((r1.children_user - r0.children_user) + (r1.children_system - r0.children_system), 1),
            "loadavg_after": [round(x, 2) for x in load], "exit": proc.returncode, "tests": tests,
            "reports": reports, "date": dt.date.today().isoformat(), "tail": proc.stdout[-3000:]}


def _fmt_counts(d: dict[str, int]) -> str:
    order = ("IngestError", "parsed with warnings", "parsed")
    return ", ".join(f"{d[k]} {k}" for k in order if d.get(k))


def render(r: dict[str, Any]) -> str:
    rep = r["reports"]
    kill = rep.get("kill", {})
    lines = [BEGIN, "## Reliability", "",
             f"`bench/build/reliability.py` (runs `tests/pipelines/test_reliability_*.py`, {r['date']}): "
             f"{sum(t['outcome'] == 'passed' for t in r['tests'])} of {len(r['tests'])} tests passed in "
             f"{r['wall_seconds']} s wall ({r['cpu_seconds']} s CPU over both cores; load average after: "
             f"{', '.join(map(str, r['loadavg_after']))}). Every fault is injected for real."]
    if kill.get("full_build_seconds", 0) > 7:  # a busy machine: say how much it slowed the run
        lines[-1] += (f" The machine was shared with other jobs: a `sheaf build --full` of the 4-paper test library "
                      f"took {kill['full_build_seconds']} s during this run and about 5.5 s on a quiet machine, so "
                      f"scale the wall time by about {5.5 / kill['full_build_seconds']:.1f} for an idle 2-core machine.")
    lines.append("")
    lines += ["| fault | trials | outcome | rows lost | lock failures |", "|---|---|---|---|---|"]
    import re

    def short(msg: str) -> str:  # the test's scratch folder is not the point
        return re.sub(r"\S*/home/", "$SHEAF_HOME/", msg.split(" (")[0])

    if kill:
        lines.append(f"| `kill -9` of `sheaf build` ({kill['random_kills']} at random moments, "
                     f"{kill['targeted_kills']} at chosen points) | {kill['kills']} kills | after each, a plain "
                     f"`sheaf build` completed and the index equalled a clean build's (units, FTS rows, vectors per "
                     f"paper; no orphan, no duplicate; artifacts identical, no temp file left); "
                     f"{kill['runs_marked_failed']} killed runs shown FAILURE (\"process died\"; the other "
                     f"{kill['kills'] - kill['runs_marked_failed']} kills came when no run was in progress), none left "
                     f"running | "
                     f"{kill['rows_lost']} | 0 |")
    two = rep.get("concurrency-two-builds")
    if two:
        lines.append("| two `sheaf build` at once | 1 | the second waited (\"another sheaf build is running (pid N); "
                     f"waiting…\"), then had {len(two['second_planned'])} papers left to build; both exit 0; index = "
                     "clean build | 0 | 0 |")
    rd = rep.get("concurrency-readers")
    if rd:
        lines.append(f"| a build (paper edited, removed, added; then `--full`) under `sheaf serve` + query commands + "
                     f"2 reader processes | {rd['queries']} queries ({sum((rd['served'] or {}).values())} answered by "
                     f"`sheaf serve`), "
                     f"{sum(rd['reader_reads'])} read transactions | {rd['queries_failed']} failed queries, "
                     f"{rd['violations']} half-replaced papers seen, {rd['reader_errors']} reader errors; final index = "
                     "clean build | 0 | 0 |")
    df = rep.get("disk-full")
    if df:
        lines.append(f"| disk full ({df['how']}: {'; '.join(df['phases'])}) | {len(df['phases'])} | exit 2, "
                     f"`BACKEND_UNAVAILABLE`: \"{short(df['messages'][0])}\"; previous index identical and "
                     "answering queries; after freeing space `sheaf build` completes | 0 | 0 |")
    ro = rep.get("read-only")
    if ro:
        lines.append(f"| read-only index folder ({ro['how']}) | 1 | exit 2, `BACKEND_UNAVAILABLE`: "
                     f"\"{short(ro['message'])}\"; queries still answered; build completes once writable | 0 | 0 |")
    for name in sorted(k for k in rep if k.startswith("damage-")):
        d = rep[name]
        codes = ", ".join(f"{q}: {c}" for q, c in d["queries"].items())
        how = d["recovery"] + (" (file moved aside" + (f", {d['salvaged']} cached embeddings salvaged)"
                                                       if d["salvaged"] else ")") if d["moved_aside"] else "")
        lines.append(f"| damaged index: {name[7:].replace('_', ' ')} | 1 | queries → {codes} (never a traceback); "
                     f"`{how}` recovered it: index = clean build | 0 | 0 |")
    doc = rep.get("doctor")
    if doc:
        kinds = sorted({f.split(":")[0] for f in doc["found"]})
        lines.append(f"| `sheaf doctor` on {len(doc['found'])} planted drifts ({', '.join(kinds)}) | 1 | every one reported "
                     f"with its cause; `--repair` rebuilt only {', '.join(doc['rebuilt'])} (the untouched paper was "
                     f"not rebuilt), removed the orphans; {doc['after']} issues after | 0 | 0 |")
    if kill:
        lines += ["", "Kill stages hit (the step a killed run was in, from its Dagster events): "
                  + "; ".join(kill["stages"]) + "."]
        targeted = [x["label"] for x in kill["results"] if not x["label"].startswith("random")]
        lines += ["Chosen points: " + "; ".join(dict.fromkeys(targeted)) + "."]
    fuzz = {k[5:]: v for k, v in rep.items() if k.startswith("fuzz-")}
    if fuzz:
        total = sum(sum(c.values()) for f in fuzz.values() for c in f.values())
        lines += ["", f"Hostile input: {total} generated malformed files (hypothesis, derandomized), every one ended "
                  "in a named `IngestError` (paper, file, message) or a valid result, with warnings where the adapter "
                  "noticed damage (always for invalid UTF-8 in a text format; bounding boxes off the page, absurd "
                  "heading levels, cut blocks), that went through render, tree, units, the Arrow artifacts and an "
                  "index write; no other exception, for that paper or any other:", "",
                  "| format | inputs | truncation | wrong types / structure | huge strings | deep nesting | NUL bytes | "
                  "invalid UTF-8 | absurd numbers | random bytes | wrong root | empty | entities |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        cols = ("truncate", "wrong_type", "huge_string", "deep_nesting", "nul_bytes", "invalid_utf8",
                "absurd_numbers", "random_bytes", "wrong_root", "empty", "entities")
        for fmt, classes in sorted(fuzz.items()):
            n = sum(sum(c.values()) for c in classes.values())
            cells = [_fmt_counts(classes[c]) if c in classes else "–" for c in cols]
            lines.append(f"| {fmt} | {n} | " + " | ".join(cells) + " |")
        lines += ["", "Paper keys that would escape the data folder (`../x`, `/abs`, `...`, `a/b`, `x\\n`, NUL, "
                  "300 generated) are refused by key validation, artifact paths, index writes, metadata loading and "
                  "discovery."]
    lines += ["", "Fixes these tests forced: a deleted or moved-aside index left `sheaf build` saying every paper "
              "was built, with no index at all (now index drift, e.g. rows a killed process committed but Dagster "
              "never recorded, is a reason to rebuild; a negative control in the tests shows the old behaviour); killed runs stayed STARTED and held the index pool's "
              "slot, so the next build hung at its first index write (now reaped and freed); a rebuild dropped "
              "every vector until the vector step, failing semantic queries meanwhile (now only changed units' "
              "vectors); a damaged or replaced index lost the library metadata; two builds on a fresh home could "
              "fail on Dagster's storage setup (`table jobs already exists`; now a lock); "
              "a full disk and a damaged index ended in `INTERNAL_ERROR` (\"a bug in sheaf\") instead of a clear "
              "error; a 1 MB paragraph took "
              "25-70 s to split into units (quadratic); absurd heading levels overflowed the Arrow int32 artifacts; "
              "`valid_paper_key` accepted a trailing newline.", END]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--from-json", type=Path, help="re-render results saved by --json (no run)")
    args = ap.parse_args()
    r = json.loads(args.from_json.read_text()) if args.from_json else run()
    if args.json:
        args.json.write_text(json.dumps(r, indent=1))
    section = render(r)
    print(section)
    if r.get("exit"):
        print(r.get("tail", ""), file=sys.stderr)
    if args.write_docs:
        write_docs_section(section, BEGIN, END, DOCS)


if __name__ == "__main__":
    main()
