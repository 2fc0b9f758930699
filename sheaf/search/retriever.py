"""Retrieval over the index (docs/retrieval.md): the library API behind `sheaf search`, `retrieve`,
`get`, `timeline` and `grep`. Results are plain dicts (the envelope's `data`), so the CLI,
a server and tests share them.

- `search`: paper level. Lexical (FTS5 bm25) over paper metadata (title, authors,
  abstract, journal, domain, year), body units and figures/tables; the three rankings of
  papers are fused by reciprocal rank (k = 60); one match per paper, with the snippet of
  its best evidence.
- `retrieve`: unit level, ``lexical`` (bm25), ``semantic`` (exact cosine KNN over the
  passages of the current model, deduplicated to units) or ``hybrid`` (RRF, k = 10, of
  both; each match carries each leg's rank and score). A per-paper cap (default 2) with
  over-fetching: candidates are fetched again, more of them, until `limit` matches pass
  the cap or the legs run out.
- Three layers for callers that count tokens: `retrieve` gives compact matches (a snippet);
  `get` gives whole units by short id; `timeline` gives the units around one in the
  paper's reading order.
- `grep`: exact grounding. Every occurrence of a term (a code in any of its spellings:
  SPG302, SPG 302, SPG-302, SPG‑302 ...) as a verbatim span with unit, page and character
  offsets.

The FTS tables are contentless: every snippet is cut in Python from the base tables' text.
The index is an `IndexBackend` and query vectors come from a `QueryEncoder`, both passed in
(`Retriever.open` opens the configured index, SQLite or Postgres; a warm server passes engines that answer
from memory). Every answer says which engines answered (`data.engines`). Nothing here imports
numpy, torch, pydantic or dagster until the semantic leg runs.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.defaults import (
    DEFAULT_LIMIT,
    DEFAULT_PER_PAPER,
    DEFAULT_WINDOW,
    KINDS,
    MODES,
    UNIT_KINDS,
    in_kinds,
)
from sheaf.core.envelope import SheafError
from sheaf.core.models import BodyUnit, ObjectUnit
from sheaf.core.settings import get_settings
from sheaf.search.evidence import EVIDENCE_DEPTH, NONE, Evidence
from sheaf.search.fusion import RankFusion
from sheaf.search.grep import find_spans, page_at, term_pattern
from sheaf.search.paper_search import PaperSearch
from sheaf.search.snippets import (
    SUMMARY_CHARS,
    make_snippet,
    one_line,
)
from sheaf.search.units import (  # the constants and Result are also this module's (its callers import them here)
    BODY_WEIGHTS,
    HYBRID_RRF_K,
    OBJECT_WEIGHTS,
    PAPER_WEIGHTS,
    RRF_K,
    SCORE_KINDS,
    SEMANTIC_STRONG_GAP,
    SEMANTIC_STRONG_MIN,
    Result,
    Unit,
    kinds_of,
    positive,
    reading_order,
    scopes_of,
    unit_heading,
    unit_page_span,
    unit_source,
    unit_text,
)
from sheaf.store.artifact_store import open_artifacts
from sheaf.store.backend import MAX_KNN_K, LexicalEngine, VectorEngine
from sheaf.store.fulltext import (  # the query builder's own rules, so grep and search agree on codes
    WORD_RE,
)
from sheaf.store.records import FtsHit
from sheaf.store.select import open_backend
from sheaf.vectors.identity import (
    ModelChangedError,
    ModelIdentity,
    QueryVector,
    resolve_model_path,
)

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.core.settings import Settings
    from sheaf.store.backend import IndexBackend
    from sheaf.vectors.query_encoder import QueryEncoder

__all__ = [
    "RRF_K", "HYBRID_RRF_K", "DEFAULT_LIMIT", "DEFAULT_PER_PAPER", "MODES", "KINDS", "Result", "Retriever",
    "term_pattern", "make_snippet", "reading_order", "PAPER_WEIGHTS", "BODY_WEIGHTS", "OBJECT_WEIGHTS",
]


def _canonical_model(model: str) -> str:
    return resolve_model_path(model)[0]


@dataclass
class _Ranked:
    """What ranking a retrieval found: the units picked (best first, with each leg's rank and
    score), the query vector, each unit's best passage, and what the lexical leg relaxed."""

    picked: list[dict[str, Any]] = field(default_factory=list)
    qv: Any = None
    ordinals: dict[str, int] = field(default_factory=dict)
    relaxed: bool = False
    every_word: set[str] = field(default_factory=set)
    dropped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    evidence: dict[str, tuple[Evidence, bool]] = field(default_factory=dict)  # unit id: (evidence, back matter)
    units: dict[str, Unit] = field(default_factory=dict)  # the candidates read so far


