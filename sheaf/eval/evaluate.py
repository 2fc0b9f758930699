"""Retrieval quality: metric functions (pure) and the two evaluation runners behind `sheaf eval`.

- Metrics (`ndcg_at_k`, `recall_at_k`, `mrr_at_k`, `evaluate_run`) follow BEIR / trec_eval:
  gains are the graded relevance itself (``rel``, not ``2**rel - 1``), the discount is
  ``log2(rank + 1)``, a document listed twice in a ranking counts once (its first place),
  and the mean is taken over every query of the qrels that has a relevant document (a query
  with no answer scores 0).
- `run_beir`: a BEIR-format dataset (corpus.jsonl, queries.jsonl, qrels .tsv) becomes a
  temporary index, each document a paper with a title and one "Abstract" section that goes
  through the same canonical blocks → render → tree → units → FTS → passages → embedding code
  as a real paper. Every query is run through `Retriever.retrieve` in each mode; unit hits are
  aggregated to papers (a paper's rank is its best unit's: ``per_paper=1``) and scored.
  The index lives in a cache folder keyed by the corpus hash (``<cache>/<sha16>/sheaf.db``)
  and is reused while nothing that shapes it changed; its content-addressed embedding cache
  survives rebuilds, so only new passage texts are ever embedded.
- `run_library`: known-item evaluation of the user's own index, no labels needed: a paper's
  title should find that paper, a sentence quoted from a unit that unit, a code or number
  that only one unit holds that unit. Recall@1, recall@10 and MRR@10 per query type and mode.

No module-level import of numpy, torch or dagster; the model is loaded when a semantic or
hybrid mode runs.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sheaf.core.envelope import SheafError

__all__ = [
    "METRICS", "ndcg_at_k", "recall_at_k", "mrr_at_k", "evaluate_run", "latency_stats",
    "BeirDataset", "load_beir", "beir_paper", "build_beir_index", "run_beir", "paper_ranking",
    "KnownItem", "library_queries", "run_library", "Progress",
]

#: The metrics `run_beir` reports per mode, in order.
METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
#: Library (known-item) metrics.
KNOWN_ITEM_METRICS = ("recall@1", "recall@10", "mrr@10")
MODES = ("lexical", "semantic", "hybrid")
#: Bumped whenever the way a BEIR document becomes a paper changes (forces an index rebuild).
BEIR_BUILD_VERSION = 1
BEIR_DEPTH = 100  # papers ranked per query (recall@100)

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# --- metrics (pure) --------------------------------------------------------------------------

def _dedupe(ranking: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ranking))


def _dcg(gains: Sequence[float]) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains) if g)


def ndcg_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """nDCG@k of one ranking (doc ids, best first) against graded judgements {doc: rel}.
    Gain = rel (rel <= 0 is not relevant), discount log2(rank + 1); 0 when nothing is relevant."""
    ideal = sorted((r for r in qrels.values() if r > 0), reverse=True)[:k]
    idcg = _dcg(ideal)
    if idcg <= 0:
        return 0.0
    gains = [max(qrels.get(d, 0), 0) for d in _dedupe(ranking)[:k]]
    return _dcg(gains) / idcg


def recall_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents (rel > 0) found in the first k."""
    rel = {d for d, r in qrels.items() if r > 0}
    if not rel:
        return 0.0
    return len(rel.intersection(_dedupe(ranking)[:k])) / len(rel)


def mrr_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document within the first k, else 0."""
    for i, d in enumerate(_dedupe(ranking)[:k]):
        if qrels.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


_METRIC_FNS = {"ndcg": ndcg_at_k, "recall": recall_at_k, "mrr": mrr_at_k}


def _metric(name: str) -> tuple[Callable[..., float], int]:
    kind, _, k = name.partition("@")
    if kind not in _METRIC_FNS or not k.isdigit():
        raise ValueError(f"unknown metric {name!r}")
    return _METRIC_FNS[kind], int(k)


def per_query_metrics(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]],
                      metrics: Sequence[str] = METRICS) -> dict[str, dict[str, float]]:
    """{query id: {metric: value}} for every judged query with a relevant document (a query
    missing from `run` has an empty ranking)."""
    fns = [(m, *_metric(m)) for m in metrics]
    out: dict[str, dict[str, float]] = {}
    for qid, judged in qrels.items():
        if not any(r > 0 for r in judged.values()):
            continue
        ranking = run.get(qid, ())
        out[qid] = {m: fn(ranking, judged, k) for m, fn, k in fns}
    return out


def evaluate_run(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]],
                 metrics: Sequence[str] = METRICS) -> dict[str, float]:
    """Mean of each metric over the judged queries (see `per_query_metrics`)."""
    per = per_query_metrics(run, qrels, metrics)
    if not per:
        return {m: 0.0 for m in metrics}
    return {m: sum(v[m] for v in per.values()) / len(per) for m in metrics}


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def latency_stats(seconds: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / mean / max in milliseconds (nearest-rank percentiles)."""
    if not seconds:
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0, "max": 0.0, "n": 0}
    return {"p50": round(_pct(seconds, 50) * 1000, 2), "p95": round(_pct(seconds, 95) * 1000, 2),
            "mean": round(statistics.fmean(seconds) * 1000, 2), "max": round(max(seconds) * 1000, 2),
            "n": len(seconds)}


