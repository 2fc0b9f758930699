"""Retrieval quality levers on SciFact, train split only (results: docs/benchmarks.md, "## Quality").

The index is the one `sheaf eval beir` builds (`sheaf.eval.beir.build_beir_index`: each abstract a
paper with a title and one "Abstract" section, through blocks → tree → units → FTS → passages →
embeddings), kept in --cache-dir so reruns embed nothing. Each lever is then measured on the
legs directly, the way `Retriever.retrieve` computes them, with the other levers at the
product's setting:

- lexical: FTS5 bm25 over the units with the product's query builder (`build_match_query`) and
  staging (units holding every word first, then units holding some), in an in-memory FTS5 copy
  of the units so the tokenizer (unicode61 vs porter), the columns (the paper title indexed with
  the unit or not) and their bm25 weights, and the query preprocessing (AND-then-OR vs OR only,
  stopwords dropped) can vary. The product setting is checked against `Retriever.retrieve` itself;
- semantic: exact cosine over every passage of the unit, a unit scoring as its best passage
  (what sqlite-vec's exact KNN + dedupe gives), for three passage context prefixes:
  "title > Abstract" (the product: paper title > section path), title only, none;
- hybrid: reciprocal-rank fusion exactly as `Retriever._fuse` (sum of 1/(k + rank), ties by best
  rank then unit id), a paper ranking as its best unit, for RRF k and per-leg depth.

Run from the project root (the first run embeds ~10k passages per prefix variant: 5-30 min on 2
cores depending on load; later runs take ~2 minutes):
    .venv/bin/python -m bench.search.quality --json bench/results/quality.json --write-docs
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import write_docs_section
from sheaf.eval import beir, metrics
from sheaf.store.sqlite.backend import SqliteEmbeddingCache

ROOT = Path(__file__).resolve().parents[2]

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
METRICS = metrics.METRICS
DEPTH = 300  # what `retrieve(limit=100, per_paper=1)` fetches per leg

STOPWORDS = frozenset("""a an and are as at be been being by can could did do does for from had has have
in into is it its may might of on or shall should than that the their them then there these they this
those to was were which while who whom whose will with would not no nor but if so such both each all any
most more other some our we you he she his her i me my your after before between during about above
below over under again further once only own same too very s t just""".split())


def say(msg: str) -> None:
    print(f"[quality] {msg}", file=sys.stderr, flush=True)


class Study:
    def __init__(self, cache_dir: Path, embedder: Any, split: str = "train") -> None:
        self.ds = beir.load_beir(SCIFACT / "corpus.jsonl", SCIFACT / "queries.jsonl",
                                     SCIFACT / "qrels" / f"{split}.tsv")
        self.cache_dir = cache_dir
        self.embedder = embedder
        self.path, self.info = beir.build_beir_index(self.ds, cache_dir, embedder=embedder, progress=say)
        from sheaf.store.sqlite.schema import open_index

        self.conn = open_index(self.path, readonly=True)
        rows = self.conn.execute("SELECT unit_id, paper_id, section_path, text FROM body_units "
                                 "ORDER BY unit_rowid").fetchall()
        self.units = [(u, p, tuple(json.loads(sp)), t) for u, p, sp, t in rows]
        self.paper_of = {u: p for u, p, _, _ in self.units}
        self.titles = dict(self.conn.execute("SELECT paper_id, title FROM papers"))
        keys = self.info.get("keys") or {}
        self.doc_of = {v: k for k, v in keys.items()}
        self.qids = self.ds.judged
        self.qrels = {q: self.ds.qrels[q] for q in self.qids}
        self._qv: np.ndarray | None = None

    # --- scoring ------------------------------------------------------------------------------

    def papers(self, unit_ranking: list[str], depth: int = 100) -> list[str]:
        out: dict[str, None] = {}
        for u in unit_ranking:
            p = self.paper_of[u]
            out.setdefault(self.doc_of.get(p, p), None)
            if len(out) >= depth:
                break
        return list(out)

    def score(self, unit_runs: dict[str, list[str]]) -> dict[str, float]:
        run = {q: self.papers(r) for q, r in unit_runs.items()}
        return {m: round(v, 4) for m, v in metrics.evaluate_run(run, self.qrels, METRICS).items()}

    # --- lexical -----------------------------------------------------------------------------

    def lexical_runs(self, *, tokenizer: str = "unicode61 remove_diacritics 2", title: bool = False,
                     weights: tuple[float, float, float] = (0.0, 2.0, 1.0), staging: bool = True,
                     stopwords: bool = False, depth: int = DEPTH) -> dict[str, list[str]]:
        """Unit rankings per query. weights = (title, heading, text) bm25 column weights."""
        from sheaf.store.fulltext import build_match_query, fts_text
        from sheaf.store.sqlite.db import connect

        mem = connect(":memory:")
        mem.execute(f"CREATE VIRTUAL TABLE f USING fts5(title, heading, text, tokenize='{tokenizer}')")
        mem.executemany("INSERT INTO f(rowid, title, heading, text) VALUES (?,?,?,?)",
                        [(i, fts_text(self.titles.get(p) or "") if title else "",
                          fts_text(" > ".join(sp)), fts_text(t)) for i, (_, p, sp, t) in enumerate(self.units)])
        cols = "{title heading text}" if title else "{heading text}"
        w = ", ".join(str(float(x)) for x in weights)
        sql = f"SELECT rowid, bm25(f, {w}) AS s FROM f WHERE f MATCH ? ORDER BY s, rowid LIMIT ?"
        runs: dict[str, list[str]] = {}
        for q in self.qids:
            text = self.ds.queries[q]
            if stopwords:
                kept = [t for t in text.split() if t.lower().strip(".,;:()[]'\"") not in STOPWORDS]
                text = " ".join(kept) or text
            and_q = build_match_query(text, mode="and")
            or_q = build_match_query(text, mode="or")
            if and_q is None:
                runs[q] = []
                continue
            hits: list[int] = []
            if staging:
                hits = [r for r, _ in mem.execute(sql, (f"{cols} : ({and_q})", depth))]
            if len(hits) <= depth and (or_q != and_q or not staging):
                seen = set(hits)
                hits += [r for r, _ in mem.execute(sql, (f"{cols} : ({or_q})", depth)) if r not in seen]
            runs[q] = [self.units[r][0] for r in hits[:depth]]
        mem.close()
        return runs

    def product_lexical_runs(self, depth: int = 100) -> dict[str, list[str]]:
        """`Retriever.retrieve(mode="lexical")` itself (the check on the replica above)."""
        from sheaf.core.settings import get_settings
        from sheaf.search.retriever import Retriever

        r = Retriever(self.conn, get_settings(index_file=self.path))
        return {q: [m["unit_id"] for m in r.retrieve(self.ds.queries[q], mode="lexical", limit=depth,
                                                     per_paper=1).matches] for q in self.qids}

    # --- semantic ----------------------------------------------------------------------------

    def query_vectors(self) -> np.ndarray:
        if self._qv is None:
            f = self.cache_dir / f"queries-{self.ds.queries_sha256[:12]}-{self.embedder.identity.key}.npy"
            if f.exists():
                self._qv = np.load(f)
            else:
                say(f"embedding {len(self.qids)} queries")
                # one batch (the claims fit the model's window: the same vectors as embed_query)
                self._qv = self.embedder.encode([self.ds.queries[q] for q in self.qids])
                np.save(f, self._qv)
        return self._qv

    def semantic_runs(self, prefix: str = "title > section", depth: int = DEPTH) -> dict[str, list[str]]:
        """Unit rankings per query for a passage context prefix: 'title > section' (product),
        'title', 'none'."""
        from sheaf.store.sqlite.schema import open_index

        cache = open_index(self.cache_dir / "vectors.db")  # the study's own cache of variant vectors
        try:
            passages = []
            for uid, pid, sp, text in self.units:
                from sheaf.core.models import BodyUnit

                u = BodyUnit(uid, "", pid, "n", sp, 1, (1, 1), ("p1:0",), text, 0, "body", 0)
                if prefix == "title > section":
                    ps = self.embedder.passages_for(u, self.titles.get(pid))
                elif prefix == "title":
                    ps = self.embedder.passages_for(replace(u, section_path=()), self.titles.get(pid))
                elif prefix == "none":
                    ps = self.embedder.passages_for(replace(u, section_path=()), None)
                else:
                    raise ValueError(prefix)
                passages += ps
            self._seed(cache)
            vecs = []
            t0 = time.perf_counter()
            done = 0
            for i in range(0, len(passages), 512):
                ep = self.embedder.embed(passages[i:i + 512], SqliteEmbeddingCache(cache))
                done += ep.encoded
                vecs.append(ep.vectors)
                if ep.encoded:
                    say(f"{prefix}: {i + len(ep.passages)}/{len(passages)} passages ({done} encoded, "
                        f"{time.perf_counter() - t0:.0f} s)")
        finally:
            cache.close()
        m = np.concatenate(vecs)
        unit_idx = {u: i for i, (u, _, _, _) in enumerate(self.units)}
        owner = np.array([unit_idx[p.unit_id] for p in passages])
        qv = self.query_vectors()
        runs: dict[str, list[str]] = {}
        for s in range(0, len(self.qids), 64):
            sims = qv[s:s + 64] @ m.T  # (queries, passages)
            best = np.full((sims.shape[0], len(self.units)), -2.0, np.float32)
            for j in range(sims.shape[0]):
                np.maximum.at(best[j], owner, sims[j])
            for j in range(sims.shape[0]):
                top = np.argsort(-best[j], kind="stable")[:depth]
                runs[self.qids[s + j]] = [self.units[i][0] for i in top]
        return runs

    def _seed(self, cache: Any) -> None:
        """Copy vectors already computed elsewhere (the eval index; bench/search/query.py's cache of
        title-prefixed abstracts) into the study's cache: content-addressed, so any match is valid."""
        from sheaf.store.sqlite.db import connect, transaction

        if cache.execute("SELECT value FROM meta WHERE key = 'study_seeded'").fetchone():
            return
        rows = []
        for src in (self.path, ROOT / "bench" / ".cache" / "embeddings.db"):
            if Path(src).exists():
                c = connect(src, readonly=True)
                try:
                    rows += c.execute("SELECT model_key, text_sha256, vector FROM embedding_cache").fetchall()
                finally:
                    c.close()
        with transaction(cache):
            cache.executemany("INSERT OR IGNORE INTO embedding_cache(model_key, text_sha256, vector) "
                              "VALUES (?,?,?)", rows)
            cache.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('study_seeded', '1')")
        say(f"seeded the study cache with {len(rows)} vectors")

    # --- fusion ------------------------------------------------------------------------------

    @staticmethod
    def fuse(lex: list[str], sem: list[str], k: float = 60, depth: int = DEPTH,
             weights: tuple[float, float] = (1.0, 1.0)) -> list[str]:
        """`Retriever._fuse` for two unit rankings cut at `depth` each."""
        table: dict[str, list[float]] = {}
        for leg, (ranking, w) in enumerate(((lex, weights[0]), (sem, weights[1]))):
            for rank, u in enumerate(ranking[:depth], start=1):
                c = table.setdefault(u, [0.0, 10**9, 1])
                c[0] += w / (k + rank)
                c[1] = min(c[1], rank)
                if leg == 0:
                    c[2] = 0  # ties go to what the lexical leg found
        return sorted(table, key=lambda u: (-table[u][0], table[u][1], table[u][2], u))

    def hybrid_runs(self, lex: dict[str, list[str]], sem: dict[str, list[str]], **kw: Any) -> dict[str, list[str]]:
        return {q: self.fuse(lex[q], sem[q], **kw) for q in self.qids}


