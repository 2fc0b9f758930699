"""Reads of the SQLite index: counts, papers and units by id, FTS5 candidates (bm25), and exact
vector candidates (sqlite-vec)."""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError
from sheaf.core.models import BodyUnit, ObjectUnit
from sheaf.store.fulltext import build_match_query
from sheaf.store.sqlite.db import read_snapshot, sqlite3, varints

if TYPE_CHECKING:  # sheaf.vectors.identity is imported where used: `sheaf search` never needs it
    from sheaf.vectors.identity import QueryVector
from sheaf.core.lazy import lazy_module
from sheaf.core.models import PaperMeta
from sheaf.store.backend import MAX_KNN_K, LexicalEngine, VectorEngine
from sheaf.store.records import FtsHit, VectorHit
from sheaf.store.rows import (
    BODY_COLS,
    OBJECT_COLS,
    body_from_row,
    filter_papers,
    object_from_row,
    query_collection,
    year_clauses,
)
from sheaf.store.sqlite.schema import Conn, collections

np = lazy_module("numpy")  # imported on first use: the lexical query path never needs it
hashlib = lazy_module("hashlib")  # its OpenSSL backend costs ~3-5 ms to load

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.core.models import PaperMeta


def counts(conn: Conn, paper_id: str | None = None) -> dict[str, int]:
    """Row counts per table (of one paper when `paper_id` is given). FTS counts are rows of
    the FTS index; vector counts are keyed ``vec_<key>`` / ``passages_<key>``."""
    out: dict[str, int] = {}
    where, args = ("WHERE paper_id = ?", (paper_id,)) if paper_id else ("", ())
    for t in ("papers", "body_units", "object_units"):
        out[t] = conn.execute(f"SELECT COUNT(*) FROM {t} {where}", args).fetchone()[0]
    for t, base, key in (("papers_fts", "papers", "paper_rowid"),
                         ("body_units_fts", "body_units", "unit_rowid"),
                         ("object_units_fts", "object_units", "unit_rowid")):
        if paper_id:
            # rows of the FTS index whose rowid is one of the paper's base rows
            out[t] = conn.execute(
                f"SELECT COUNT(*) FROM {t} WHERE rowid IN (SELECT {key} FROM {base} {where})",
                args).fetchone()[0]
        else:
            out[t] = conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
    for ident in collections(conn).values():
        pt, vt = ident.passages_table, ident.vec_table
        out[pt] = conn.execute(f"SELECT COUNT(*) FROM {pt} {where}", args).fetchone()[0]
        if paper_id:
            # the paper's passages that have their vector: a point lookup per passage. (The
            # vec0 metadata filter `paper_id = ?` scans every vector of the collection: ~0.3 s
            # a paper at 190k vectors, quadratic over a build. Vectors without a passage are
            # global orphans: `sheaf doctor` finds those.)
            out[vt] = conn.execute(f"SELECT COUNT(*) FROM {pt} p WHERE p.paper_id = ? AND EXISTS "
                                   f"(SELECT 1 FROM {vt} v WHERE v.passage_rowid = p.rowid)", args).fetchone()[0]
        else:
            out[vt] = conn.execute(f"SELECT COUNT(*) FROM {vt}").fetchone()[0]
    if not paper_id:
        out["embedding_cache"] = conn.execute("SELECT COUNT(*) FROM embedding_cache").fetchone()[0]
    return out


def paper_ids(conn: Conn, *, with_units: bool = False) -> list[str]:
    """Every paper id in the index (only those with units when `with_units`)."""
    if with_units:
        q = "SELECT paper_id FROM body_units UNION SELECT paper_id FROM object_units ORDER BY 1"
    else:
        q = "SELECT paper_id FROM papers ORDER BY 1"
    return [r[0] for r in conn.execute(q)]


