"""BEIR evaluation: load a dataset, index it once (cached by fingerprint), rank papers per query and
score the rankings (nDCG@10, recall@10/100, MRR@10) per mode."""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sheaf import __version__
from sheaf.core.envelope import SheafError
from sheaf.core.models import PaperMeta, ParsedPaper, valid_paper_key
from sheaf.eval.metrics import METRICS, latency_stats, per_query_metrics
from sheaf.eval.runs import (
    BEIR_DEPTH,
    MODES,
    Progress,
    QueryVectors,
    Ticker,
    check_modes,
    paper_ranking,
    quiet,
    run_modes,
    settings_for,
)
from sheaf.formats.common import RawBlock, finalize
from sheaf.search.retriever import HYBRID_RRF_K, Retriever
from sheaf.store.fulltext import FTS_TEXT_VERSION, FTS_TOKENIZER
from sheaf.store.select import SQLITE_SCHEMA_VERSION, fresh_index_file, open_url
from sheaf.transform.chain import units_from_paper
from sheaf.transform.units import DEFAULT_TOKEN_CAP
from sheaf.vectors.embedder import Embedder
from sheaf.vectors.identity import EmbeddedPassages

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

#: Bumped whenever the way a BEIR document becomes a paper changes (forces an index rebuild).
BEIR_BUILD_VERSION = 1




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

    return doc_id if valid_paper_key(doc_id) and len(doc_id) <= 100 else \
        "d" + hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:16]


def beir_paper(doc_id: str, title: str, text: str, paper_id: str | None = None):
    """A BEIR document as a parsed paper: a title block, an "Abstract" heading and the text as
    an abstract block, finalized by the adapters' shared `finalize` (the canonical-block
    rules every format goes through). Returns a `ParsedPaper`."""

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

    return {"corpus_sha256": ds.corpus_sha256, "beir_build_version": BEIR_BUILD_VERSION,
            "schema_version": SQLITE_SCHEMA_VERSION, "fts_text_version": FTS_TEXT_VERSION,
            "fts_tokenizer": FTS_TOKENIZER, "unit_token_cap": token_cap, "sheaf_version": __version__,
            "collection": identity.key if identity is not None else None, "probe": probe}


def build_beir_index(ds: BeirDataset, cache_dir: str | Path, *, embedder: Any = None,
                     token_cap: int | None = None, rebuild: bool = False,
                     progress: Progress = quiet, batch: int = 1024) -> tuple[Path, dict[str, Any]]:
    """The dataset's index under ``cache_dir/<corpus sha[:16]>/sheaf.db``: reused when its
    fingerprint (corpus, build version, schema, FTS text and tokenizer, unit cap, model
    identity) matches, else built afresh paper by paper with `replace_paper` (the old file's
    embedding cache carried over). `embedder` None
    builds a lexical-only index. Returns (path, info)."""
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
    index = fresh_index_file(path, progress)
    conn = index.conn
    try:
        keys = {}
        papers = []
        tick = Ticker(progress, "units", len(ds.docs))
        for i, (did, title, text) in enumerate(ds.docs, start=1):
            pid = _paper_key(did)
            if pid in keys.values():
                pid = "d" + hashlib.sha1(f"{i}:{did}".encode("utf-8")).hexdigest()[:16]
            keys[did] = pid
            out = units_from_paper(beir_paper(did, title, text, pid), cap)
            papers.append((pid, title, out.body_units, out.object_units))
            tick(i)
        index.upsert_papers([PaperMeta(key=pid, citation_key=None, title=title, authors=(), first_author=None,
                                       year=None, journal=None, doi=None, pmid=None, abstract=None,
                                       collections=(), domain=None, source="beir")
                             for pid, title, _, _ in papers])
        by_paper: dict[str, list[Any]] = {}
        vecs: dict[str, Any] = {}
        encoded = 0
        if embedder is not None:
            passages = []
            tick = Ticker(progress, "passages", len(papers))
            for i, (pid, title, body, objects) in enumerate(papers, start=1):
                ps = embedder.build_passages(body, objects, title)
                by_paper[pid] = ps
                passages += ps
                tick(i)
            tick = Ticker(progress, "embedding", len(passages), every=10.0)
            for i in range(0, len(passages), batch):
                ep = embedder.embed(passages[i:i + batch], index.embedding_cache())
                encoded += ep.encoded
                for p, v in zip(ep.passages, ep.vectors):
                    vecs[p.passage_id] = v
                tick(min(i + batch, len(passages)), f"{encoded} encoded, the rest cached")
        tick = Ticker(progress, "writing", len(papers))
        n_pass = 0
        for i, (pid, _, body, objects) in enumerate(papers, start=1):
            ep = None
            if embedder is not None:
                ps = by_paper[pid]
                matrix = (np.stack([vecs[p.passage_id] for p in ps]) if ps
                          else np.zeros((0, identity.dimension), np.float32))
                ep = EmbeddedPassages(identity, tuple(ps), matrix)
                n_pass += len(ps)
            index.replace_paper(pid, body, objects, ep)
            tick(i)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        index.close()
    info = {"fingerprint": fp, "lexical_probe": _probe(ds, None, cap) if embedder is not None else fp["probe"],
            "papers": len(papers), "units": sum(len(b) + len(o) for _, _, b, o in papers),
            "passages": n_pass, "encoded": encoded, "keys": {d: k for d, k in keys.items() if d != k},
            "built_seconds": round(time.perf_counter() - t0, 1)}
    stamp.write_text(json.dumps(info), encoding="utf-8")
    info.update({"path": str(path), "reused": False, "seconds": info["built_seconds"]})
    return path, info


def run_beir(ds: BeirDataset, *, modes: Sequence[str] = MODES, cache_dir: str | Path,
             embedder: Any = None, settings: Settings | None = None, max_queries: int | None = None,
             rebuild: bool = False, per_query: bool = False, progress: Progress = quiet,
             depth: int = BEIR_DEPTH) -> dict[str, Any]:
    """Evaluate each mode on a BEIR dataset (see the module docstring). `embedder` is needed
    for semantic/hybrid (default: `Embedder.from_settings`). Returns the envelope's data:
    ``metrics[mode][metric]``, ``latency_ms[mode]``, the dataset, index and configuration."""

    modes = check_modes(modes)
    needs_model = any(m != "lexical" for m in modes)
    if needs_model and embedder is None:
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
    warnings: list[str] = []
    qv = QueryVectors(embedder) if needs_model else None
    with Retriever(open_url(f"sqlite:{path}", readonly=True), settings_for(path, model), query_encoder=qv) as retriever:
        encode_ms = None
        if qv is not None:
            qv.prefetch([text for _, text in items], progress=progress)
        runs, times, w = run_modes(retriever, items, modes, lambda r, q, m: paper_ranking(r, q, m, depth), progress)
        if qv is not None:
            encode_ms = latency_stats(qv.seconds)
        warnings += w
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