def row(name: str, lex: dict[str, float] | None, sem: dict[str, float] | None,
        hyb: dict[str, float] | None, **extra: Any) -> dict[str, Any]:
    return {"lever": name, "lexical": lex, "semantic": sem, "hybrid": hyb, **extra}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sheaf.vectors.embedder import Embedder

    t_start = time.perf_counter()
    embedder = Embedder()
    if args.cache_dir is None:
        from sheaf.core.settings import get_settings

        args.cache_dir = str(get_settings().home / "eval-cache")
    st = Study(Path(args.cache_dir), embedder)
    say(f"{len(st.units)} units of {len(st.titles)} papers; {len(st.qids)} train queries")
    out: dict[str, Any] = {"date": dt.date.today().isoformat(), "split": "train", "queries": len(st.qids),
                           "documents": len(st.ds.docs), "units": len(st.units), "model": embedder.model_name,
                           "machine": {"python": platform.python_version(), "cores": 2}, "tables": {}}
    T = out["tables"]

    # the legs before this study, and the product's current lexical setting (checked against
    # `Retriever.retrieve` itself: the replica must give the same numbers)
    from sheaf.search.retriever import BODY_WEIGHTS
    from sheaf.store.fulltext import FTS_TOKENIZER

    before = {"tokenizer": "unicode61 remove_diacritics 2", "title": False, "weights": (0.0, 2.0, 1.0)}
    now = {"tokenizer": FTS_TOKENIZER, "title": len(BODY_WEIGHTS) > 2,
           "weights": (BODY_WEIGHTS[2] if len(BODY_WEIGHTS) > 2 else 0.0, BODY_WEIGHTS[0], BODY_WEIGHTS[1])}
    lex0 = st.lexical_runs(**before)
    lex_now = st.lexical_runs(**now)
    prod = st.product_lexical_runs()
    out["replica_check"] = {"product_setting": {k: list(v) if isinstance(v, tuple) else v for k, v in now.items()},
                            "replica": st.score(lex_now), "product_retrieve": st.score(prod)}
    say(f"lexical replica {out['replica_check']['replica']} vs product {out['replica_check']['product_retrieve']}")
    sem0 = st.semantic_runs("title > section")
    s_lex0, s_sem0 = st.score(lex0), st.score(sem0)
    base_h = st.score(st.hybrid_runs(lex0, sem0))
    T["baseline"] = [row("before (unicode61; heading 2, text 1, no title; AND then OR; "
                         "prefix title > section; RRF k 60, depth 300)", s_lex0, s_sem0, base_h)]
    say(f"baseline {T['baseline']}")

    # lexical: tokenizer, title field and weights, query preprocessing
    lex_rows = []
    variants = [
        ("unicode61, no title (before)", {}),
        ("porter", {"tokenizer": "porter unicode61 remove_diacritics 2"}),
        ("title indexed with the unit, weight 1", {"title": True, "weights": (1.0, 2.0, 1.0)}),
        ("title weight 2", {"title": True, "weights": (2.0, 2.0, 1.0)}),
        ("title weight 3", {"title": True, "weights": (3.0, 2.0, 1.0)}),
        ("title weight 2, heading 0", {"title": True, "weights": (2.0, 0.0, 1.0)}),
        ("OR only (no AND stage)", {"staging": False}),
        ("stopwords dropped", {"stopwords": True}),
        ("stopwords dropped, OR only", {"stopwords": True, "staging": False}),
        ("porter + title 2 + OR only", {"tokenizer": "porter unicode61 remove_diacritics 2", "title": True,
                                        "weights": (2.0, 2.0, 1.0), "staging": False}),
        ("porter + title 2 + stopwords + OR only", {"tokenizer": "porter unicode61 remove_diacritics 2",
                                                    "title": True, "weights": (2.0, 2.0, 1.0),
                                                    "staging": False, "stopwords": True}),
        ("porter + OR only", {"tokenizer": "porter unicode61 remove_diacritics 2", "staging": False}),
        ("porter + stopwords + OR only", {"tokenizer": "porter unicode61 remove_diacritics 2",
                                          "staging": False, "stopwords": True}),
    ]
    lex_by_name = {}
    for name, kw in variants:
        runs = lex0 if not kw else st.lexical_runs(**{**before, **kw})
        lex_by_name[name] = runs
        lex_rows.append(row(name, st.score(runs), None, st.score(st.hybrid_runs(runs, sem0)), config=kw))
        say(f"lexical {name}: {lex_rows[-1]['lexical']} hybrid {lex_rows[-1]['hybrid']}")
    T["lexical"] = lex_rows

    # semantic: the passage context prefix
    sem_rows = []
    sem_by_name = {}
    for prefix in args.prefixes.split(","):
        runs = sem0 if prefix == "title > section" else st.semantic_runs(prefix)
        sem_by_name[prefix] = runs
        sem_rows.append(row(f"prefix: {prefix}", None, st.score(runs), st.score(st.hybrid_runs(lex0, runs)),
                            prefix=prefix, hybrid_with_kept_lexical=st.score(st.hybrid_runs(lex_now, runs))))
        say(f"semantic {prefix}: {sem_rows[-1]['semantic']} hybrid {sem_rows[-1]['hybrid']}")
    T["semantic"] = sem_rows

    # fusion: RRF k and per-leg depth (product legs)
    fus = []
    for k in (1, 5, 10, 20, 30, 60, 100):
        for depth in (10, 20, 30, 60, 100, 300):
            fus.append({"k": k, "depth": depth, "hybrid": st.score(st.hybrid_runs(lex0, sem0, k=k, depth=depth))})
    T["fusion"] = fus
    say("fusion grid done")

    # the chosen combination, and its fusion grid
    best_lex = args.best_lexical
    best_prefix = args.best_prefix
    lexb, semb = lex_by_name[best_lex], sem_by_name[best_prefix]
    comb = []
    for k in (1, 5, 10, 20, 30, 60, 100):
        for depth in (10, 20, 30, 60, 100, 300):
            comb.append({"k": k, "depth": depth, "hybrid": st.score(st.hybrid_runs(lexb, semb, k=k, depth=depth))})
    T["combined_fusion"] = comb
    from sheaf.search.retriever import HYBRID_RRF_K

    T["combined"] = [row(f"lexical: {best_lex}; prefix: {best_prefix}; RRF k 60, depth 300",
                         st.score(lexb), st.score(semb), st.score(st.hybrid_runs(lexb, semb))),
                     row(f"lexical: {best_lex}; prefix: {best_prefix}; RRF k {HYBRID_RRF_K}, depth 300 (kept)",
                         st.score(lexb), st.score(semb), st.score(st.hybrid_runs(lexb, semb, k=HYBRID_RRF_K)),
                         kept=True)]
    for w in ((1.0, 1.5), (1.5, 1.0)):
        T["combined"].append(row(f"same, RRF k {HYBRID_RRF_K}, leg weights lexical {w[0]} / semantic {w[1]}",
                                 None, None, st.score(st.hybrid_runs(lexb, semb, k=HYBRID_RRF_K, weights=w)),
                                 weights=w))
    out["seconds"] = round(time.perf_counter() - t_start, 1)
    return out


