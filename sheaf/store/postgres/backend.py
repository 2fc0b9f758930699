"""`PostgresIndex`: the `IndexBackend` on Postgres + pgvector (`SHEAF_INDEX_URL=postgresql://...`).

Lexical ranking is FTS5's bm25 computed per query in Postgres (`sheaf.store.postgres.lexical`):
the same scores and order as the SQLite backend's FTS5 tables, the same rows for `grep` and the
code variants (the retriever cuts spans from the rows matched).
Vector search is exact (a scan ordered by cosine distance, ties by insertion order) below
`EXACT_BELOW` passages or with a paper filter, HNSW with a wide ``ef_search`` above.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from sheaf.core.envelope import SheafError
from sheaf.core.models import BodyUnit, ObjectUnit, PaperMeta
from sheaf.store.fulltext import build_match_query, match_queries
from sheaf.store.health import IndexHealth, artifact_unit_digest, zero_filled
from sheaf.store.postgres import writer
from sheaf.store.postgres.db import Where, connect, one, psycopg, retrying, snapshot, unavailable
from sheaf.store.postgres.lexical import PostgresBm25
from sheaf.store.postgres.schema import (
    EF_SEARCH,
    EXACT_BELOW,
    SCOPES,
    collections,
    ensure_schema,
    has_vector_type,
)
from sheaf.store.records import FtsHit, Unit, VectorHit
from sheaf.store.rows import (
    BODY_COLS,
    OBJECT_COLS,
    body_from_row,
    collection_segments,
    filter_papers,
    object_from_row,
    query_collection,
    year_clauses,
)
from sheaf.vectors.identity import EmbeddedPassages, Passage

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.vectors.identity import ModelIdentity, QueryVector

F = TypeVar("F", bound=Callable[..., Any])

_REF_TABLE = {"body": "body_units", "object": "object_units"}

def _guarded(fn: F) -> F:
    """A lost connection or a server gone mid-call → BACKEND_UNAVAILABLE (never a traceback)."""
    @functools.wraps(fn)
    def call(self: "PostgresIndex", *a: Any, **kw: Any) -> Any:
        try:
            return fn(self, *a, **kw)
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            raise unavailable(self.where, e) from None
    return call  # type: ignore[return-value]


class PostgresEmbeddingCache:
    """The index's content-addressed embedding cache (`EmbeddingCache`); each `put` commits."""

    def __init__(self, index: "PostgresIndex") -> None:
        self.index = index

    def get(self, identity: ModelIdentity, shas: set[str]) -> dict[str, Any]:
        try:
            return writer.cache_get(self.index.conn, identity, shas)
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            raise unavailable(self.index.where, e) from None

    def put(self, identity: ModelIdentity, vectors: dict[str, Any]) -> None:
        try:
            writer.cache_put(self.index.conn, self.index.where, identity, vectors)
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            raise unavailable(self.index.where, e) from None


