"""Writes to the Postgres index: a paper's rows replaced in one transaction (units, lexical rows
and their term statistics, passages and vectors), removal, library metadata, the embedding cache.

What a lexical row indexes is the SQLite backend's definition (`sheaf.store.sqlite.schema`'s
FTS row functions over `fts_text`), tokenized by FTS5's own tokenizer in process
(`sheaf.store.tokens.FtsTokenizer`): the same terms, positions and lengths as the FTS5 tables,
so bm25 computed from them ranks as FTS5 does. The validation, the unit conversion and the
metadata hash are the SQLite writer's.

Writers of different papers touch disjoint rows (every key starts with the paper id; the
term statistics are kept per paper). The one shared constraint, unique short ids, can make a
writer lose a race: `sheaf.store.postgres.db.retrying` then runs the paper's transaction again.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sheaf.core.lazy import lazy_module
from sheaf.core.models import BodyUnit, ObjectUnit, valid_paper_key
from sheaf.store.fulltext import FTS_TOKENIZER
from sheaf.store.postgres.db import Where, psycopg, retrying
from sheaf.store.postgres.schema import SCOPE_COLUMNS, SCOPES, collections, ensure_collection
from sheaf.store.rows import (
    BODY_CONTENT,
    OBJECT_CONTENT,
    PASSAGE_CONTENT,
    ReplaceStats,
    as_units,
    body_fts_row,
    body_row,
    json_text,
    meta_sha,
    object_fts_row,
    object_row,
    papers_fts_row,
    passages_list,
    same_passages,
    units_held,
    validate_paper,
)
from sheaf.store.rows import unchanged_units as shared_unchanged_units
from sheaf.store.tokens import FtsTokenizer

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.core.models import PaperMeta
    from sheaf.vectors.identity import EmbeddedPassages, ModelIdentity

np = lazy_module("numpy")
hashlib = lazy_module("hashlib")

Hook = Callable[[str], None] | None
Conn = psycopg.Connection

TOKENIZER = FtsTokenizer()


def _call(hook: Hook, step: str) -> None:
    if hook is not None:
        hook(step)


def changed(conn: Conn) -> None:
    """Advance the change counter (`PostgresIndex.state`): before a write and after its commit."""
    conn.execute("SELECT nextval('sheaf_changes')")


# --- the embedding cache -------------------------------------------------------------------

def cache_get(conn: Conn, identity: ModelIdentity, shas: Iterable[str]) -> dict[str, Any]:
    shas = list(shas)
    out: dict[str, Any] = {}
    for i in range(0, len(shas), 5000):
        for sha, blob in conn.execute("SELECT text_sha256, vector FROM embedding_cache WHERE model_key = %s "
                                      "AND text_sha256 = ANY(%s)", (identity.key, shas[i:i + 5000])):
            v = np.frombuffer(bytes(blob), dtype=np.float32)
            if v.shape == (identity.dimension,):
                out[sha] = v
    return out


def cache_put(conn: Conn, where: Where, identity: ModelIdentity, vectors: Mapping[str, Any]) -> None:
    if not vectors:
        return
    rows = [(identity.key, sha, np.asarray(v, dtype=np.float32).tobytes()) for sha, v in vectors.items()]

    def body(c: Conn) -> None:
        with c.cursor() as cur:
            cur.executemany("INSERT INTO embedding_cache VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", rows)
    retrying(conn, where, body)


# --- lexical rows ----------------------------------------------------------------------------

def _lex_items(conn: Conn, paper_id: str, scope: str) -> list[tuple[str, int, tuple[str, ...]]]:
    """(ref, seq, column values) of the paper's rows in `scope`, computed from the base rows as
    the SQLite writer computes an FTS row (`fts_rows`)."""
    if scope == "papers":
        return [(r[0], r[1], papers_fts_row(0, *r[2:])[1:]) for r in conn.execute(
            "SELECT paper_id, seq, has_metadata, title, authors, abstract, journal, domain, year FROM papers "
            "WHERE paper_id = %s", (paper_id,))]
    if scope == "body":
        return [(r[0], r[1], body_fts_row(0, json.loads(r[2]), r[3], r[4])[1:]) for r in conn.execute(
            "SELECT b.unit_id, b.seq, b.section_path, b.text, p.title FROM body_units b LEFT JOIN papers p "
            "ON p.paper_id = b.paper_id WHERE b.paper_id = %s ORDER BY b.seq", (paper_id,))]
    return [(r[0], r[1], object_fts_row(0, *r[2:])[1:]) for r in conn.execute(
        "SELECT b.unit_id, b.seq, b.caption, b.label, b.table_text, b.nearby_text, p.title FROM object_units b "
        "LEFT JOIN papers p ON p.paper_id = b.paper_id WHERE b.paper_id = %s ORDER BY b.seq", (paper_id,))]


def _packed(codes: Sequence[int]) -> bytes:
    """A term's positions in a row (``column << 28 | offset``, sorted) as little-endian int32s."""
    return bytes(np.asarray(codes, dtype="<i4").tobytes())


