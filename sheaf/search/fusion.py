"""How `retrieve` ranks: the legs fused (one leg's own order, or reciprocal rank), the fused
order weighed by what each unit holds of the query (`sheaf.search.evidence`: the phrase, its rare
terms close together, back matter below the body), whether more candidates could still pass a
score floor, and the per-paper cap (`sheaf.search.retriever`)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sheaf.core.defaults import in_kinds
from sheaf.search.evidence import (
    BACK_MATTER_WEIGHT,
    EVIDENCE_DEPTH,
    NONE,
    Evidence,
    QueryWords,
    Stems,
    evidence,
    is_back_matter,
    quoted_phrases,
    searchable,
)
from sheaf.search.units import HYBRID_RRF_K, scopes_of
from sheaf.store.fulltext import FTS_TOKENIZER
from sheaf.store.tokens import FtsTokenizer

if TYPE_CHECKING:
    from sheaf.store.backend import IndexBackend
    from sheaf.store.records import Unit


class RankFusion:
    """The fusion steps of `Retriever.retrieve`, as methods of its base class (they read its
    `index`, `_units` and `_memo`)."""

    _stems: Stems | None = None

    if TYPE_CHECKING:  # what `Retriever` supplies (see there)
        index: IndexBackend

        def _memoized(self, key: Any, compute: Callable[[], Any]) -> Any: ...
        def _units(self, unit_ids: Sequence[str]) -> dict[str, Unit]: ...

    def _stemmer(self) -> Stems:
        """Words to the index's tokens, kept while this Retriever lives (a warm server's does)."""
        if self._stems is None:
            tokenizer = FtsTokenizer(cache=64)
            self._stems = Stems(lambda text: tokenizer.tokens(FTS_TOKENIZER, text))
        return self._stems

    def _query_words(self, query: str, kinds: Sequence[str]) -> QueryWords:
        """The query's tokens, content and rare terms, the idf from the scope the kinds search."""
        scope = "object" if set(kinds) == {"object"} else "body"
        # The counts are kept while the index is unchanged: only a term not asked for before is read.
        known: dict[str, int] = self._memoized(("term_rows", scope), dict)

        def rows(terms: Sequence[str]) -> tuple[int, dict[str, int]]:
            new = [t for t in terms if t not in known]
            if new or "" not in known:
                n, got = self.index.term_rows(scope, new)
                known.update({t: got.get(t, 0) for t in new}, **{"": n})
            return known[""], {t: known[t] for t in terms}

        return QueryWords.of(query, self._stemmer(), rows)

    def _weigh(self, fused: list[dict[str, Any]], words: QueryWords, mode: str,
               seen: dict[str, tuple[Evidence, bool]], units: dict[str, Any]) -> list[dict[str, Any]]:
        """The first `EVIDENCE_DEPTH` candidates ordered by evidence, then the rest as fused:
        those holding the query as a phrase first, then those holding its terms close together;
        then by the fused score (hybrid) or the leg's order, a back-matter unit's counted at
        `BACK_MATTER_WEIGHT`. Semantic mode keeps the order of meaning. Each candidate gets
        its `evidence` and `back_matter`; `seen` and `units` keep what was read (by unit id)."""
        head = fused[:EVIDENCE_DEPTH]
        want = [c["unit_id"] for c in head if c["unit_id"] not in units]
        if want:
            units.update(self._units(want))
        stems = self._stemmer()
        # Whether a unit is back matter depends on it alone: kept while the index is unchanged.
        back: dict[str, bool] = self._memoized("back_matter", dict)
        for c in head:
            uid = c["unit_id"]
            if uid not in seen and uid in units:
                u = units[uid]
                if uid not in back:
                    back[uid] = is_back_matter(u)
                seen[uid] = (evidence(words, searchable(u), stems) if words.weighs else NONE, back[uid])
            c["evidence"], c["back_matter"] = seen.get(uid, (NONE, False))

        if mode == "semantic":  # meaning alone: the evidence is told, not ranked by
            return fused

        def key(item: tuple[int, dict[str, Any]]) -> tuple[int, float, int]:
            pos, c = item
            base = c["score"] if mode == "hybrid" else 1.0 / (HYBRID_RRF_K + pos + 1)
            return -c["evidence"].level, -base * (BACK_MATTER_WEIGHT if c["back_matter"] else 1.0), pos

        return [c for _, c in sorted(enumerate(head), key=key)] + fused[EVIDENCE_DEPTH:]

    def _phrase_holders(self, query: str, kinds: Sequence[str], paper_ids: Sequence[str] | None
                        ) -> tuple[list[str], dict[str, str] | None]:
        """(the phrases the query quotes, {unit id: paper id} of the units of `kinds` holding every
        one of them, or None when it quotes none), found by the index's phrase match: the same on
        every backend."""
        phrases = quoted_phrases(query)
        if not phrases:
            return [], None
        index = self.index
        groups = [index.match_query(f'"{p}"') for p in phrases]
        match = " AND ".join(g for g in groups if g)
        hits = [h for scope in scopes_of(kinds)
                for h in index.lexical_units(scope, match, limit=-1, paper_ids=paper_ids, weights=None)]
        return phrases, {h.ref: h.paper_id for h in hits if in_kinds(h.ref, kinds)}

    @staticmethod
    def _fuse(legs: dict[str, list[tuple[str, str, float]]], mode: str) -> list[dict[str, Any]]:
        """Candidates best first. One leg: in the leg's own order (lexical: units holding every
        word first, then bm25), scored by the leg's score; hybrid: sum of 1 / (HYBRID_RRF_K + rank)."""
        table: dict[str, dict[str, Any]] = {}
        for leg in ("lexical", "semantic"):
            for rank, (uid, pid, score) in enumerate(legs.get(leg, []), start=1):
                c = table.setdefault(uid, {"unit_id": uid, "paper_id": pid, "score": 0.0,
                                           "legs": {name: None for name in legs}})
                c["legs"][leg] = {"rank": rank, "score": round(float(score), 6)}
                c["score"] += 1.0 / (HYBRID_RRF_K + rank) if mode == "hybrid" else float(score)
        if mode != "hybrid":
            return sorted(table.values(), key=lambda c: min(v["rank"] for v in c["legs"].values() if v))
        # Ties (typically the first hit of one leg against the first hit of the other) go to the
        # unit the lexical leg found: an exact word or code match over the nearest meaning.
        return sorted(table.values(), key=lambda c: (
            -c["score"], min(v["rank"] for v in c["legs"].values() if v), c["legs"].get("lexical") is None,
            c["unit_id"]))

    @staticmethod
    def _below(min_score: float | None, mode: str, legs: dict[str, list[tuple[str, str, float]]], n: int) -> bool:
        """True when fetching more candidates cannot add one scoring `min_score` or more (the
        legs are in score order; a hybrid score is at most 2 / (k + rank))."""
        if min_score is None:
            return False
        if mode == "hybrid":
            return 2.0 / (HYBRID_RRF_K + n) < min_score
        leg = legs.get("lexical" if mode == "lexical" else "semantic") or []
        return bool(leg) and min(s for _, _, s in leg) < min_score

    @staticmethod
    def _cap(cands: list[dict[str, Any]], per_paper: int, limit: int,
             dropped: dict[str, int] | None = None) -> list[dict[str, Any]]:
        """The first `limit` candidates, at most `per_paper` of one paper (`dropped`: how many
        each paper had past its cap before the limit was reached)."""
        per: dict[str, int] = {}
        out = []
        for c in cands:
            if per_paper and per.get(c["paper_id"], 0) >= per_paper:
                if dropped is not None:
                    dropped[c["paper_id"]] = dropped.get(c["paper_id"], 0) + 1
                continue
            per[c["paper_id"]] = per.get(c["paper_id"], 0) + 1
            out.append(c)
            if len(out) >= limit:
                break
        return out