def paper_ids_where(conn: Conn, *, year_min: int | None = None, year_max: int | None = None,
                    domains: Sequence[str] | None = None, collection: str | None = None,
                    collections: Sequence[str] | None = None, authors: Sequence[str] | None = None,
                    tags: Sequence[str] | None = None) -> list[str]:
    """Paper ids passing metadata filters (for the `paper_ids` argument of the searches).

    `collection` matches a collection path or any path below it ("Bone" matches "Bone/Reviews").
    `collections`: any of these names, matched case- and accent-insensitively against whole
    segments of a collection path, the path below included ("Ecology" matches "Library/Ecology"
    and "Library/Ecology/Soils"). `authors`: any of these names, matched against the start of a
    word of an author's name, case- and accent-insensitively ("muller" matches "Anna Müller-Lenz").
    `tags`: any of these tags, whole, case- and accent-insensitively.
    """
    where, args = year_clauses(year_min, year_max)
    if domains is not None:
        where.append(f"domain IN ({','.join('?' * len(domains))})")
        args += list(domains)
    if collection is not None:
        where.append("EXISTS (SELECT 1 FROM json_each(papers.collections) c "
                     "WHERE c.value = ? OR substr(c.value, 1, ?) = ?)")
        args += [collection, len(collection) + 1, collection + "/"]
    rows = conn.execute(f"SELECT paper_id, collections, authors, tags FROM papers WHERE {' AND '.join(where)} "
                        "ORDER BY paper_id", args).fetchall()
    return filter_papers(rows, collections=collections, authors=authors, tags=tags)


def get_paper(conn: Conn, paper_id: str) -> PaperMeta | None:
    """A paper's metadata (None when absent or only a stub without metadata)."""
    r = conn.execute("SELECT paper_id, citation_key, title, authors, first_author, year, journal, "
                     "doi, pmid, abstract, collections, domain, item_type, source, has_metadata, tags, link "
                     "FROM papers WHERE paper_id = ?", (paper_id,)).fetchone()
    if r is None or not r[14]:
        return None

    return PaperMeta(key=r[0], citation_key=r[1], title=r[2] or "", authors=tuple(json.loads(r[3])),
                     first_author=r[4], year=r[5], journal=r[6], doi=r[7], pmid=r[8], abstract=r[9],
                     collections=tuple(json.loads(r[10])), domain=r[11], item_type=r[12], source=r[13],
                     tags=tuple(json.loads(r[15] or "[]")), link=r[16])


def get_units(conn: Conn, unit_ids: Iterable[str]) -> dict[str, BodyUnit | ObjectUnit]:
    """Units (body or object) by unit_id; ids not in the index are absent from the result."""
    ids = list(dict.fromkeys(unit_ids))
    out: dict[str, BodyUnit | ObjectUnit] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        marks = ",".join("?" * len(chunk))
        for r in conn.execute(f"SELECT {BODY_COLS} FROM body_units WHERE unit_id IN ({marks})", chunk):
            out[r[0]] = body_from_row(r)
        for r in conn.execute(f"SELECT {OBJECT_COLS} FROM object_units WHERE unit_id IN ({marks})", chunk):
            out[r[0]] = object_from_row(r)
    return out


def get_unit(conn: Conn, ref: str) -> BodyUnit | ObjectUnit | None:
    """One unit by unit_id or by short_id."""
    for cols, table, make in ((BODY_COLS, "body_units", body_from_row), (OBJECT_COLS, "object_units", object_from_row)):
        r = conn.execute(f"SELECT {cols} FROM {table} WHERE unit_id = ? OR short_id = ?",
                         (ref, ref)).fetchone()
        if r is not None:
            return make(r)
    return None


def paper_units(conn: Conn, paper_id: str) -> tuple[list[BodyUnit], list[ObjectUnit]]:
    """A paper's body units and object units, in insertion order."""
    b = [body_from_row(r) for r in conn.execute(
        f"SELECT {BODY_COLS} FROM body_units WHERE paper_id = ? ORDER BY unit_rowid", (paper_id,))]
    o = [object_from_row(r) for r in conn.execute(
        f"SELECT {OBJECT_COLS} FROM object_units WHERE paper_id = ? ORDER BY unit_rowid", (paper_id,))]
    return b, o


_SCOPES = {
    "body": ("body_units_fts", "body_units", "unit_rowid", "unit_id"),
    "object": ("object_units_fts", "object_units", "unit_rowid", "unit_id"),
    "papers": ("papers_fts", "papers", "paper_rowid", "paper_id"),
}