def _freqs(codes: Sequence[int], ncol: int) -> list[int]:
    """A term's count in each column of its row."""
    out = [0] * ncol
    for c in codes:
        out[c >> 28] += 1
    return out


def delete_lex(conn: Conn, paper_id: str, scopes: Iterable[str]) -> int:
    ids = [SCOPES[s] for s in scopes]
    conn.execute("DELETE FROM lex_postings WHERE paper_id = %s AND scope = ANY(%s)", (paper_id, ids))
    conn.execute("DELETE FROM lex_stats WHERE paper_id = %s AND scope = ANY(%s)", (paper_id, ids))
    conn.execute("DELETE FROM lex_terms WHERE paper_id = %s AND scope = ANY(%s)", (paper_id, ids))
    return conn.execute("DELETE FROM lex_rows WHERE paper_id = %s AND scope = ANY(%s)", (paper_id, ids)).rowcount


def recount_terms(conn: Conn, paper_ids: Iterable[str]) -> int:
    """The papers' rows per term (``lex_terms``) counted again from their postings (after orphan
    postings were removed); the number of count rows written."""
    ids = sorted(set(paper_ids))
    if not ids:
        return 0
    conn.execute("DELETE FROM lex_terms WHERE paper_id = ANY(%s)", (ids,))
    return conn.execute("INSERT INTO lex_terms SELECT paper_id, scope, term, count(*) FROM lex_postings "
                        "WHERE paper_id = ANY(%s) GROUP BY 1, 2, 3", (ids,)).rowcount


def write_lex(conn: Conn, paper_id: str, scopes: Iterable[str]) -> int:
    """(Re)write the paper's lexical rows, postings and statistics of `scopes` from its base rows."""
    scopes = list(scopes)
    delete_lex(conn, paper_id, scopes)
    n = 0
    for scope in scopes:
        items = _lex_items(conn, paper_id, scope)
        if not items:
            continue
        sid = SCOPES[scope]
        inst = TOKENIZER.instances(FTS_TOKENIZER, [vals for _, _, vals in items])
        with conn.cursor() as cur:
            with cur.copy("COPY lex_rows (paper_id, scope, ref, seq, doclen) FROM STDIN") as cp:
                for (ref, seq, _), (_, size) in zip(items, inst):
                    cp.write_row((paper_id, sid, ref, seq, size))
            ncol = len(SCOPE_COLUMNS[scope])
            with cur.copy("COPY lex_postings (paper_id, scope, ref, term, seq, doclen, codes, freqs) FROM STDIN") as cp:
                for (ref, seq, _), (terms, size) in zip(items, inst):
                    for term, codes in terms.items():
                        cp.write_row((paper_id, sid, ref, term, seq, size, _packed(codes), _freqs(codes, ncol)))
            rows_of: Counter[str] = Counter(term for terms, _ in inst for term in terms)
            with cur.copy("COPY lex_terms (paper_id, scope, term, n_rows) FROM STDIN") as cp:
                for term, k in rows_of.items():
                    cp.write_row((paper_id, sid, term, k))
        conn.execute("INSERT INTO lex_stats VALUES (%s, %s, %s, %s)",
                     (paper_id, sid, len(items), sum(size for _, size in inst)))
        n += len(items)
    return n


