"""Retrieval quality levers on SciFact, train split only (results: docs/benchmarks.md, "## Quality").

The index is the one `sheaf eval beir` builds (`sheaf.evaluate.build_beir_index`: each abstract a
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
    /work/venv/bin/python bench/quality.py --cache-dir /tmp/sheaf-eval --json bench/results/quality.json
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from sheaf import evaluate  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
METRICS = evaluate.METRICS
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
        self.ds = evaluate.load_beir(SCIFACT / "corpus.jsonl", SCIFACT / "queries.jsonl",
                                     SCIFACT / "qrels" / f"{split}.tsv")
        self.cache_dir = cache_dir
        self.embedder = embedder
        self.path, self.info = evaluate.build_beir_index(self.ds, cache_dir, embedder=embedder, progress=say)
        from sheaf.index import open_index

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
        return {m: round(v, 4) for m, v in evaluate.evaluate_run(run, self.qrels, METRICS).items()}

    # --- lexical -----------------------------------------------------------------------------

    def lexical_runs(self, *, tokenizer: str = "unicode61 remove_diacritics 2", title: bool = False,
                     weights: tuple[float, float, float] = (0.0, 2.0, 1.0), staging: bool = True,
                     stopwords: bool = False, depth: int = DEPTH) -> dict[str, list[str]]:
        """Unit rankings per query. weights = (title, heading, text) bm25 column weights."""
        from sheaf.db import connect
        from sheaf.fts import build_match_query, fts_text

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
        from sheaf.retrieve import Retriever
        from sheaf.settings import query_settings

        r = Retriever(self.conn, query_settings(index_file=self.path))
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
        from sheaf.index import open_index

        cache = open_index(self.cache_dir / "vectors.db")  # the study's own cache of variant vectors
        try:
            passages = []
            for uid, pid, sp, text in self.units:
                from sheaf.models import BodyUnit

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
                ep = self.embedder.embed(passages[i:i + 512], cache)
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
        """Copy vectors already computed elsewhere (the eval index; bench/query.py's cache of
        title-prefixed abstracts) into the study's cache: content-addressed, so any match is valid."""
        from sheaf.db import connect, transaction

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
                c = table.setdefault(u, [0.0, 10**9])
                c[0] += w / (k + rank)
                c[1] = min(c[1], rank)
        return sorted(table, key=lambda u: (-table[u][0], table[u][1], u))

    def hybrid_runs(self, lex: dict[str, list[str]], sem: dict[str, list[str]], **kw: Any) -> dict[str, list[str]]:
        return {q: self.fuse(lex[q], sem[q], **kw) for q in self.qids}


def row(name: str, lex: dict[str, float] | None, sem: dict[str, float] | None,
        hyb: dict[str, float] | None, **extra: Any) -> dict[str, Any]:
    return {"lever": name, "lexical": lex, "semantic": sem, "hybrid": hyb, **extra}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sheaf.embed import Embedder

    t_start = time.perf_counter()
    embedder = Embedder()
    st = Study(Path(args.cache_dir), embedder)
    say(f"{len(st.units)} units of {len(st.titles)} papers; {len(st.qids)} train queries")
    out: dict[str, Any] = {"date": dt.date.today().isoformat(), "split": "train", "queries": len(st.qids),
                           "documents": len(st.ds.docs), "units": len(st.units), "model": embedder.model_name,
                           "machine": {"python": platform.python_version(), "cores": 2}, "tables": {}}
    T = out["tables"]

    # the legs before this study, and the product's current lexical setting (checked against
    # `Retriever.retrieve` itself: the replica must give the same numbers)
    from sheaf.fts import FTS_TOKENIZER
    from sheaf.retrieve import BODY_WEIGHTS

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
    T["combined"] = [row(f"lexical: {best_lex}; prefix: {best_prefix}; RRF k 60, depth 300",
                         st.score(lexb), st.score(semb), st.score(st.hybrid_runs(lexb, semb)))]
    for w in ((1.0, 1.5), (1.5, 1.0)):
        T["combined"].append(row(f"same, leg weights lexical {w[0]} / semantic {w[1]}", None, None,
                                 st.score(st.hybrid_runs(lexb, semb, weights=w)), weights=w))
    out["seconds"] = round(time.perf_counter() - t_start, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-dir", default="/tmp/sheaf-eval", help="the eval index and vector caches")
    ap.add_argument("--prefixes", default="title > section,title,none")
    ap.add_argument("--best-lexical", default="porter + title 2 + OR only")
    ap.add_argument("--best-prefix", default="title > section")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    r = run(args)
    text = json.dumps(r, indent=1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
