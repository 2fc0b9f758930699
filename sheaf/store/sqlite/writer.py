"""Writes to the SQLite index: a paper's rows replaced in one transaction, removal, library
metadata, and the content-addressed embedding cache."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sheaf.core.models import BodyUnit, ObjectUnit, valid_paper_key
from sheaf.store.sqlite.db import transaction

if TYPE_CHECKING:  # sheaf.vectors.identity is imported where used: `sheaf search` never needs it
    from sheaf.vectors.identity import EmbeddedPassages, ModelIdentity
from sheaf.core.lazy import lazy_module
from sheaf.store.rows import (
    BODY_CONTENT,
    OBJECT_CONTENT,
    PASSAGE_CONTENT,
    ReplaceStats,
    as_units,
    body_row,
    json_text,
    meta_sha,
    object_row,
    passage_rows,
    passages_list,
    same_passages,
    unchanged_units,
    units_held,
    validate_paper,
)
from sheaf.store.sqlite.schema import (
    VECTORS_EPOCH,
    Conn,
    Hook,
    collections,
    ensure_collection,
    fill_fts,
    fill_unit_fts,
    fts_delete,
    fts_rows,
    new_epoch,
)
from sheaf.vectors.identity import EmbeddedPassages

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # imported on first use: the lexical query path never needs it
hashlib = lazy_module("hashlib")  # its OpenSSL backend costs ~3-5 ms to load

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.core.models import PaperMeta


def cache_get(conn: Conn, identity: ModelIdentity, shas: Iterable[str]) -> dict[str, np.ndarray]:
    """Cached vectors of `identity` for the given passage-text sha256s (those present)."""
    shas = list(shas)
    out: dict[str, np.ndarray] = {}
    dim = identity.dimension
    for i in range(0, len(shas), 500):
        chunk = shas[i:i + 500]
        q = ("SELECT text_sha256, vector FROM embedding_cache WHERE model_key = ? AND "
             f"text_sha256 IN ({','.join('?' * len(chunk))})")
        for sha, blob in conn.execute(q, (identity.key, *chunk)):
            v = np.frombuffer(blob, dtype=np.float32)
            if v.shape == (dim,):
                out[sha] = v
    return out


def cache_put(conn: Conn, identity: ModelIdentity, vectors: dict[str, np.ndarray]) -> None:
    """Store vectors in the cache (own transaction unless one is open)."""
    if not vectors:
        return
    rows = [(identity.key, sha, np.asarray(v, dtype=np.float32).tobytes()) for sha, v in vectors.items()]
    sql = "INSERT OR IGNORE INTO embedding_cache(model_key, text_sha256, vector) VALUES (?, ?, ?)"
    if conn.in_transaction:
        conn.executemany(sql, rows)
    else:
        with transaction(conn):
            conn.executemany(sql, rows)


def prune_embedding_cache(conn: Conn) -> int:
    """Delete cache entries no passage of any collection uses; returns how many."""
    with transaction(conn):
        before = conn.total_changes
        for key, ident in collections(conn).items():
            conn.execute(f"DELETE FROM embedding_cache WHERE model_key = ? AND text_sha256 NOT IN "
                         f"(SELECT text_sha256 FROM {ident.passages_table})", (key,))
        keys = list(collections(conn))
        conn.execute(f"DELETE FROM embedding_cache WHERE model_key NOT IN ({','.join('?' * len(keys))})",
                     keys)
        return conn.total_changes - before


def _call(hook: Hook | None, step: str) -> None:
    if hook is not None:
        hook(step)


def _ensure_paper_row(conn: Conn, paper_id: str) -> None:
    if conn.execute("SELECT 1 FROM papers WHERE paper_id = ?", (paper_id,)).fetchone() is None:
        rowid = _next_rowid(conn, "papers", "paper_rowid", "papers_fts")
        conn.execute("INSERT INTO papers(paper_rowid, paper_id) VALUES (?, ?)", (rowid, paper_id))
        fill_fts(conn, "papers_fts", "b.paper_rowid = ?", (rowid,))


def _delete_vectors(conn: Conn, paper_id: str, identity: ModelIdentity,
                    keep_units: set[str] | None = None) -> int:
    """Delete the paper's passages and vectors in one collection, except those of the units in
    `keep_units` (units a replace leaves unchanged: their vectors are still right)."""
    pt, vt = identity.passages_table, identity.vec_table
    rows = conn.execute(f"SELECT passage_rowid, unit_id FROM {pt} WHERE paper_id = ?", (paper_id,)).fetchall()
    rowids = [r for r, uid in rows if not keep_units or uid not in keep_units]
    if rowids:
        # One rowid at a time: vec0 serves a rowid point delete fast, an IN (subquery) slowly.
        conn.executemany(f"DELETE FROM {vt} WHERE passage_rowid = ?", [(r,) for r in rowids])
        if len(rowids) == len(rows):
            conn.execute(f"DELETE FROM {pt} WHERE paper_id = ?", (paper_id,))
        else:
            conn.executemany(f"DELETE FROM {pt} WHERE passage_rowid = ?", [(r,) for r in rowids])
        new_epoch(conn, VECTORS_EPOCH)
    return len(rowids)


def _fts_held(conn: Conn, paper_id: str, n_body: int, n_objects: int) -> bool:
    """Whether the paper has one FTS row per unit (what Sheaf writes; rows written or lost
    outside it make a replace write them again)."""
    for fts, table, n in (("body_units_fts", "body_units", n_body), ("object_units_fts", "object_units", n_objects)):
        if conn.execute(f"SELECT COUNT(*) FROM {fts} WHERE rowid IN "
                        f"(SELECT unit_rowid FROM {table} WHERE paper_id = ?)", (paper_id,)).fetchone()[0] != n:
            return False
    return True


def _vectors_held(conn: Conn, paper_id: str, ep: EmbeddedPassages) -> bool:
    """Whether the collection holds exactly these passages of the paper, each with this vector."""
    pt, vt = ep.identity.passages_table, ep.identity.vec_table
    cols = ", ".join(f"p.{c.strip()}" for c in PASSAGE_CONTENT.split(","))
    old = conn.execute(f"SELECT {cols}, v.embedding FROM {pt} p LEFT JOIN {vt} v ON v.passage_rowid = p.passage_rowid "
                       "WHERE p.paper_id = ? ORDER BY p.passage_rowid", (paper_id,)).fetchall()
    return same_passages(old, ep, bytes)


def _delete_units(conn: Conn, paper_id: str) -> int:
    n = 0
    for table in ("body_units", "object_units"):
        rows = fts_rows(conn, f"{table}_fts", "b.paper_id = ?", (paper_id,))  # before the base rows go
        if rows:
            fts_delete(conn, f"{table}_fts", rows)
            conn.execute(f"DELETE FROM {table} WHERE paper_id = ?", (paper_id,))
        n += len(rows)
    return n


def _next_rowid(conn: Conn, table: str, col: str, fts: str | None = None) -> int:
    """The next free rowid of `table`, and of its FTS table: a new row never lands on an FTS
    row left behind by a write outside Sheaf (two rows under one rowid of a contentless
    table could never be told apart again)."""
    n = int(conn.execute(f"SELECT COALESCE(MAX({col}), 0) FROM {table}").fetchone()[0])
    if fts is not None:
        n = max(n, int(conn.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {fts}").fetchone()[0]))
    return n + 1


def _assign_short_ids(conn: Conn, units: Sequence[BodyUnit | ObjectUnit]) -> tuple[list[str], int]:
    """Short ids unique across the index: a unit's own id, lengthened (more hex of
    sha1(unit_id)) while another unit already holds it."""
    taken: set[str] = set()
    out: list[str] = []
    lengthened = 0
    for u in units:
        full = hashlib.sha1(u.unit_id.encode("utf-8")).hexdigest()
        cand = u.short_id or full[:4]
        n = max(len(cand), 4)
        while cand in taken or conn.execute(
                "SELECT 1 FROM body_units WHERE short_id = ? UNION ALL "
                "SELECT 1 FROM object_units WHERE short_id = ? LIMIT 1", (cand, cand)).fetchone():
            n += 1
            cand = full[:n] if n <= len(full) else f"{full}-{n - len(full)}"
        lengthened += cand != u.short_id
        taken.add(cand)
        out.append(cand)
    return out, lengthened


def _insert_units(conn: Conn, body: Sequence[tuple[Any, ...]], objects: Sequence[tuple[Any, ...]], shorts: Sequence[str],
                  hook: Hook | None) -> None:
    """Insert `body_row` / `object_row` tuples (with their short ids) and their FTS rows."""
    if body:
        r0 = _next_rowid(conn, "body_units", "unit_rowid", "body_units_fts")
        conn.executemany(f"INSERT INTO body_units(unit_rowid, short_id, {BODY_CONTENT}) "
                         "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         [(r0 + i, shorts[i], *row) for i, row in enumerate(body)])
        _call(hook, "after_body_units")
        # what is indexed is computed from the rows just written, as every delete will compute it
        fill_fts(conn, "body_units_fts", "b.unit_rowid >= ?", (r0,))
        _call(hook, "after_body_units_fts")
    if objects:
        r0 = _next_rowid(conn, "object_units", "unit_rowid", "object_units_fts")
        k = len(body)
        conn.executemany(f"INSERT INTO object_units(unit_rowid, short_id, {OBJECT_CONTENT}) "
                         "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         [(r0 + i, shorts[k + i], *row) for i, row in enumerate(objects)])
        _call(hook, "after_object_units")
        fill_fts(conn, "object_units_fts", "b.unit_rowid >= ?", (r0,))
        _call(hook, "after_object_units_fts")


def _insert_vectors(conn: Conn, paper_id: str, ep: EmbeddedPassages, hook: Hook | None) -> int:
    ident = ep.identity
    ensure_collection(conn, ident)
    if not ep.passages:
        return 0
    pt, vt = ident.passages_table, ident.vec_table
    r0 = _next_rowid(conn, pt, "passage_rowid")
    conn.executemany(f"INSERT INTO {pt}(passage_rowid, paper_id, {PASSAGE_CONTENT}) VALUES (?,?,?,?,?,?,?,?,?)",
                     [(r0 + i, paper_id, *row) for i, row in enumerate(passage_rows(ep))])
    _call(hook, "after_passages")
    vecs = np.ascontiguousarray(ep.vectors, dtype=np.float32)
    conn.executemany(f"INSERT INTO {vt}(passage_rowid, embedding, paper_id) VALUES (?,?,?)",
                     [(r0 + i, vecs[i].tobytes(), paper_id) for i in range(len(ep.passages))])
    new_epoch(conn, VECTORS_EPOCH)
    _call(hook, "after_vectors")
    return len(ep.passages)


def replace_paper(
    conn: Conn,
    paper_id: str,
    units: Sequence[BodyUnit | Mapping[str, Any]],
    objects: Sequence[ObjectUnit | Mapping[str, Any]] = (),
    passages: EmbeddedPassages | Sequence[EmbeddedPassages] | None = None,
    *,
    hook: Hook | None = None,
) -> ReplaceStats:
    """Replace every row of one paper in ONE transaction: its units and objects (with FTS
    rows), and its passages and vectors in every model collection (those in `passages` are
    written anew; other collections lose the vectors of the units whose text changed, and
    keep those of unchanged units, so a rebuild never leaves semantic search blind while the
    vector step runs).

    Units may be dataclasses or their dict (Parquet row) form. A paper without a `papers`
    row gets a stub one (metadata may come later through
    `upsert_papers`). Short ids are made unique across the index. Any failure (including one
    raised by `hook(step)`, called after each statement group: ``after_delete``,
    ``after_body_units``, ``after_body_units_fts``, ``after_object_units``,
    ``after_object_units_fts``, ``after_passages``, ``after_vectors``, ``before_commit``)
    rolls back and leaves the previous rows intact.

    Without `passages`, a paper whose rows (and FTS rows) already hold exactly these units is
    left as it is (`unchanged`): its rowids, short ids and every collection's vectors stay, and
    the index's state does not move.
    """
    import time

    t0 = time.perf_counter()
    units, objects = as_units(units, objects)
    eps = passages_list(passages)
    validate_paper(paper_id, units, objects, eps)
    body, objs = [body_row(u) for u in units], [object_row(o) for o in objects]
    with transaction(conn):
        if (not eps and (body or objs) and units_held(conn, paper_id, body, objs)
                and _fts_held(conn, paper_id, len(body), len(objs))):
            return ReplaceStats(paper_id, 0, len(units), len(objects), 0, 0, time.perf_counter() - t0, True)
        _ensure_paper_row(conn, paper_id)
        given = {ep.identity.key for ep in eps}
        cols = collections(conn)
        keep = unchanged_units(conn, paper_id, units, objects) if set(cols) - given else set()
        for ident in cols.values():
            _delete_vectors(conn, paper_id, ident, keep_units=None if ident.key in given else keep)
        deleted = _delete_units(conn, paper_id)
        _call(hook, "after_delete")
        shorts, lengthened = _assign_short_ids(conn, [*units, *objects])
        _insert_units(conn, body, objs, shorts, hook)
        n_pass = sum(_insert_vectors(conn, paper_id, ep, hook) for ep in eps)
        _call(hook, "before_commit")
    return ReplaceStats(paper_id, deleted, len(units), len(objects), n_pass, lengthened,
                        time.perf_counter() - t0)


def replace_paper_vectors(conn: Conn, paper_id: str, passages: EmbeddedPassages, *,
                          hook: Hook | None = None) -> int:
    """Replace one paper's passages and vectors in one model's collection only (one
    transaction); the units they point to must already be in the index. Passages the
    collection already holds exactly (rows and vectors, byte for byte, in order) are left as
    they are."""
    ids = {p.unit_id for p in passages.passages}
    with transaction(conn):
        known = {r[0] for r in conn.execute(
            "SELECT unit_id FROM body_units WHERE paper_id = ? UNION ALL "
            "SELECT unit_id FROM object_units WHERE paper_id = ?", (paper_id, paper_id))}
        if ids - known:
            raise ValueError(f"passages of units not in the index: {sorted(ids - known)[:5]}")
        for p in passages.passages:
            if p.paper_id != paper_id:
                raise ValueError(f"passage {p.passage_id} does not belong to {paper_id}")
        ensure_collection(conn, passages.identity)
        if passages.passages and _vectors_held(conn, paper_id, passages):
            return len(passages.passages)
        _delete_vectors(conn, paper_id, passages.identity)
        _call(hook, "after_delete")
        n = _insert_vectors(conn, paper_id, passages, hook)
        _call(hook, "before_commit")
    return n


def remove_paper(conn: Conn, paper_id: str, *, prune_cache: bool = True, keep_metadata: bool = False,
                 hook: Hook | None = None) -> bool:
    """Delete every row of a paper (metadata, FTS, units, passages, vectors) in one
    transaction; with `prune_cache`, also the cached vectors only this paper used.

    `keep_metadata` keeps its library metadata (the ``papers`` row and its ``papers_fts`` row,
    when loaded from the export; a stub row goes): for a paper still in the library whose
    content must go (its units failed to build), so it is still found by title or author.
    Returns False when the index held nothing of it (nothing but the kept metadata)."""
    with transaction(conn):
        idents = list(collections(conn).values())
        shas: set[str] = set()
        if prune_cache:
            for ident in idents:
                shas |= {r[0] for r in conn.execute(
                    f"SELECT text_sha256 FROM {ident.passages_table} WHERE paper_id = ?", (paper_id,))}
        n = sum(_delete_vectors(conn, paper_id, ident) for ident in idents)
        _call(hook, "after_vectors")
        n += _delete_units(conn, paper_id)
        _call(hook, "after_units")
        row = conn.execute("SELECT paper_rowid, has_metadata FROM papers WHERE paper_id = ?",
                           (paper_id,)).fetchone()
        if row is not None and not (keep_metadata and row[1]):
            fts_delete(conn, "papers_fts", fts_rows(conn, "papers_fts", "b.paper_rowid = ?", (row[0],)))
            conn.execute("DELETE FROM papers WHERE paper_rowid = ?", (row[0],))
            n += 1
        _call(hook, "after_paper")
        if shas:
            for ident in idents:
                still = {r[0] for r in conn.execute(
                    f"SELECT DISTINCT text_sha256 FROM {ident.passages_table} WHERE text_sha256 IN "
                    f"({','.join('?' * len(shas))})", list(shas))}
                conn.executemany("DELETE FROM embedding_cache WHERE model_key = ? AND text_sha256 = ?",
                                 [(ident.key, s) for s in shas - still])
        _call(hook, "before_commit")
    return n > 0


def upsert_papers(conn: Conn, metas: Iterable[PaperMeta], *, hook: Hook | None = None) -> dict[str, int]:
    """Insert or update library metadata (and `papers_fts`) in one transaction.

    Unchanged records are skipped (compared by a hash of the record). Papers absent from
    `metas` are left alone. A changed title is rewritten in the FTS rows of the paper's units
    (a column of each). Returns ``{"inserted": n, "updated": n, "unchanged": n}``.
    `hook(step)` is called before the commit (``before_commit``).
    """
    metas = list(metas)
    for m in metas:
        if not valid_paper_key(m.key):
            raise ValueError(f"invalid paper id {m.key!r}")
    stats = {"inserted": 0, "updated": 0, "unchanged": 0}
    cols = ("citation_key", "title", "authors", "first_author", "year", "journal", "doi", "pmid",
            "abstract", "collections", "domain", "item_type", "has_metadata", "meta_sha256", "source", "tags", "link")
    with transaction(conn):
        for m in metas:
            sha = meta_sha(m)
            vals = (m.citation_key, m.title, json_text(m.authors), m.first_author, m.year, m.journal, m.doi,
                    m.pmid, m.abstract, json_text(m.collections), m.domain, m.item_type, 1, sha, m.source, json_text(m.tags),
                    m.link)
            row = conn.execute("SELECT paper_rowid, meta_sha256, title FROM papers WHERE paper_id = ?",
                               (m.key,)).fetchone()
            if row is not None and row[1] == sha:
                stats["unchanged"] += 1
                continue
            old_title = row[2] if row is not None else None  # units without a papers row: none
            retitle = (old_title or "") != (m.title or "")
            if retitle:  # the title is a column of every unit's FTS row: out under the old one
                for fts in ("body_units_fts", "object_units_fts"):
                    fts_delete(conn, fts, fts_rows(conn, fts, "b.paper_id = ?", (m.key,), title=old_title))
            if row is None:
                rowid = _next_rowid(conn, "papers", "paper_rowid", "papers_fts")
                conn.execute(f"INSERT INTO papers(paper_rowid, paper_id, {', '.join(cols)}) "
                             f"VALUES (?, ?, {', '.join('?' * len(cols))})", (rowid, m.key, *vals))
                stats["inserted"] += 1
            else:
                rowid = row[0]
                fts_delete(conn, "papers_fts", fts_rows(conn, "papers_fts", "b.paper_rowid = ?", (rowid,)))
                conn.execute(f"UPDATE papers SET {', '.join(c + ' = ?' for c in cols)} "
                             "WHERE paper_rowid = ?", (*vals, rowid))
                stats["updated"] += 1
            fill_fts(conn, "papers_fts", "b.paper_rowid = ?", (rowid,))
            if retitle:
                fill_unit_fts(conn, m.key)
        _call(hook, "before_commit")
    return stats


def prune_metadata(conn: Conn, exported: Iterable[str], *, hook: Hook | None = None) -> dict[str, int]:
    """Forget the library metadata of papers no longer in the export (`exported`: the keys it
    holds now), in one transaction: a paper still indexed (it has units) keeps the stub row
    `replace_paper` makes (no title, empty metadata FTS row; its units' FTS rows lose the
    title); any other paper's row goes with its FTS row. Returns ``{"stubbed": n, "removed": n}``.
    `hook(step)` is called before the commit (``before_commit``)."""
    keep = set(exported)
    stats = {"stubbed": 0, "removed": 0}
    with transaction(conn):
        gone = [r for r in conn.execute("SELECT paper_rowid, paper_id, title FROM papers WHERE has_metadata = 1")
                if r[1] not in keep]
        for rowid, pid, title in gone:
            fts_delete(conn, "papers_fts", fts_rows(conn, "papers_fts", "b.paper_rowid = ?", (rowid,)))
            indexed = conn.execute("SELECT 1 FROM body_units WHERE paper_id = ? UNION ALL "
                                   "SELECT 1 FROM object_units WHERE paper_id = ? LIMIT 1", (pid, pid)).fetchone()
            if indexed is None:
                conn.execute("DELETE FROM papers WHERE paper_rowid = ?", (rowid,))
                stats["removed"] += 1
                continue
            if title:  # the title is a column of every unit's FTS row: out under the old one
                for fts in ("body_units_fts", "object_units_fts"):
                    fts_delete(conn, fts, fts_rows(conn, fts, "b.paper_id = ?", (pid,), title=title))
            conn.execute("UPDATE papers SET citation_key = NULL, title = NULL, authors = '[]', first_author = NULL, "
                         "year = NULL, journal = NULL, doi = NULL, pmid = NULL, abstract = NULL, collections = '[]', "
                         "domain = NULL, item_type = NULL, has_metadata = 0, meta_sha256 = NULL, source = NULL, "
                         "tags = '[]', link = NULL WHERE paper_rowid = ?", (rowid,))
            fill_fts(conn, "papers_fts", "b.paper_rowid = ?", (rowid,))
            if title:
                fill_unit_fts(conn, pid)
            stats["stubbed"] += 1
        _call(hook, "before_commit")
    return stats