# --- docs ---------------------------------------------------------------------------------------

DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:quality:begin -->", "<!-- bench:quality:end -->"
NAMES = {"ndcg@10": "nDCG@10", "recall@10": "R@10", "recall@100": "R@100", "mrr@10": "MRR@10"}


def _cells(m: dict[str, float] | None) -> str:
    return " | ".join(f"{m[k]:.4f}" for k in METRICS) if m else " | ".join("–" for _ in METRICS)


def _head(first: str, legs: tuple[str, ...]) -> list[str]:
    cols = [f"{leg} {NAMES[k]}" for leg in legs for k in METRICS]
    return [f"| {first} | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]


def render(q: dict[str, Any], ev: dict[str, Any] | None, lib: dict[str, Any] | None) -> str:
    T = q["tables"]
    L: list[str] = [BEGIN, "## Quality", ""]
    d = (ev or {}).get("data", {})
    run = d.get("run", {})
    L += [f"Retrieval quality on SciFact (BEIR format, `../shared/data/scifact`: {q['documents']:,} abstracts), "
          f"**train split only** ({q['queries']} claims with judgements, `qrels/train.tsv`): every lever was "
          f"chosen on it and nothing else. Measured {run.get('date', q['date'])[:10]} (levers {q['date']}) on the "
          "project machine (2 shared cores, AMD EPYC, Python 3.11.7), model all-MiniLM-L6-v2 (the default).",
          "", "Rerun from the project root (the first run embeds ~10k passages: 5-30 min depending on load; "
          "reruns reuse the cache dir and take a few minutes):", "", "```",
          ".venv/bin/sheaf eval beir --corpus ../shared/data/scifact/corpus.jsonl \\",
          "    --queries ../shared/data/scifact/queries.jsonl --qrels ../shared/data/scifact/qrels/train.tsv \\",
          "    --cache-dir /tmp/sheaf-eval --out bench/results/eval-scifact-train.json",
          ".venv/bin/python -m bench.search.quality --cache-dir /tmp/sheaf-eval --json bench/results/quality.json --write-docs",
          ".venv/bin/python -m bench.report                      # the plots below",
          "```", ""]
    if d:
        M, lat = d["metrics"], d.get("latency_ms", {})
        L += ["`sheaf eval beir` with the product as it is now (porter stemmer, paper title indexed with each "
              "unit, passage prefix \"title > section\", hybrid RRF k = 10; a paper ranks as its best unit):", "",
              "| mode | nDCG@10 | recall@10 | recall@100 | MRR@10 | retrieve p50 / p95 (ms) |", "|---|---|---|---|---|---|"]
        for mode, m in M.items():
            b = "**" if mode == "hybrid" else ""
            L.append(f"| {b}{mode}{b} | " + " | ".join(f"{b}{m[k]:.4f}{b}" for k in METRICS)
                     + f" | {lat.get(mode, {}).get('p50', 0):.0f} / {lat.get(mode, {}).get('p95', 0):.0f} |")
        legs = [M[x] for x in ("lexical", "semantic") if x in M]
        beats = all(M["hybrid"][k] > leg[k] for leg in legs for k in METRICS) if "hybrid" in M else False
        goal = M.get("hybrid", {}).get("ndcg@10", 0) >= 0.72
        L += ["", f"Goal hybrid nDCG@10 ≥ 0.72: **{'met' if goal else 'missed'}** ({M['hybrid']['ndcg@10']:.4f}). "
              f"Hybrid better than both legs on every metric: **{'yes' if beats else 'no'}**. Latency is the "
              "in-process `Retriever.retrieve` call for 100 papers (snippets included) with the query already "
              f"encoded; encoding a query took p50 {d.get('query_encode_ms', {}).get('p50', 0):.0f} ms "
              "(sentence-transformers, in process, on the loaded machine). For reference, published nDCG@10 on "
              "SciFact's *test* split (300 claims; not the same queries): BM25 0.665, all-MiniLM-L6-v2 0.645.", ""]
    b = T["baseline"][0]
    L += ["### Levers", "",
          "Measured by `bench/search/quality.py` on the legs directly (the lexical leg in an in-memory FTS5 copy of the "
          "units, checked against `Retriever.retrieve`: "
          f"replica {q['replica_check']['replica']['ndcg@10']:.4f} = product "
          f"{q['replica_check']['product_retrieve']['ndcg@10']:.4f}; the semantic leg as exact cosine over the "
          "passages; RRF as `Retriever._fuse`). Unless a row says otherwise: depth 300 per leg (what "
          "`retrieve(limit=100, per_paper=1)` fetches) and RRF k = 60.", "",
          "Before this study: " + ", ".join(f"{leg} nDCG@10 {b[leg]['ndcg@10']:.4f}" for leg in
                                            ("lexical", "semantic", "hybrid")) + ".", "",
          "**Lexical**: tokenizer, fields and weights (bm25 column weights title / heading / text), query "
          "preprocessing; each row changes the lexical leg only, hybrid fuses it with the product's semantic leg:", ""]
    L += _head("lexical leg", ("lexical", "hybrid"))
    for r in T["lexical"]:
        L.append(f"| {r['lever']} | {_cells(r['lexical'])} | {_cells(r['hybrid'])} |")
    L += ["", "**Passage context prefix** (re-embeds every passage): the product's `paper title > section path`, "
          "the title alone, nothing; hybrid with the lexical leg before and after this study:", ""]
    L += ["| prefix | " + " | ".join(f"semantic {NAMES[k]}" for k in METRICS)
          + " | hybrid nDCG@10 (lexical before) | hybrid nDCG@10 (lexical kept) |", "|---|" + "---|" * 6]
    for r in T["semantic"]:
        L.append(f"| {r['prefix']} | {_cells(r['semantic'])} | {r['hybrid']['ndcg@10']:.4f} | "
                 f"{r.get('hybrid_with_kept_lexical', {}).get('ndcg@10', float('nan')):.4f} |")
    for key, title in (("fusion", "legs before this study"), ("combined_fusion", "kept legs (porter + title)")):
        grid = T.get(key) or []
        if not grid:
            continue
        ks = sorted({g["k"] for g in grid})
        ds = sorted({g["depth"] for g in grid})
        val = {(g["k"], g["depth"]): g["hybrid"] for g in grid}
        L += ["", f"**RRF k × per-leg depth**, {title}: hybrid nDCG@10 (recall@100 in brackets):", "",
              "| k \\ depth | " + " | ".join(str(x) for x in ds) + " |", "|---|" + "---|" * len(ds)]
        for k in ks:
            L.append(f"| {k} | " + " | ".join(
                f"{val[(k, x)]['ndcg@10']:.4f} ({val[(k, x)]['recall@100']:.3f})" if (k, x) in val else "–"
                for x in ds) + " |")
    L += ["", "**Kept combination**, and leg weights on top of it:", ""]
    L += _head("setting", ("lexical", "semantic", "hybrid"))
    for r in T["combined"]:
        L.append(f"| {r['lever']} | {_cells(r['lexical'])} | {_cells(r['semantic'])} | {_cells(r['hybrid'])} |")
    L += ["", "What was kept, and why:", "",
          "- **porter stemmer** (`porter unicode61 remove_diacritics 2`, schema 2): the largest single gain "
          "(claims say \"regenerates\", abstracts \"regeneration\"); codes, CJK and Hangul queries behave as before.",
          "- **the paper title as a column of every unit's FTS row, weight 2** (1 and 3 were a little worse; the "
          "heading weight does not matter here: SciFact units all sit under \"Abstract\").",
          "- **hybrid RRF k = 10**: k 1-5 scored higher still on train, but rank the first hit of either leg "
          "alone almost as high as a unit both legs agree on; 10 keeps most of the gain. Per-leg depth "
          "barely matters from 60 up (the CLI's default `--limit 10 --per-paper 2` fetches 60), so the "
          "over-fetch rule is unchanged.",
          "- **RRF ties go to the lexical leg's unit** (the first hit of one leg against the first hit of the "
          "other used to be decided by unit id): SciFact hybrid nDCG@10 0.7314 → 0.7315, hybrid code recall@1 0.78 → 1.0 on the "
          "sample library's known items below (both measured by hand during the study, 2026-11-29; not in "
          "bench/results).",
          "- not kept for quality: dropping stopwords (no gain), OR-only instead of AND-then-OR (identical on "
          "claims: no abstract holds every word of a claim), the title-only or no passage prefix (title-only "
          "+0.002 hybrid: noise, and it would re-embed every library; no prefix −0.02), leg weights (no gain).",
          "- **Stopwords leave the relaxed OR form for speed** (after this study, 2026-11-30): in an OR, \"the\", "
          "\"of\", \"in\" match nearly every unit, which bm25 then scores; without them the bm25 part of the OR "
          "queries took 41 ms instead of 135 ms at 100k units (an A/B of the 50 claims on one index, by hand, "
          "2026-11-30; the Query section has the lexical leg's time after it). Cost on SciFact train, product "
          "to product (`sheaf eval beir` before and after, this file's history): lexical "
          "nDCG@10 0.6926 → 0.6912, hybrid 0.7315 → 0.7298 (the table at the top is the product after it; the "
          "lever rows above were measured before it, so the replica check reads 0.6926).", ""]
    if lib:
        ld = lib["data"]
        L += ["### Known items in the sample library (`sheaf eval library`)", "",
              f"The 10 bundled papers ({ld.get('units_scanned', '?')} units), every paper sampled (`--sample 0`): "
              "its title → the paper, a quoted sentence → its unit, a code or number only one unit holds → "
              "that unit. Rerun: build the sample library (`sheaf build`), then "
              "`.venv/bin/sheaf eval library --sample 0 --out bench/results/eval-library-sample.json`.", "",
              "| mode | type | queries | recall@1 | recall@10 | MRR@10 |", "|---|---|---|---|---|---|"]
        for mode, per in ld["metrics"].items():
            for qtype, m in per.items():
                L.append(f"| {mode} | {qtype} | {m['queries']} | {m['recall@1']:.3f} | {m['recall@10']:.3f} | "
                         f"{m['mrr@10']:.3f} |")
        L += ["", "Semantic search cannot find a code it has never seen (code recall@10 0.11): that is what the "
              "lexical leg, and `sheaf grep`, are for; hybrid keeps recall@10 at 1.0 for every type.", ""]
    L += ["### Findings on the way", "",
          "- FTS5 (SQLite 3.51.1) does not remove a deleted row of a `contentless_delete=1` table from its bm25 "
          "statistics: after replacing every paper once the SciFact index scored lexical nDCG@10 0.6406 instead of "
          "0.6427 (a fresh build), and the drift grew with each rebuild. Fixed in index schema 3: the FTS tables "
          "are plain contentless tables and every delete hands FTS5 the exact values it indexed, so scores after "
          "any sequence of rebuilds equal a fresh build's (tests/test_index_fts_stats.py); the 2 → 3 migration "
          "rebuilds the tables and so also clears drift an index already had.",
          "- `retrieve --mode lexical` used to sort by bm25 alone, so a unit holding some words could outrank one "
          "holding all of them, unlike the documented order and the lexical leg of hybrid; it now keeps the leg's "
          "order.",
          "- Snippets: the highlight regex had one lookbehind per query word; on 10-20-word claims it took 2/3 of a "
          "lexical `retrieve` of 100 matches. One shared lookbehind gives the same matches about 5x faster; "
          "highlighting also matches stemmed variants now that the index stems.", "",
          "![Retrieval quality by mode](img/quality.png)", "", "![Hybrid nDCG@10 per lever](img/quality_levers.png)",
          "", "Plots of the other sections (`bench/report.py`, from `bench/results/*.json`, else the Query table "
          "above): [build time vs papers](img/build_time.png), [incremental vs full](img/incremental.png), "
          "[query latency by corpus size](img/query_latency.png).", END]
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", default=None, help="the eval index and vector caches (default: "
                    "SHEAF_HOME/eval-cache, the same as `sheaf eval beir`)")
    ap.add_argument("--prefixes", default="title > section,title,none")
    ap.add_argument("--best-lexical", default="porter + title 2 + OR only")
    ap.add_argument("--best-prefix", default="title > section")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--from-json", type=Path, help="re-render results saved by --json (no run)")
    ap.add_argument("--eval-json", type=Path, default=ROOT / "bench" / "results" / "eval-scifact-train.json",
                    help="the `sheaf eval beir --out` envelope shown at the top of the section")
    ap.add_argument("--library-json", type=Path, default=ROOT / "bench" / "results" / "eval-library-sample.json",
                    help="a `sheaf eval library --out` envelope of the sample library")
    ap.add_argument("--write-docs", action="store_true", help="update the Quality section of docs/benchmarks.md")
    args = ap.parse_args()
    r = json.loads(args.from_json.read_text()) if args.from_json else run(args)
    if args.json and not args.from_json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(r, indent=1) + "\n")
    ev = json.loads(args.eval_json.read_text()) if args.eval_json and args.eval_json.exists() else None
    lib = json.loads(args.library_json.read_text()) if args.library_json and args.library_json.exists() else None
    section = render(r, ev, lib)
    print(section)
    if args.write_docs:
        write_docs_section(section, BEGIN, END, DOCS)


if __name__ == "__main__":
    main()
