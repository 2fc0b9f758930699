"""Retrieval quality per embedding backend: `sheaf eval beir` on SciFact train (../shared/data/scifact,
all 5,183 abstracts, 809 judged claims) once per backend, each in an eval cache of its own (the backends
share the model identity, so one cache would hand the second run the first one's vectors), the
passages and the claims both encoded on the backend under test. Passes when every mode's nDCG@10 is
within `--tolerance` (0.002) of torch fp32's.

    python -m bench.embed.quality [--backends torch-fp32 torch-bf16] [--work DIR [--reuse]]

Writes bench/results/embed-quality.json (docs: `bench/embed/backends.py --write-docs`). About 5 minutes
for fp32 and 2 for bf16 on a quiet 2-core machine with AMX (the encode of ~10,000 passages).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, machine

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
SHEAF = str(Path(sys.executable).parent / "sheaf")
RESULT = ROOT / "bench" / "results" / "embed-quality.json"
#: backend name → (SHEAF_EMBED_BACKEND, SHEAF_EMBED_PRECISION)
SETTINGS = {"torch-fp32": ("torch", "fp32"), "torch-bf16": ("torch", "bf16"), "onnx": ("onnx", "fp32")}
REFERENCE = "torch-fp32"


def run_eval(backend: str, work: Path, reuse: bool = False) -> dict:
    """`sheaf eval beir` on SciFact train with `backend`, in a fresh eval cache; its metrics and wall
    (`reuse`: the envelope an earlier run left in `work`, when there is one)."""
    setting, precision = SETTINGS[backend]
    out = work / f"{backend}.json"
    if reuse and out.exists():
        data = json.loads(out.read_text(encoding="utf-8"))["data"]
        return {"wall_s": None, "passages": data["index"]["passages"], "encoded": data["index"]["encoded"],
                "queries": data["dataset"]["queries_evaluated"], "metrics": data["metrics"]}
    env = {**os.environ, "SHEAF_HOME": str(work / "home"), "SHEAF_EMBED_BACKEND": setting,
           "SHEAF_EMBED_PRECISION": precision, "PYTHONWARNINGS": "ignore"}
    t0 = time.perf_counter()
    proc = subprocess.run([SHEAF, "eval", "beir", "--corpus", str(SCIFACT / "corpus.jsonl"),
                           "--queries", str(SCIFACT / "queries.jsonl"), "--qrels", str(SCIFACT / "qrels" / "train.tsv"),
                           "--cache-dir", str(work / f"cache-{backend}"), "--quiet", "--json", "--out", str(out)],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"sheaf eval beir with {backend} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads(out.read_text(encoding="utf-8"))["data"]
    return {"wall_s": round(wall, 1), "passages": data["index"]["passages"], "encoded": data["index"]["encoded"],
            "queries": data["dataset"]["queries_evaluated"], "metrics": data["metrics"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", nargs="+", default=["torch-fp32", "torch-bf16"], choices=sorted(SETTINGS))
    ap.add_argument("--tolerance", type=float, default=0.002)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--reuse", action="store_true", help="take a backend's result an earlier run left in --work")
    a = ap.parse_args()
    if not (SCIFACT / "corpus.jsonl").exists():
        print(f"skipped: {SCIFACT} is absent")
        return 0
    backends = [REFERENCE] + [b for b in a.backends if b != REFERENCE]
    with tempfile.TemporaryDirectory(prefix="sheaf-embed-quality-") as tmp:
        work = a.work or Path(tmp)
        runs = {}
        for b in backends:
            runs[b] = run_eval(b, work, a.reuse)
            print(b, json.dumps(runs[b]), flush=True)
    ref = runs[REFERENCE]["metrics"]
    delta = {b: {m: round(r["metrics"][m]["ndcg@10"] - ref[m]["ndcg@10"], 4) for m in ref}
             for b, r in runs.items() if b != REFERENCE}
    ok = all(abs(d) <= a.tolerance for per in delta.values() for d in per.values())
    out = {"machine": machine(["torch", "onnxruntime"]), "date": time.strftime("%Y-%m-%d"),
           "dataset": "scifact train", "tolerance": a.tolerance, "runs": runs, "ndcg10_delta_vs_fp32": delta,
           "within_tolerance": ok}
    RESULT.parent.mkdir(exist_ok=True)
    RESULT.write_text(json.dumps(out, indent=1), encoding="utf-8")
    print(json.dumps({"ndcg10_delta_vs_fp32": delta, "within_tolerance": ok}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