def term_rows(conn: Conn, scope: str, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
    """(rows of the scope's FTS table, {term: rows holding it}) for FTS tokens (stemmed, as
    `sheaf.store.tokens.FtsTokenizer` makes them): the document frequencies of an idf. Read
    from an fts5vocab table in the connection's temp schema and FTS5's averages record."""
    fts = _fts_scope(scope, None)[0]
    vocab = f"sheaf_rows_{fts}"
    terms = sorted(set(terms))
    with read_snapshot(conn):
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocab} USING fts5vocab(main, {fts}, row)")
        got = {t: int(n) for t, n in conn.execute(
            f"SELECT term, doc FROM temp.{vocab} WHERE term IN ({', '.join('?' * len(terms))})", terms)} \
            if terms else {}
        row = conn.execute(f"SELECT block FROM {fts}_data WHERE id = 1").fetchone()
    n_rows = (varints(bytes(row[0])) or [0])[0] if row and row[0] else 0
    return n_rows, got


def _fts_scope(scope: str, weights: Sequence[float] | None) -> tuple[str, str, str, str, str]:
    """(fts table, base table, key column, ref column, bm25 call) of a scope."""
    if scope not in _SCOPES:
        raise ValueError(f"scope must be one of {sorted(_SCOPES)}")
    fts, base, key, ref = _SCOPES[scope]
    w = "" if not weights else ", " + ", ".join(str(float(x)) for x in weights)
    return fts, base, key, ref, f"bm25({fts}{w})"


def _ranked(conn: Conn, fts: str, bm25: str, match: str, limit: int = -1,
            weights: Sequence[float] | None = None, rowids: Sequence[int] | None = None,
            engine: LexicalEngine | None = None) -> Any:
    """Cursor over (rowid, bm25) of the FTS rows matching `match`, best first (ties: rowid),
    at most `limit` (-1: all); only `rowids` when given. The base rows are joined afterwards,
    only for the rows used: joining every matching row before the sort costs more than the
    sort itself. A lexical `engine` (a warm server's in-memory bm25, `sheaf.store.sqlite.memory_bm25`)
    answers the same from memory when it can."""
    if engine is not None:
        got = engine(conn, fts, weights, match, rowids)
        if got is not None:
            return _Limited(got, limit)
    if rowids is not None:
        return None
    return conn.execute(f"SELECT rowid, {bm25} AS s FROM {fts} WHERE {fts} MATCH ? ORDER BY s, rowid LIMIT ?",
                        (match, int(limit)))


class _Limited:
    """An accelerator's ranked rows read like `_ranked`'s cursor, at most `limit` of them."""

    def __init__(self, rows: Any, limit: int) -> None:
        self._rows = rows
        self._left = None if limit < 0 else int(limit)

    def fetchmany(self, n: int) -> list[tuple[int, float]]:
        if self._left is not None:
            n = min(n, self._left)
        got: list[tuple[int, float]] = self._rows.fetchmany(n)
        if self._left is not None:
            self._left -= len(got)
        return got

    def fetchall(self) -> list[tuple[int, float]]:
        out: list[tuple[int, float]] = []
        while True:
            got = self.fetchmany(4096 if self._left is None else self._left)
            if not got:
                return out
            out += got

    def close(self) -> None:
        self._rows.close()


def _refs(conn: Conn, base: str, key: str, ref: str, rowids: Sequence[int]) -> dict[int, tuple[str, str]]:
    """rowid → (ref, paper_id) of the base rows (absent rowids are left out)."""
    out: dict[int, tuple[str, str]] = {}
    for i in range(0, len(rowids), 500):
        chunk = rowids[i:i + 500]
        for r in conn.execute(f"SELECT {key}, {ref}, paper_id FROM {base} WHERE {key} IN "
                              f"({','.join('?' * len(chunk))})", chunk):
            out[r[0]] = (r[1], r[2])
    return out


def fts_search(conn: Conn, scope: str, match: str, *, limit: int = 20,
               paper_ids: Sequence[str] | None = None,
               weights: Sequence[float] | None = None, engine: LexicalEngine | None = None) -> list[FtsHit]:
    """Run a MATCH expression (build it with `sheaf.store.fulltext.build_match_query`) on one scope's
    FTS table, best first (ties: rowid). `weights` are bm25 column weights; `paper_ids`
    filters; `limit` -1: every hit; `engine`: see `_ranked`."""
    with read_snapshot(conn):
        return _fts_search(conn, scope, match, limit, paper_ids, weights, engine)


