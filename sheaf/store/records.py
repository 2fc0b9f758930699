"""What an index answers, for every backend: lexical hits, vector hits, and the unit records."""
from __future__ import annotations

from dataclasses import dataclass

from sheaf.core.models import BodyUnit, ObjectUnit

Unit = BodyUnit | ObjectUnit


@dataclass(frozen=True, slots=True)
class FtsHit:
    """One lexical match: `ref` is a unit_id (body/object scope) or a paper_id (papers)."""

    ref: str
    paper_id: str
    score: float  # -bm25: higher is better


@dataclass(frozen=True, slots=True)
class VectorHit:
    """One nearest passage."""

    passage_id: str
    unit_id: str
    unit_type: str
    paper_id: str
    ordinal: int
    distance: float  # cosine distance
    score: float  # 1 - distance (cosine similarity)
