"""Known-item evaluation of the user's own index: queries drawn from its units (titles, sentences,
codes), each with the paper it came from as the one relevant answer."""
from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError
from sheaf.core.settings import get_settings
from sheaf.eval.metrics import KNOWN_ITEM_METRICS, dedupe, evaluate_run, latency_stats
from sheaf.eval.runs import (
    MODES,
    Progress,
    QueryVectors,
    check_modes,
    paper_ranking,
    quiet,
    run_modes,
)
from sheaf.search.retriever import Retriever
from sheaf.vectors.embedder import Embedder

if TYPE_CHECKING:
    from sheaf.core.settings import Settings


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


def _unit_texts(index: Any) -> Iterator[tuple[str, str, str, str]]:
    """(unit_id, paper_id, searchable text, copied text) of every unit of the index (an
    `IndexBackend`), body units then objects, in write order: a body unit's text; an object's
    caption and table text, and the citing paragraph it copies (`nearby_text`)."""
    units = [index.paper_units(pid) for pid in index.papers_in_write_order()]
    for body, _ in units:
        for u in body:
            yield u.unit_id, u.paper_id, u.text, ""
    for _, objects in units:
        for o in objects:
            yield o.unit_id, o.paper_id, f"{o.caption or ''}\n{o.table_text or ''}", o.nearby_text or ""


def _sentences(text: str) -> list[str]:
    out = []
    for para in text.split("\n\n"):
        for s in _SENT_RE.split(" ".join(para.split())):
            words = s.split()
            if 8 <= len(words) <= 40 and sum(c.isalpha() for c in s) > 0.6 * len(s):
                out.append(s.strip())
    return out


def library_queries(index: Any, *, sample: int = 50, seed: int = 0,
                    progress: Progress = quiet) -> tuple[list[KnownItem], dict[str, Any]]:
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
    for uid, pid, text, copied in _unit_texts(index):
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
    titles = {pid: f["title"] for pid, f in index.paper_fields(index.paper_ids()).items() if f["title"]}
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
    return dedupe(m["unit_id"] for m in res.matches)


def run_library(settings: Settings | None = None, *, sample: int = 50, seed: int = 0, modes: Sequence[str] = MODES,
                embedder: Any = None, per_query: bool = False, progress: Progress = quiet) -> dict[str, Any]:
    """Known-item evaluation of the configured index (read-only): recall@1, recall@10 and MRR@10
    per query type and mode, and retrieval latency per mode."""

    modes = check_modes(modes)
    s = settings if settings is not None else get_settings()
    warnings: list[str] = []
    with Retriever.open(s) as r:
        items, stats = library_queries(r.index, sample=sample, seed=seed, progress=progress)
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
                embedder = Embedder.from_settings(get_settings(embedding_model=s.embedding_model))
            qv = r.query_encoder = QueryVectors(embedder)
            qv.prefetch([it.query for _, it in keyed], progress=progress)
            runs, times, w = run_modes(r, [(q, q) for q, _ in keyed], modes, rank, progress)
            encode_ms = latency_stats(qv.seconds)
        else:
            runs, times, w = run_modes(r, [(q, q) for q, _ in keyed], modes, rank, progress)
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
