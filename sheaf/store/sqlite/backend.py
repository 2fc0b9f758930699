"""`SqliteIndex`: the `IndexBackend` of the embedded default, one SQLite file (FTS5 + sqlite-vec).

It holds one connection and, optionally, the engines a warm server passes in (an in-memory
bm25 and an in-memory vector matrix that answer exactly what FTS5 and sqlite-vec answer, only
faster); `engines` says which answered the last lexical and vector calls.
"""
from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError
from sheaf.core.lazy import lazy_module
from sheaf.core.models import BodyUnit, ObjectUnit
from sheaf.store.backend import LexicalEngine, VectorEngine
from sheaf.store.fulltext import build_match_query, match_queries
from sheaf.store.records import FtsHit, Unit, VectorHit
from sheaf.store.rows import IndexSchemaError, collection_segments
from sheaf.store.sqlite import integrity, reader, writer
from sheaf.store.sqlite.db import sqlite3, transaction
from sheaf.store.sqlite.schema import collections, open_index
from sheaf.vectors.identity import EmbeddedPassages, Passage

np = lazy_module("numpy")  # the export only

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.core.models import PaperMeta
    from sheaf.vectors.identity import ModelIdentity, QueryVector

#: The distinct paper ids of units, by a loose index scan (one seek per paper in the
#: ``paper_id`` indexes, not a pass over every unit row: ~3 ms instead of ~7 at 100k units).
_INDEXED_SQL = (
    "WITH RECURSIVE b(p) AS (SELECT min(paper_id) FROM body_units UNION ALL SELECT (SELECT "
    "min(paper_id) FROM body_units WHERE paper_id > b.p) FROM b WHERE b.p IS NOT NULL), "
    "o(p) AS (SELECT min(paper_id) FROM object_units UNION ALL SELECT (SELECT min(paper_id) "
    "FROM object_units WHERE paper_id > o.p) FROM o WHERE o.p IS NOT NULL), "
    "u(p) AS (SELECT p FROM b WHERE p IS NOT NULL UNION SELECT p FROM o WHERE p IS NOT NULL)")


def _corrupted(ident: ModelIdentity, e: Exception) -> SheafError:
    return SheafError("VECTOR_CORRUPTED", f"passage table of collection {ident.key} unreadable: {e}",
                      {"collection": ident.key}, hint="rebuild the vectors (sheaf build)")


def _tracked(engine: Any, answered: list[str]) -> Any:
    """`engine` (or None), which writes its name into ``answered[0]`` whenever it answers
    (when it declines, the SQLite default named there already answers)."""
    if engine is None:
        return None

    def call(*a: Any) -> Any:
        got = engine(*a)
        if got is not None:
            answered[0] = getattr(engine, "name", type(engine).__name__)
        return got
    return call