def _fts_search(conn: Conn, scope: str, match: str, limit: int, paper_ids: Sequence[str] | None,
                weights: Sequence[float] | None, engine: LexicalEngine | None) -> list[FtsHit]:
    fts, base, key, ref, bm25 = _fts_scope(scope, weights)
    if limit >= 0:  # every hit (or a filter): the join below at once
        rowids = None
        if paper_ids is not None and engine is not None:
            rowids = paper_rowids(conn, scope, paper_ids)
            if not rowids:
                return []  # none of these papers has a row here
        cur = None if paper_ids is not None and rowids is None else \
            _ranked(conn, fts, bm25, match, limit, weights, rowids, engine)
        if cur is not None:
            rows = cur.fetchall()
            refs = _refs(conn, base, key, ref, [r[0] for r in rows])
            if len(refs) == len(rows):
                return [FtsHit(*refs[rid], -float(s)) for rid, s in rows]
        # An FTS row without its base row (written outside Sheaf) took a place in the limit:
        # rank with the join instead (below), which never counts it.
    args: list[Any] = [match]
    flt = ""
    if paper_ids is not None:
        flt = f" AND b.paper_id IN ({','.join('?' * len(paper_ids))})"
        args += list(paper_ids)
    args.append(int(limit))
    q = (f"SELECT b.{ref}, b.paper_id, {bm25} AS s FROM {fts} JOIN {base} b "
         f"ON b.{key} = {fts}.rowid WHERE {fts} MATCH ?{flt} ORDER BY s, b.{key} LIMIT ?")
    return [FtsHit(r[0], r[1], -float(r[2])) for r in conn.execute(q, args)]


def paper_rowids(conn: Conn, scope: str, paper_ids: Sequence[str]) -> list[int]:
    """The FTS rowids of a scope's rows of these papers."""
    _, base, key, _, _ = _fts_scope(scope, None)
    out: list[int] = []
    ids = list(paper_ids)
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        out += [r[0] for r in conn.execute(
            f"SELECT {key} FROM {base} WHERE paper_id IN ({','.join('?' * len(chunk))})", chunk)]
    return out


def fts_best_per_paper(conn: Conn, scope: str, match: str, *, limit: int = 20,
                       paper_ids: Sequence[str] | None = None,
                       weights: Sequence[float] | None = None, engine: LexicalEngine | None = None) -> list[FtsHit]:
    """Like `fts_search`, but only each paper's best hit (ties: rowid): best paper first
    (ties: paper_id), at most `limit` papers (-1: all); no paper is lost to a row limit.

    The ranked rows are read best first and joined to their base rows in batches, only until
    `limit` papers are certain: every paper not seen yet scores below the last one kept."""
    fts, base, key, ref, bm25 = _fts_scope(scope, weights)
    with read_snapshot(conn):
        return _best_per_paper(conn, fts, base, key, ref, bm25, match, limit, paper_ids, weights, engine)


def _best_per_paper(conn: Conn, fts: str, base: str, key: str, ref: str, bm25: str, match: str, limit: int,
                    paper_ids: Sequence[str] | None, weights: Sequence[float] | None,
                    engine: LexicalEngine | None) -> list[FtsHit]:
    allowed = None if paper_ids is None else set(paper_ids)
    limit = int(limit)
    if limit == 0:
        return []
    best: dict[str, tuple[float, str]] = {}  # paper_id → (bm25, ref) of its first (best) row
    cut: float | None = None  # bm25 of the row that brought the limit-th paper
    batch = max(64, min(limit, 1000)) if limit > 0 else 1000
    cur = _ranked(conn, fts, bm25, match, weights=weights, engine=engine)
    try:
        done = False
        while not done:
            rows = cur.fetchmany(batch)
            if not rows:
                break
            batch = min(batch * 2, 4000)
            refs = _refs(conn, base, key, ref, [r[0] for r in rows])
            for rid, s in rows:
                if cut is not None and s > cut:  # papers tied with the cut are all in
                    done = True
                    break
                hit = refs.get(rid)
                if hit is None or hit[1] in best or (allowed is not None and hit[1] not in allowed):
                    continue
                best[hit[1]] = (s, hit[0])
                if len(best) == limit:
                    cut = s
    finally:
        cur.close()
    ranked = sorted(best.items(), key=lambda kv: (kv[1][0], kv[0]))
    if limit >= 0:
        ranked = ranked[:limit]
    return [FtsHit(r, pid, -float(s)) for pid, (s, r) in ranked]


