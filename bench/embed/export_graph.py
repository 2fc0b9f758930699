"""The ONNX export's graph, side by side: the model traced with torch's fused scaled-dot-product
attention call against the same model traced with its attention written out ("eager", what
`sheaf.vectors.onnx_export` exports), and, optionally, onnxruntime's transformer optimizer run on
the eager graph (fused Attention, SkipLayerNormalization, BiasGelu). Each on 1 and 2 onnxruntime
threads, on SciFact abstracts in length-sorted batches of 16 (as the build encodes), the variants
alternated within each round, best round kept; vectors compared with sentence-transformers fp32.

    .venv/bin/python -m bench.embed.export_graph --write-docs          # ~3 min, needs ../shared
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import ROOT, machine, write_docs_section

SCIFACT = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
RESULTS = ROOT / "bench" / "results" / "export-graph.json"
BEGIN, END = "<!-- bench:export-graph:begin -->", "<!-- bench:export-graph:end -->"
BATCH = 16


def export_variants(work: Path, optimize: bool) -> tuple[dict[str, Path], list[str], Any]:
    """The model exported twice (fused attention call, eager attention) into `work`, plus the
    optimizer's rewrite of the eager one when `optimize`; (name → model file, input names, the
    sentence-transformers model)."""
    from sheaf.vectors.embedder import Embedder
    from sheaf.vectors.onnx_export import _eager_attention, _export_module, _torch_onnx_export

    st = Embedder(device="cpu", precision="fp32").load().model
    module, names, _ = _export_module(st)
    sample = st.tokenizer(["a query", "a somewhat longer second query text"], padding=True, return_tensors="pt")
    args = tuple(sample[n] for n in names)
    out = {"fused call": work / "fused.onnx", "eager": work / "eager.onnx"}
    _torch_onnx_export(module, args, names, out["fused call"], 512)
    with _eager_attention(module.m):
        _torch_onnx_export(module, args, names, out["eager"], 512)
    if optimize:
        from onnxruntime.transformers import optimizer

        cfg = module.m.config
        opt = optimizer.optimize_model(str(out["eager"]), model_type="bert", num_heads=cfg.num_attention_heads,
                                       hidden_size=cfg.hidden_size, opt_level=0, use_gpu=False)
        out["eager + transformer optimizer"] = work / "optimized.onnx"
        opt.save_model_to_file(str(out["eager + transformer optimizer"]))
    return out, names, st


def rates(models: dict[str, Path], names: list[str], texts: list[str], st: Any, rounds: int) -> dict[str, Any]:
    import onnxruntime as ort
    import tokenizers

    tok = tokenizers.Tokenizer.from_str(st.tokenizer.backend_tokenizer.to_str())
    tok.enable_truncation(max_length=st.max_seq_length)
    tok.enable_padding(pad_id=st.tokenizer.pad_token_id or 0)
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    ref = np.asarray(st.encode(texts, batch_size=32, normalize_embeddings=True), dtype=np.float32)

    def run(sess: Any) -> np.ndarray:
        out = np.zeros((len(texts), ref.shape[1]), np.float32)
        for i in range(0, len(order), BATCH):
            idx = order[i:i + BATCH]
            encs = tok.encode_batch([texts[j] for j in idx])
            cols = {"input_ids": [e.ids for e in encs], "attention_mask": [e.attention_mask for e in encs],
                    "token_type_ids": [e.type_ids for e in encs]}
            out[idx] = sess.run(None, {n: np.asarray(cols[n], np.int64) for n in names})[0]
        return out

    res: dict[str, Any] = {}
    for threads in (1, 2):
        sessions = {}
        for name, path in models.items():
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sessions[name] = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
            run(sessions[name])  # warm-up
        best = {k: float("inf") for k in sessions}
        vectors: dict[str, np.ndarray] = {}
        for _ in range(rounds):
            for name, sess in sessions.items():
                t0 = time.perf_counter()
                vectors[name] = run(sess)
                best[name] = min(best[name], time.perf_counter() - t0)
        res[str(threads)] = {k: {"per_s": round(len(texts) / best[k], 1),
                                 "min_cosine": round(float(np.sum(ref * vectors[k], axis=1).min()), 7)}
                             for k in sessions}
    return res


def render(r: dict[str, Any]) -> str:
    m = r["machine"]
    rows = []
    for name in r["rates"]["1"]:
        one, two = r["rates"]["1"][name], r["rates"]["2"][name]
        rows.append(f"| {name} | {one['per_s']} | {two['per_s']} | {min(one['min_cosine'], two['min_cosine']):.7f} |")
    base = r["rates"]["2"]["fused call"]["per_s"]
    eager = r["rates"]["2"]["eager"]["per_s"]
    return "\n".join([
        BEGIN, "## The export's graph (`bench/embed/export_graph.py`)", "",
        f"**Measures** the ONNX export of the embedding model traced two ways, side by side: with torch's "
        f"fused attention call, and with the attention written out (what the build exports now); and "
        f"onnxruntime's transformer optimizer on the latter. {r['texts']} SciFact abstracts in "
        f"length-sorted batches of {BATCH}, best of {r['rounds']} alternated rounds; cosine to "
        f"sentence-transformers fp32. {r['date']}, {m['cpu']}, {m['cores']} cores, onnxruntime {m['onnxruntime']}, "
        f"torch {m['torch']}.", "",
        "```", ".venv/bin/python -m bench.embed.export_graph --write-docs", "```", "",
        "| graph | passages/s, 1 thread | passages/s, 2 threads | min cosine |", "|---|---|---|---|", *rows, "",
        f"The eager graph: {eager / base:.2f}x the fused call's rate on 2 threads. The build keeps what "
        "agrees (cosine ≥ 0.9999) and is faster; the optimizer is not run where it adds nothing. The `onnx` "
        "rows of \"Embedding backends\" were measured on the fused call's graph.", END])


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.embed.export_graph", description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=320)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-optimizer", action="store_true")
    ap.add_argument("--from-json", type=Path, default=None)
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    if a.from_json is not None:
        r = json.loads(a.from_json.read_text())
    else:
        if not SCIFACT.exists():
            print(f"no SciFact corpus at {SCIFACT} (../shared is absent): nothing to measure")
            return
        texts = [json.loads(line)["text"] for line in SCIFACT.open(encoding="utf-8")][:a.texts]
        with tempfile.TemporaryDirectory(prefix="sheaf-export-graph-") as work:
            models, names, st = export_variants(Path(work), not a.no_optimizer)
            r = {"date": time.strftime("%Y-%m-%d"), "machine": machine(["onnxruntime", "torch"]),
                 "texts": len(texts), "rounds": a.rounds, "rates": rates(models, names, texts, st, a.rounds)}
        RESULTS.write_text(json.dumps(r, indent=1), encoding="utf-8")
    text = render(r)
    print(text)
    if a.write_docs:
        write_docs_section(text + "\n", BEGIN, END)


if __name__ == "__main__":
    sys.exit(main())