class SqliteEmbeddingCache:
    """The index's content-addressed embedding cache (`EmbeddingCache`); each `put` commits."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def get(self, identity: ModelIdentity, shas: set[str]) -> dict[str, Any]:
        return writer.cache_get(self.conn, identity, shas)

    def put(self, identity: ModelIdentity, vectors: dict[str, Any]) -> None:
        writer.cache_put(self.conn, identity, vectors)


class SqliteIndex:
    """One open SQLite index (see the module docstring)."""

    kind = "sqlite"

    def __init__(self, conn: sqlite3.Connection, path: str | Path | None = None, *, readonly: bool = False,
                 busy_timeout_ms: int = 10_000, lexical_engine: LexicalEngine | None = None,
                 vector_engine: VectorEngine | None = None, owns_connection: bool = True) -> None:
        self.conn = conn
        self.path = None if path is None else Path(path)
        self.location = str(self.path) if self.path is not None else "(a SQLite connection)"
        self.readonly = readonly
        self.busy_timeout_ms = busy_timeout_ms
        self.lexical_engine = lexical_engine
        self.vector_engine = vector_engine
        self.engines: dict[str, str] = {}
        self._owns = owns_connection

    @classmethod
    def open(cls, path: str | Path, *, readonly: bool = False, create: bool = True, busy_timeout_ms: int = 10_000,
             lexical_engine: LexicalEngine | None = None, vector_engine: VectorEngine | None = None) -> "SqliteIndex":
        """Open the index file. Read-only and no usable index: INDEX_NOT_FOUND (absent or empty)
        or BACKEND_UNAVAILABLE (not a readable Sheaf index, or another schema)."""
        path = Path(path)
        try:
            conn = open_index(path, readonly=readonly, create=create, busy_timeout_ms=busy_timeout_ms)
        except IndexSchemaError as e:
            if e.details.get("found", 0) is None:  # an empty file: nothing was ever built
                raise SheafError("INDEX_NOT_FOUND", f"the index at {path} is empty", {"path": str(path)},
                                 hint="build the index first (sheaf build)") from None
            raise
        except sqlite3.DatabaseError as e:
            raise SheafError("BACKEND_UNAVAILABLE", f"cannot read the index at {path}: {e}",
                             {"path": str(path)}, hint="rebuild the index (sheaf build)") from None
        return cls(conn, path, readonly=readonly, busy_timeout_ms=busy_timeout_ms,
                   lexical_engine=lexical_engine, vector_engine=vector_engine)

    # --- lifecycle and state ------------------------------------------------------------------

    def state(self) -> Hashable:
        """Changes whenever the content may have: a commit by another connection (``PRAGMA
        data_version``) or a change through this one (`total_changes`)."""
        return (self.conn.execute("PRAGMA data_version").fetchone()[0], self.conn.total_changes)

    def clone(self) -> "SqliteIndex | None":
        """Another read-only handle on the same file (a hybrid query's lexical leg runs on it in
        parallel), sharing the engines; None for a connection this object did not open."""
        if self.path is None:
            return None
        try:
            return SqliteIndex.open(self.path, readonly=True, busy_timeout_ms=self.busy_timeout_ms,
                                    lexical_engine=self.lexical_engine, vector_engine=self.vector_engine)
        except Exception:  # noqa: BLE001 - the caller then runs the leg in line
            return None

    def close(self) -> None:
        if self._owns:
            self.conn.close()

    # --- queries in FTS5's language ---------------------------------------------------------------

    def match_queries(self, query: str) -> tuple[str, str]:
        """(every word, some words without function words) as MATCH expressions; BAD_QUERY
        when the query holds no word."""
        return match_queries(query)

    def match_query(self, term: str) -> str | None:
        return build_match_query(term, mode="and")

    # --- candidates ---------------------------------------------------------------------------------

    def _lexical(self, fn: Any, scope: str, match: str, **kw: Any) -> list[FtsHit]:
        answered = ["fts5"]
        kw["engine"] = _tracked(self.lexical_engine, answered)
        try:
            hits: list[FtsHit] = fn(self.conn, scope, match, **kw)
        except sqlite3.OperationalError as e:  # build_match_query makes this unreachable; belt and braces
            raise SheafError("BAD_QUERY", f"the query could not be run: {e}", {"match": match},
                             hint="search for plain words; quotes, operators and brackets are "
                                  "treated as text") from None
        self.engines["lexical"] = answered[0]
        return hits

    def lexical_units(self, scope: str, match: str, *, limit: int, paper_ids: Sequence[str] | None = None,
                      weights: Sequence[float] | None = None) -> list[FtsHit]:
        return self._lexical(reader.fts_search, scope, match, limit=limit, paper_ids=paper_ids, weights=weights)

    def lexical_papers(self, scope: str, match: str, *, limit: int, paper_ids: Sequence[str] | None = None,
                       weights: Sequence[float] | None = None) -> list[FtsHit]:
        return self._lexical(reader.fts_best_per_paper, scope, match, limit=limit, paper_ids=paper_ids,
                             weights=weights)

    def term_rows(self, scope: str, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        return reader.term_rows(self.conn, scope, terms)

    def collections(self) -> dict[str, ModelIdentity]:
        return collections(self.conn)

    def vector_candidates(self, query: QueryVector, k: int, paper_ids: Sequence[str] | None = None) -> list[VectorHit]:
        answered = ["sqlite-vec"]
        hits = reader.vector_search(self.conn, query, k, paper_ids=paper_ids,
                                    engine=_tracked(self.vector_engine, answered))
        self.engines["vector"] = answered[0]
        return hits

    # --- fetch by id ---------------------------------------------------------------------------------

    def units(self, unit_ids: Iterable[str]) -> dict[str, Unit]:
        return reader.get_units(self.conn, unit_ids)

    def unit(self, ref: str) -> Unit | None:
        return reader.get_unit(self.conn, ref)

    def paper_units(self, paper_id: str) -> tuple[list[BodyUnit], list[ObjectUnit]]:
        return reader.paper_units(self.conn, paper_id)

    def paper_fields(self, paper_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The papers rows of these ids (absent ids are left out)."""
        out: dict[str, dict[str, Any]] = {}
        ids = list(paper_ids)
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            for r in self.conn.execute(
                    "SELECT paper_id, title, first_author, year, journal, domain, has_metadata, citation_key, link "
                    f"FROM papers WHERE paper_id IN ({','.join('?' * len(chunk))})", chunk):
                out[r[0]] = {"zotero_key": r[0], "title": r[1] or None, "first_author": r[2], "year": r[3],
                             "journal": r[4], "domain": r[5], "has_metadata": bool(r[6]), "citation_key": r[7],
                             "link": r[8]}
        return out

    def paper_text(self, paper_id: str) -> dict[str, Any] | None:
        r = self.conn.execute("SELECT title, abstract, authors, journal FROM papers WHERE paper_id = ?",
                              (paper_id,)).fetchone()
        if r is None:
            return None
        return {"title": r[0] or "", "abstract": r[1] or "", "authors": json.loads(r[2] or "[]"),
                "journal": r[3] or ""}

    def passage_starts(self, identity: ModelIdentity, passage_ids: Sequence[str]) -> dict[str, int]:
        if not passage_ids:
            return {}
        rows = self.conn.execute(f"SELECT passage_id, char_start FROM {identity.passages_table} WHERE "
                                 f"passage_id IN ({','.join('?' * len(passage_ids))})", list(passage_ids))
        return {pid: int(start) for pid, start in rows}

    # --- facts and coverage ----------------------------------------------------------------------------

    def known_papers(self, keys: Sequence[str]) -> set[str]:
        """Which of `keys` the index knows (a papers row or units)."""
        keys = list(keys)
        marks = ",".join("?" * len(keys))
        return {r[0] for r in self.conn.execute(
            f"SELECT paper_id FROM papers WHERE paper_id IN ({marks}) UNION "
            f"SELECT paper_id FROM body_units WHERE paper_id IN ({marks})", keys + keys)}

    def papers_where(self, *, year_min: int | None = None, year_max: int | None = None,
                     domains: Sequence[str] | None = None, collections: Sequence[str] | None = None,
                     authors: Sequence[str] | None = None, tags: Sequence[str] | None = None) -> list[str]:
        return reader.paper_ids_where(self.conn, year_min=year_min, year_max=year_max,
                                      domains=list(domains) if domains else None,
                                      collections=list(collections) if collections else None,
                                      authors=list(authors) if authors else None, tags=list(tags) if tags else None)

    def collection_names(self) -> set[str]:
        """Every segment of every collection path ("Library/Ecology" → Library, Ecology)."""
        return collection_segments(c for (c,) in self.conn.execute(
            "SELECT collections FROM papers WHERE collections != '[]'"))

    def domains(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT DISTINCT domain FROM papers WHERE domain IS NOT NULL")}

    def indexed_papers(self) -> list[str]:
        """The ids of the papers with units in the index, sorted."""
        return [r[0] for r in self.conn.execute(f"{_INDEXED_SQL} SELECT p FROM u ORDER BY p")]

    def passage_count(self, identity: ModelIdentity, paper_ids: Sequence[str] | None = None) -> int:
        """Passages of the collection (of these papers); VECTOR_CORRUPTED when unreadable. The
        count(*) reads the table's whole index: it doubles as a probe for damage (0.6 ms at 190k)."""
        where, args = "", []
        if paper_ids is not None:
            where = f" WHERE paper_id IN ({','.join('?' * len(paper_ids))})"
            args = list(paper_ids)
        try:
            return int(self.conn.execute(f"SELECT count(*) FROM {identity.passages_table}{where}",
                                         args).fetchone()[0])
        except sqlite3.DatabaseError as e:
            raise _corrupted(identity, e) from None

    def embedding_gaps(self, identity: ModelIdentity, paper_ids: Sequence[str] | None = None) -> tuple[int, int]:
        """(indexed papers, those without a passage of `identity`), of `paper_ids` when given."""
        where, args = "", []
        if paper_ids is not None:
            where = f" WHERE u.p IN ({','.join('?' * len(paper_ids))})"
            args = list(paper_ids)
        try:
            r = self.conn.execute(
                f"{_INDEXED_SQL} SELECT count(*), coalesce(sum(NOT EXISTS (SELECT 1 FROM "
                f"{identity.passages_table} v WHERE v.paper_id = u.p)), 0) FROM u{where}", args).fetchone()
        except sqlite3.DatabaseError as e:  # a damaged page: an answer for the caller, not a traceback
            raise _corrupted(identity, e) from None
        return int(r[0]), int(r[1])

    def embedded_papers(self, identity: ModelIdentity) -> int:
        try:
            return int(self.conn.execute(
                f"SELECT count(DISTINCT paper_id) FROM {identity.passages_table}").fetchone()[0])
        except sqlite3.DatabaseError:
            return 0

    def papers_with_metadata(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM papers WHERE has_metadata = 1").fetchone()[0])

    def counts(self, paper_id: str | None = None) -> dict[str, int]:
        return reader.counts(self.conn, paper_id)

    def paper_ids(self, *, with_units: bool = False) -> list[str]:
        return reader.paper_ids(self.conn, with_units=with_units)

    # --- writes ------------------------------------------------------------------------------------------

    def replace_paper(self, paper_id: str, units: Sequence[BodyUnit], objects: Sequence[ObjectUnit],
                      passages: EmbeddedPassages | Sequence[EmbeddedPassages] | None = None, **kw: Any) -> Any:
        return writer.replace_paper(self.conn, paper_id, units, objects, passages, **kw)

    def replace_paper_vectors(self, paper_id: str, passages: EmbeddedPassages, **kw: Any) -> int:
        return writer.replace_paper_vectors(self.conn, paper_id, passages, **kw)

    def remove_paper(self, paper_id: str, **kw: Any) -> bool:
        return writer.remove_paper(self.conn, paper_id, **kw)

    def upsert_papers(self, metas: Iterable[PaperMeta], **kw: Any) -> dict[str, int]:
        return writer.upsert_papers(self.conn, metas, **kw)

    def prune_metadata(self, exported: Iterable[str], **kw: Any) -> dict[str, int]:
        return writer.prune_metadata(self.conn, exported, **kw)

    def embedding_cache(self) -> SqliteEmbeddingCache:
        return SqliteEmbeddingCache(self.conn)

    # --- integrity (`sheaf doctor`, the build's drift check) ----------------------------------------

    def paper_index_stats(self, collection_key: str | None = None,
                          paper_ids: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
        return integrity.paper_index_stats(self.conn, collection_key, paper_ids)

    def unit_digest(self, paper_id: str) -> str:
        return integrity.unit_digest(self.conn, paper_id)

    def global_orphans(self) -> dict[str, int]:
        return integrity.global_orphans(self.conn)

    def remove_global_orphans(self) -> dict[str, int]:
        return integrity.remove_global_orphans(self.conn)

    def vector_bytes_mismatch(self, ident: ModelIdentity) -> dict[str, int]:
        """Per paper: vectors whose bytes differ from the embedding cache's vector of their text."""
        bad: dict[str, int] = {}
        pt, vt = ident.passages_table, ident.vec_table
        try:
            rows = self.conn.execute(
                f"SELECT p.paper_id, v.embedding, c.vector FROM {pt} p JOIN {vt} v ON v.passage_rowid = "
                f"p.passage_rowid JOIN embedding_cache c ON c.model_key = ? AND c.text_sha256 = p.text_sha256",
                (ident.key,))
            for pid, a, b in rows:
                if a != b:
                    bad[pid] = bad.get(pid, 0) + 1
        except sqlite3.DatabaseError:  # an unreadable collection is reported by the health check
            pass
        return bad

    # --- export (`sheaf.store.copy`) ---------------------------------------------------------------

    def export_papers(self) -> list[PaperMeta]:
        """The library metadata of every paper that has it, in the order it was first written."""
        ids = [r[0] for r in self.conn.execute("SELECT paper_id FROM papers WHERE has_metadata = 1 "
                                               "ORDER BY paper_rowid")]
        return [m for m in (reader.get_paper(self.conn, pid) for pid in ids) if m is not None]

    def papers_in_write_order(self) -> list[str]:
        """The papers with units, in the order their units were first written."""
        return [r[0] for r in self.conn.execute(
            "SELECT paper_id FROM (SELECT paper_id, min(unit_rowid) AS r FROM body_units GROUP BY paper_id "
            "UNION ALL SELECT paper_id, min(unit_rowid) + 1000000000000 FROM object_units GROUP BY paper_id) "
            "GROUP BY paper_id ORDER BY min(r), paper_id")]

    def paper_passages(self, paper_id: str, identity: ModelIdentity) -> EmbeddedPassages:
        """A paper's passages and vectors in one collection (texts are not stored: empty)."""
        rows = self.conn.execute(
            f"SELECT p.passage_id, p.unit_id, p.unit_type, p.ordinal, p.char_start, p.char_end, p.text_sha256, "
            f"v.embedding FROM {identity.passages_table} p JOIN {identity.vec_table} v ON v.passage_rowid = "
            f"p.passage_rowid WHERE p.paper_id = ? ORDER BY p.passage_rowid", (paper_id,)).fetchall()
        vecs = (np.stack([np.frombuffer(r[7], dtype=np.float32) for r in rows]) if rows
                else np.zeros((0, identity.dimension), np.float32))
        return EmbeddedPassages(identity, tuple(Passage(r[0], r[1], paper_id, r[2], r[3], r[4], r[5], "", r[6], 0)
                                                for r in rows), vecs)

    def cache_rows(self) -> Iterable[tuple[str, str, bytes]]:
        """Every embedding-cache entry: (model key, text sha256, float32 bytes)."""
        for r in self.conn.execute("SELECT model_key, text_sha256, vector FROM embedding_cache ORDER BY cache_rowid"):
            yield r[0], r[1], bytes(r[2])

    def put_cache_rows(self, rows: Iterable[tuple[str, str, bytes]]) -> int:
        """Add cache entries (existing ones are kept); returns how many rows were offered."""
        rows = list(rows)
        with transaction(self.conn):
            self.conn.executemany("INSERT OR IGNORE INTO embedding_cache(model_key, text_sha256, vector) "
                                  "VALUES (?, ?, ?)", rows)
        return len(rows)

    def __enter__(self) -> "SqliteIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
