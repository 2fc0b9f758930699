"""The embedding backends side by side (`sheaf.vectors.backends`): bare encode rate of the ONNX export,
torch fp32 and torch bf16 (where the CPU has AMX / AVX512-BF16), alternated in one process; their
agreement with fp32 (min / mean cosine over SciFact abstracts) and the top-10 neighbour overlap of
SciFact claims against those abstracts; and which backend a machine without bf16 would choose (the
same trials with bf16 left out: torch fp32 vs the export).

    python bench/embed_backends.py [--rate-docs 64] [--rounds 2] [--corpus-docs 240] [--claims 100] [--write-docs]

Needs ../shared/data/scifact. Writes bench/results/embed-backends.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import ROOT, machine, write_docs_section

sys.path.insert(0, str(ROOT))

from sheaf.vectors.backend_probe import encoders_of  # noqa: E402
from sheaf.vectors.backends import ONNX, TORCH_BF16, TORCH_FP32, candidates_for, choose, machine_facts, measure  # noqa: E402
from sheaf.vectors.embedder import Embedder  # noqa: E402
from sheaf.vectors.onnx_export import export_to_models_dir  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
BEGIN, END = "<!-- bench:embed-backends:begin -->", "<!-- bench:embed-backends:end -->"


def topk(q: np.ndarray, d: np.ndarray, k: int = 10) -> np.ndarray:
    return np.argsort(-(q @ d.T), axis=1)[:, :k]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate-docs", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--corpus-docs", type=int, default=240)
    ap.add_argument("--claims", type=int, default=100)
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    docs = [json.loads(x) for x in (SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:a.corpus_docs]]
    claims = [json.loads(x)["text"] for x in (SCIFACT / "queries.jsonl").read_text(encoding="utf-8").splitlines()[:a.claims]]
    emb = Embedder(precision="fp32")
    t0 = time.perf_counter()
    ld = emb.load()
    load_s = time.perf_counter() - t0
    texts = [emb.compose(d["title"], d["text"]) for d in docs]
    facts = machine_facts(ld.identity.key)
    with tempfile.TemporaryDirectory() as tmp:
        export_to_models_dir(emb, Path(tmp))
        encoders = encoders_of(emb, candidates_for(facts), Path(tmp))
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
    out = {"machine": machine(["torch", "onnxruntime", "sentence-transformers"]), "facts": facts.to_dict(),
           "torch_load_s": round(load_s, 2), "rate_docs": a.rate_docs, "rounds": a.rounds,
           "corpus_docs": len(texts), "claims": len(claims),
           "rates": {k: v.rate for k, v in rates.items()}, "agreement": agreement,
           "chosen": choose(rates), "chosen_without_bf16": choose(no_bf16)}
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "embed-backends.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    if a.write_docs:
        onnx = out["rates"][ONNX]
        rows = "\n".join(
            f"| {k} | {r:.1f} | {r / onnx:.2f}x | {agreement[k]['min_cosine']:.6f} | {agreement[k]['mean_cosine']:.6f} "
            f"| {agreement[k]['top10_overlap']:.4f} |" for k, r in out["rates"].items())
        m = out["machine"]
        section = f"""{BEGIN}
## Embedding backends

`bench/embed_backends.py`: the backends the build's embedder chooses from (`SHEAF_EMBED_BACKEND=auto`,
`sheaf.vectors.backends`), measured {time.strftime('%Y-%m-%d')} on {m['cpu']} ({m['cores']} cores, shared with other
jobs: absolute rates are low and noisy, the ratios are what counts), torch {m['torch']}, onnxruntime {m['onnxruntime']}.
Bare encode rate: {a.rate_docs} SciFact abstracts with titles, batch 32, the backends alternated, best of {a.rounds}
rounds after a warm-up. Agreement: cosine to torch fp32 over {len(texts)} abstracts, and the overlap of the top-10
neighbours of {len(claims)} SciFact claims among them, against fp32's.

| backend | passages/s | vs ONNX | min cosine | mean cosine | top-10 overlap |
|---|---|---|---|---|---|
{rows}

Chosen here: **{out['chosen']}**. A machine without bf16 (the same trials without it; torch fp32 and the
export use no bf16 or AMX instructions): **{out['chosen_without_bf16']}** (torch fp32
{out['rates'][TORCH_FP32] / onnx:.2f}x the export). Loading torch + the model took {out['torch_load_s']} s (what a
switch from the export costs; a build switches only past the break-even).

Rerun: `python bench/embed_backends.py --write-docs` (about 3 minutes; needs ../shared/data/scifact).
{END}
"""
        write_docs_section(section, BEGIN, END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
