"""The index seam: what retrieval and the build need of an index, named by what callers do, not
by any one database's tables. `sheaf.store.sqlite.SqliteIndex` is the embedded default; a
second backend (Postgres + pgvector) implements the same protocol.

Retrieval (`sheaf.search.Retriever`) asks for candidates (lexical units or papers, vector
passages), fetches units and paper fields by id, and reads a few facts about the content
(collections, coverage, papers without vectors) that it remembers while `state()` is
unchanged. The build replaces or removes one paper's rows at once (a reader sees the old
rows or the new ones, never a mix), keeps the library metadata current, and embeds through
the index's content-addressed `embedding_cache()`.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sheaf.core.models import BodyUnit, ObjectUnit

if TYPE_CHECKING:  # pragma: no cover - value types only
    from sheaf.core.models import PaperMeta
    from sheaf.store.sqlite.writer import ReplaceStats
    from sheaf.vectors.identity import EmbeddedPassages, EmbeddingCache, ModelIdentity, QueryVector

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


#: Lexical scopes: units' text (`body`), figures and tables (`object`), paper metadata (`papers`).
SCOPES = ("body", "object", "papers")


class IndexBackend(Protocol):
    """One open index (see the module docstring). `engines` names what answered the last
    lexical and vector calls (e.g. ``{"lexical": "fts5", "vector": "sqlite-vec"}``)."""

    kind: str  # "sqlite", "postgres"
    location: str  # where it is, fit to show (never a password)
    engines: dict[str, str]

    # --- lifecycle and state ---
    def state(self) -> Hashable: ...
    def clone(self) -> "IndexBackend | None": ...
    def close(self) -> None: ...

    # --- queries into the backend's own query language ---
    def match_queries(self, query: str) -> tuple[str, str]: ...
    def match_query(self, term: str) -> str | None: ...

    # --- candidates ---
    def lexical_units(self, scope: str, match: str, *, limit: int, paper_ids: Sequence[str] | None,
                      weights: Sequence[float] | None) -> list[FtsHit]: ...
    def lexical_papers(self, scope: str, match: str, *, limit: int, paper_ids: Sequence[str] | None,
                       weights: Sequence[float] | None) -> list[FtsHit]: ...
    def collections(self) -> dict[str, ModelIdentity]: ...
    def vector_candidates(self, query: QueryVector, k: int, paper_ids: Sequence[str] | None) -> list[VectorHit]: ...

    # --- fetch by id ---
    def units(self, unit_ids: Iterable[str]) -> dict[str, Unit]: ...
    def unit(self, ref: str) -> Unit | None: ...
    def paper_units(self, paper_id: str) -> tuple[list[BodyUnit], list[ObjectUnit]]: ...
    def paper_fields(self, paper_ids: Sequence[str]) -> dict[str, dict[str, Any]]: ...
    def paper_text(self, paper_id: str) -> dict[str, Any] | None: ...
    def passage_starts(self, identity: ModelIdentity, passage_ids: Sequence[str]) -> dict[str, int]: ...

    # --- facts and coverage ---
    def known_papers(self, keys: Sequence[str]) -> set[str]: ...
    def papers_where(self, *, year_min: int | None, year_max: int | None,
                     domains: Sequence[str] | None) -> list[str]: ...
    def domains(self) -> set[str]: ...
    def indexed_papers(self) -> list[str]: ...
    def passage_count(self, identity: ModelIdentity, paper_ids: Sequence[str] | None = None) -> int: ...
    def embedding_gaps(self, identity: ModelIdentity, paper_ids: Sequence[str] | None) -> tuple[int, int]: ...
    def embedded_papers(self, identity: ModelIdentity) -> int: ...
    def papers_with_metadata(self) -> int: ...
    def counts(self, paper_id: str | None = None) -> dict[str, int]: ...
    def paper_ids(self, *, with_units: bool = False) -> list[str]: ...

    # --- writes (the build) ---
    def replace_paper(self, paper_id: str, units: Sequence[BodyUnit], objects: Sequence[ObjectUnit],
                      passages: EmbeddedPassages | Sequence[EmbeddedPassages] | None = None,
                      **kw: Any) -> ReplaceStats: ...
    def replace_paper_vectors(self, paper_id: str, passages: EmbeddedPassages, **kw: Any) -> int: ...
    def remove_paper(self, paper_id: str, **kw: Any) -> dict[str, int]: ...
    def upsert_papers(self, metas: Iterable[PaperMeta], **kw: Any) -> dict[str, int]: ...
    def prune_metadata(self, exported: Iterable[str], **kw: Any) -> dict[str, int]: ...
    def embedding_cache(self) -> EmbeddingCache: ...
