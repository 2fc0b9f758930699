"""Benchmark of `sheaf build` at library scale: what a build costs against what its embeddings
cost, and what an incremental build, a no-op and `sheaf status` cost as the library grows.

Corpus (needs `../shared/data/scifact/corpus.jsonl`; skipped with a message without it): N plain
Markdown papers of three SciFact abstracts each (`# title`, an author line, `## Abstract` + the
first abstract, `## 1 <title>` + the second, `## 2 <title>` + the third) and a CSL-JSON
`library.json`: about six passages a paper, every one new to the embedding cache.

Measured per size, each command a fresh process, one at a time:
- full build on an empty home: wall, user CPU, peak RSS, passages; against the bare encode of
  the same passages (the build's own embedder and backend, batch as configured, model loaded,
  no cache, no Dagster) measured in the same run; orchestration per paper = (build wall -
  bare encode - model load) / N;
- an orchestration-only rebuild (`--full` with every embedding cached): its wall / N;
- no-op build (3 times), `sheaf status`;
- one paper edited (a paragraph with a unique word) until the word is searchable; one paper removed;
- storage: the Dagster home, the index and the artifacts, per paper.

Run from the project root (1,000 papers: ~15 minutes on a quiet 2-core machine; 10,000: hours):
    .venv/bin/python -m bench.build.scale --sizes 1000 --write-docs
    .venv/bin/python -m bench.build.scale --sizes 300               # quicker, prints only
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

SCIFACT = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:scale:begin -->", "<!-- bench:scale:end -->"
SHEAF = str(Path(sys.executable).parent / "sheaf")
TIME = "/usr/bin/time"


def make_library(dest: Path, n: int) -> int:
    docs = [json.loads(line) for line in SCIFACT.open(encoding="utf-8")]
    (dest / "papers").mkdir(parents=True)
    items = []
    for i in range(n):
        a, b, c = (docs[(3 * i + j) % len(docs)] for j in range(3))
        key = f"S{i:05d}X"
        md = (f"# {a['title']}\n\nA. Author, B. Writer\n\n## Abstract\n\n{a['text']}\n\n"
              f"## 1 {b['title']}\n\n{b['text']}\n\n## 2 {c['title']}\n\n{c['text']}\n")
        (dest / "papers" / key).mkdir()
        (dest / "papers" / key / "paper.md").write_text(md, encoding="utf-8")
        items.append({"id": key, "type": "article-journal", "title": a["title"],
                      "author": [{"family": "Author", "given": "A."}], "issued": {"date-parts": [[2000 + i % 20]]}})
    (dest / "library.json").write_text(json.dumps(items), encoding="utf-8")
    return n


def home_env(home: Path, lib: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SHEAF_INDEX_FILE", "PYTHONDONTWRITEBYTECODE")}
    env.update(SHEAF_HOME=str(home), SHEAF_LIBRARY=str(lib), DAGSTER_HOME=str(home / "dagster_home"),
               PYTHONWARNINGS="ignore")
    return env


def timed(home: Path, lib: Path, *argv: str) -> dict[str, Any]:
    """`sheaf <argv> --json` in a fresh process: wall, user CPU, peak RSS and the envelope."""
    out = Path(tempfile.mktemp(prefix="sheaf-time-"))
    t0 = time.perf_counter()
    proc = subprocess.run([TIME, "-f", "%U %M", "-o", str(out), SHEAF, *argv, "--json"], env=home_env(home, lib),
                          capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    user, rss = out.read_text().split()[-2:]
    out.unlink()
    try:
        env = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"sheaf {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}") from None
    if not env.get("ok"):
        raise SystemExit(f"sheaf {' '.join(argv)}: {env.get('error')}")
    return {"wall_s": round(wall, 2), "user_s": float(user), "rss_mb": round(int(rss) / 1024), "env": env,
            "load": round(os.getloadavg()[0], 2)}


def build(home: Path, lib: Path, *extra: str) -> dict[str, Any]:
    r = timed(home, lib, "build", *extra)
    d = r.pop("env")["data"]
    r.update(runs=len(d["runs"]), planned=len(d["planned"]), embeddings_computed=d["embeddings_computed"],
             passages=sum(p.get("passages") or 0 for p in d["papers"]), states=d["states"], plan=d.get("plan"),
             reported_s=d["seconds"])
    return r


def bare_main(home: Path, fraction: float) -> dict[str, Any]:
    """Child: the build's embedder loaded, then the bare encode of the build's passages."""
    from bench.build import pipeline as P  # bench/build/pipeline.py: the passages as the build composed them
    from pipelines.resources import SheafConfig

    t0 = time.perf_counter()
    emb = SheafConfig().embedder()
    emb.load()
    load_s = time.perf_counter() - t0
    texts, total = P._passage_texts(home)
    sample = texts if fraction >= 1 else random.Random(7).sample(texts, max(1, int(len(texts) * fraction)))
    t1 = time.perf_counter()
    emb.encode(sample)
    enc = time.perf_counter() - t1
    return {"backend": emb.backend, "batch_size": emb.batch_size, "load_s": round(load_s, 2), "passages": total,
            "distinct": len(texts), "encoded": len(sample), "per_s": round(len(sample) / enc, 1),
            "bare_s": round(enc * len(texts) / len(sample), 1)}


def in_build_encode_main() -> dict[str, Any]:
    """Child: the encode time inside the build, from the vector steps' own `embed_ms` metadata
    (every materialization that computed embeddings): the build's time over its own encode
    needs no second reading of the model, so the machine's speed drifting between two
    readings (17.3 to 25.6 passages a second within one run here) does not enter the ratio."""
    from bench.common import vector_step_readings

    ms, papers, computed = 0.0, 0, 0
    runs: dict[str, list[float]] = {}  # run id -> [encode ms, passages computed]
    for run_id, meta in vector_step_readings():
        n = int(meta["embeddings_computed"].value)
        ms += float(meta["embed_ms"].value)
        papers += 1
        computed += n
        run = runs.setdefault(run_id, [0.0, 0])
        run[0] += float(meta["embed_ms"].value)
        run[1] += n
    # the encoder's rate run by run (runs that encoded 500 passages or more): how far the
    # machine's speed drifted during the build
    rates = [1000 * n / t for t, n in runs.values() if n >= 500 and t]
    return {"encode_s": round(ms / 1000, 1), "papers": papers, "computed": computed,
            "per_s": round(computed / (ms / 1000), 1) if ms else None,
            "run_rates": [round(min(rates), 1), round(max(rates), 1)] if rates else None}


def dagster_way_main(command: str) -> dict[str, Any]:
    """Child: `sheaf build` / `sheaf status` forced the Dagster way (no no-op proof), in-process,
    for the side-by-side row; the caller times the whole process."""
    from pipelines.planning import noop
    from sheaf.core.settings import get_settings
    from sheaf.service import builds

    settings = get_settings()
    if command == "build":
        env = builds.build(settings, builds.definitions(settings)).envelope
    else:
        noop.quick_status = lambda s: noop.Proof.no("bench: the Dagster way")
        env = builds.status(settings).envelope
    return {"ok": env["ok"], "plan": env["data"].get("plan")}


def dagster_way(home: Path, lib: Path, command: str) -> dict[str, Any]:
    out = Path(tempfile.mktemp(prefix="sheaf-time-"))
    t0 = time.perf_counter()
    proc = subprocess.run([TIME, "-f", "%U %M", "-o", str(out), sys.executable, "-m", __spec__.name, "_dagster_way",
                           "--command", command], env=home_env(home, lib), capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    user, rss = out.read_text().split()[-2:]
    out.unlink()
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall_s": round(wall, 2), "user_s": float(user), "rss_mb": round(int(rss) / 1024), **res,
            "load": round(os.getloadavg()[0], 2)}


def in_build_encode(home: Path, lib: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", __spec__.name, "_in_build_encode"], env=home_env(home, lib), capture_output=True,
                          text=True, cwd=ROOT, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def edit_one(home: Path, lib: Path, key: str) -> dict[str, Any]:
    word = f"zqx{int(time.time())}scale"
    f = lib / "papers" / key / "paper.md"
    f.write_text(f.read_text(encoding="utf-8") + f"\nAn added sentence names {word} once.\n", encoding="utf-8")
    t0 = time.perf_counter()
    r = build(home, lib)
    q = timed(home, lib, "search", word)
    r["searchable_s"] = round(time.perf_counter() - t0, 2)
    r["searchable"] = [m["zotero_key"] for m in q["env"]["data"]["matches"]][:1] == [key]
    return r


def _size_mb(p: Path) -> float:
    return round(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 1e6, 1) if p.exists() else 0.0


def run_size(work: Path, n: int, fraction: float, say, s: dict[str, Any] | None = None,
             save=lambda: None) -> dict[str, Any]:
    """Every row for one size, in `s` (saved after each step through `save`, so a run stopped
    part way keeps what it measured)."""
    lib, home = work / f"lib-{n}", work / f"home-{n}"
    for p in (lib, home):
        shutil.rmtree(p, ignore_errors=True)
    make_library(lib, n)
    s = {} if s is None else s
    s.update(papers=n, date=dt.date.today().isoformat())
    s["full"] = build(home, lib)
    say(f"full {s['full']}")
    save()
    s["in_build_encode"] = in_build_encode(home, lib)
    say(f"in-build encode {s['in_build_encode']}")
    s["storage_mb"] = {"dagster_home": _size_mb(home / "dagster_home"), "index": _size_mb(home / "index"),
                       "artifacts": _size_mb(home / "artifacts")}
    s["bare"] = json.loads(subprocess.run(
        [sys.executable, "-m", __spec__.name, "_bare", "--home", str(home), "--fraction", str(fraction)],
        env=home_env(home, lib), capture_output=True, text=True, cwd=ROOT, check=True).stdout.strip().splitlines()[-1])
    say(f"bare {s['bare']}")
    save()
    s["noop"] = [build(home, lib) for _ in range(3)]
    say(f"noop {[r['wall_s'] for r in s['noop']]}")
    save()
    st = timed(home, lib, "status")
    st.pop("env")
    s["status"] = st
    # side by side: the same no-op and status the Dagster way (pipelines.planning.noop not asked)
    s["noop_dagster_way"] = dagster_way(home, lib, "build")
    s["noop_again"] = build(home, lib)
    s["status_dagster_way"] = dagster_way(home, lib, "status")
    st = timed(home, lib, "status")
    st.pop("env")
    s["status_again"] = st
    say(f"side by side: no-op {s['noop_again']['wall_s']} s vs {s['noop_dagster_way']['wall_s']} s the Dagster way; "
        f"status {s['status_again']['wall_s']} s vs {s['status_dagster_way']['wall_s']} s")
    save()
    keys = sorted(p.name for p in (lib / "papers").iterdir())
    s["edit"] = edit_one(home, lib, keys[len(keys) // 2])
    say(f"edit {s['edit']}")
    save()
    shutil.rmtree(lib / "papers" / keys[1])
    s["remove"] = build(home, lib)
    say(f"remove {s['remove']['wall_s']}")
    save()
    s["orchestration_only"] = build(home, lib, "--full")
    say(f"orchestration-only {s['orchestration_only']}")
    s["storage_mb_final"] = {"dagster_home": _size_mb(home / "dagster_home"), "index": _size_mb(home / "index"),
                             "artifacts": _size_mb(home / "artifacts")}
    save()
    return s


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    where = (f"{m.get('cpu', '?')} ({m.get('cores', '?')} cores, {m.get('memory', '?')}), Python {m.get('python', '?')}, "
             f"dagster {m.get('dagster', '?')}, torch {m.get('torch', '?')}") if isinstance(m, dict) else str(m)
    lines = [BEGIN, f"Measured {r['date']} on {where} with `bench/build/scale.py --sizes {' '.join(map(str, r['sizes']))}` "
             "(SciFact plain library, three abstracts a paper; every command a fresh process, one at a time; "
             "load average at each step in the raw JSON).", "",
             "| | " + " | ".join(f"{n} papers" for n in r["sizes"]) + " |", "|---|" + "---|" * len(r["sizes"])]

    def cell(fn, s: dict[str, Any]) -> str:
        try:
            return fn(s)
        except (KeyError, TypeError):
            return "not measured"

    def row(label: str, fn) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(fn, r["results"][str(n)]) for n in r["sizes"]) + " |")

    if any(r["results"][str(n)].get("date", r["date"]) != r["date"] for n in r["sizes"]):
        row("measured on", lambda s: s.get("date", r["date"]))

    row("full build (wall / user CPU / peak RSS)", lambda s: f"{s['full']['wall_s']} s / {s['full']['user_s']} s / "
        f"{s['full']['rss_mb']} MB")
    row("passages embedded", lambda s: f"{s['full']['embeddings_computed']}")
    row("bare encode, same passages (backend, rate)", lambda s: f"{s['bare']['bare_s']} s ({s['bare']['backend']}, "
        f"{s['bare']['per_s']}/s; model load {s['bare']['load_s']} s)")
    row("**full build ÷ bare encode** (goal ≤ 1.15)", lambda s: f"**{s['full']['wall_s'] / s['bare']['bare_s']:.3f}x**")
    row("encode time inside the full build (the vector steps' own reading, rate)", lambda s: (
        f"{s['in_build_encode']['encode_s']} s ({s['in_build_encode']['per_s']}/s"
        + (f"; run by run {s['in_build_encode']['run_rates'][0]}-{s['in_build_encode']['run_rates'][1]}/s"
           if s["in_build_encode"].get("run_rates") else "") + ")"))
    row("**full build ÷ its own encode time** (one reading of the encoder, so free of its speed drifting between two)",
        lambda s: f"**{s['full']['wall_s'] / s['in_build_encode']['encode_s']:.3f}x** "
                  f"({1000 * (s['full']['wall_s'] - s['in_build_encode']['encode_s']) / s['papers']:.0f} ms a paper besides)")
    row("orchestration per paper in the full build (goal ≤ 30 ms): beside the bare encode / beside its own",
        lambda s: f"{1000 * (s['full']['wall_s'] - s['bare']['bare_s'] - s['bare']['load_s']) / s['papers']:.0f} ms / "
                  f"{1000 * (s['full']['wall_s'] - s['in_build_encode']['encode_s']) / s['papers']:.0f} ms")
    row("orchestration-only rebuild (`--full`, embeddings cached)", lambda s: f"{s['orchestration_only']['wall_s']} s = "
        f"{1000 * s['orchestration_only']['wall_s'] / s['papers']:.0f} ms a paper")
    row("no-op build (goal ≤ 1.5 s at 1,000)", lambda s: " / ".join(f"{x['wall_s']} s" for x in s["noop"]) +
        f" (papers' events read: {s['noop'][-1]['plan']['papers_read']}; Dagster loaded: "
        f"{'no' if s['noop'][-1]['plan'].get('dagster') is False else 'yes'})")
    row("no-op build, side by side: without Dagster / the Dagster way", lambda s: (
        f"{s['noop_again']['wall_s']} s / {s['noop_dagster_way']['wall_s']} s" if "noop_again" in s else "not measured"))
    row("`sheaf status` (goal ≤ 1 s)", lambda s: f"{s['status']['wall_s']} s")
    row("`sheaf status`, side by side: without Dagster / the Dagster way", lambda s: (
        f"{s['status_again']['wall_s']} s / {s['status_dagster_way']['wall_s']} s" if "status_again" in s
        else "not measured"))
    row("one paper edited → searchable (goal ≤ 3 s)", lambda s: f"{s['edit']['searchable_s']} s (build "
        f"{s['edit']['wall_s']} s, events read for {s['edit']['plan']['papers_read']} paper)")
    row("one paper removed (goal ≤ 3 s)", lambda s: f"{s['remove']['wall_s']} s")
    row("peak RSS: full build / orchestration-only rebuild (goal ≤ 1 GB at 10,000)",
        lambda s: f"{s['full']['rss_mb']} MB / {s['orchestration_only']['rss_mb']} MB")
    row("Dagster home after the first build (goal ≤ 30 KB a paper)", lambda s: f"{s['storage_mb']['dagster_home']} MB = "
        f"{1000 * s['storage_mb']['dagster_home'] / s['papers']:.0f} KB a paper (index {s['storage_mb']['index']} MB, "
        f"artifacts {s['storage_mb']['artifacts']} MB)")
    row("Dagster home after all of the above", lambda s: f"{s['storage_mb_final']['dagster_home']} MB")
    notes = [f"- {n} papers: {r['results'][str(n)]['note']}" for n in r["sizes"] if r["results"][str(n)].get("note")]
    if notes:  # a reading taken again or set aside, said where the table shows it
        lines += ["", *notes]
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_dagster_way":
        ap = argparse.ArgumentParser()
        ap.add_argument("mode")
        ap.add_argument("--command", choices=("build", "status"), required=True)
        print(json.dumps(dagster_way_main(ap.parse_args().command)))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_in_build_encode":
        print(json.dumps(in_build_encode_main()))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_bare":
        ap = argparse.ArgumentParser()
        ap.add_argument("mode")
        ap.add_argument("--home", type=Path, required=True)
        ap.add_argument("--fraction", type=float, default=1.0)
        a = ap.parse_args()
        print(json.dumps(bare_main(a.home, a.fraction)))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000])
    ap.add_argument("--bare-fraction", type=float, default=0.25,
                    help="share of the passages the bare encode runs on at sizes over 1,000 (scaled up)")
    ap.add_argument("--work", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--from-json", type=Path)
    ap.add_argument("--merge-json", type=Path, nargs="*", default=[],
                    help="earlier runs' JSON whose sizes join the table (a size measured here wins)")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    if args.from_json:
        r = json.loads(args.from_json.read_text())
    else:
        if not SCIFACT.exists():
            print(f"skipped: {SCIFACT} not found (the SciFact corpus of ../shared/data)", file=sys.stderr)
            return
        from bench.build.pipeline import machine

        work = args.work or Path(tempfile.mkdtemp(prefix="sheaf-bench-scale-"))
        r = {"date": dt.date.today().isoformat(), "machine": machine(), "sizes": args.sizes, "results": {}}

        def save() -> None:
            if args.json:
                args.json.write_text(json.dumps(r, indent=1))

        for n in args.sizes:
            r["results"][str(n)] = {}
            run_size(work, n, 1.0 if n <= 1000 else args.bare_fraction,
                     lambda m, n=n: print(f"[{n}] {m}", file=sys.stderr, flush=True), r["results"][str(n)], save)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    for extra in args.merge_json:
        old = json.loads(extra.read_text())
        for n in old["sizes"]:
            if str(n) not in r["results"]:
                r["results"][str(n)] = {"date": old["date"], **old["results"][str(n)]}
                r["sizes"] = sorted({*r["sizes"], n})
    if args.json:
        args.json.write_text(json.dumps(r, indent=1))
    text = render(r)
    print(text)
    if args.write_docs:
        from bench.common import write_docs_section

        write_docs_section(text, BEGIN, END, DOCS)


if __name__ == "__main__":
    main()