# --- units and vectors -------------------------------------------------------------------------

def _seqs(conn: Conn, n: int) -> list[int]:
    if n <= 0:
        return []
    return sorted(r[0] for r in conn.execute("SELECT nextval('sheaf_seq') FROM generate_series(1, %s)", (n,)))


def _ensure_paper_row(conn: Conn, paper_id: str) -> None:
    cur = conn.execute("INSERT INTO papers (paper_id) VALUES (%s) ON CONFLICT DO NOTHING", (paper_id,))
    if cur.rowcount:
        write_lex(conn, paper_id, ["papers"])


def _assign_short_ids(conn: Conn, units: Sequence[BodyUnit | ObjectUnit]) -> tuple[list[str], int]:
    """As `sheaf.store.sqlite.writer._assign_short_ids`: a unit's own short id, lengthened while
    another unit of the index holds it."""
    taken: set[str] = set()
    out: list[str] = []
    lengthened = 0
    fulls = [hashlib.sha1(u.unit_id.encode("utf-8")).hexdigest() for u in units]
    first = [u.short_id or f[:4] for u, f in zip(units, fulls)]
    # Every candidate up to 12 characters, looked up in one query, not one per unit and length (in
    # a large index most 4-character ids are held: 65,536 of them).
    asked = set(first) | {f[:n] for c, f in zip(first, fulls) for n in range(max(len(c), 4) + 1, 13)}
    held = {r[0] for r in conn.execute(
        "SELECT short_id FROM body_units WHERE short_id = ANY(%s) UNION "
        "SELECT short_id FROM object_units WHERE short_id = ANY(%s)", (sorted(asked), sorted(asked)))}

    def clash(cand: str) -> bool:
        if cand in taken:
            return True
        if cand in asked:
            return cand in held
        return conn.execute("SELECT 1 FROM body_units WHERE short_id = %s UNION ALL "
                            "SELECT 1 FROM object_units WHERE short_id = %s LIMIT 1", (cand, cand)).fetchone() is not None

    for u, full, cand in zip(units, fulls, first):
        n = max(len(cand), 4)
        while clash(cand):
            n += 1
            cand = full[:n] if n <= len(full) else f"{full}-{n - len(full)}"
        lengthened += cand != u.short_id
        taken.add(cand)
        out.append(cand)
    return out, lengthened


def _delete_vectors(conn: Conn, paper_id: str, identity: ModelIdentity, keep_units: set[str] | None = None) -> int:
    vt = identity.vec_table
    if keep_units:
        return conn.execute(f"DELETE FROM {vt} WHERE paper_id = %s AND NOT (unit_id = ANY(%s))",
                            (paper_id, list(keep_units))).rowcount
    return conn.execute(f"DELETE FROM {vt} WHERE paper_id = %s", (paper_id,)).rowcount


def _unchanged_units(conn: Conn, paper_id: str, units: Sequence[BodyUnit], objects: Sequence[ObjectUnit]) -> set[str]:
    """`sheaf.store.rows.unchanged_units`, with Postgres' placeholder."""
    return shared_unchanged_units(conn, paper_id, units, objects, mark="%s")


def _delete_units(conn: Conn, paper_id: str) -> int:
    delete_lex(conn, paper_id, ["body", "object"])
    return sum(conn.execute(f"DELETE FROM {t} WHERE paper_id = %s", (paper_id,)).rowcount
               for t in ("body_units", "object_units"))


