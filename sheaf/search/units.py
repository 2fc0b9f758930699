"""The retriever's plain pieces (`sheaf.search.retriever`): its answer (`Result`), the ranking's
constants, a unit's fields as matches show them, and a paper's units in reading order."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sheaf.core.defaults import UNIT_KINDS
from sheaf.core.envelope import SheafError
from sheaf.core.models import BodyUnit, ObjectUnit
from sheaf.vectors.identity import unit_embedding_text

RRF_K = 60  # `search`: its three lexical rankings of papers
#: `retrieve --mode hybrid`: RRF of the lexical and semantic legs. k = 10 weighs the top of each
#: leg more than the usual 60; on SciFact train it gives hybrid nDCG@10 0.732 against 0.726 at
#: k = 60 (k 1-5 were higher still, but lean on a single leg's first hits; docs/benchmarks.md).
HYBRID_RRF_K = 10
#: bm25 column weights: papers_fts (title, authors, abstract, journal, domain, year),
#: body_units_fts (heading, text, paper title), object_units_fts (caption, label, table_text,
#: nearby_text, paper title). The title weight 2 is the best of 1/2/3 on SciFact train.
PAPER_WEIGHTS = (8.0, 4.0, 2.0, 1.0, 1.0, 1.0)
BODY_WEIGHTS = (2.0, 1.0, 2.0)
OBJECT_WEIGHTS = (3.0, 2.0, 1.0, 0.5, 2.0)

Unit = BodyUnit | ObjectUnit
#: What a match's `score` is, per retrieve mode (`search` fuses ranks: rrf).
SCORE_KINDS = {"lexical": "bm25", "semantic": "cosine", "hybrid": "rrf"}
#: A semantic match is *strong* when its cosine is within this of the best match's, and at
#: least SEMANTIC_STRONG_MIN; a lexical one when its unit holds every word of the query.
SEMANTIC_STRONG_GAP = 0.15
SEMANTIC_STRONG_MIN = 0.25
LEG_PREF = {"body": 0, "object": 1, "metadata": 2}  # the snippet's source when ranks tie


@dataclass
class Result:
    """One command's answer: the envelope's `data`, `warnings` and `next_actions`."""

    data: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    next_actions: list[str] = field(default_factory=list)

    @property
    def matches(self) -> list[dict[str, Any]]:
        matches: list[dict[str, Any]] = self.data.get("matches", [])
        return matches




# --- reading order ------------------------------------------------------------------------

def reading_order(body: Sequence[BodyUnit], objects: Sequence[ObjectUnit]) -> list[Unit]:
    """A paper's units in reading order: body units as indexed (tree order), each figure or
    table placed after the last body unit of its section (else of its page)."""
    last_of_node: dict[str, int] = {}
    for i, u in enumerate(body):
        last_of_node[u.node_id] = i
    after: dict[int, list[ObjectUnit]] = {}
    for o in objects:
        at = last_of_node.get(o.node_id)
        if at is None:
            at = -1
            for j, u in enumerate(body):
                if u.page_span and u.page_span[0] <= o.page:
                    at = j
        after.setdefault(at, []).append(o)
    out: list[Unit] = list(after.get(-1, []))
    for i, u in enumerate(body):
        out.append(u)
        out.extend(after.get(i, []))
    return out


# --- a unit as matches show it -------------------------------------------------------------------

def kinds_of(kind: str) -> tuple[str, ...]:
    """The unit kinds a `kind` choice stands for (`all`: every one)."""
    return UNIT_KINDS if kind == "all" else (kind,)


def scopes_of(kinds: Sequence[str]) -> list[str]:
    """The index scopes (FTS tables) holding units of `kinds`: `body` for every kind but objects
    (notes, annotations and back matter are body units), `object` for figures and tables."""
    return ["body"] * bool(set(kinds) - {"object"}) + ["object"] * ("object" in kinds)


def unit_source(u: Unit) -> str:
    if isinstance(u, ObjectUnit):
        return u.object_kind
    if u.unit_kind in ("annotation", "note"):
        return u.unit_kind
    return "backmatter" if u.unit_kind == "backmatter_body" else "body"


def unit_text(u: Unit) -> str:
    return u.text if isinstance(u, BodyUnit) else unit_embedding_text(u)


def unit_page_span(u: Unit) -> list[int] | None:
    if isinstance(u, ObjectUnit):
        return [u.page, u.page] if u.page is not None else None
    return list(u.page_span) if u.page_span else None


def unit_heading(u: Unit) -> str:
    if isinstance(u, ObjectUnit) and u.label:
        return u.label
    return u.section_path[-1] if u.section_path else ""


def is_backmatter(unit_id: str) -> bool:
    """A back-matter unit (acknowledgments, data availability, ...): `{paper}:body:{node}:backmatter[...]`."""
    return ":backmatter" in unit_id


def positive(name: str, value: int, minimum: int = 1) -> int:
    if not isinstance(value, int) or value < minimum:
        raise SheafError("BAD_QUERY", f"{name} must be an integer >= {minimum}, not {value!r}",
                         {name: value}, hint=f"pass {name} {max(minimum, 1)} or more")
    return value