class PostgresIndex(PostgresBm25):
    """One open Postgres index (see the module docstring)."""

    kind = "postgres"

    def __init__(self, conn: psycopg.Connection, where: Where, *, readonly: bool = False) -> None:
        self.conn = conn
        self.where = where
        self.location = where.shown
        self.readonly = readonly
        self.engines: dict[str, str] = {}
        self.exact_below = EXACT_BELOW

    @classmethod
    def open(cls, url: str, *, readonly: bool = False, connect_timeout: int = 10) -> "PostgresIndex":
        """Connect and check (`readonly`) or create / migrate the schema. Unreachable server, wrong
        credentials, no ``vector`` extension: BACKEND_UNAVAILABLE; no index yet (read-only):
        INDEX_NOT_FOUND; another schema version: the schema message."""
        where = Where(url)
        conn = connect(where, connect_timeout=connect_timeout)
        try:
            ensure_schema(conn, where, readonly=readonly)
            if not has_vector_type(conn):
                raise unavailable(where, "the pgvector extension (vector) is not installed in this database",
                                  hint="CREATE EXTENSION vector (or run a build, which creates it)")
            if not readonly:
                conn.close()  # reconnect: pgvector's types are registered on a new connection
                conn = connect(where, connect_timeout=connect_timeout)
        except psycopg.OperationalError as e:
            conn.close()
            raise unavailable(where, e) from None
        except BaseException:
            conn.close()
            raise
        return cls(conn, where, readonly=readonly)

    # --- lifecycle and state ------------------------------------------------------------------

    @_guarded
    def state(self) -> Hashable:
        """The change counter, which every write advances before it starts and after it commits."""
        r = one(self.conn.execute("SELECT last_value, is_called FROM sheaf_changes"))
        return (int(r[0]), bool(r[1]))

    def clone(self) -> "PostgresIndex | None":
        try:
            return PostgresIndex(connect(self.where), self.where, readonly=True)
        except Exception:  # noqa: BLE001 - the caller then runs the leg in line
            return None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "PostgresIndex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- queries (the SQLite backend's expressions: one builder, one parser) -------------------

    def match_queries(self, query: str) -> tuple[str, str]:
        return match_queries(query)

    def match_query(self, term: str) -> str | None:
        return build_match_query(term, mode="and")

    # --- lexical candidates: bm25 from the postings of the query's terms (`PostgresBm25`) ----------

    @_guarded
    def term_rows(self, scope: str, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {sorted(SCOPES)}")
        return self._term_rows(scope, terms)

    @_guarded
    def lexical_units(self, scope: str, match: str, *, limit: int, paper_ids: Sequence[str] | None = None,
                      weights: Sequence[float] | None = None) -> list[FtsHit]:
        ranked = self._ranked(scope, match, weights, paper_ids, limit)
        if limit >= 0:
            ranked = ranked[:limit]
        self.engines["lexical"] = "postgres-bm25"
        return [FtsHit(ref, pid, -float(s)) for ref, s, pid in ranked]

    @_guarded
    def lexical_papers(self, scope: str, match: str, *, limit: int, paper_ids: Sequence[str] | None = None,
                       weights: Sequence[float] | None = None) -> list[FtsHit]:
        if limit == 0:
            return []
        best: dict[str, tuple[float, str]] = {}
        for ref, s, pid in self._ranked(scope, match, weights, paper_ids, limit, per_paper=True):
            best.setdefault(pid, (s, ref))  # rank order: a paper's first row is its best
        ranked = sorted(best.items(), key=lambda kv: (kv[1][0], kv[0]))
        if limit >= 0:
            ranked = ranked[:limit]
        self.engines["lexical"] = "postgres-bm25"
        return [FtsHit(ref, pid, -float(s)) for pid, (s, ref) in ranked]

    # --- vectors --------------------------------------------------------------------------------

    @_guarded
    def collections(self) -> dict[str, ModelIdentity]:
        return collections(self.conn)

    def _collection(self, ident: ModelIdentity) -> ModelIdentity:
        return query_collection(collections(self.conn), ident)

    @_guarded
    def vector_candidates(self, query: QueryVector, k: int, paper_ids: Sequence[str] | None = None,
                          *, exact: bool | None = None) -> list[VectorHit]:
        """The `k` nearest passages of the query's collection, nearest first (ties: insertion
        order). `exact`: force the exact scan (True) or HNSW (False); default: by size."""
        ident = self._collection(query.identity)
        vec = np.ascontiguousarray(query.vector, dtype=np.float32).reshape(-1)
        if vec.shape != (ident.dimension,) or not np.all(np.isfinite(vec)):
            raise SheafError("BAD_QUERY", f"query vector has shape {vec.shape}, expected ({ident.dimension},)")
        if paper_ids is not None and not paper_ids:
            return []
        k = max(1, int(k))
        vt = ident.vec_table
        if exact is None:
            exact = paper_ids is not None or 4 * k > 1000 or self.passage_count(ident) <= self.exact_below
        cols = "passage_id, unit_id, unit_type, paper_id, ordinal, embedding <=> %s AS d, seq"
        with snapshot(self.conn, self.where):
            if exact:
                # No index scan: the planner would otherwise walk HNSW (ordered by distance) under an
                # incremental sort, and HNSW stops at ef_search candidates.
                self.conn.execute("SET LOCAL enable_indexscan = off")
                flt, args = ("", [vec]) if paper_ids is None else (" WHERE paper_id = ANY(%s)", [vec, list(paper_ids)])
                # An exact scan ordered by (distance, seq): ties broken by insertion order, as
                # SQLite breaks them by rowid.
                rows = self.conn.execute(f"SELECT {cols} FROM {vt}{flt} ORDER BY d, seq LIMIT %s",
                                         [*args, k]).fetchall()
                self.engines["vector"] = "pgvector-exact"
            else:
                self.conn.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(EF_SEARCH, 4 * k))}")
                rows = self.conn.execute(f"SELECT {cols} FROM {vt} ORDER BY embedding <=> %s LIMIT %s",
                                         [vec, vec, k]).fetchall()
                self.engines["vector"] = "pgvector-hnsw"
        rows = sorted((r for r in rows if r[5] == r[5]), key=lambda r: (r[5], r[6]))  # NaN: a zero vector
        return [VectorHit(r[0], r[1], r[2], r[3], r[4], float(r[5]), 1.0 - float(r[5])) for r in rows[:k]]

    # --- fetch by id ----------------------------------------------------------------------------

    @_guarded
    def units(self, unit_ids: Iterable[str]) -> dict[str, Unit]:
        ids = list(dict.fromkeys(unit_ids))
        out: dict[str, Unit] = {}
        with snapshot(self.conn, self.where):
            for r in self.conn.execute(f"SELECT {BODY_COLS} FROM body_units WHERE unit_id = ANY(%s)", (ids,)):
                out[r[0]] = body_from_row(r)
            for r in self.conn.execute(f"SELECT {OBJECT_COLS} FROM object_units WHERE unit_id = ANY(%s)", (ids,)):
                out[r[0]] = object_from_row(r)
        return out

    @_guarded
    def unit(self, ref: str) -> Unit | None:
        for cols, table, make in ((BODY_COLS, "body_units", body_from_row), (OBJECT_COLS, "object_units", object_from_row)):
            r = self.conn.execute(f"SELECT {cols} FROM {table} WHERE unit_id = %s OR short_id = %s",
                                  (ref, ref)).fetchone()
            if r is not None:
                return make(r)
        return None

    @_guarded
    def paper_units(self, paper_id: str) -> tuple[list[BodyUnit], list[ObjectUnit]]:
        with snapshot(self.conn, self.where):
            b = [body_from_row(r) for r in self.conn.execute(
                f"SELECT {BODY_COLS} FROM body_units WHERE paper_id = %s ORDER BY seq", (paper_id,))]
            o = [object_from_row(r) for r in self.conn.execute(
                f"SELECT {OBJECT_COLS} FROM object_units WHERE paper_id = %s ORDER BY seq", (paper_id,))]
        return b, o

    @_guarded
    def paper_fields(self, paper_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for r in self.conn.execute(
                "SELECT paper_id, title, first_author, year, journal, domain, has_metadata, citation_key, link "
                "FROM papers WHERE paper_id = ANY(%s)", (list(paper_ids),)):
            out[r[0]] = {"zotero_key": r[0], "title": r[1] or None, "first_author": r[2], "year": r[3],
                         "journal": r[4], "domain": r[5], "has_metadata": bool(r[6]), "citation_key": r[7],
                         "link": r[8]}
        return out

    @_guarded
    def paper_text(self, paper_id: str) -> dict[str, Any] | None:
        r = self.conn.execute("SELECT title, abstract, authors, journal FROM papers WHERE paper_id = %s",
                              (paper_id,)).fetchone()
        if r is None:
            return None
        return {"title": r[0] or "", "abstract": r[1] or "", "authors": json.loads(r[2] or "[]"), "journal": r[3] or ""}

    @_guarded
    def passage_starts(self, identity: ModelIdentity, passage_ids: Sequence[str]) -> dict[str, int]:
        if not passage_ids:
            return {}
        return {pid: int(s) for pid, s in self.conn.execute(
            f"SELECT passage_id, char_start FROM {identity.vec_table} WHERE passage_id = ANY(%s)", (list(passage_ids),))}

    # --- facts and coverage -----------------------------------------------------------------------

    @_guarded
    def known_papers(self, keys: Sequence[str]) -> set[str]:
        keys = list(keys)
        return {r[0] for r in self.conn.execute(
            "SELECT paper_id FROM papers WHERE paper_id = ANY(%s) UNION "
            "SELECT paper_id FROM body_units WHERE paper_id = ANY(%s)", (keys, keys))}

    @_guarded
    def papers_where(self, *, year_min: int | None = None, year_max: int | None = None,
                     domains: Sequence[str] | None = None, collections: Sequence[str] | None = None,
                     authors: Sequence[str] | None = None, tags: Sequence[str] | None = None) -> list[str]:
        where, args = year_clauses(year_min, year_max, mark="%s")
        if domains:
            where.append("domain = ANY(%s)")
            args.append(list(domains))
        rows = self.conn.execute(f"SELECT paper_id, collections, authors, tags FROM papers WHERE "
                                 f"{' AND '.join(where)} ORDER BY paper_id COLLATE \"C\"", args).fetchall()
        return filter_papers(rows, collections=list(collections) if collections else None,
                             authors=list(authors) if authors else None, tags=list(tags) if tags else None)

    @_guarded
    def collection_names(self) -> set[str]:
        return collection_segments(c for (c,) in self.conn.execute(
            "SELECT collections FROM papers WHERE collections != '[]'"))

    @_guarded
    def domains(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT DISTINCT domain FROM papers WHERE domain IS NOT NULL")}

    _INDEXED = ("SELECT DISTINCT paper_id FROM body_units UNION SELECT DISTINCT paper_id FROM object_units")

    @_guarded
    def indexed_papers(self) -> list[str]:
        return [r[0] for r in self.conn.execute(f"SELECT p FROM ({self._INDEXED}) u(p) ORDER BY p COLLATE \"C\"")]

    @_guarded
    def passage_count(self, identity: ModelIdentity, paper_ids: Sequence[str] | None = None) -> int:
        vt = identity.vec_table
        if paper_ids is None:
            return int(one(self.conn.execute(f"SELECT count(*) FROM {vt}"))[0])
        return int(one(self.conn.execute(f"SELECT count(*) FROM {vt} WHERE paper_id = ANY(%s)",
                                     (list(paper_ids),)))[0])

    @_guarded
    def embedding_gaps(self, identity: ModelIdentity, paper_ids: Sequence[str] | None = None) -> tuple[int, int]:
        flt, args = ("", []) if paper_ids is None else (" WHERE u.p = ANY(%s)", [list(paper_ids)])
        r = one(self.conn.execute(f"SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM "
                                  f"{identity.vec_table} v WHERE v.paper_id = u.p)) FROM ({self._INDEXED}) u(p){flt}",
                                  args))
        return int(r[0]), int(r[1])

    @_guarded
    def embedded_papers(self, identity: ModelIdentity) -> int:
        return int(one(self.conn.execute(f"SELECT count(DISTINCT paper_id) FROM {identity.vec_table}"))[0])

    @_guarded
    def papers_with_metadata(self) -> int:
        return int(one(self.conn.execute("SELECT count(*) FROM papers WHERE has_metadata = 1"))[0])

    @_guarded
    def counts(self, paper_id: str | None = None) -> dict[str, int]:
        """Row counts per table, keyed as on SQLite (the lexical rows of a scope count as its
        ``*_fts`` table; a collection's passages count as ``passages_<key>`` and ``vec_<key>``)."""
        where, args = ("WHERE paper_id = %s", [paper_id]) if paper_id else ("", [])
        out: dict[str, int] = {}
        with snapshot(self.conn, self.where):
            for t in ("papers", "body_units", "object_units"):
                out[t] = int(one(self.conn.execute(f"SELECT count(*) FROM {t} {where}", args))[0])
            lex = dict(self.conn.execute(f"SELECT scope, count(*) FROM lex_rows {where} GROUP BY scope", args).fetchall())
            for scope, sid in SCOPES.items():
                out[f"{'papers' if scope == 'papers' else _REF_TABLE[scope]}_fts"] = int(lex.get(sid, 0))
            for ident in collections(self.conn).values():
                n = int(one(self.conn.execute(f"SELECT count(*) FROM {ident.vec_table} {where}", args))[0])
                out[ident.passages_table] = out[ident.vec_table] = n
            if not paper_id:
                out["embedding_cache"] = int(one(self.conn.execute("SELECT count(*) FROM embedding_cache"))[0])
        return out

    @_guarded
    def paper_ids(self, *, with_units: bool = False) -> list[str]:
        q = self._INDEXED if with_units else "SELECT paper_id FROM papers"
        return [r[0] for r in self.conn.execute(f"SELECT p FROM ({q}) u(p) ORDER BY p COLLATE \"C\"")]

    # --- writes -----------------------------------------------------------------------------------

    @_guarded
    def replace_paper(self, paper_id: str, units: Sequence[BodyUnit], objects: Sequence[ObjectUnit],
                      passages: EmbeddedPassages | Sequence[EmbeddedPassages] | None = None, **kw: Any) -> Any:
        return writer.replace_paper(self.conn, self.where, paper_id, units, objects, passages, **kw)

    @_guarded
    def replace_paper_vectors(self, paper_id: str, passages: EmbeddedPassages, **kw: Any) -> int:
        return writer.replace_paper_vectors(self.conn, self.where, paper_id, passages, **kw)

    @_guarded
    def remove_paper(self, paper_id: str, **kw: Any) -> bool:
        return writer.remove_paper(self.conn, self.where, paper_id, **kw)

    @_guarded
    def upsert_papers(self, metas: Iterable[PaperMeta], **kw: Any) -> dict[str, int]:
        return writer.upsert_papers(self.conn, self.where, metas, **kw)

    @_guarded
    def prune_metadata(self, exported: Iterable[str], **kw: Any) -> dict[str, int]:
        return writer.prune_metadata(self.conn, self.where, exported, **kw)

    def embedding_cache(self) -> PostgresEmbeddingCache:
        return PostgresEmbeddingCache(self)

    # --- integrity (`sheaf doctor`, the build's drift check) ----------------------------------------

    @_guarded
    def paper_index_stats(self, collection_key: str | None = None,
                          paper_ids: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
        """Per paper: units, their lexical rows and (for `collection_key`) passages, vectors and
        passages whose unit is gone, keyed as `sheaf.store.sqlite.integrity.paper_index_stats`;
        `paper_ids`: only those papers' rows."""
        stats: dict[str, dict[str, int]] = {}
        args = [] if paper_ids is None else [list(paper_ids)]

        def only(col: str, joiner: str = "WHERE") -> str:
            return "" if paper_ids is None else f" {joiner} {col} = ANY(%s)"

        def put(name: str, sql: str) -> None:
            for pid, n in self.conn.execute(sql, args):
                stats.setdefault(pid, {})[name] = int(n)

        with snapshot(self.conn, self.where):
            put("body_units", f"SELECT paper_id, count(*) FROM body_units{only('paper_id')} GROUP BY 1")
            put("object_units", f"SELECT paper_id, count(*) FROM object_units{only('paper_id')} GROUP BY 1")
            put("body_fts", "SELECT l.paper_id, count(*) FROM lex_rows l JOIN body_units b ON b.paper_id = l.paper_id "
                            f"AND b.unit_id = l.ref WHERE l.scope = {SCOPES['body']}{only('l.paper_id', 'AND')} "
                            "GROUP BY 1")
            put("object_fts", "SELECT l.paper_id, count(*) FROM lex_rows l JOIN object_units o ON o.paper_id = "
                              f"l.paper_id AND o.unit_id = l.ref WHERE l.scope = {SCOPES['object']}"
                              f"{only('l.paper_id', 'AND')} GROUP BY 1")
            cols = collections(self.conn)
            if collection_key and collection_key in cols:
                vt = cols[collection_key].vec_table
                put("passages", f"SELECT paper_id, count(*) FROM {vt}{only('paper_id')} GROUP BY 1")
                put("vectors", f"SELECT paper_id, count(*) FROM {vt}{only('paper_id')} GROUP BY 1")
                put("dangling_passages", f"SELECT p.paper_id, count(*) FROM {vt} p WHERE NOT EXISTS (SELECT 1 FROM "
                                         "body_units b WHERE b.unit_id = p.unit_id AND b.paper_id = p.paper_id) AND NOT "
                                         "EXISTS (SELECT 1 FROM object_units o WHERE o.unit_id = p.unit_id AND "
                                         f"o.paper_id = p.paper_id){only('p.paper_id', 'AND')} GROUP BY 1")
        return zero_filled(stats, collection_key)

    @_guarded
    def unit_digest(self, paper_id: str) -> str:
        with snapshot(self.conn, self.where):
            body = [{"unit_id": r[0], "text": r[1]} for r in self.conn.execute(
                "SELECT unit_id, text FROM body_units WHERE paper_id = %s", (paper_id,))]
            objects = [dict(zip(("unit_id", "caption", "table_text", "nearby_text"), r)) for r in self.conn.execute(
                "SELECT unit_id, caption, table_text, nearby_text FROM object_units WHERE paper_id = %s", (paper_id,))]
        return artifact_unit_digest(body, objects)

    _ORPHANS = {
        "lexical_rows_without_unit": (
            "lex_rows l WHERE (l.scope = 0 AND NOT EXISTS (SELECT 1 FROM body_units b WHERE b.paper_id = l.paper_id "
            "AND b.unit_id = l.ref)) OR (l.scope = 1 AND NOT EXISTS (SELECT 1 FROM object_units o WHERE o.paper_id = "
            "l.paper_id AND o.unit_id = l.ref)) OR (l.scope = 2 AND NOT EXISTS (SELECT 1 FROM papers p WHERE "
            "p.paper_id = l.ref))"),
        "postings_without_row": ("lex_postings x WHERE NOT EXISTS (SELECT 1 FROM lex_rows l WHERE l.paper_id = "
                                 "x.paper_id AND l.scope = x.scope AND l.ref = x.ref)"),
    }
    #: (paper, scope, term) whose count of rows (``lex_terms``) is not what its postings say.
    _TERM_COUNTS_OFF = ("SELECT paper_id FROM lex_terms t FULL JOIN (SELECT paper_id, scope, term, count(*) AS n "
                        "FROM lex_postings GROUP BY 1, 2, 3) x USING (paper_id, scope, term) "
                        "WHERE t.n_rows IS DISTINCT FROM x.n")

    @_guarded
    def global_orphans(self) -> dict[str, int]:
        """Rows that belong to nothing: lexical rows or postings without their unit or paper, units
        without a papers row, passages whose unit is gone (per collection)."""
        out: dict[str, int] = {}
        with snapshot(self.conn, self.where):
            for name, frm in self._ORPHANS.items():
                out[name] = int(one(self.conn.execute(f"SELECT count(*) FROM {frm}"))[0])
            out["term_counts_off"] = int(one(self.conn.execute(
                f"SELECT count(*) FROM ({self._TERM_COUNTS_OFF}) o"))[0])
            out["units_without_fts"] = sum(int(one(self.conn.execute(
                f"SELECT count(*) FROM {t} u WHERE NOT EXISTS (SELECT 1 FROM lex_rows l WHERE l.paper_id = u.paper_id "
                f"AND l.scope = {sid} AND l.ref = u.unit_id)"))[0])
                for t, sid in (("body_units", 0), ("object_units", 1)))
            out["units_without_paper"] = sum(int(one(self.conn.execute(
                f"SELECT count(*) FROM {t} u WHERE NOT EXISTS (SELECT 1 FROM papers p WHERE p.paper_id = u.paper_id)"
            ))[0]) for t in ("body_units", "object_units"))
            for ident in collections(self.conn).values():
                out[f"{ident.passages_table}_without_unit"] = int(one(self.conn.execute(
                    f"SELECT count(*) FROM {ident.vec_table} p WHERE NOT EXISTS (SELECT 1 FROM body_units b WHERE "
                    "b.unit_id = p.unit_id) AND NOT EXISTS (SELECT 1 FROM object_units o WHERE o.unit_id = p.unit_id)"
                ))[0])
        return out

    @_guarded
    def remove_global_orphans(self) -> dict[str, int]:
        """Delete what `global_orphans` counts (one transaction); lexical rows of a unit that lost
        them are rewritten with its paper's."""
        def body(c: psycopg.Connection) -> dict[str, int]:
            out: dict[str, int] = {}
            for name, frm in self._ORPHANS.items():
                table, alias = frm.split(" WHERE ", 1)[0].split()
                out[name] = c.execute(f"DELETE FROM {table} {alias} WHERE {frm.split(' WHERE ', 1)[1]}").rowcount
            for ident in collections(c).values():
                out[f"{ident.passages_table}_removed"] = c.execute(
                    f"DELETE FROM {ident.vec_table} p WHERE NOT EXISTS (SELECT 1 FROM body_units b WHERE "
                    "b.unit_id = p.unit_id) AND NOT EXISTS (SELECT 1 FROM object_units o WHERE o.unit_id = p.unit_id)"
                ).rowcount
            lacking = [r[0] for r in c.execute(
                "SELECT DISTINCT paper_id FROM (SELECT paper_id, unit_id, 0 AS s FROM body_units UNION ALL "
                "SELECT paper_id, unit_id, 1 FROM object_units) u WHERE NOT EXISTS (SELECT 1 FROM lex_rows l WHERE "
                "l.paper_id = u.paper_id AND l.scope = u.s AND l.ref = u.unit_id)")]
            off = {r[0] for r in c.execute(f"SELECT DISTINCT paper_id FROM ({self._TERM_COUNTS_OFF}) o")}
            out["term_counts_off"] = writer.recount_terms(c, off - set(lacking))
            for pid in lacking:
                writer.write_lex(c, pid, ["body", "object"])
            out["papers_lexical_rows_rewritten"] = len(lacking)
            return out
        writer.changed(self.conn)
        return retrying(self.conn, self.where, body)

    @_guarded
    def vector_bytes_mismatch(self, ident: ModelIdentity) -> dict[str, int]:
        bad: dict[str, int] = {}
        for pid, a, b in self.conn.execute(
                f"SELECT p.paper_id, p.embedding, c.vector FROM {ident.vec_table} p JOIN embedding_cache c ON "
                "c.model_key = %s AND c.text_sha256 = p.text_sha256", (ident.key,)):
            if np.asarray(a.to_numpy(), dtype=np.float32).tobytes() != bytes(b):
                bad[pid] = bad.get(pid, 0) + 1
        return bad

    # --- export (`sheaf.store.copy`) ---------------------------------------------------------------

    @_guarded
    def export_papers(self) -> list[PaperMeta]:
        rows = self.conn.execute("SELECT paper_id, citation_key, title, authors, first_author, year, journal, doi, "
                                 "pmid, abstract, collections, domain, item_type, source, tags, link FROM papers "
                                 "WHERE has_metadata = 1 ORDER BY seq").fetchall()
        return [PaperMeta(key=r[0], citation_key=r[1], title=r[2] or "", authors=tuple(json.loads(r[3])),
                          first_author=r[4], year=r[5], journal=r[6], doi=r[7], pmid=r[8], abstract=r[9],
                          collections=tuple(json.loads(r[10])), domain=r[11], item_type=r[12], source=r[13],
                          tags=tuple(json.loads(r[14] or "[]")), link=r[15])
                for r in rows]

    @_guarded
    def papers_in_write_order(self) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT paper_id FROM (SELECT paper_id, min(seq) AS s FROM body_units GROUP BY paper_id UNION ALL "
            "SELECT paper_id, min(seq) FROM object_units GROUP BY paper_id) u GROUP BY paper_id "
            "ORDER BY min(s), paper_id COLLATE \"C\"")]

    @_guarded
    def paper_passages(self, paper_id: str, identity: ModelIdentity) -> EmbeddedPassages:
        rows = self.conn.execute(
            f"SELECT passage_id, unit_id, unit_type, ordinal, char_start, char_end, text_sha256, embedding "
            f"FROM {identity.vec_table} WHERE paper_id = %s ORDER BY seq", (paper_id,)).fetchall()
        vecs = (np.stack([np.asarray(r[7].to_numpy(), dtype=np.float32) for r in rows]) if rows
                else np.zeros((0, identity.dimension), np.float32))
        return EmbeddedPassages(identity, tuple(Passage(r[0], r[1], paper_id, r[2], r[3], r[4], r[5], "", r[6], 0)
                                                for r in rows), vecs)

    @_guarded
    def cache_rows(self) -> Iterable[tuple[str, str, bytes]]:
        return [(r[0], r[1], bytes(r[2])) for r in
                self.conn.execute("SELECT model_key, text_sha256, vector FROM embedding_cache ORDER BY 1, 2")]

    @_guarded
    def put_cache_rows(self, rows: Iterable[tuple[str, str, bytes]]) -> int:
        rows = list(rows)

        def body(c: psycopg.Connection) -> None:
            with c.cursor() as cur:
                cur.executemany("INSERT INTO embedding_cache VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", rows)
        retrying(self.conn, self.where, body)
        return len(rows)


def check(url: str) -> IndexHealth:
    """Can the Postgres index be used (`sheaf doctor`, the build's first step)? ``ok`` / ``empty``
    (no index yet) / ``schema`` / ``unavailable`` / ``damaged_collections`` (a collection whose
    table cannot be read)."""
    where = Where(url)
    try:
        index = PostgresIndex.open(url, readonly=True)
    except SheafError as e:
        state = ("empty" if e.code == "INDEX_NOT_FOUND" else
                 "schema" if "schema" in e.message else "unavailable")
        return IndexHealth(where.shown, state, e.message, dict(e.details))
    try:
        damaged = []
        for key, ident in index.collections().items():
            try:
                with snapshot(index.conn, where):
                    index.conn.execute(f"SELECT embedding FROM {ident.vec_table} LIMIT 1").fetchall()
            except (psycopg.Error, SheafError):
                damaged.append(key)
        if damaged:
            return IndexHealth(where.shown, "damaged_collections", f"vector collection(s) {', '.join(damaged)} "
                               "unreadable", damaged_collections=damaged)
        return IndexHealth(where.shown, "ok", "")
    finally:
        index.close()