def _insert_units(conn: Conn, body: Sequence[tuple[Any, ...]], objects: Sequence[tuple[Any, ...]],
                  units: Sequence[BodyUnit | ObjectUnit], hook: Hook) -> int:
    """Insert `body_row` / `object_row` tuples (of `units`, body then objects)."""
    shorts, lengthened = _assign_short_ids(conn, units)
    seqs = _seqs(conn, len(body) + len(objects))
    with conn.cursor() as cur:
        if body:
            cur.executemany(f"INSERT INTO body_units (seq, short_id, {BODY_CONTENT}) "
                            "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                            [(seqs[i], shorts[i], *row) for i, row in enumerate(body)])
            _call(hook, "after_body_units")
        if objects:
            k = len(body)
            cur.executemany(f"INSERT INTO object_units (seq, short_id, {OBJECT_CONTENT}) "
                            "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                            [(seqs[k + i], shorts[k + i], *row) for i, row in enumerate(objects)])
            _call(hook, "after_object_units")
    return lengthened


def _insert_vectors(conn: Conn, paper_id: str, ep: EmbeddedPassages, hook: Hook) -> int:
    if not ep.passages:
        return 0
    vecs = np.ascontiguousarray(ep.vectors, dtype=np.float32)
    seqs = _seqs(conn, len(ep.passages))
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {ep.identity.vec_table} (paper_id, passage_id, seq, unit_id, unit_type, ordinal, "
            "char_start, char_end, text_sha256, embedding) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            [(paper_id, p.passage_id, seqs[i], p.unit_id, p.unit_type, p.ordinal, p.char_start, p.char_end,
              p.text_sha256, vecs[i]) for i, p in enumerate(ep.passages)])
    _call(hook, "after_vectors")
    return len(ep.passages)


def replace_paper(conn: Conn, where: Where, paper_id: str, units: Sequence[Any], objects: Sequence[Any] = (),
                  passages: Any = None, *, hook: Hook = None) -> ReplaceStats:
    """Replace every row of one paper in ONE transaction, as `sheaf.store.sqlite.writer.replace_paper`
    does (its docstring): units, lexical rows, and vectors (those of `passages` anew; other
    collections keep the vectors of unchanged units)."""
    t0 = time.perf_counter()
    units, objects = as_units(units, objects)
    eps = passages_list(passages)
    validate_paper(paper_id, units, objects, eps)
    for ep in eps:
        ensure_collection(conn, ep.identity)

    body_rows, object_rows = [body_row(u) for u in units], [object_row(o) for o in objects]

    def body(c: Conn) -> tuple[int, int, int] | None:
        if (not eps and (units or objects) and units_held(c, paper_id, body_rows, object_rows, mark="%s", order="seq")
                and _lex_held(c, paper_id, len(units), len(objects))):
            return None
        changed(c)  # a sequence: advanced at once, whatever the transaction does
        _ensure_paper_row(c, paper_id)
        given = {ep.identity.key for ep in eps}
        cols = collections(c)
        keep = _unchanged_units(c, paper_id, units, objects) if set(cols) - given else set()
        for ident in cols.values():
            _delete_vectors(c, paper_id, ident, keep_units=None if ident.key in given else keep)
        deleted = _delete_units(c, paper_id)
        _call(hook, "after_delete")
        lengthened = _insert_units(c, body_rows, object_rows, [*units, *objects], hook)
        write_lex(c, paper_id, ["body", "object"])
        _call(hook, "after_units_fts")
        n_pass = sum(_insert_vectors(c, paper_id, ep, hook) for ep in eps)
        return deleted, lengthened, n_pass

    done = retrying(conn, where, body, hook)
    if done is None:  # the index already held these rows: nothing written, its state unmoved
        return ReplaceStats(paper_id, 0, len(units), len(objects), 0, 0, time.perf_counter() - t0, True)
    changed(conn)
    deleted, lengthened, n_pass = done
    return ReplaceStats(paper_id, deleted, len(units), len(objects), n_pass, lengthened, time.perf_counter() - t0)