def search_text(conn: Conn, query: str, scope: str = "body", *, limit: int = 20,
                mode: str = "and", paper_ids: Sequence[str] | None = None) -> list[FtsHit]:
    """Lexical search for a user query (made safe by `build_match_query`); [] when the query
    holds no searchable token."""
    match = build_match_query(query, mode=mode)
    if match is None:
        return []
    return fts_search(conn, scope, match, limit=limit, paper_ids=paper_ids)


def vector_search(conn: Conn, query: QueryVector, k: int = 10, *,
                  paper_ids: Sequence[str] | None = None, engine: VectorEngine | None = None) -> list[VectorHit]:
    """Exact KNN over the collection of the query's model identity, nearest first
    (`k` is capped at `MAX_KNN_K`). A vector `engine` (a warm server's in-memory matrix,
    `sheaf.store.sqlite.memory_vectors`) answers instead after the checks, when it can: exactly what
    sqlite-vec would answer.

    Refused with `ModelChangedError` (``MODEL_CHANGED``) when the index has vectors but none
    of the query's identity; ``VECTOR_NOT_BUILT`` when it has no vectors at all.
    """

    ident = query_collection(collections(conn), query.identity)
    vec = np.ascontiguousarray(query.vector, dtype=np.float32).reshape(-1)
    if vec.shape != (ident.dimension,) or not np.all(np.isfinite(vec)):
        raise SheafError("BAD_QUERY", f"query vector has shape {vec.shape}, expected ({ident.dimension},)")
    pt, vt = ident.passages_table, ident.vec_table
    if paper_ids is not None and not paper_ids:
        return []
    k = max(1, min(int(k), MAX_KNN_K))
    if engine is not None:  # a warm server's in-memory matrix (same answer, faster)
        hits: list[VectorHit] | None = engine(conn, query, k, paper_ids)
        if hits is not None:
            return hits
    flt, tail = "", list(paper_ids) if paper_ids is not None else []
    if paper_ids is not None:
        flt = f" AND paper_id IN ({','.join('?' * len(paper_ids))})"
    # Ties (identical vectors: identical passage texts) are broken by passage rowid, never
    # by vec0's scan order: fetch one more than k, and more while the k-th distance is tied.
    fetch = min(k + 1, MAX_KNN_K)
    while True:
        try:
            rows = conn.execute(
                f"SELECT v.passage_rowid, v.distance, p.passage_id, p.unit_id, p.unit_type, p.paper_id, "
                f"p.ordinal FROM (SELECT passage_rowid, distance FROM {vt} WHERE embedding MATCH ? "
                f"AND k = ?{flt}) v JOIN {pt} p ON p.passage_rowid = v.passage_rowid "
                f"ORDER BY v.distance", [vec.tobytes(), fetch, *tail]).fetchall()
        except sqlite3.DatabaseError as e:  # OperationalError and the rest (a damaged vec0 table)
            raise SheafError("VECTOR_CORRUPTED", f"vector collection {ident.key} unreadable: {e}",
                             {"collection": ident.key}, hint="rebuild the vectors") from e
        fetched = len(rows)
        # A zero vector has no direction: sqlite-vec gives it a NULL distance; it is near nothing.
        rows = sorted((r for r in rows if r[1] is not None), key=lambda r: (r[1], r[0]))
        if fetched < fetch or fetch >= MAX_KNN_K or (len(rows) > k and rows[-1][1] > rows[k - 1][1]):
            break
        fetch = min(fetch * 2, MAX_KNN_K)
    return [VectorHit(r[2], r[3], r[4], r[5], r[6], float(r[1]), 1.0 - float(r[1])) for r in rows[:k]]