# --- query vectors: encode once, time it ---------------------------------------------------------

class _QueryVectors:
    """Stands in for the registered query embedder (`sheaf.search.retrieve.register_query_embedder`):
    each distinct query is embedded once (its encode time recorded), so every mode sees the
    same vector and the retrieval latency excludes the model."""

    def __init__(self, embedder: Any) -> None:
        self.model_name = embedder.model_name
        self._embedder = embedder
        self.vectors: dict[str, Any] = {}
        self.seconds: list[float] = []

    def prefetch(self, texts: Sequence[str], timed: int = 20, progress: Progress = _quiet) -> None:
        """Vectors for many queries: the first `timed` one at a time (their encode latency is
        what `seconds` reports), the rest in batches (the same vectors, far faster)."""
        texts = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        for t in texts[:timed]:
            self.embed_query(t)
        rest = texts[timed:]
        if not rest:
            return
        from sheaf.vectors.embed import QueryVector

        ld = self._embedder.load()
        budget = ld.identity.max_tokens - ld.n_special
        short = [t for t in rest if len(ld.tokenizer.encode(t, add_special_tokens=False).ids) <= budget]
        tick = _Ticker(progress, "query vectors", len(rest))
        for i in range(0, len(short), 256):
            chunk = short[i:i + 256]
            for t, v in zip(chunk, self._embedder.encode(chunk)):
                self.vectors[t] = QueryVector(ld.identity, v, t, windows=1)
            tick(i + len(chunk))
        for t in rest:  # longer than the window: averaged windows, as embed_query does
            if t not in self.vectors:
                self.vectors[t] = self._embedder.embed_query(t)

    def embed_query(self, text: str) -> Any:
        qv = self.vectors.get(text)
        if qv is None:
            t0 = time.perf_counter()
            qv = self._embedder.embed_query(text)
            self.seconds.append(time.perf_counter() - t0)
            self.vectors[text] = qv
        return qv


@contextmanager
def _query_embedder(embedder: Any) -> Iterator[_QueryVectors]:
    from sheaf.search import retrieve

    qv = _QueryVectors(embedder)
    key = retrieve._canonical_model(embedder.model_name)
    previous = retrieve._EMBEDDERS.get(key)
    retrieve._EMBEDDERS[key] = qv
    try:
        yield qv
    finally:
        if previous is None:
            retrieve._EMBEDDERS.pop(key, None)
        else:
            retrieve._EMBEDDERS[key] = previous


class _Ticker:
    """Progress lines at most every `every` seconds (and at the end)."""

    def __init__(self, progress: Progress, label: str, total: int, every: float = 5.0) -> None:
        self.progress, self.label, self.total, self.every = progress, label, total, every
        self.t0 = self.last = time.perf_counter()

    def __call__(self, done: int, extra: str = "") -> None:
        now = time.perf_counter()
        if done >= self.total or now - self.last >= self.every:
            self.last = now
            el = now - self.t0
            eta = el / done * (self.total - done) if done else 0.0
            self.progress(f"{self.label}: {done}/{self.total} ({el:.0f} s"
                          + (f", ~{eta:.0f} s left" if done < self.total else "") + ")"
                          + (f" {extra}" if extra else ""))


# --- BEIR datasets ------------------------------------------------------------------------------