def replace_paper_vectors(conn: Conn, where: Where, paper_id: str, passages: EmbeddedPassages, *,
                          hook: Hook = None) -> int:
    """Replace one paper's passages and vectors in one model's collection (one transaction)."""
    ids = {p.unit_id for p in passages.passages}
    for p in passages.passages:
        if p.paper_id != paper_id:
            raise ValueError(f"passage {p.passage_id} does not belong to {paper_id}")
    ensure_collection(conn, passages.identity)

    def body(c: Conn) -> int | None:
        known = {r[0] for r in c.execute("SELECT unit_id FROM body_units WHERE paper_id = %s UNION ALL "
                                         "SELECT unit_id FROM object_units WHERE paper_id = %s", (paper_id, paper_id))}
        if ids - known:
            raise ValueError(f"passages of units not in the index: {sorted(ids - known)[:5]}")
        if passages.passages and _vectors_held(c, paper_id, passages):
            return None
        changed(c)
        _delete_vectors(c, paper_id, passages.identity)
        _call(hook, "after_delete")
        return _insert_vectors(c, paper_id, passages, hook)

    n = retrying(conn, where, body, hook)
    if n is None:  # the collection already held exactly these passages and vectors
        return len(passages.passages)
    changed(conn)
    return n


def _lex_held(conn: Conn, paper_id: str, n_body: int, n_objects: int) -> bool:
    """Whether the paper has one lexical row per unit of each scope (what Sheaf writes)."""
    n: dict[int, int] = dict(conn.execute("SELECT scope, count(*) FROM lex_rows WHERE paper_id = %s AND scope = ANY(%s) GROUP BY 1",
                          (paper_id, [SCOPES["body"], SCOPES["object"]])).fetchall())
    return n.get(SCOPES["body"], 0) == n_body and n.get(SCOPES["object"], 0) == n_objects


def _vectors_held(conn: Conn, paper_id: str, ep: EmbeddedPassages) -> bool:
    """Whether the collection holds exactly these passages of the paper, each with this vector."""
    old = conn.execute(f"SELECT {PASSAGE_CONTENT}, embedding FROM {ep.identity.vec_table} WHERE paper_id = %s "
                       "ORDER BY seq", (paper_id,)).fetchall()
    return same_passages(old, ep, lambda v: np.asarray(v.to_numpy(), dtype=np.float32).tobytes())


def remove_paper(conn: Conn, where: Where, paper_id: str, *, prune_cache: bool = True, keep_metadata: bool = False,
                 hook: Hook = None) -> bool:
    """Delete every row of a paper in one transaction (see `sheaf.store.sqlite.writer.remove_paper`)."""
    def body(c: Conn) -> bool:
        idents = list(collections(c).values())
        shas: set[str] = set()
        if prune_cache:
            for ident in idents:
                shas |= {r[0] for r in c.execute(f"SELECT text_sha256 FROM {ident.vec_table} WHERE paper_id = %s",
                                                 (paper_id,))}
        n = sum(_delete_vectors(c, paper_id, ident) for ident in idents)
        _call(hook, "after_vectors")
        n += _delete_units(c, paper_id)
        _call(hook, "after_units")
        row = c.execute("SELECT has_metadata FROM papers WHERE paper_id = %s", (paper_id,)).fetchone()
        if row is not None and not (keep_metadata and row[0]):
            delete_lex(c, paper_id, ["papers"])
            c.execute("DELETE FROM papers WHERE paper_id = %s", (paper_id,))
            n += 1
        _call(hook, "after_paper")
        for ident in idents if shas else ():
            still = {r[0] for r in c.execute(f"SELECT DISTINCT text_sha256 FROM {ident.vec_table} WHERE "
                                             "text_sha256 = ANY(%s)", (list(shas),))}
            c.execute("DELETE FROM embedding_cache WHERE model_key = %s AND text_sha256 = ANY(%s)",
                      (ident.key, list(shas - still)))
        return n > 0

    changed(conn)
    out = retrying(conn, where, body, hook)
    changed(conn)
    return out


