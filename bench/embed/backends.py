"""The embedding backends side by side (`sheaf.vectors.backend_choice`), in one run:

- bare encode rate of the ONNX export, torch fp32 and torch bf16 (where the CPU has AMX /
  AVX512-BF16), alternated in one process; their agreement with fp32 (min / mean cosine over SciFact
  abstracts) and the top-10 neighbour overlap of SciFact claims against those abstracts;
- the first-time measurement as a build makes it (`measure_in_child`: a process of its own), timed;
- full first builds of one library (`--builds N` papers, made as `bench/build/scale.py` makes them) with
  each backend: onnx, torch fp32, torch bf16, auto, and auto on a machine without bf16 (the record
  without the bf16 trial: torch fp32 vs the export); wall, peak RSS, the encode inside the build and
  the backends it ran on; then a no-op of each and one edited paper on onnx and auto. Every home gets
  the same ONNX export and the measurement's record, so no build pays for an export or a measurement;
- with `--write-docs`, the section in docs/benchmarks.md, with `bench/embed/quality.py`'s nDCG@10.

    python -m bench.embed.backends [--builds 300] [--only BUILD ...] [--record child|loaded] [--out JSON]
                                   [--rate-docs 64] [--rounds 2] [--write-docs]
    python -m bench.embed.backends --from-json bench/results/embed-backends.json \
        --merge-builds bench/results/embed-backends-switch.json --write-docs   # the docs' table

(`--record loaded`: the homes get the measurement made with torch loaded instead of the child's,
e.g. to see a build switch to torch when the child's, on a busy machine, chose the export.)

Needs ../shared/data/scifact. Writes bench/results/embed-backends.json.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.build import scale  # (bench/build/scale.py: the library, the timed `sheaf build`, the edit)
from bench.common import ROOT, environment, machine, vector_step_readings, write_docs_section
from sheaf.vectors.backend_choice import (
    BF16_FLAGS,
    ONNX,
    RECORD_FILE,
    TORCH_BF16,
    TORCH_FP32,
    Measurement,
    candidates_for,
    choose,
    machine_facts,
    measure,
    measure_in_child,
    save_record,
)
from sheaf.vectors.backend_probe import encoders_of
from sheaf.vectors.embedder import Embedder
from sheaf.vectors.onnx_export import export_to_models_dir, link_export

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
RESULTS = ROOT / "bench" / "results"
BEGIN, END = "<!-- bench:embed-backends:begin -->", "<!-- bench:embed-backends:end -->"
#: build name → (SHEAF_EMBED_BACKEND, SHEAF_EMBED_PRECISION)
BUILDS = {"onnx": ("onnx", "auto"), "torch-fp32": ("torch", "fp32"), "torch-bf16": ("torch", "bf16"),
          "auto": ("auto", "auto"), "auto-no-bf16": ("auto", "auto")}


def topk(q: np.ndarray, d: np.ndarray, k: int = 10) -> np.ndarray:
    return np.argsort(-(q @ d.T), axis=1)[:, :k]


def rates_and_agreement(a: argparse.Namespace, emb: Embedder, models: Path) -> dict:
    docs = [json.loads(x) for x in (SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:a.corpus_docs]]
    claims = [json.loads(x)["text"] for x in (SCIFACT / "queries.jsonl").read_text(encoding="utf-8").splitlines()[:a.claims]]
    texts = [emb.compose(d["title"], d["text"]) for d in docs]
    facts = machine_facts(emb.identity.key)
    encoders = encoders_of(emb, candidates_for(facts), models)
    # bare encode rate, alternated (measure: warm-up, then rounds of every backend in turn)
    rates = measure(encoders, texts[:a.rate_docs], rounds=a.rounds)
    vecs = {name: enc(texts) for name, enc in encoders.items()}
    qv = {name: enc(claims) for name, enc in encoders.items()}
    ref_top = topk(qv[TORCH_FP32], vecs[TORCH_FP32])
    agreement = {}
    for name in encoders:
        cos = np.sum(vecs[TORCH_FP32] * vecs[name], axis=1)
        top = topk(qv[name], vecs[name])
        overlap = float(np.mean([len(set(a_) & set(b_)) / 10 for a_, b_ in zip(top, ref_top)]))
        agreement[name] = {"min_cosine": round(float(cos.min()), 6), "mean_cosine": round(float(cos.mean()), 6),
                           "top10_overlap": round(overlap, 4)}
    no_bf16 = {k: v for k, v in rates.items() if k != TORCH_BF16}
    return {"facts": facts.to_dict(), "rate_docs": a.rate_docs, "rounds": a.rounds, "corpus_docs": len(texts),
            "claims": len(claims), "rates": {k: v.rate for k, v in rates.items()}, "agreement": agreement,
            "chosen": choose(rates), "chosen_without_bf16": choose(no_bf16)}


def settings_env(backend: str, precision: str):
    """SHEAF_EMBED_BACKEND / _PRECISION for the `sheaf` processes `scale` starts (it copies os.environ)."""
    return environment({"SHEAF_EMBED_BACKEND": backend, "SHEAF_EMBED_PRECISION": precision})


def in_build_main() -> dict:
    """Child (the home's DAGSTER_HOME): the vector steps' own reading of the build's encode (`embed_ms`),
    and the passages each backend encoded."""
    ms, computed, by_backend = 0.0, 0, {}
    for _, meta in vector_step_readings():
        n = int(meta["embeddings_computed"].value)
        ms += float(meta["embed_ms"].value)
        computed += n
        b = str(getattr(meta.get("embed_backend"), "value", "?"))
        by_backend[b] = by_backend.get(b, 0) + n
    return {"encode_s": round(ms / 1000, 1), "computed": computed, "by_backend": by_backend,
            "per_s": round(computed / (ms / 1000), 1) if ms else None}


def builds(a: argparse.Namespace, work: Path, export: Path, record: Measurement, say, save) -> dict:
    """Full first builds of one library with each backend of `a.only`, then no-ops, then one edit on
    onnx and auto (`save()` after each step: a run stopped part way keeps what it measured)."""
    lib = work / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    scale.make_library(lib, a.builds)
    no_bf16 = {k: t for k, t in record.trials.items() if k != TORCH_BF16}
    out: dict = {"papers": a.builds}
    homes = {}
    chosen = {k: v for k, v in BUILDS.items() if k in a.only}
    for name, (backend, precision) in chosen.items():
        home = work / f"home-{name}"
        shutil.rmtree(home, ignore_errors=True)
        link_export(export, home)
        rec = record if name != "auto-no-bf16" else Measurement(record.facts, no_bf16, choose(no_bf16),
                                                                 record.torch_load_s, record.measured_at)
        save_record(home / "models" / RECORD_FILE, rec)
        with settings_env(backend, precision):
            r = scale.build(home, lib)
        r["in_build"] = json.loads(subprocess.run(
            [sys.executable, "-m", __spec__.name, "_in_build"], env=scale.home_env(home, lib), capture_output=True, text=True,
            cwd=ROOT, check=True).stdout.strip().splitlines()[-1])
        r.pop("states", None)
        homes[name] = home
        out[name] = {"full": r}
        say(f"{name}: full {r['wall_s']} s, rss {r['rss_mb']} MB, in-build {r['in_build']}")
        save(out)
    for name, (backend, precision) in chosen.items():
        with settings_env(backend, precision):
            r = scale.build(homes[name], lib)
        out[name]["noop"] = {"wall_s": r["wall_s"], "rss_mb": r["rss_mb"]}
        say(f"{name}: no-op {r['wall_s']} s")
    save(out)
    key = sorted(p.name for p in (lib / "papers").iterdir())[a.builds // 2]
    for name in [k for k in ("onnx", "auto") if k in chosen]:
        with settings_env(*BUILDS[name]):
            r = scale.edit_one(homes[name], lib, key)
        out[name]["edit"] = {"wall_s": r["wall_s"], "searchable_s": r["searchable_s"], "searchable": r["searchable"],
                             "embeddings_computed": r["embeddings_computed"], "rss_mb": r["rss_mb"]}
        say(f"{name}: edit {out[name]['edit']}")
        save(out)
    return out


def render(out: dict, quality: dict | None) -> str:
    m, rates, agr = out["machine"], out["rates"], out["agreement"]
    onnx = rates[ONNX]
    b = out.get("builds") or {}
    n = b.get("papers")

    def build_cells(k: str) -> str:
        if k not in b:
            return "| | |"
        f = b[k]["full"]
        return f"| {f['wall_s']:.0f} s | {f['rss_mb']} MB |"

    rows = []
    for k, r in rates.items():
        q = ""
        if quality and k in quality["ndcg10_delta_vs_fp32"]:
            q = " ".join(f"{v:+.4f}" for v in quality["ndcg10_delta_vs_fp32"][k].values())
        elif quality and k == TORCH_FP32:
            q = " ".join(f"{v['ndcg@10']:.4f}" for v in quality["runs"][k]["metrics"].values())
        rows.append(f"| {k} | {r:.1f} ({r / onnx:.2f}x) | {agr[k]['min_cosine']:.6f} | {agr[k]['top10_overlap']:.4f} "
                    f"{build_cells(k)} {q} |")
    for k in [k for k in b if k.startswith("auto")]:
        if isinstance(b[k], dict):
            used = "+".join(f"{x} {c}" for x, c in b[k]["full"]["in_build"]["by_backend"].items())
            rows.append(f"| {k} ({used}) | | | {build_cells(k)} |")
    text = [BEGIN, "## Embedding backends", "",
            f"`bench/embed/backends.py{f' --builds {n}' if n else ''}`, `bench/embed/quality.py`; {out['date']}, {m['cpu']}, "
            f"{m['cores']} cores, bf16 by {'/'.join(out.get('bf16_flags') or ['AMX'])}, torch {m['torch']}. Rate: {out['rate_docs']} SciFact abstracts, best of {out['rounds']}. "
            f"Cosine, top-10 vs fp32: {out['corpus_docs']} abstracts, {out['claims']} claims."
            + (f" Builds: {n} papers ({next(v['full']['embeddings_computed'] for v in b.values() if isinstance(v, dict))}"
               " passages)." if n else "")
            + (" nDCG@10 (lexical/semantic/hybrid): SciFact train." if quality else ""), "",
            "| backend | passages/s | min cos | top-10 | first build | peak RSS | nDCG@10 |", "|---|---|---|---|---|---|---|",
            *rows, ""]
    notes = [f"Chosen by the rates: **{out['chosen']}**; without bf16: **{out['chosen_without_bf16']}**; by the "
             f"first-time measurement (the record given): **{out.get('probe_chosen', '?')}**."]
    first = next((v["full"] for v in b.values() if isinstance(v, dict)), None)
    if "auto" in b:
        fp32_alone = first["embeddings_computed"] / rates[TORCH_FP32]
        floor = (f"; bf16's bare encode of the same passages alone: {rates[TORCH_FP32] / rates[TORCH_BF16]:.2f}x"
                 if TORCH_BF16 in rates else "")
        notes.append(f"Auto build ÷ fp32 encode alone: {b['auto']['full']['wall_s'] / fp32_alone:.2f}x (goal ≤ 0.5{floor}).")
    for label, step, field in (("No-op", "noop", "wall_s"), ("One edit searchable", "edit", "searchable_s")):
        got = {k: v[step][field] for k, v in b.items() if isinstance(v, dict) and step in v and k in ("onnx", "auto")}
        if got:
            notes.append(f"{label} {' / '.join(got)}: {' / '.join(f'{x} s' for x in got.values())}.")
    notes.append(f"First measurement: {out['measure_s']} s in a child (torch load {out['torch_load_s']} s), "
                 f"{out.get('measure_loaded_s', '?')} s with torch loaded. GPU path unmeasured.")
    text.append(" ".join(notes))
    text += ["", "Rerun: `bench/embed/quality.py`, then `bench/embed/backends.py --write-docs`.", END]
    return "\n".join(text) + "\n"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_in_build":
        print(json.dumps(in_build_main()))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate-docs", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--corpus-docs", type=int, default=240)
    ap.add_argument("--claims", type=int, default=100)
    ap.add_argument("--builds", type=int, default=300, help="papers in the library built with each backend (0: none)")
    ap.add_argument("--only", nargs="+", default=list(BUILDS), choices=list(BUILDS), help="the builds to run")
    ap.add_argument("--record", choices=("child", "loaded"), default="child",
                    help="the measurement the builds' homes get: the first-time one (a child) or the one with torch loaded")
    ap.add_argument("--out", type=Path, default=RESULTS / "embed-backends.json")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--from-json", type=Path, default=None, help="render this result instead of measuring")
    ap.add_argument("--merge-builds", type=Path, default=None,
                    help="another run's JSON whose builds join the table (one already here: named '<build>, <its record>')")
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    from sheaf.vectors.backend_choice import FIRST_SWITCH_PASSAGES

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if a.from_json:
        out = json.loads(a.from_json.read_text(encoding="utf-8"))
    else:
        out = {"date": time.strftime("%Y-%m-%d"), "machine": machine(["torch", "onnxruntime", "sentence-transformers"]),
               "first_switch": FIRST_SWITCH_PASSAGES,
               "bf16_flags": [f for f in BF16_FLAGS if f in machine_facts("probe").cpu_flags]}
        with tempfile.TemporaryDirectory(prefix="sheaf-embed-backends-") as tmp:
            work = a.work or Path(tmp)
            models = work / "models"
            emb = Embedder(precision="fp32")
            export, _ = export_to_models_dir(emb, models)
            # the first-time measurement as a build makes it: a process of its own, torch loaded there
            t0 = time.perf_counter()
            record = measure_in_child(emb.model_name, str(models))
            out.update(measure_s=round(time.perf_counter() - t0, 1), torch_load_s=record.torch_load_s,
                       probe_trials={k: t.rate for k, t in record.trials.items()}, probe_chosen=record.chosen)
            say(f"measurement: {out['measure_s']} s, {out['probe_trials']} → {record.chosen}")
            # the same measurement where torch is loaded already (SHEAF_EMBED_BACKEND=torch): no child
            ld = emb.load()
            t0 = time.perf_counter()
            here = emb.measure_backends(ld, machine_facts(ld.identity.key), models)
            out.update(measure_loaded_s=round(time.perf_counter() - t0, 1),
                       probe_trials_loaded={k: t.rate for k, t in here.trials.items()}, probe_chosen_loaded=here.chosen)
            say(f"measurement with the model loaded: {out['measure_loaded_s']} s, {out['probe_trials_loaded']}")
            out.update(rates_and_agreement(a, emb, models))
            say(f"rates: {out['rates']}")
            del emb
            RESULTS.mkdir(exist_ok=True)

            def save(b: dict | None = None) -> None:
                if b is not None:
                    out["builds"] = b
                a.out.write_text(json.dumps({**out, "record": a.record}, indent=1))

            save()
            if a.builds:
                builds(a, work, export, record if a.record == "child" else here, say, save)
            save()
    if a.merge_builds:
        other = json.loads(a.merge_builds.read_text(encoding="utf-8"))
        mine = out.setdefault("builds", {"papers": other["builds"]["papers"]})
        for k, v in other["builds"].items():
            if isinstance(v, dict):
                mine[k if k not in mine else f"{k}, {other.get('record')} record"] = v
    qf = RESULTS / "embed-quality.json"
    section = render(out, json.loads(qf.read_text(encoding="utf-8")) if qf.exists() else None)
    print(section)
    if a.write_docs:
        write_docs_section(section, BEGIN, END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