@dataclass
class BeirDataset:
    """A BEIR dataset: docs [(doc id, title, text)], queries {qid: text}, qrels {qid: {doc: rel}}."""

    docs: list[tuple[str, str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    corpus_sha256: str
    queries_sha256: str
    qrels_sha256: str
    paths: dict[str, str] = field(default_factory=dict)

    @property
    def judged(self) -> list[str]:
        """Query ids with text and at least one relevant document, in qrels order."""
        return [q for q, j in self.qrels.items() if q in self.queries and any(r > 0 for r in j.values())]


def _read_jsonl(path: Path, what: str) -> tuple[list[dict[str, Any]], str]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SheafError("NOT_FOUND", f"cannot read the {what} file {path}: {e.strerror or e}",
                         {"path": str(path)}, hint=f"pass the {what} file of a BEIR dataset") from None
    rows = []
    for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError:
            raise SheafError("BAD_INPUT", f"{path}: line {n} is not JSON", {"path": str(path), "line": n},
                             hint="a BEIR file has one JSON object per line") from None
        if not isinstance(d, dict) or "_id" not in d:
            raise SheafError("BAD_INPUT", f"{path}: line {n} has no _id", {"path": str(path), "line": n})
        rows.append(d)
    return rows, hashlib.sha256(data).hexdigest()


def load_beir(corpus: str | Path, queries: str | Path, qrels: str | Path) -> BeirDataset:
    """Read a BEIR dataset: corpus.jsonl (``_id``, ``title``, ``text``), queries.jsonl (``_id``,
    ``text``) and a qrels TSV (``query-id  corpus-id  score``, an optional header line)."""
    corpus, queries, qrels = Path(corpus), Path(queries), Path(qrels)
    rows, c_sha = _read_jsonl(corpus, "corpus")
    docs: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for d in rows:
        did = str(d["_id"])
        if did in seen:
            continue
        seen.add(did)
        docs.append((did, str(d.get("title") or "").strip(), str(d.get("text") or "").strip()))
    qrows, q_sha = _read_jsonl(queries, "queries")
    qs = {str(d["_id"]): str(d.get("text") or "").strip() for d in qrows}
    try:
        raw = qrels.read_bytes()
    except OSError as e:
        raise SheafError("NOT_FOUND", f"cannot read the qrels file {qrels}: {e.strerror or e}",
                         {"path": str(qrels)}, hint="pass a qrels .tsv of a BEIR dataset") from None
    judged: dict[str, dict[str, int]] = {}
    for n, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), start=1):
        parts = line.strip().split("\t") if "\t" in line else line.split()
        if not parts or not line.strip():
            continue
        if len(parts) == 4:  # TREC format: qid 0 doc rel
            parts = [parts[0], parts[2], parts[3]]
        try:
            rel = int(float(parts[2]))
        except (IndexError, ValueError):
            if n == 1:
                continue  # the header line
            raise SheafError("BAD_INPUT", f"{qrels}: line {n} is not 'query-id corpus-id score'",
                             {"path": str(qrels), "line": n}) from None
        judged.setdefault(parts[0], {})[parts[1]] = rel
    return BeirDataset(docs, qs, judged, c_sha, q_sha, hashlib.sha256(raw).hexdigest(),
                       {"corpus": str(corpus), "queries": str(queries), "qrels": str(qrels)})


def _paper_key(doc_id: str) -> str:
    from sheaf.core.models import valid_paper_key

    return doc_id if valid_paper_key(doc_id) and len(doc_id) <= 100 else \
        "d" + hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:16]


def beir_paper(doc_id: str, title: str, text: str, paper_id: str | None = None):
    """A BEIR document as a parsed paper: a title block, an "Abstract" heading and the text as
    an abstract block, finalized by the adapters' shared `finalize` (the canonical-block
    rules every format goes through). Returns a `ParsedPaper`."""
    from sheaf.ingest.common import RawBlock, finalize
    from sheaf.core.models import ParsedPaper

    pid = paper_id or _paper_key(doc_id)
    raws = []
    if title:
        raws.append(RawBlock(page=1, label="doc_title", text=title, role="title"))
    if text:
        raws.append(RawBlock(page=1, label="paragraph_title", text="Abstract", role="abstract_heading",
                             heading_level=1))
        raws.append(RawBlock(page=1, label="abstract", text=text, role="abstract"))
    elif title:  # a title-only document: its title is its only text
        raws.append(RawBlock(page=1, label="text", text=title, role="body"))
    warnings: list[str] = []
    blocks = finalize(pid, "beir", raws, warnings)
    sha = hashlib.sha256(json.dumps([doc_id, title, text]).encode("utf-8")).hexdigest()
    return ParsedPaper(paper_id=pid, source_format="beir", source_path=f"beir:{doc_id}", adapter="beir/1",
                       ocr_result_hash=sha, blocks=tuple(blocks), warnings=tuple(warnings),
                       title=title or None)