_META_COLS = ("citation_key", "title", "authors", "first_author", "year", "journal", "doi", "pmid", "abstract",
              "collections", "domain", "item_type", "has_metadata", "meta_sha256", "source", "tags", "link")


def upsert_papers(conn: Conn, where: Where, metas: Iterable[PaperMeta], *, hook: Hook = None) -> dict[str, int]:
    """Insert or update library metadata in one transaction (see `sheaf.store.sqlite.writer.upsert_papers`):
    unchanged records skipped; a changed title rewrites the lexical rows of the paper's units."""
    metas = list(metas)
    for m in metas:
        if not valid_paper_key(m.key):
            raise ValueError(f"invalid paper id {m.key!r}")

    def body(c: Conn) -> dict[str, int]:
        stats = {"inserted": 0, "updated": 0, "unchanged": 0}
        old = {r[0]: (r[1], r[2]) for r in c.execute("SELECT paper_id, meta_sha256, title FROM papers WHERE "
                                                     "paper_id = ANY(%s)", ([m.key for m in metas],))}
        for m in metas:
            sha = meta_sha(m)
            vals = (m.citation_key, m.title, json_text(m.authors), m.first_author, m.year, m.journal, m.doi, m.pmid,
                    m.abstract, json_text(m.collections), m.domain, m.item_type, 1, sha, m.source, json_text(m.tags), m.link)
            row = old.get(m.key)
            if row is not None and row[0] == sha:
                stats["unchanged"] += 1
                continue
            if row is None:
                c.execute(f"INSERT INTO papers (paper_id, {', '.join(_META_COLS)}) VALUES (%s, "
                          f"{', '.join(['%s'] * len(_META_COLS))})", (m.key, *vals))
                stats["inserted"] += 1
            else:
                c.execute(f"UPDATE papers SET {', '.join(k + ' = %s' for k in _META_COLS)} WHERE paper_id = %s",
                          (*vals, m.key))
                stats["updated"] += 1
            retitle = row is not None and (row[1] or "") != (m.title or "")
            write_lex(c, m.key, ["papers", "body", "object"] if retitle else ["papers"])
        return stats

    changed(conn)
    out = retrying(conn, where, body, hook)
    changed(conn)
    return out


def prune_metadata(conn: Conn, where: Where, exported: Iterable[str], *, hook: Hook = None) -> dict[str, int]:
    """Forget the metadata of papers no longer exported (see `sheaf.store.sqlite.writer.prune_metadata`)."""
    keep = set(exported)

    def body(c: Conn) -> dict[str, int]:
        stats = {"stubbed": 0, "removed": 0}
        gone = [r for r in c.execute("SELECT paper_id, title FROM papers WHERE has_metadata = 1") if r[0] not in keep]
        for pid, title in gone:
            indexed = c.execute("SELECT 1 FROM body_units WHERE paper_id = %s UNION ALL "
                                "SELECT 1 FROM object_units WHERE paper_id = %s LIMIT 1", (pid, pid)).fetchone()
            if indexed is None:
                delete_lex(c, pid, ["papers"])
                c.execute("DELETE FROM papers WHERE paper_id = %s", (pid,))
                stats["removed"] += 1
                continue
            c.execute("UPDATE papers SET citation_key = NULL, title = NULL, authors = '[]', first_author = NULL, "
                      "year = NULL, journal = NULL, doi = NULL, pmid = NULL, abstract = NULL, collections = '[]', "
                      "domain = NULL, item_type = NULL, has_metadata = 0, meta_sha256 = NULL, source = NULL, "
                      "tags = '[]', link = NULL WHERE paper_id = %s", (pid,))
            write_lex(c, pid, ["papers", "body", "object"] if title else ["papers"])
            stats["stubbed"] += 1
        return stats

    changed(conn)
    out = retrying(conn, where, body, hook)
    changed(conn)
    return out
