"""`search`: papers for a lexical query, fused over metadata, body units and figures/tables
(reciprocal rank, k = `RRF_K`), with the metadata filters; the paper-level half of the
`Retriever` (`sheaf.search.retriever`), which it is a base class of."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sheaf.core.defaults import DEFAULT_LIMIT, KINDS, in_kinds
from sheaf.core.envelope import SheafError
from sheaf.core.text import fold, fold_same_length
from sheaf.search.snippets import SUMMARY_CHARS, clip, highlight_re, make_snippet
from sheaf.search.units import (
    BODY_WEIGHTS,
    LEG_PREF,
    OBJECT_WEIGHTS,
    PAPER_WEIGHTS,
    RRF_K,
    Result,
    is_backmatter,
    positive,
    unit_text,
)
from sheaf.store.records import FtsHit, Unit

if TYPE_CHECKING:
    from sheaf.store.backend import IndexBackend


class PaperSearch:
    """The paper-level queries of `Retriever` (it supplies `index`, `engines`, `papers`,
    `_memoized`, `_match`, `_matches`, `_units`, `_paper_fields` and `_nothing_found`)."""

    if TYPE_CHECKING:  # what `Retriever` supplies (see there)
        index: IndexBackend

        def _memoized(self, key: Any, compute: Callable[[], Any]) -> Any: ...
        def _matches(self, query: str) -> tuple[str, str]: ...
        def papers(self, paper_ids: Iterable[str]) -> dict[str, dict[str, Any]]: ...
        def _units(self, unit_ids: Sequence[str]) -> dict[str, Unit]: ...
        def _match(self, u: Unit, *, score: float | None, text: str, query: str = "",
                   full: bool = False, full_text: str | None = None) -> dict[str, Any]: ...
        def engines(self) -> dict[str, str]: ...
        def _nothing_found(self, res: Result, *, semantic: bool, filtered: bool = False) -> None: ...
        def _paper_fields(self, paper_id: str) -> dict[str, Any]: ...

    def _filter_papers(self, year_from: int | None, year_to: int | None, domains: Sequence[str] | None,
                       authors: Sequence[str] | None, collections: Sequence[str] | None,
                       tags: Sequence[str] | None = None
                       ) -> tuple[list[str] | None, list[str], dict[str, Any]]:
        """(the papers passing the metadata filters, None without filters; warnings about
        filter values no paper has; the filters as the envelope shows them). An inverted year
        range: BAD_QUERY."""
        filters = {"year_from": year_from, "year_to": year_to, "domain": list(domains) if domains else None,
                   "author": list(authors) if authors else None,
                   "collection": list(collections) if collections else None, "tag": list(tags) if tags else None}
        if year_from is not None and year_to is not None and year_from > year_to:
            raise SheafError("BAD_QUERY", f"--year-from {year_from} is after --year-to {year_to}: no year "
                             "can pass both", {"year_from": year_from, "year_to": year_to},
                             hint=f"swap them: --year-from {year_to} --year-to {year_from}")
        if year_from is None and year_to is None and not domains and not authors and not collections and not tags:
            return None, [], filters
        warnings: list[str] = []
        paper_ids = self.index.papers_where(year_min=year_from, year_max=year_to,
                                            domains=list(domains) if domains else None,
                                            collections=list(collections) if collections else None,
                                            authors=list(authors) if authors else None,
                                            tags=list(tags) if tags else None)
        if domains:
            known = self._memoized("domains", self.index.domains)
            unknown = [d for d in domains if d not in known]
            if unknown:
                warnings.append(f"no paper has domain {', '.join(map(repr, unknown))}"
                                + (f"; domains: {', '.join(sorted(known))}" if known else
                                   "; the library has no domains (--collection filters by Zotero collection)"))
        if collections:
            known_c = self._memoized("collection_names", self.index.collection_names)
            folded = {fold(k) for k in known_c}
            unknown = [c for c in collections if fold(c.strip("/").split("/")[-1].strip()) not in folded]
            if unknown:
                warnings.append(f"no paper is in collection {', '.join(map(repr, unknown))}"
                                + (f"; collections: {', '.join(sorted(known_c))}" if known_c else
                                   "; the library's export has no collections"))
        return paper_ids, warnings, filters

    def search(self, query: str, *, limit: int = DEFAULT_LIMIT, year_from: int | None = None,
               year_to: int | None = None, domains: Sequence[str] | None = None,
               authors: Sequence[str] | None = None, collections: Sequence[str] | None = None,
               tags: Sequence[str] | None = None, kind: str = "all") -> Result:
        """Papers for a lexical query over metadata and full text; one match per paper. The
        snippet is the paper's best evidence, body text before back matter (acknowledgments,
        data availability, ...) when both hold the words. `kind` other than `all`: papers by
        their units of that kind alone (see `KINDS`; the metadata is not searched then)."""
        positive("--limit", limit)
        if kind not in KINDS:
            raise SheafError("BAD_QUERY", f"kind must be one of {', '.join(KINDS)}", {"kind": kind})
        if not (query or "").strip():
            raise SheafError("BAD_QUERY", "the query is empty", hint="give some words to search for")
        and_q, or_q = self._matches(query)
        paper_ids, warnings, filters = self._filter_papers(year_from, year_to, domains, authors, collections, tags)
        actions: list[str] = []
        n = max(200, limit * 10)
        relaxed = False
        legs = self._paper_legs(and_q, n, paper_ids, kind) if paper_ids != [] else {}
        if not any(legs.values()) and or_q != and_q and paper_ids != []:
            legs = self._paper_legs(or_q, n, paper_ids, kind)
            relaxed = any(legs.values())
        fused: dict[str, dict[str, Any]] = {}
        for leg, hits in legs.items():
            for rank, h in enumerate(hits, start=1):
                c = fused.setdefault(h.paper_id, {"paper_id": h.paper_id, "score": 0.0,
                                                  "legs": {k: None for k in legs}, "best": None})
                c["legs"][leg] = {"rank": rank, "score": round(h.score, 6), "ref": h.ref}
                c["score"] += 1.0 / (RRF_K + rank)
                if c["best"] is None or (rank, LEG_PREF[leg]) < (c["best"][1], LEG_PREF[c["best"][0]]):
                    c["best"] = (leg, rank, h.ref)
        ranked = sorted(fused.values(), key=lambda c: (-c["score"], c["paper_id"]))[:limit]
        for c in ranked:
            if c["best"][0] == "body" and is_backmatter(c["best"][2]) and kind == "all":
                c["best"] = self._body_evidence(c, or_q if relaxed else and_q)
        self.papers(c["paper_id"] for c in ranked)
        best_units = self._units([c["best"][2] for c in ranked if c["best"][0] != "metadata"])
        matches = []
        for c in ranked:
            leg, _, ref = c["best"]
            u = best_units.get(ref) if leg != "metadata" else None
            if u is not None:
                full_text = unit_text(u)
                m = self._match(u, score=c["score"], text=make_snippet(full_text, query), query=query,
                                full_text=full_text)
            else:
                m = self._metadata_match(c["paper_id"], c["score"], query)
            m["legs"] = {k: ({kk: vv for kk, vv in v.items() if kk != "ref"} if v else None)
                         for k, v in c["legs"].items()}
            matches.append(m)
        if relaxed:
            warnings.append("no paper contains every word of the query; these contain some of them")
        for m in matches:
            m["strong"] = not relaxed
        res = Result({"query": query, "kind": kind, "filters": filters, "fusion": {"method": "rrf", "k": RRF_K},
                      "score_kind": "rrf", "strong_matches": 0 if relaxed else len(matches),
                      "matches": matches, "engines": self.engines()}, warnings, actions)
        if not matches:
            self._nothing_found(res, semantic=False, filtered=paper_ids is not None)
        else:
            res.next_actions.append("sheaf retrieve QUERY --paper KEY for the best passages of one paper")
        return res

    def _body_evidence(self, c: dict[str, Any], match: str) -> tuple[str, int, str]:
        """A paper's best evidence other than back matter: its best body unit outside back
        matter holding the words, else its object hit, else the back-matter unit it had."""
        hits = self.index.lexical_units("body", match, limit=50, paper_ids=[c["paper_id"]], weights=BODY_WEIGHTS)
        body = next((h for h in hits if not is_backmatter(h.ref)), None)
        if body is not None:
            return ("body", c["best"][1], body.ref)
        obj = c["legs"].get("object")
        return ("object", obj["rank"], obj["ref"]) if obj else c["best"]

    def _paper_legs(self, match: str, n: int, paper_ids: Sequence[str] | None,
                    kind: str = "all") -> dict[str, list[FtsHit]]:
        if kind != "all":
            return self._paper_legs_of_kind(match, n, paper_ids, kind)
        return {
            "metadata": self.index.lexical_papers("papers", match, limit=n, paper_ids=paper_ids, weights=PAPER_WEIGHTS),
            "body": self.index.lexical_papers("body", match, limit=n, paper_ids=paper_ids, weights=BODY_WEIGHTS),
            "object": self.index.lexical_papers("object", match, limit=n, paper_ids=paper_ids, weights=OBJECT_WEIGHTS),
        }

    def _paper_legs_of_kind(self, match: str, n: int, paper_ids: Sequence[str] | None,
                            kind: str) -> dict[str, list[FtsHit]]:
        """Each paper's best unit of `kind` (one leg: `object`, else `body`), best paper first:
        the scope's units ranked, the other kinds skipped, n papers or every unit (more
        fetched until then). Zotero's notes and annotations share the body scope: their units are
        picked from the scope's ranking, which costs more fetching when the words are common in
        the papers' text and rare in the notes."""
        if kind == "object":  # the whole scope: each paper's best hit as the index ranks it
            return {"object": self.index.lexical_papers("object", match, limit=n, paper_ids=paper_ids,
                                                        weights=OBJECT_WEIGHTS)}
        scope, weights = "body", BODY_WEIGHTS
        fetch = n
        while True:
            got = self.index.lexical_units(scope, match, limit=fetch, paper_ids=paper_ids, weights=weights)
            best: dict[str, FtsHit] = {}
            for h in got:
                if h.paper_id not in best and in_kinds(h.ref, (kind,)):
                    best[h.paper_id] = h
            if len(best) >= n or len(got) < fetch:
                return {scope: list(best.values())[:n]}
            fetch *= 4

    def _metadata_match(self, paper_id: str, score: float, query: str) -> dict[str, Any]:
        r = self.index.paper_text(paper_id)
        title, abstract = (r["title"], r["abstract"]) if r else ("", "")
        pat = highlight_re(fold_same_length(query))

        def has(value: str | None) -> bool:  # accents folded: "Muller" is found in "Müller"
            return bool(value and pat and pat.search(fold_same_length(value)))

        field_name, text = "Title", title
        if r and not has(title):
            fields = (("Abstract", abstract), ("Authors", "; ".join(r["authors"])), ("Journal", r["journal"]))
            for name, value in fields:
                if has(value):
                    field_name, text = name, value
                    break
        m = self._paper_fields(paper_id)
        snippet = make_snippet(text, query) if text else (m["title"] or paper_id)
        m.update({"score": round(score, 6), "text": snippet, "heading": field_name, "source": "metadata",
                  "unit_id": None, "short_id": None, "section_path": [], "page_span": None,
                  "summary": clip(snippet, SUMMARY_CHARS), "text_is_full": False})
        return m