def _probe(ds: BeirDataset, embedder: Any, token_cap: int, n: int = 25) -> str:
    """A hash of what the code makes of the first `n` documents (units; passages when
    embedding): a change in the units or passage code invalidates the cached index."""
    from sheaf.transform.chain import units_from_paper

    h = hashlib.sha256()
    for did, title, text in ds.docs[:n]:
        out = units_from_paper(beir_paper(did, title, text), token_cap)
        for u in (*out.body_units, *out.object_units):
            h.update(json.dumps(u.to_dict(), sort_keys=True, default=str).encode("utf-8"))
        if embedder is not None:
            for p in embedder.build_passages(out.body_units, out.object_units, title):
                h.update(p.text_sha256.encode("ascii"))
    return h.hexdigest()[:16]


def _fingerprint(ds: BeirDataset, identity: Any, token_cap: int, probe: str) -> dict[str, Any]:
    from sheaf import __version__
    from sheaf.store.sqlite.fts import FTS_TEXT_VERSION, FTS_TOKENIZER
    from sheaf.store.sqlite.index import SCHEMA_VERSION

    return {"corpus_sha256": ds.corpus_sha256, "beir_build_version": BEIR_BUILD_VERSION,
            "schema_version": SCHEMA_VERSION, "fts_text_version": FTS_TEXT_VERSION,
            "fts_tokenizer": FTS_TOKENIZER, "unit_token_cap": token_cap, "sheaf_version": __version__,
            "collection": identity.key if identity is not None else None, "probe": probe}


def _fresh_index(path: Path, progress: Progress) -> Any:
    """A new, empty eval index at `path`, keeping the embedding cache of the one it replaces
    (vectors are content-addressed: still valid). Never rebuilt in place, so results never
    depend on the cache's history (schema 2's ``contentless_delete=1`` FTS tables kept
    replaced rows in the bm25 statistics; schema 3 deletes exactly, but rowids, which break
    score ties, still follow the history)."""
    from sheaf.store.sqlite.index import open_index
    from sheaf.store.sqlite.integrity import salvage_cache

    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.with_name(path.name + ".old")
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(path) + suffix)
        if p.exists():
            p.replace(Path(str(old) + suffix))
    conn = open_index(path)
    if old.exists():  # an unreadable old file salvages nothing: embed afresh
        kept = salvage_cache(old, conn)
        progress(f"kept {kept} cached vectors of the previous eval index")
    for suffix in ("", "-wal", "-shm"):
        Path(str(old) + suffix).unlink(missing_ok=True)
    return conn