class Retriever(PaperSearch, RankFusion):
    """Read-only queries over one open index (an `IndexBackend`).

    Its dependencies are passed in: the `index` (with whatever engines its owner gave it) and
    the `query_encoder` that embeds queries (a `sheaf.vectors.query_encoder.QueryEncoder`, or
    anything with its `encode(text, identity)`); without one, the first semantic query makes
    one from `settings`. A warm server keeps one Retriever across queries (`_memoized`)."""

    def __init__(self, index: IndexBackend, settings: Settings | None = None, *, query_encoder: "QueryEncoder | None" = None,
                 owns_index: bool = True) -> None:
        self.index = index
        self.settings = settings if settings is not None else get_settings()
        self.query_encoder = query_encoder
        self._owns = owns_index
        self._papers: dict[str, dict[str, Any]] = {}
        self._memo: dict[Any, Any] = {}  # facts about the index content (see `_memoized`)
        self._memo_key: Any = None
        self._aux: IndexBackend | None = None  # a second handle: the lexical leg of a hybrid query
        self._aux_tried = False

    # --- lifecycle ------------------------------------------------------------------------

    @classmethod
    def open(cls, settings: Settings | None = None, *, query_encoder: "QueryEncoder | None" = None,
             lexical_engine: LexicalEngine | None = None, vector_engine: VectorEngine | None = None) -> "Retriever":
        """Open the configured index read-only (`sheaf.store.select`: the SQLite file, or Postgres
        when SHEAF_INDEX_URL says so). No index: INDEX_NOT_FOUND; not a readable Sheaf index, or
        a server that cannot be reached: BACKEND_UNAVAILABLE. The engines, when given, answer lexical
        rankings and vector searches from memory (a warm server's)."""
        s = settings if settings is not None else get_settings()
        index = open_backend(s, readonly=True, lexical_engine=lexical_engine, vector_engine=vector_engine)
        return cls(index, s, query_encoder=query_encoder)

    @property
    def conn(self) -> Any:
        """The SQLite connection of the embedded backend (tests and benchmarks read it)."""
        return self.index.conn  # type: ignore[attr-defined]

    def close(self) -> None:
        if self._aux is not None:
            self._aux.close()
            self._aux = None
        if self._owns:
            self.index.close()

    def engines(self) -> dict[str, str]:
        """Which engines answered this Retriever's last query (lexical, vector)."""
        out = dict(self.index.engines)
        if self._aux is not None and "lexical" in self._aux.engines:
            out.setdefault("lexical", self._aux.engines["lexical"])
        return out

    def _memoized(self, key: Any, compute: Callable[[], Any]) -> Any:
        """`compute()`, remembered while the index content stays the same (`IndexBackend.state`).
        Facts such as the vector collection or the papers without vectors then cost one pragma
        per query instead of their scans (a warm server's Retriever lives across queries)."""
        state = self.index.state()
        if state != self._memo_key:
            self._memo.clear()
            self._memo_key = state
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def __enter__(self) -> "Retriever":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- papers ---------------------------------------------------------------------------

    def _parsed_title(self, paper_id: str) -> str | None:
        """A stub paper's title from its parsed structure tree (the artifact), if any."""
        try:
            tree = open_artifacts(self.settings).read("structure_tree", paper_id)
        except (OSError, ValueError, SheafError):
            return None
        title = tree.get("title") if isinstance(tree, dict) else None
        return title if isinstance(title, str) and title.strip() and title != paper_id else None

    def papers(self, paper_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Match fields of papers (cached): zotero_key, title, first_author, year, journal,
        domain, has_metadata. A stub row's title falls back to the parsed title."""
        want = [p for p in dict.fromkeys(paper_ids) if p not in self._papers]
        if want:
            self._papers.update(self.index.paper_fields(want))
            for pid in want:
                self._papers.setdefault(pid, {"zotero_key": pid, "title": None, "first_author": None,
                                              "year": None, "journal": None, "domain": None,
                                              "has_metadata": False, "citation_key": None})
        out = {}
        for pid in dict.fromkeys(paper_ids):
            rec = self._papers[pid]
            if rec["title"] is None and not rec.get("_title_checked"):
                rec["_title_checked"] = True
                rec["title"] = self._parsed_title(pid)
            out[pid] = rec
        return out

    def clear_paper_cache(self) -> None:
        """Forget the paper fields read so far (a Retriever lent to another query of a warm
        server starts from them as a fresh Retriever would)."""
        self._papers = {}

    def _paper_fields(self, paper_id: str) -> dict[str, Any]:
        rec = self.papers([paper_id])[paper_id]
        out = {k: rec[k] for k in ("zotero_key", "title", "first_author", "year", "journal", "domain")}
        if rec.get("link"):  # a Zotero item: its zotero://select link
            out["link"] = rec["link"]
        return out

    def _require_papers(self, keys: Sequence[str] | None) -> list[str] | None:
        if not keys:
            return None
        keys = list(dict.fromkeys(keys))
        known = self.index.known_papers(keys)
        missing = [k for k in keys if k not in known]
        if missing:
            by_fold = {p.casefold(): p for p in self._indexed_papers()}
            close = {k: by_fold[k.casefold()] for k in missing if k.casefold() in by_fold}
            hint = ("did you mean " + ", ".join(f"--paper {v}" for v in close.values()) + "? (paper keys are "
                    "case-sensitive)") if close else \
                "check the key (the Zotero item key: `sheaf search` finds papers), or build the index (sheaf build)"
            raise SheafError("NOT_FOUND", f"paper {', '.join(missing)} is not in the index"
                             + (f"; did you mean {', '.join(close.values())}?" if close else ""),
                             {"papers": missing, "suggestions": close}, hint=hint)
        return keys

    def _not_a_unit(self, refs: Sequence[str]) -> SheafError:
        """NOT_FOUND for unit ids that do not exist, saying so when one is a paper key."""
        refs = list(refs)
        papers = self.index.known_papers([r.strip() for r in refs])
        if papers:
            key = sorted(papers)[0]
            return SheafError("NOT_FOUND", f"no unit with id {', '.join(refs)}: {key} is a paper key, not a unit's "
                              "short id", {"ids": refs, "papers": sorted(papers)},
                              hint=f"`sheaf retrieve QUERY --paper {key}` gives that paper's best passages "
                                   "(with their short ids)")
        return SheafError("NOT_FOUND", f"no unit with id {', '.join(refs)}", {"ids": refs},
                          hint="short ids come from `sheaf retrieve`; they change when a paper is rebuilt")

    # --- matches ----------------------------------------------------------------------------

    def _match(self, u: Unit, *, score: float | None, text: str, query: str = "",
               full: bool = False, full_text: str | None = None) -> dict[str, Any]:
        """A match: the paper's fields, the unit's, `text` as shown (snippet or full text) and a
        one-line `summary` (from `full_text`, default `text`)."""
        m = self._paper_fields(u.paper_id)
        m.update({
            "score": None if score is None else round(float(score), 6),
            "text": text,
            "heading": unit_heading(u),
            "source": unit_source(u),
            "unit_id": u.unit_id,
            "short_id": u.short_id,
            "section_path": list(u.section_path),
            "page_span": unit_page_span(u),
            "summary": make_snippet(full_text if full_text is not None else text, query, SUMMARY_CHARS),
            "text_is_full": full,
        })
        return m

    # --- lexical legs -----------------------------------------------------------------------

    def _matches(self, query: str) -> tuple[str, str]:
        return self.index.match_queries(query)

    def _lexical_units(self, query: str, kinds: Sequence[str], n: int, paper_ids: Sequence[str] | None,
                       index: IndexBackend | None = None) -> tuple[list[FtsHit], bool, bool, set[str]]:
        """Best units for the query: those with every word first (bm25), then those with some
        of them. Returns (hits, exhausted, relaxed, refs of the hits holding every word).
        `index`: another handle on the index."""
        ix = self.index if index is None else index
        and_q, or_q = self._matches(query)
        scopes = [(scope, BODY_WEIGHTS if scope == "body" else OBJECT_WEIGHTS) for scope in scopes_of(kinds)]
        every_kind = set(UNIT_KINDS) <= set(kinds)

        def run(match: str) -> tuple[list[FtsHit], bool]:
            """Every scope's best n of the kinds asked for, merged (not cut); True when no
            scope had more (before the kinds were picked: n grows until then)."""
            hits: list[FtsHit] = []
            complete = True
            for scope, w in scopes:
                got = ix.lexical_units(scope, match, limit=n, paper_ids=paper_ids, weights=w)
                complete &= len(got) < n
                hits += got if every_kind or scope == "object" else \
                    [h for h in got if in_kinds(h.ref, kinds)]
            # Stable sort on the score alone: ties keep each scope's own order (bm25, then
            # rowid), so the first n candidates never change when more are fetched.
            hits.sort(key=lambda h: -h.score)
            return hits, complete

        hits, complete = run(and_q)
        every = {h.ref for h in hits}
        relaxed = False
        if or_q != and_q and len(hits) <= n:  # room left: units with some of the words follow
            more, complete = run(or_q)
            seen = {h.ref for h in hits}
            extra = [h for h in more if h.ref not in seen]
            relaxed = not hits and bool(extra)
            hits = hits + extra
        return hits[:n], complete and len(hits) <= n, relaxed, every

    def _lexical_in_background(self, query: str, kinds: Sequence[str], n: int,
                               paper_ids: Sequence[str] | None) -> "_Background | None":
        """`_lexical_units` on a thread over a second handle on the index (SQLite, ONNX and
        numpy all release the GIL: a hybrid query costs about its slower leg, not the sum), or
        None (run it in line) when the index offers no second handle."""
        if self._aux is None and not self._aux_tried:
            self._aux_tried = True
            self._aux = self.index.clone()
        if self._aux is None:
            return None
        return _Background(self._lexical_units, query, kinds, n, paper_ids, self._aux)

    # --- semantic leg -------------------------------------------------------------------------

    def _collection(self) -> ModelIdentity:
        """The index collection of the configured model; VECTOR_NOT_BUILT / MODEL_CHANGED early
        (before any model is loaded). Remembered while the index is unchanged (errors are not)."""
        ident: ModelIdentity = self._memoized(("collection", self.settings.embedding_model), self._find_collection)
        return ident

    def _find_collection(self) -> ModelIdentity:
        cols = self.index.collections()
        hint = "run `sheaf build` to embed the library (or use --mode lexical meanwhile)"
        if not cols:
            raise SheafError("VECTOR_NOT_BUILT", "the index has no vectors yet", hint=hint)
        name = _canonical_model(self.settings.embedding_model)
        mine = [c for c in cols.values() if c.name == name]
        if not mine:
            raise ModelChangedError(
                f"the configured embedding model {name!r} has no vectors in the index, which holds "
                + "; ".join(c.describe() for c in cols.values()),
                {"configured_model": name, "index_models": [c.to_dict() for c in cols.values()]},
                hint="set SHEAF_EMBEDDING_MODEL back to the model the index was built with, or "
                     "rebuild the vectors with the new model (sheaf build)")
        ident = mine[0]
        n = self.index.passage_count(ident)  # remembered while the index is unchanged; probes for damage
        if n == 0:
            raise SheafError("VECTOR_NOT_BUILT", f"no vectors of {name} in the index yet",
                             {"collection": ident.key}, hint=hint)
        return ident

    def _encoder(self) -> "QueryEncoder":
        if self.query_encoder is None:
            # The vector stack (onnxruntime, tokenizers, numpy; torch for the fallback) loads only
            # when a query needs a vector: the lexical commands never pay for it.
            from sheaf.vectors.query_encoder import QueryEncoder

            self.query_encoder = QueryEncoder(self.settings)
        return self.query_encoder

    def query_vector(self, query: str) -> tuple[QueryVector, list[str]]:
        ident = self._collection()
        return self._encoder().encode(query, ident)

    def _semantic_units(self, qv: QueryVector, kinds: Sequence[str], n: int,
                        paper_ids: Sequence[str] | None) -> tuple[list[tuple[str, str, float, int]], bool]:
        """Best units by their best passage: [(unit_id, paper_id, cosine, passage ordinal)]."""
        k = min(MAX_KNN_K, max(n * 2, 20))
        hits = self.index.vector_candidates(qv, k, paper_ids)
        if not hits:
            self._check_vectors(qv.identity, paper_ids)
        out: dict[str, tuple[str, str, float, int]] = {}
        for h in hits:
            if h.unit_id not in out and in_kinds(h.unit_id, kinds):
                out[h.unit_id] = (h.unit_id, h.paper_id, h.score, h.ordinal)
        exhausted = (len(hits) < k or k >= MAX_KNN_K) and len(out) <= n
        return list(out.values())[:n], exhausted

    def _check_vectors(self, ident: ModelIdentity, paper_ids: Sequence[str] | None) -> None:
        """No nearest vector at all although passages exist: the vector table lost its rows."""
        n = self.index.passage_count(ident, paper_ids)
        if n:
            raise SheafError("VECTOR_CORRUPTED", f"the vector table of collection {ident.key} returned "
                             f"nothing for {n} passages", {"collection": ident.key, "passages": n},
                             hint="rebuild the vectors (sheaf build)")

    # --- retrieve -----------------------------------------------------------------------------

    def retrieve(self, query: str, *, mode: str = "hybrid", limit: int = DEFAULT_LIMIT,
                 per_paper: int = DEFAULT_PER_PAPER, papers: Sequence[str] | None = None,
                 kind: str = "all", full: bool = False, fetch: int | None = None, year_from: int | None = None,
                 year_to: int | None = None, domains: Sequence[str] | None = None,
                 authors: Sequence[str] | None = None, collections: Sequence[str] | None = None,
                 tags: Sequence[str] | None = None, min_score: float | None = None) -> Result:
        """Unit-level retrieval (see the module docstring). `per_paper` 0 means no cap;
        `fetch` is the first number of candidates per leg (times four until `limit` is met);
        the metadata filters as `search`'s; `min_score`: only matches scoring that or more (in
        the mode's score: bm25, cosine or rrf). Every match says whether it is `strong` (its
        unit holds every word of the query, or its cosine is near the best one's).

        In steps: check the request, scope it to the papers the filters leave, rank (both legs,
        fetching more until `limit` is met), then make the matches and the envelope."""
        self._check_retrieve(query, mode, kind, limit, per_paper)
        kinds = kinds_of(kind)
        paper_ids = self._require_papers(papers)
        filtered, filter_warnings, filters = self._filter_papers(year_from, year_to, domains, authors, collections, tags)
        if filtered is not None:
            paper_ids = filtered if paper_ids is None else [k for k in paper_ids if k in set(filtered)]
        data = {"query": query, "mode": mode, "limit": limit, "per_paper": per_paper, "kind": kind,
                "papers": list(papers or []), "filters": filters, "full": full, "score_kind": SCORE_KINDS[mode]}
        if paper_ids == []:  # the filters leave no paper: nothing to rank
            res = Result({**data, "strong_matches": 0, "matches": [], "engines": self.engines()}, list(filter_warnings))
            self._nothing_found(res, semantic=mode != "lexical", filtered=True)
            return res
        n = max(fetch or 0, 1) if fetch else max(limit * max(per_paper, 1) * 3, 30)
        ranked = self._rank_units(query, mode, kinds, n, paper_ids, limit, per_paper, min_score)
        matches = self._unit_matches(ranked, query, full)
        return self._retrieve_result(data, ranked, matches, [*filter_warnings, *ranked.warnings], paper_ids,
                                     filtered is not None)

    def _check_retrieve(self, query: str, mode: str, kind: str, limit: int, per_paper: int) -> None:
        """BAD_QUERY for a request that cannot run, before any model is loaded."""
        if mode not in MODES:
            raise SheafError("BAD_QUERY", f"mode must be one of {', '.join(MODES)}", {"mode": mode})
        if kind not in KINDS:
            raise SheafError("BAD_QUERY", f"kind must be one of {', '.join(KINDS)}", {"kind": kind})
        positive("--limit", limit)
        positive("--per-paper", per_paper, 0)
        if not (query or "").strip():
            raise SheafError("BAD_QUERY", "the query is empty", hint="give a question or some words")
        if mode != "semantic":
            self._matches(query)
        elif not WORD_RE.search(unicodedata.normalize("NFKC", query)):
            raise SheafError("BAD_QUERY", "the query holds no word", {"query": query},
                             hint="ask with words: punctuation alone has no meaning to embed")

    def _rank_units(self, query: str, mode: str, kinds: tuple[str, ...], n: int, paper_ids: list[str] | None,
                    limit: int, per_paper: int, min_score: float | None) -> _Ranked:
        """The units to show, best first: each leg's first `n` candidates, fused (RRF for hybrid),
        capped per paper; `n` times four until `limit` is met or the legs run out. In hybrid mode
        the lexical leg's first round runs in a thread while the query is encoded. The fused
        order is weighed by evidence (`RankFusion._weigh`); a quoted phrase keeps only the units
        holding it, in every mode."""
        r = _Ranked()
        phrases, holders = self._phrase_holders(query, kinds, paper_ids)
        if holders is not None:
            paper_ids = sorted(set(holders.values()))
            if not holders:
                r.warnings.append("no unit holds " + " and ".join(f'"{p}"' for p in phrases)
                                  + " as written: drop the quotes to search for the words")
                return r
        pending = None
        if mode == "hybrid":
            self._collection()  # VECTOR_NOT_BUILT / MODEL_CHANGED first, as without the thread
            pending = self._lexical_in_background(query, kinds, n, paper_ids)
        if mode != "lexical":
            try:
                r.qv, w = self.query_vector(query)
            except BaseException:
                if pending is not None:
                    pending.join()  # the encoder's error, as without the background leg
                raise
            r.warnings += w
        words = None
        while True:
            legs: dict[str, list[tuple[str, str, float]]] = {}
            exhausted = True
            sem_done: Any = None
            if pending is not None:  # the semantic leg meanwhile; errors in the sequential order
                try:
                    sem_done = self._semantic_units(r.qv, kinds, n, paper_ids)
                except Exception as e:  # noqa: BLE001 - raised below unless the lexical leg failed
                    sem_done = e
            if mode != "semantic":
                if pending is not None:
                    lex, ex, r.relaxed, r.every_word = pending.result()
                    pending = None
                else:
                    lex, ex, r.relaxed, r.every_word = self._lexical_units(query, kinds, n, paper_ids)
                legs["lexical"] = [(h.ref, h.paper_id, h.score) for h in lex]
                exhausted &= ex
            if isinstance(sem_done, Exception):
                raise sem_done
            if r.qv is not None:
                sem, ex = sem_done if sem_done is not None else self._semantic_units(r.qv, kinds, n, paper_ids)
                legs["semantic"] = [(u, p, s) for u, p, s, _ in sem]
                r.ordinals = {u: o for u, _, _, o in sem}
                exhausted &= ex
            fused = self._fuse(legs, mode)
            weighed_all = len(fused) >= EVIDENCE_DEPTH  # the evidence sees what a larger fetch would
            if holders is not None:
                fused = [c for c in fused if c["unit_id"] in holders]
            if words is None:
                words = self._query_words(query, kinds)
            fused = self._weigh(fused, words, mode, r.evidence, r.units)
            if min_score is not None:
                fused = [c for c in fused if c["score"] >= min_score]
            r.dropped = {}
            r.picked = self._cap(fused, per_paper, limit, r.dropped)
            if (len(r.picked) >= limit and weighed_all) or exhausted or self._below(min_score, mode, legs, n):
                return r
            n *= 4

    def _unit_matches(self, r: _Ranked, query: str, full: bool) -> list[dict[str, Any]]:
        """The matches of the ranked units: text (whole or a snippet around the best passage),
        each leg's rank and score, and whether the match is strong."""
        want = [c["unit_id"] for c in r.picked if c["unit_id"] not in r.units]
        units = {**r.units, **(self._units(want) if want else {})}
        # When some candidate holds every rare term of the query, a unit missing one is not strong
        # however near its meaning: the "weaker matches" line falls where the evidence does.
        any_rare = any(ev.rare for ev, _ in r.evidence.values())
        passage_starts = self._passage_starts(r.qv, r.ordinals, r.picked) if r.qv is not None else {}
        sem_scores = [c["legs"]["semantic"]["score"] for c in r.picked if c["legs"].get("semantic")]
        strong_cos = max(max(sem_scores, default=1.0) - SEMANTIC_STRONG_GAP, SEMANTIC_STRONG_MIN)
        matches = []
        for c in r.picked:
            u = units.get(c["unit_id"])
            if u is None:  # removed between two statements (a concurrent build): skip it
                continue
            text = unit_text(u)
            shown = text if full else make_snippet(text, query, start_hint=passage_starts.get(u.unit_id, 0))
            m = self._match(u, score=c["score"], text=shown, query=query, full=full, full_text=text)
            m["legs"] = c["legs"]
            sem = c["legs"].get("semantic")
            ev = c.get("evidence", NONE)
            m["strong"] = ev.exact or (c["legs"].get("lexical") is not None and c["unit_id"] in r.every_word) or \
                (sem is not None and sem["score"] >= strong_cos and (ev.rare or not any_rare))
            m["evidence"] = ev.label
            m["back_matter"] = bool(c.get("back_matter"))
            matches.append(m)
        return matches

    def _retrieve_result(self, data: dict[str, Any], r: _Ranked, matches: list[dict[str, Any]],
                         warnings: list[str], paper_ids: list[str] | None, filtered: bool) -> Result:
        """The envelope's data and warnings of a retrieval, with what to do next."""
        limit, per_paper, mode = data["limit"], data["per_paper"], data["mode"]
        if r.relaxed:
            warnings.append("no unit contains every word of the query; these contain some of them")
        capped = {k: v for k, v in r.dropped.items() if v}
        if per_paper and capped and len(matches) < limit:
            warnings.append(f"{len(matches)} of the {limit} asked for: --per-paper {per_paper} left out "
                            + ", ".join(f"{v} more unit{'s' if v != 1 else ''} of {k}"
                                        for k, v in sorted(capped.items()))
                            + " (--per-paper 0 shows every unit)")
        data = {**data, "strong_matches": sum(1 for m in matches if m["strong"]), "capped": capped, "matches": matches}
        if mode == "hybrid":
            data["fusion"] = {"method": "rrf", "k": HYBRID_RRF_K}
        if r.qv is not None:
            data["model"] = r.qv.identity.name
            warnings += self._embedding_gaps(r.qv.identity, paper_ids)
        data["engines"] = self.engines()
        res = Result(data, warnings)
        if not matches:
            self._nothing_found(res, semantic=mode != "lexical", filtered=filtered)
        else:
            res.next_actions.append("sheaf get SHORT_ID... for whole units; sheaf timeline SHORT_ID for "
                                    "the units around one")
        return res


    def _units(self, unit_ids: Sequence[str]) -> dict[str, Unit]:
        return self.index.units(unit_ids)

    def _passage_starts(self, qv: QueryVector, ordinals: dict[str, int],
                        picked: list[dict[str, Any]]) -> dict[str, int]:
        """Where each semantic match's best passage starts in its unit's text (snippet hint)."""
        want = {f"{c['unit_id']}#{ordinals[c['unit_id']]}": c["unit_id"] for c in picked
                if ordinals.get(c["unit_id"])}
        starts = self.index.passage_starts(qv.identity, list(want))
        return {want[pid]: start for pid, start in starts.items()}

    def _embedding_gaps(self, ident: ModelIdentity, paper_ids: Sequence[str] | None) -> list[str]:
        """A warning when indexed papers (of `paper_ids`, default all) have no vectors of `ident`."""
        key = ("gaps", ident.key, None if paper_ids is None else tuple(sorted(set(paper_ids))))
        indexed, gap = self._memoized(key, lambda: self._count_gaps(ident, key[2]))
        return [f"{gap} of {indexed} indexed papers have no vectors yet: semantic results miss "
                "them (run `sheaf build`)"] if gap else []

    def _count_gaps(self, ident: ModelIdentity, paper_ids: Sequence[str] | None) -> tuple[int, int]:
        """(indexed papers, those without a passage of `ident`), of `paper_ids` when given."""
        return self.index.embedding_gaps(ident, paper_ids)

    def _indexed_papers(self) -> list[str]:
        """The ids of the papers with units in the index, sorted."""
        return self.index.indexed_papers()

    # --- coverage and empty answers -----------------------------------------------------------

    def coverage(self) -> dict[str, Any]:
        """How much of the library is searchable: papers in the library folder, parsed (units
        artifacts), with metadata, indexed (units in the index), embedded (vectors of the
        configured model)."""
        # Reading the library folder needs the ingest package (~20 ms to import): only an
        # empty answer, which reports coverage, pays for it.
        from sheaf.library.discover import discover_library

        s = self.settings
        library = None
        try:
            if Path(s.library).is_dir():
                library = len(discover_library(s, write=False).papers)
        except (OSError, SheafError):  # coverage is a hint: another library, a home without a record
            pass
        store = open_artifacts(s)
        try:
            names = store.names("body_units")
            parsed = (sum(1 for n in names if n.endswith(".parquet") and not n.startswith("."))
                      if names or "body_units" in store.assets() else None)
        except SheafError:  # an object store out of reach: coverage unknown
            parsed = None
        indexed = len(self._indexed_papers())
        metadata = self.index.papers_with_metadata()
        embedded = 0
        try:
            name = _canonical_model(s.embedding_model)
            for ident in self.index.collections().values():
                if ident.name == name:
                    embedded = max(embedded, self.index.embedded_papers(ident))
        except SheafError:
            pass
        return {"library": library, "parsed": parsed, "metadata": metadata, "indexed": indexed,
                "embedded": embedded}

    def _nothing_found(self, res: Result, *, semantic: bool, filtered: bool = False) -> None:
        cov = self.coverage()
        res.data["coverage"] = cov
        acts = res.next_actions
        lib, parsed, indexed, embedded = cov["library"], cov["parsed"], cov["indexed"], cov["embedded"]
        if lib is not None and parsed is not None and lib > parsed:
            acts.append(f"{lib - parsed} papers of the library are not parsed yet: run `sheaf build`")
        base = parsed if parsed is not None else lib
        if base is not None and base > indexed:
            acts.append(f"{base - indexed} papers are not indexed yet: run `sheaf build`")
        if indexed > embedded:
            acts.append(f"{indexed - embedded} papers are not embedded yet: run `sheaf build`")
        if indexed == 0:
            acts.append("the index holds no papers: run `sheaf build`")
        if filtered:
            acts.append("drop or widen the filters (--year-from, --year-to, --domain, --collection, --author)")
        acts.append("try other or fewer words" + ("" if semantic else ", or `sheaf retrieve QUERY "
                                                   "--mode semantic` for passages by meaning"))

    # --- get / timeline -------------------------------------------------------------------------

    def _unit(self, ref: str) -> Unit | None:
        ref = ref.strip().strip("[]")
        return self.index.unit(ref) if ref else None

    def get(self, refs: Sequence[str]) -> Result:
        """Whole units by short id (or unit id), in the order asked."""
        refs = [r for r in refs if r and r.strip()]
        if not refs:
            raise SheafError("BAD_QUERY", "give at least one short id", hint="short ids come from sheaf retrieve")
        found: list[Unit] = []
        missing: list[str] = []
        for r in dict.fromkeys(refs):
            u = self._unit(r)
            (found.append(u) if u is not None else missing.append(r))
        if not found:
            raise self._not_a_unit(missing)
        matches = [self._match(u, score=None, text=unit_text(u), full=True) for u in found]
        warnings = [f"no unit with id {r}" for r in missing]
        return Result({"ids": refs, "missing": missing, "matches": matches}, warnings,
                      ["sheaf timeline SHORT_ID for the units around one"])

    def timeline(self, ref: str, *, window: int = DEFAULT_WINDOW) -> Result:
        """The `window` units before and after one unit in its paper's reading order."""
        positive("--window", window, 0)
        u = self._unit(ref)
        if u is None:
            e = self._not_a_unit([ref])
            e.details["id"] = ref
            raise e
        body, objects = self.index.paper_units(u.paper_id)
        order = reading_order(body, objects)
        pos = next(i for i, x in enumerate(order) if x.unit_id == u.unit_id)
        lo, hi = max(0, pos - window), min(len(order), pos + window + 1)
        matches = []
        for i in range(lo, hi):
            m = self._match(order[i], score=None, text=unit_text(order[i]), full=True)
            m["offset"] = i - pos
            m["position"] = i
            matches.append(m)
        data = {"anchor": {"unit_id": u.unit_id, "short_id": u.short_id, "position": pos},
                "paper": self._paper_fields(u.paper_id), "window": window, "units_in_paper": len(order),
                "matches": matches}
        return Result(data, [], [] if hi - lo == len(order) else
                      [f"sheaf timeline {order[lo].short_id} or {order[hi - 1].short_id} to read on"])

    def paper(self, key: str) -> Result:
        """A paper's metadata and its section outline: each section (a distinct section path,
        in reading order) with its first unit's short id, its pages and its number of units
        (figures and tables counted apart), so that a caller can read the structure of a paper
        before asking for units."""
        pid = self._require_papers([key])[0]  # type: ignore[index]
        rec = self.index.paper_text(pid) or {"title": "", "abstract": "", "authors": [], "journal": ""}
        body, objects = self.index.paper_units(pid)
        sections: dict[tuple[str, ...], dict[str, Any]] = {}
        for u in reading_order(body, objects):
            s = sections.get(u.section_path)
            if s is None:
                s = sections[u.section_path] = {"section_path": list(u.section_path), "first_short_id": u.short_id,
                                                "pages": None, "units": 0, "figures": 0, "tables": 0}
            if isinstance(u, ObjectUnit):
                s["figures" if u.object_kind == "figure" else "tables"] += 1
            else:
                s["units"] += 1
            span = unit_page_span(u)
            if span:
                lo, hi = s["pages"] or span
                s["pages"] = [min(lo, span[0]), max(hi, span[1])]
        fields = self._paper_fields(pid)
        data = {"paper": {**fields, "title": fields["title"] or rec["title"] or None, "authors": rec["authors"],
                          "abstract": rec["abstract"] or None},
                "units": len(body), "objects": len(objects), "sections": list(sections.values())}
        return Result(data, [], ["sheaf get SHORT_ID for a section's first unit; sheaf timeline SHORT_ID to read on"]
                      if sections else [])

    # --- grep -----------------------------------------------------------------------------------

    def grep(self, term: str, *, papers: Sequence[str] | None = None, kind: str = "all") -> Result:
        """Every occurrence of `term` (and its variants, see `term_pattern`) in unit text
        (body text, notes and annotations, figure and table captions, table text) of the
        units of `kind` (see `KINDS`): the verbatim span, unit, page and character offsets into
        the field. The citing-paragraph copy an object carries (`nearby_text`) is not searched:
        that paragraph is found in its body unit."""
        if kind not in KINDS:
            raise SheafError("BAD_QUERY", f"kind must be one of {', '.join(KINDS)}", {"kind": kind})
        kinds = kinds_of(kind)
        pat = term_pattern(term)
        paper_ids = self._require_papers(papers)
        match = self.index.match_query(term)
        warnings: list[str] = []
        candidates: set[str] | None = None
        if match is not None and paper_ids is None:
            hits = [h for scope in scopes_of(kinds)
                    for h in self.index.lexical_units(scope, match, limit=-1) if in_kinds(h.ref, kinds)]
            candidates = {h.ref for h in hits}
            paper_ids = sorted({h.paper_id for h in hits})
        elif paper_ids is None:
            warnings.append("the term has no word the full-text index knows: every unit was scanned")
            paper_ids = self._indexed_papers()
        matches: list[dict[str, Any]] = []
        variants: dict[str, int] = {}
        for pid in sorted(paper_ids):
            body, objects = self.index.paper_units(pid)
            for u in reading_order(body, objects):
                if not in_kinds(u.unit_id, kinds):
                    continue
                fields = ([("text", u.text)] if isinstance(u, BodyUnit) else
                          [("caption", u.caption or ""), ("table_text", u.table_text or "")])
                for fname, text in fields:
                    for s, e in find_spans(pat, text):
                        span = text[s:e]
                        variants[span] = variants.get(span, 0) + 1
                        matches.append(self._grep_hit(u, fname, text, s, e))
                        if candidates is not None and u.unit_id not in candidates:
                            warnings.append(f"{u.unit_id}: found although the full-text index missed it")
        res = Result({"term": term, "pattern": pat.pattern, "papers": list(papers or []), "kind": kind,
                      "variants": variants, "papers_with_hits": len({m["zotero_key"] for m in matches}),
                      "matches": matches}, warnings)
        if not matches:
            self._nothing_found(res, semantic=True)
        return res

    def _grep_hit(self, u: Unit, fname: str, text: str, s: int, e: int) -> dict[str, Any]:
        a, b = max(0, s - 60), min(len(text), e + 60)
        if a > 0 and (sp := text.find(" ", a, s)) >= 0:  # whole words at the edges
            a = sp + 1
        if b < len(text) and (sp := text.rfind(" ", e, b)) >= 0:
            b = sp
        context = ("…" if a else "") + one_line(text[a:b]) + ("…" if b < len(text) else "")
        m = self._match(u, score=None, text=context)
        page = page_at(u, s) if isinstance(u, BodyUnit) else u.page
        m.update({"field": fname, "char_start": s, "char_end": e, "span": text[s:e], "page": page})
        return m


class _Background:
    """`fn(*args)` on a daemon thread; `result()` waits and returns it (or raises its error)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        import threading

        self._out: tuple[bool, Any] = (False, None)

        def run() -> None:
            try:
                self._out = (True, fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
                self._out = (False, e)

        self._thread = threading.Thread(target=run, name="sheaf-lexical-leg", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def result(self) -> Any:
        self._thread.join()
        ok, value = self._out
        if not ok:
            raise value
        return value