def build_beir_index(ds: BeirDataset, cache_dir: str | Path, *, embedder: Any = None,
                     token_cap: int | None = None, rebuild: bool = False,
                     progress: Progress = _quiet, batch: int = 1024) -> tuple[Path, dict[str, Any]]:
    """The dataset's index under ``cache_dir/<corpus sha[:16]>/sheaf.db``: reused when its
    fingerprint (corpus, build version, schema, FTS text and tokenizer, unit cap, model
    identity) matches, else built afresh paper by paper with `replace_paper` (the old file's
    embedding cache carried over). `embedder` None
    builds a lexical-only index. Returns (path, info)."""
    from sheaf.vectors.embed import EmbeddedPassages
    from sheaf.store.sqlite.index import replace_paper, upsert_papers
    from sheaf.ingest.metadata import PaperMeta
    from sheaf.transform.chain import units_from_paper
    from sheaf.transform.units import DEFAULT_TOKEN_CAP

    cap = token_cap or DEFAULT_TOKEN_CAP
    folder = Path(cache_dir) / ds.corpus_sha256[:16]
    path = folder / "sheaf.db"
    stamp = folder / "build.json"
    identity = embedder.identity if embedder is not None else None
    fp = _fingerprint(ds, identity, cap, _probe(ds, embedder, cap))
    t0 = time.perf_counter()
    if not rebuild and path.exists() and stamp.exists():
        try:
            info = json.loads(stamp.read_text(encoding="utf-8"))
            have = dict(info.get("fingerprint") or {})
            if identity is None and have.get("collection") is not None:
                # lexical only: an index with vectors serves as well (its probe covered passages)
                have["collection"] = None
                have["probe"] = fp["probe"] if info.get("lexical_probe") == fp["probe"] else have.get("probe")
            if have == fp:
                info.update({"path": str(path), "reused": True, "seconds": round(time.perf_counter() - t0, 2)})
                progress(f"reusing the eval index {path} ({info.get('papers')} papers)")
                return path, info
        except ValueError:
            pass
    stamp.unlink(missing_ok=True)
    progress(f"building the eval index {path} from {len(ds.docs)} documents")
    conn = _fresh_index(path, progress)
    try:
        keys = {}
        papers = []
        tick = _Ticker(progress, "units", len(ds.docs))
        for i, (did, title, text) in enumerate(ds.docs, start=1):
            pid = _paper_key(did)
            if pid in keys.values():
                pid = "d" + hashlib.sha1(f"{i}:{did}".encode("utf-8")).hexdigest()[:16]
            keys[did] = pid
            out = units_from_paper(beir_paper(did, title, text, pid), cap)
            papers.append((pid, title, out.body_units, out.object_units))
            tick(i)
        upsert_papers(conn, [PaperMeta(key=pid, citation_key=None, title=title, authors=(), first_author=None,
                                       year=None, journal=None, doi=None, pmid=None, abstract=None,
                                       collections=(), domain=None, source="beir")
                             for pid, title, _, _ in papers])
        by_paper: dict[str, list[Any]] = {}
        vecs: dict[str, Any] = {}
        encoded = 0
        if embedder is not None:
            import numpy as np

            passages = []
            tick = _Ticker(progress, "passages", len(papers))
            for i, (pid, title, body, objects) in enumerate(papers, start=1):
                ps = embedder.build_passages(body, objects, title)
                by_paper[pid] = ps
                passages += ps
                tick(i)
            tick = _Ticker(progress, "embedding", len(passages), every=10.0)
            for i in range(0, len(passages), batch):
                ep = embedder.embed(passages[i:i + batch], conn)
                encoded += ep.encoded
                for p, v in zip(ep.passages, ep.vectors):
                    vecs[p.passage_id] = v
                tick(min(i + batch, len(passages)), f"{encoded} encoded, the rest cached")
        tick = _Ticker(progress, "writing", len(papers))
        n_pass = 0
        for i, (pid, _, body, objects) in enumerate(papers, start=1):
            ep = None
            if embedder is not None:
                ps = by_paper[pid]
                matrix = (np.stack([vecs[p.passage_id] for p in ps]) if ps
                          else np.zeros((0, identity.dimension), np.float32))
                ep = EmbeddedPassages(identity, tuple(ps), matrix)
                n_pass += len(ps)
            replace_paper(conn, pid, body, objects, ep)
            tick(i)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    info = {"fingerprint": fp, "lexical_probe": _probe(ds, None, cap) if embedder is not None else fp["probe"],
            "papers": len(papers), "units": sum(len(b) + len(o) for _, _, b, o in papers),
            "passages": n_pass, "encoded": encoded, "keys": {d: k for d, k in keys.items() if d != k},
            "built_seconds": round(time.perf_counter() - t0, 1)}
    stamp.write_text(json.dumps(info), encoding="utf-8")
    info.update({"path": str(path), "reused": False, "seconds": info["built_seconds"]})
    return path, info


def paper_ranking(retriever: Any, query: str, mode: str, depth: int = BEIR_DEPTH) -> list[str]:
    """Papers for a query, best first: `retrieve` with one unit per paper (a paper ranks as its
    best unit: max aggregation)."""
    res = retriever.retrieve(query, mode=mode, limit=depth, per_paper=1, kind="all")
    return _dedupe(m["zotero_key"] for m in res.matches)


def _settings_for(index: Path, model: str | None) -> Any:
    from sheaf.core.settings import query_settings

    over: dict[str, Any] = {"index_file": index}
    if model:
        over["embedding_model"] = model
    return query_settings(**over)


def _run_modes(retriever: Any, items: Sequence[tuple[str, str]], modes: Sequence[str],
               rank: Callable[[Any, str, str], list[str]], progress: Progress,
               ) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[float]], list[str]]:
    """{mode: {item id: ranking}}, {mode: [seconds]}, warnings (first few per mode)."""
    runs: dict[str, dict[str, list[str]]] = {}
    times: dict[str, list[float]] = {}
    warnings: list[str] = []
    for mode in modes:
        run: dict[str, list[str]] = {}
        ts: list[float] = []
        failed = 0
        tick = _Ticker(progress, f"{mode} queries", len(items))
        for i, (qid, text) in enumerate(items, start=1):
            t0 = time.perf_counter()
            try:
                run[qid] = rank(retriever, text, mode)
            except SheafError as e:
                if e.code != "BAD_QUERY":
                    raise
                run[qid] = []  # nothing searchable in it: an empty ranking (scores 0)
                failed += 1
            ts.append(time.perf_counter() - t0)
            tick(i)
        if failed:
            warnings.append(f"{mode}: {failed} queries had nothing to search for (scored 0)")
        runs[mode], times[mode] = run, ts
    return runs, times, warnings


def _check_modes(modes: Sequence[str]) -> list[str]:
    modes = [m.strip() for m in modes if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise SheafError("BAD_QUERY", f"unknown mode {', '.join(bad) or '(none)'}; modes are "
                         f"{', '.join(MODES)}", {"modes": list(modes)}, hint="e.g. --modes lexical,hybrid")
    return list(dict.fromkeys(modes))


def run_beir(ds: BeirDataset, *, modes: Sequence[str] = MODES, cache_dir: str | Path,
             embedder: Any = None, settings: Any = None, max_queries: int | None = None,
             rebuild: bool = False, per_query: bool = False, progress: Progress = _quiet,
             depth: int = BEIR_DEPTH) -> dict[str, Any]:
    """Evaluate each mode on a BEIR dataset (see the module docstring). `embedder` is needed
    for semantic/hybrid (default: `Embedder.from_settings`). Returns the envelope's data:
    ``metrics[mode][metric]``, ``latency_ms[mode]``, the dataset, index and configuration."""
    from sheaf.search.retrieve import HYBRID_RRF_K, Retriever

    modes = _check_modes(modes)
    needs_model = any(m != "lexical" for m in modes)
    if needs_model and embedder is None:
        from sheaf.vectors.embed import Embedder

        embedder = Embedder.from_settings(settings)
    cap = getattr(settings, "unit_token_cap", None)
    path, info = build_beir_index(ds, cache_dir, embedder=embedder if needs_model else None,
                                  token_cap=cap, rebuild=rebuild, progress=progress)
    qids = ds.judged
    if max_queries:
        qids = qids[:max_queries]
    items = [(q, ds.queries[q]) for q in qids]
    keys = info.get("keys") or {}
    back = {v: k for k, v in keys.items()}
    model = embedder.model_name if embedder is not None else None
    from sheaf.store.sqlite.index import open_index

    conn = open_index(path, readonly=True)
    warnings: list[str] = []
    try:
        retriever = Retriever(conn, _settings_for(path, model))
        encode_ms = None
        if needs_model:
            with _query_embedder(embedder) as qv:
                qv.prefetch([text for _, text in items], progress=progress)
                runs, times, w = _run_modes(retriever, items, modes,
                                            lambda r, q, m: paper_ranking(r, q, m, depth), progress)
                encode_ms = latency_stats(qv.seconds)
        else:
            runs, times, w = _run_modes(retriever, items, modes,
                                        lambda r, q, m: paper_ranking(r, q, m, depth), progress)
        warnings += w
    finally:
        conn.close()
    qrels = {q: ds.qrels[q] for q in qids}
    metrics, per = {}, {}
    for mode, run in runs.items():
        docs_run = {q: [back.get(p, p) for p in r] for q, r in run.items()}
        pq = per_query_metrics(docs_run, qrels)
        metrics[mode] = {m: round(sum(v[m] for v in pq.values()) / len(pq), 4) if pq else 0.0
                         for m in METRICS}
        if per_query:
            per[mode] = {q: {"ranking": docs_run[q][:10], **{m: round(v, 4) for m, v in pq[q].items()}}
                         for q in pq}
    missing = sum(1 for q in ds.qrels if q not in ds.queries)
    if missing:
        warnings.append(f"{missing} judged query ids have no text in the queries file: left out")
    data: dict[str, Any] = {
        "dataset": {**ds.paths, "documents": len(ds.docs), "queries": len(ds.queries),
                    "queries_evaluated": len(items), "judgements": sum(len(j) for j in qrels.values()),
                    "corpus_sha256": ds.corpus_sha256, "queries_sha256": ds.queries_sha256,
                    "qrels_sha256": ds.qrels_sha256},
        "index": {k: info.get(k) for k in ("path", "reused", "seconds", "papers", "units", "passages",
                                            "encoded")},
        "modes": modes,
        "config": {"depth": depth, "rrf_k": HYBRID_RRF_K, "aggregation": "max over units (per_paper=1)",
                   "model": getattr(embedder, "model_name", None) if needs_model else None},
        "metrics": metrics,
        "latency_ms": {m: latency_stats(t) for m, t in times.items()},
        "query_encode_ms": encode_ms,
    }
    if per_query:
        data["per_query"] = per
    return {"data": data, "warnings": warnings}


# --- the user's library: known items ----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class KnownItem:
    """A generated query whose answer is known: `target` is a paper id (type ``title``) or a
    unit id (``sentence``, ``code``)."""

    qtype: str  # title | sentence | code
    query: str
    target: str
    paper_id: str

    def to_dict(self) -> dict[str, str]:
        return {"type": self.qtype, "query": self.query, "target": self.target, "paper_id": self.paper_id}


QTYPES = ("title", "sentence", "code")
_SENT_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
#: A code (a capital, letters, an optional hyphen, digits: QLN-482, SPG302, IL-6R; or capitals,
#: a space, digits: SPG 302) or a decimal number (0.047, 12.75).
_CODE_TOKEN_RE = re.compile(r"(?<![\w.\-])(?:[A-Z][A-Za-z]{0,9}[-\u2010\u2011]?\d{1,7}[A-Za-z]{0,2}"
                            r"|[A-Z]{2,10} \d{1,7}|\d+\.\d{2,})(?![\w]|\.\d)")


def _code_key(token: str) -> str:
    return re.sub(r"[\s\-\u2010\u2011]", "", token).lower()


def _unit_texts(conn: Any) -> Iterator[tuple[str, str, str, str]]:
    """(unit_id, paper_id, searchable text, copied text) of every unit: a body unit's text; an
    object's caption and table text, and the citing paragraph it copies (`nearby_text`)."""
    for uid, pid, text in conn.execute("SELECT unit_id, paper_id, text FROM body_units ORDER BY unit_rowid"):
        yield uid, pid, text, ""
    for uid, pid, cap, tab, near in conn.execute(
            "SELECT unit_id, paper_id, caption, table_text, nearby_text FROM object_units ORDER BY unit_rowid"):
        yield uid, pid, f"{cap or ''}\n{tab or ''}", near or ""


def _sentences(text: str) -> list[str]:
    out = []
    for para in text.split("\n\n"):
        for s in _SENT_RE.split(" ".join(para.split())):
            words = s.split()
            if 8 <= len(words) <= 40 and sum(c.isalpha() for c in s) > 0.6 * len(s):
                out.append(s.strip())
    return out


def library_queries(conn: Any, *, sample: int = 50, seed: int = 0,
                    progress: Progress = _quiet) -> tuple[list[KnownItem], dict[str, Any]]:
    """Known-item queries for up to `sample` papers of the index (seeded random choice among
    papers with units): the paper's title (when its metadata title has 3+ words), one
    sentence of 8-40 words quoted from one of its body units that no other unit holds, and one
    code or decimal number that occurs in exactly one unit of the whole index (when it has one)."""
    rng = random.Random(seed)
    units_of: dict[str, list[tuple[str, str]]] = {}
    counts: Counter[str] = Counter()
    first: dict[str, tuple[str, str, str]] = {}
    flat: list[tuple[str, str]] = []  # (unit id, whitespace-normalized text incl. copied paragraphs)
    n = 0
    for uid, pid, text, copied in _unit_texts(conn):
        flat.append((uid, " ".join(f"{text} {copied}".split())))
        units_of.setdefault(pid, []).append((uid, text))
        for m in set(_CODE_TOKEN_RE.findall(text)):
            k = _code_key(m)
            if len(k) < 4 or (k.isdigit() and len(k) < 5):
                continue
            # counted once per unit: a code repeated inside one unit is still unique to it
            counts[k] += 1
            first.setdefault(k, (uid, pid, m.strip()))
        n += 1
    progress(f"scanned {n} units of {len(units_of)} papers for quotable sentences and unique codes")
    papers = sorted(units_of)
    chosen = sorted(rng.sample(papers, min(sample, len(papers)))) if sample else papers
    titles = dict(conn.execute("SELECT paper_id, title FROM papers WHERE title IS NOT NULL AND title != ''"))
    unique_by_paper: dict[str, list[tuple[str, str]]] = {}
    for k, c in counts.items():
        if c == 1:
            uid, pid, tok = first[k]
            unique_by_paper.setdefault(pid, []).append((uid, tok))
    items: list[KnownItem] = []
    for pid in chosen:
        title = (titles.get(pid) or "").strip()
        if len(title.split()) >= 3:
            items.append(KnownItem("title", title, pid, pid))
        body = [(u, t) for u, t in units_of[pid] if ":body:" in u]
        sents = [(u, s) for u, t in body for s in _sentences(t)]
        rng.shuffle(sents)
        for u, s in sents[:20]:  # a sentence no other unit holds (figures copy their citing paragraph)
            if not any(s in t for v, t in flat if v != u):
                items.append(KnownItem("sentence", s, u, pid))
                break
        codes = sorted(unique_by_paper.get(pid, []), key=lambda x: (not re.search(r"[A-Za-z]", x[1]), x[1]))
        if codes:
            u, tok = rng.choice(codes[:5])
            items.append(KnownItem("code", tok, u, pid))
    stats = {"papers_in_index": len(papers), "papers_sampled": len(chosen), "units_scanned": n,
             "queries": {t: sum(1 for i in items if i.qtype == t) for t in QTYPES}}
    return items, stats


def _known_item_rank(retriever: Any, item: KnownItem, mode: str) -> list[str]:
    if item.qtype == "title":
        return paper_ranking(retriever, item.query, mode, depth=10)
    res = retriever.retrieve(item.query, mode=mode, limit=10, per_paper=0, kind="all")
    return _dedupe(m["unit_id"] for m in res.matches)


def run_library(settings: Any = None, *, sample: int = 50, seed: int = 0, modes: Sequence[str] = MODES,
                embedder: Any = None, per_query: bool = False, progress: Progress = _quiet) -> dict[str, Any]:
    """Known-item evaluation of the configured index (read-only): recall@1, recall@10 and MRR@10
    per query type and mode, and retrieval latency per mode."""
    from sheaf.search.retrieve import Retriever
    from sheaf.core.settings import query_settings

    modes = _check_modes(modes)
    s = settings if settings is not None else query_settings()
    warnings: list[str] = []
    with Retriever.open(s) as r:
        items, stats = library_queries(r.conn, sample=sample, seed=seed, progress=progress)
        if not items:
            raise SheafError("NOT_FOUND", "the index holds no paper to make queries from",
                             hint="build the index first (sheaf build)")
        needs_model = any(m != "lexical" for m in modes)
        if needs_model:
            try:
                r._collection()  # VECTOR_NOT_BUILT / MODEL_CHANGED before loading a model
            except SheafError as e:
                if e.code not in ("VECTOR_NOT_BUILT",):
                    raise
                warnings.append(f"{e.message}: semantic and hybrid modes skipped")
                modes = [m for m in modes if m == "lexical"]
                needs_model = False
        keyed = [(str(i), it) for i, it in enumerate(items)]
        by_id = dict(keyed)

        def rank(ret: Any, qid: str, mode: str) -> list[str]:
            return _known_item_rank(ret, by_id[qid], mode)

        encode_ms = None
        if needs_model:
            if embedder is None:
                from sheaf.search.retrieve import _EMBEDDERS, _canonical_model

                embedder = _EMBEDDERS.get(_canonical_model(s.embedding_model))
                if isinstance(embedder, _QueryVectors):
                    embedder = embedder._embedder
            if embedder is None:
                from sheaf.vectors.embed import Embedder
                from sheaf.core.settings import get_settings

                embedder = Embedder.from_settings(get_settings(embedding_model=s.embedding_model))
            with _query_embedder(embedder) as qv:
                qv.prefetch([it.query for _, it in keyed], progress=progress)
                runs, times, w = _run_modes(r, [(q, q) for q, _ in keyed], modes, rank, progress)
                encode_ms = latency_stats(qv.seconds)
        else:
            runs, times, w = _run_modes(r, [(q, q) for q, _ in keyed], modes, rank, progress)
        warnings += w
    metrics: dict[str, dict[str, dict[str, float]]] = {}
    per: dict[str, list[dict[str, Any]]] = {}
    for mode, run in runs.items():
        metrics[mode] = {}
        for qtype in (*QTYPES, "all"):
            ids = [q for q, it in keyed if qtype == "all" or it.qtype == qtype]
            if not ids:
                continue
            qrels = {q: {by_id[q].target: 1} for q in ids}
            vals = evaluate_run({q: run[q] for q in ids}, qrels, KNOWN_ITEM_METRICS)
            metrics[mode][qtype] = {k: round(v, 4) for k, v in vals.items()} | {"queries": len(ids)}
        if per_query:
            per[mode] = [{**by_id[q].to_dict(), "rank": (run[q].index(by_id[q].target) + 1
                                                         if by_id[q].target in run[q] else None)}
                         for q, _ in keyed]
    data: dict[str, Any] = {
        "index": str(s.index_path), "sample": sample, "seed": seed, "modes": modes, **stats,
        "metrics": metrics, "latency_ms": {m: latency_stats(t) for m, t in times.items()},
        "query_encode_ms": encode_ms,
        "targets": {"title": "the paper (units aggregated to papers, max)",
                    "sentence": "the unit it was quoted from", "code": "the only unit holding it"},
    }
    if per_query:
        data["per_query"] = per
    return {"data": data, "warnings": warnings}
