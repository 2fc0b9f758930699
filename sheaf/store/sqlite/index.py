"""The SQLite index (DESIGN §5): schema and migrations, atomic per-paper writes, reads.

One file (``data/index/sheaf.db`` unless configured) opened only through `sheaf.db.connect`.

Tables
------
``meta``                 key/value: ``schema_version``, ``fts_text_version``, ``created_by``,
                         ``collection:<key>`` → a `ModelIdentity` as JSON (one per model).
``papers``               one row per paper (library metadata, or a stub until metadata comes).
``papers_fts``           FTS5: title, authors, abstract, journal, domain, year.
``body_units``           section-level text units; ``body_units_fts``: heading, text, title
                         (the paper's title, on every unit's row).
``object_units``         figures/tables; ``object_units_fts``: caption, label, table_text,
                         nearby_text, title.
``passages_<key>``       per embedding model: the passages (unit, ordinal, char span, sha256).
``vec_<key>``            per embedding model: sqlite-vec ``vec0`` (float[dim], cosine), rowid =
                         the passage's rowid, ``paper_id`` a metadata column.
``embedding_cache``      (model key, sha256 of passage text) → vector, content-addressed.

FTS tables are contentless (``content=''``): the text lives once, in the base tables; the FTS
rowid is the base row's rowid; what is indexed is `sheaf.store.sqlite.fts.fts_text` of the column (CJK
spaced, hyphen-joined forms added), written by this module inside the same transaction as the
base rows (no triggers). What a row indexes is always computed from its base row (and, for
units, its paper's current title) by `_fts_rows`, both to insert it and to delete it: a
contentless row is deleted with FTS5's ``'delete'`` command and exactly the values it indexed,
so the deletes run BEFORE the base rows (or the paper's title) change, and bm25's statistics
(row count, column lengths) stay those of a clean build of the same content. (Schema 2 used
``contentless_delete=1``, whose deletes never leave those statistics: lexical scores drifted
with every rebuild.) A contentless row cannot be deleted without its values, so FTS rows
written or deleted outside this module are repaired by `rebuild_fts` (empty, refill).

Writes (`replace_paper`, `remove_paper`, `upsert_papers`) each run in ONE
``BEGIN IMMEDIATE`` transaction across every table, vectors and FTS included: a failure at
any point rolls back to the previous rows. Each takes a `hook(step)` callback called between
its statements (tests inject failures through it).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf import __version__
from sheaf.core.lazy import lazy_module
from sheaf.store.sqlite.db import connect, read_snapshot, sqlite3, transaction
from sheaf.core.envelope import SheafError
from sheaf.store.sqlite.fts import FTS_TEXT_VERSION, FTS_TOKENIZER, build_match_query, fts_text
from sheaf.core.models import BodyUnit, ObjectUnit, valid_paper_key

if TYPE_CHECKING:  # sheaf.vectors.embed is imported where used: `sheaf search` never needs it
    from sheaf.vectors.embed import EmbeddedPassages, ModelIdentity, QueryVector

np = lazy_module("numpy")  # imported on first use: the lexical query path never needs it
hashlib = lazy_module("hashlib")  # its OpenSSL backend costs ~3-5 ms to load

if TYPE_CHECKING:  # pragma: no cover - sheaf.ingest.metadata is imported where a PaperMeta is built
    from sheaf.ingest.metadata import PaperMeta

__all__ = [
    "SCHEMA_VERSION", "MIGRATIONS", "IndexSchemaError", "ReplaceStats", "FtsHit", "VectorHit",
    "open_index", "ensure_schema", "as_unit", "schema_version", "replace_paper", "replace_paper_vectors",
    "remove_paper", "upsert_papers", "prune_metadata", "rebuild_fts", "FTS_TABLES", "collections", "ensure_collection", "cache_get",
    "cache_put", "prune_embedding_cache", "counts", "paper_ids", "paper_ids_where", "get_paper", "get_units",
    "get_unit", "paper_units", "fts_search", "fts_best_per_paper", "search_text", "vector_search",
    "MAX_KNN_K", "set_vector_accelerator", "set_lexical_accelerator", "paper_rowids", "new_epoch",
    "FTS_EPOCH", "VECTORS_EPOCH",
]

SCHEMA_VERSION = 3

Hook = Callable[[str], None]
Conn = sqlite3.Connection


class IndexSchemaError(SheafError):
    """The index file was written by another (older without a migration, or newer) version,
    or is not a Sheaf index at all. Never misread: refused with this error."""

    def __init__(self, message: str, details: dict[str, Any] | None = None,
                 hint: str | None = None) -> None:
        super().__init__("BACKEND_UNAVAILABLE", message, details, hint=hint)


# --- schema ------------------------------------------------------------------------------

#: Schema 3: plain contentless tables (deleted with the 'delete' command and the row's values).
_FTS_OPTS = f"content='', tokenize='{FTS_TOKENIZER}'"
_FTS_OPTS_V2 = "content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2'"
_FTS_OPTS_V1 = "content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 2'"

#: Version 1. A new index is created as version 1 and then migrated (MIGRATIONS), so new and
#: migrated indexes are one and the same schema.
SCHEMA_V1 = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;

CREATE TABLE papers (
    paper_rowid   INTEGER PRIMARY KEY,
    paper_id      TEXT NOT NULL UNIQUE,
    citation_key  TEXT,
    title         TEXT,
    authors       TEXT NOT NULL DEFAULT '[]',      -- JSON list of names
    first_author  TEXT,
    year          INTEGER,
    journal       TEXT,
    doi           TEXT,
    pmid          TEXT,
    abstract      TEXT,
    collections   TEXT NOT NULL DEFAULT '[]',      -- JSON list of "Parent/Child" paths
    domain        TEXT,
    item_type     TEXT,
    has_metadata  INTEGER NOT NULL DEFAULT 0,      -- 0: a stub made by replace_paper
    meta_sha256   TEXT,
    source        TEXT
);
CREATE INDEX papers_year ON papers(year);
CREATE INDEX papers_domain ON papers(domain);
CREATE INDEX papers_citation_key ON papers(citation_key);
CREATE INDEX papers_doi ON papers(doi);
CREATE VIRTUAL TABLE papers_fts USING fts5(title, authors, abstract, journal, domain, year, {_FTS_OPTS_V1});

CREATE TABLE body_units (
    unit_rowid    INTEGER PRIMARY KEY,
    unit_id       TEXT NOT NULL UNIQUE,
    short_id      TEXT NOT NULL UNIQUE,
    paper_id      TEXT NOT NULL REFERENCES papers(paper_id),
    node_id       TEXT NOT NULL,
    section_path  TEXT NOT NULL,                   -- JSON list of titles
    section_level INTEGER NOT NULL,
    page_start    INTEGER,
    page_end      INTEGER,
    block_ids     TEXT NOT NULL,                   -- JSON list
    text          TEXT NOT NULL,
    token_count   INTEGER NOT NULL,
    unit_kind     TEXT NOT NULL,
    part_ordinal  INTEGER NOT NULL
);
CREATE INDEX body_units_paper ON body_units(paper_id);
CREATE VIRTUAL TABLE body_units_fts USING fts5(heading, text, {_FTS_OPTS_V1});

CREATE TABLE object_units (
    unit_rowid    INTEGER PRIMARY KEY,
    unit_id       TEXT NOT NULL UNIQUE,
    short_id      TEXT NOT NULL UNIQUE,
    paper_id      TEXT NOT NULL REFERENCES papers(paper_id),
    object_kind   TEXT NOT NULL,
    label         TEXT,
    caption       TEXT NOT NULL,
    table_text    TEXT NOT NULL,
    nearby_text   TEXT NOT NULL,
    node_id       TEXT NOT NULL,
    section_path  TEXT NOT NULL,
    page          INTEGER NOT NULL,
    block_ids     TEXT NOT NULL
);
CREATE INDEX object_units_paper ON object_units(paper_id);
CREATE VIRTUAL TABLE object_units_fts USING fts5(caption, label, table_text, nearby_text, {_FTS_OPTS_V1});

CREATE TABLE embedding_cache (                 -- a rowid table: a 1.5 KB vector fits its
    cache_rowid   INTEGER PRIMARY KEY,             -- page (WITHOUT ROWID would spill every
    model_key     TEXT NOT NULL,                   -- row to an overflow page: +40% size)
    text_sha256   TEXT NOT NULL,
    vector        BLOB NOT NULL,
    UNIQUE (model_key, text_sha256)
);
"""

#: Forward migrations: ``MIGRATIONS[v]`` upgrades a version-``v`` index to ``v + 1``. Each step
#: runs in the same transaction as the version bump. Add a step (and bump SCHEMA_VERSION)
#: whenever the schema or `fts_text` changes.
MIGRATIONS: dict[int, Callable[[Conn], None]] = {}

#: The FTS tables of version 2: the porter stemmer over unicode61 (claims and questions say
#: "regenerates" where papers say "regeneration"), and the paper's title as a column of every
#: unit's row (a paper's title is evidence for each of its units). Measured on SciFact train:
#: lexical nDCG@10 0.643 → 0.693, hybrid 0.698 → 0.726 (docs/benchmarks.md, Quality).
FTS_V2 = {
    "papers_fts": "title, authors, abstract, journal, domain, year",
    "body_units_fts": "heading, text, title",
    "object_units_fts": "caption, label, table_text, nearby_text, title",
}


FTS_TABLES = tuple(FTS_V2)  # the columns of schema 3 are those of schema 2


def _body_fts_row(rowid: int, section_path: Sequence[str], text: str, title: str | None) -> tuple:
    return (rowid, fts_text(" > ".join(section_path)), fts_text(text), fts_text(title))


def _object_fts_row(rowid: int, caption: str | None, label: str | None, table_text: str | None,
                    nearby_text: str | None, title: str | None) -> tuple:
    return (rowid, fts_text(caption), fts_text(label), fts_text(table_text), fts_text(nearby_text),
            fts_text(title))


def _papers_fts_row(rowid: int, has_metadata: int, title: str | None, authors: str | None,
                    abstract: str | None, journal: str | None, domain: str | None,
                    year: int | None) -> tuple:
    if not has_metadata:  # a stub: indexed empty (its title, if any, is not metadata)
        return (rowid, "", "", "", "", "", "")
    return (rowid, fts_text(title), fts_text("; ".join(json.loads(authors or "[]"))), fts_text(abstract),
            fts_text(journal), fts_text(domain), str(year) if year is not None else "")


_CURRENT: Any = object()  # `_fts_rows(title=...)` default: the paper's title in the papers table

_FTS_SELECT = {
    "papers_fts": ("SELECT b.paper_rowid, b.has_metadata, b.title, b.authors, b.abstract, b.journal, "
                   "b.domain, b.year FROM papers b"),
    "body_units_fts": ("SELECT b.unit_rowid, b.section_path, b.text, p.title FROM body_units b "
                       "LEFT JOIN papers p ON p.paper_id = b.paper_id"),
    "object_units_fts": ("SELECT b.unit_rowid, b.caption, b.label, b.table_text, b.nearby_text, p.title "
                         "FROM object_units b LEFT JOIN papers p ON p.paper_id = b.paper_id"),
}


def _fts_rows(conn: Conn, fts: str, where: str = "1", args: Sequence[Any] = (), *,
              title: Any = _CURRENT) -> list[tuple]:
    """``(rowid, *values)`` that `fts` indexes for the base rows matching `where` (columns
    qualified ``b.``): computed from the base rows and, for units, their paper's title as the
    papers table holds it now (or `title`, for units indexed under another one). The ONE
    definition of what is indexed: inserts and deletes both use it."""
    rows = conn.execute(f"{_FTS_SELECT[fts]} WHERE {where} ORDER BY 1", tuple(args)).fetchall()
    if fts == "papers_fts":
        return [_papers_fts_row(*r) for r in rows]
    if fts == "body_units_fts":
        return [_body_fts_row(r, json.loads(sp), t, ti if title is _CURRENT else title)
                for r, sp, t, ti in rows]
    return [_object_fts_row(*r[:5], r[5] if title is _CURRENT else title) for r in rows]


def _fts_insert(conn: Conn, fts: str, rows: Sequence[tuple]) -> None:
    cols = FTS_V2[fts]
    conn.executemany(f"INSERT INTO {fts}(rowid, {cols}) VALUES (?, {', '.join('?' * (cols.count(',') + 1))})",
                     rows)


def _fts_delete(conn: Conn, fts: str, rows: Sequence[tuple]) -> int:
    """Take rows out of a contentless FTS table: FTS5's ``'delete'`` command with exactly the
    values they indexed (`_fts_rows`, computed before the base rows change). Rows the FTS
    table does not hold are skipped: a 'delete' of an absent rowid would still subtract its
    tokens and decrement the row count (silent damage). Returns how many were deleted."""
    if not rows:
        return 0
    ids = [r[0] for r in rows]
    present: set[int] = set()
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        present |= {r[0] for r in conn.execute(
            f"SELECT rowid FROM {fts} WHERE rowid IN ({','.join('?' * len(chunk))})", chunk)}
    cols = FTS_V2[fts]
    todo = [r for r in rows if r[0] in present]
    conn.executemany(f"INSERT INTO {fts}({fts}, rowid, {cols}) "
                     f"VALUES ('delete', ?, {', '.join('?' * (cols.count(',') + 1))})", todo)
    return len(todo)


def _fill_fts(conn: Conn, fts: str, where: str = "1", args: Sequence[Any] = ()) -> None:
    """Write the FTS rows of the base rows matching `where`; the caller has deleted the old ones."""
    _fts_insert(conn, fts, _fts_rows(conn, fts, where, args))


def _fill_unit_fts(conn: Conn, paper_id: str | None = None) -> None:
    """(Re)write the FTS rows of every unit (of one paper) from the base tables and the
    papers' titles; the caller has deleted the old rows."""
    where, args = ("b.paper_id = ?", (paper_id,)) if paper_id else ("1", ())
    for fts in ("body_units_fts", "object_units_fts"):
        _fill_fts(conn, fts, where, args)


def _recreate_fts(conn: Conn, opts: str) -> None:
    """Drop the three FTS tables, create them with `opts` and refill them from the base tables
    (a full-text rebuild; units, vectors and the cache are untouched)."""
    for table, cols in FTS_V2.items():
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5({cols}, {opts})")
    for table in FTS_V2:
        _fill_fts(conn, table)
    new_epoch(conn, FTS_EPOCH)


def _migrate_1_fts_porter_title(conn: Conn) -> None:
    """1 → 2: the FTS tables recreated (porter tokenizer, title column) and refilled from the
    base tables."""
    _recreate_fts(conn, _FTS_OPTS_V2)


def _migrate_2_fts_exact_deletes(conn: Conn) -> None:
    """2 → 3: the FTS tables recreated without ``contentless_delete=1`` (whose deletes left
    bm25's statistics inflated) and refilled from the base tables: a refill also drops the
    drift a schema-2 index accumulated."""
    _recreate_fts(conn, _FTS_OPTS)


MIGRATIONS[1] = _migrate_1_fts_porter_title
MIGRATIONS[2] = _migrate_2_fts_exact_deletes


def rebuild_fts(conn: Conn, tables: Iterable[str] = FTS_TABLES) -> None:
    """Empty FTS tables and refill them from the base tables (own transaction unless one is
    open). The repair for FTS rows written or deleted outside this module: a contentless row
    cannot be deleted without the values it indexed, so orphans go with a rebuild."""
    if not conn.in_transaction:
        with transaction(conn):
            return rebuild_fts(conn, tables)
    for t in tables:
        if t not in FTS_V2:
            raise ValueError(f"not an FTS table: {t}")
        conn.execute(f"INSERT INTO {t}({t}) VALUES ('delete-all')")
        _fill_fts(conn, t)
    new_epoch(conn, FTS_EPOCH)


_SHEAF_TABLES = {"meta", "papers", "body_units", "object_units", "embedding_cache"}


def _table_names(conn: Conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")}


def schema_version(conn: Conn) -> int | None:
    """The index's schema version, or None for an empty database."""
    names = _table_names(conn)
    if "meta" not in names:
        if names:
            raise IndexSchemaError(
                "this SQLite file is not a Sheaf index (it has tables but no meta table)",
                {"tables": sorted(names)[:20]}, hint="point SHEAF_INDEX_FILE at a Sheaf index")
        return None
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if row is None:
        raise IndexSchemaError("the index has no schema_version; it was not written by Sheaf "
                               "or is damaged", hint="rebuild the index")
    try:
        return int(row[0])
    except ValueError:
        raise IndexSchemaError(f"unreadable schema_version {row[0]!r}", hint="rebuild the index") from None


def ensure_schema(conn: Conn, *, migrate: bool = True) -> int:
    """Create the schema in an empty database, migrate an older one forward, or refuse.

    Returns the schema version now in force (always `SCHEMA_VERSION`). An index from a newer
    Sheaf, or an older one without a migration path (or with `migrate=False`), raises
    `IndexSchemaError` and is left untouched.
    """
    version = schema_version(conn)
    if version == SCHEMA_VERSION:
        return version
    if version is None:
        with transaction(conn):
            if schema_version(conn) is None:  # another process may have won the race
                for stmt in _statements(SCHEMA_V1):
                    conn.execute(stmt)
                _set_meta(conn, "schema_version", "1")  # then migrated to SCHEMA_VERSION below
                _set_meta(conn, "fts_text_version", str(FTS_TEXT_VERSION))
                _set_meta(conn, "created_by", f"sheaf {__version__}")
                new_epoch(conn, FTS_EPOCH)
        return ensure_schema(conn, migrate=True)
    if version > SCHEMA_VERSION:
        raise IndexSchemaError(
            f"the index was written by a newer Sheaf (schema {version}); this Sheaf reads "
            f"schema {SCHEMA_VERSION}", {"found": version, "supported": SCHEMA_VERSION},
            hint="upgrade Sheaf, or rebuild the index with this version")
    missing = [v for v in range(version, SCHEMA_VERSION) if v not in MIGRATIONS]
    if missing or not migrate:
        raise IndexSchemaError(
            f"the index has schema {version} and needs migrating to {SCHEMA_VERSION}"
            + (f"; no migration exists from {missing[0]}" if missing else ""),
            {"found": version, "supported": SCHEMA_VERSION},
            hint="rebuild the index" if missing else "open the index read-write to migrate it")
    for v in range(version, SCHEMA_VERSION):
        with transaction(conn):
            if schema_version(conn) != v:
                break  # migrated concurrently
            MIGRATIONS[v](conn)
            _set_meta(conn, "schema_version", str(v + 1))
    return ensure_schema(conn, migrate=migrate)


def _statements(script: str) -> list[str]:
    out, buf = [], []
    for line in script.splitlines():
        line = line.split("--", 1)[0].rstrip()
        if not line:
            continue
        buf.append(line)
        if line.endswith(";"):
            out.append("\n".join(buf))
            buf = []
    return out


def _set_meta(conn: Conn, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))


#: Meta keys holding a random token replaced whenever the full-text tables are rebuilt
#: (`FTS_EPOCH`) or any vector is written or deleted (`VECTORS_EPOCH`). A warm server's
#: in-memory copies are valid for one state; an FTS rebuild restarts FTS5's own records (so a
#: state could look like an earlier one) and re-embedding a paper may reuse passage rowids:
#: these tokens never repeat.
FTS_EPOCH = "fts_epoch"
VECTORS_EPOCH = "vectors_epoch"


def new_epoch(conn: Conn, key: str) -> None:
    """Replace the token under `key` in meta (inside the caller's transaction)."""
    import secrets

    _set_meta(conn, key, secrets.token_hex(8))


def open_index(path: str | Path | None = None, *, create: bool = True, readonly: bool = False,
               settings: Any = None) -> Conn:
    """Open (and create or migrate) the index at `path` (default: the settings' index path).

    `readonly=True` never writes: an index that needs creating or migrating is refused.
    """
    busy = 10_000
    if path is None or settings is not None:
        if settings is None:
            from sheaf.core.settings import get_settings
            settings = get_settings()
        busy = settings.sqlite_busy_timeout_ms
        path = settings.index_path if path is None else path
    conn = connect(path, create=create and not readonly, readonly=readonly, busy_timeout_ms=busy)
    try:
        if readonly:
            v = schema_version(conn)
            if v != SCHEMA_VERSION:
                older = (v or 0) < SCHEMA_VERSION
                raise IndexSchemaError(
                    f"the index has schema {v}, this Sheaf reads {SCHEMA_VERSION}"
                    + ("; open it read-write (a build) to migrate it" if older
                       else "; it was written by a newer Sheaf"),
                    {"found": v, "supported": SCHEMA_VERSION},
                    hint="run a build to migrate it" if older else "upgrade Sheaf")
        else:
            ensure_schema(conn)
            if conn.execute("SELECT 1 FROM meta WHERE key = ?", (FTS_EPOCH,)).fetchone() is None:
                with transaction(conn):  # an index from before the epochs: a warm server needs one
                    new_epoch(conn, FTS_EPOCH)
    except BaseException:
        conn.close()
        raise
    return conn


# --- model collections and the embedding cache --------------------------------------------

def collections(conn: Conn) -> dict[str, ModelIdentity]:
    """Every vector collection of the index: identity key → identity."""
    from sheaf.vectors.embed import ModelIdentity

    return {k[len("collection:"):]: ModelIdentity.from_json(v) for k, v in
            conn.execute("SELECT key, value FROM meta WHERE key LIKE 'collection:%'")}


def ensure_collection(conn: Conn, identity: ModelIdentity) -> None:
    """Create `identity`'s passages table and vec0 table if missing (call inside a transaction
    or on its own: it opens one when none is open)."""
    from sheaf.vectors.embed import ModelChangedError, ModelIdentity

    if not conn.in_transaction:
        with transaction(conn):
            return ensure_collection(conn, identity)
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (f"collection:{identity.key}",)).fetchone()
    if row is not None:
        if ModelIdentity.from_json(row[0]) != identity:  # a 12-hex collision: never share
            raise ModelChangedError("two model identities hash to one collection key",
                                    {"key": identity.key})
        return
    pt, vt = identity.passages_table, identity.vec_table
    conn.execute(f"""CREATE TABLE {pt} (
        passage_rowid INTEGER PRIMARY KEY,
        passage_id    TEXT NOT NULL UNIQUE,
        unit_id       TEXT NOT NULL,
        unit_type     TEXT NOT NULL,
        paper_id      TEXT NOT NULL REFERENCES papers(paper_id),
        ordinal       INTEGER NOT NULL,
        char_start    INTEGER NOT NULL,
        char_end      INTEGER NOT NULL,
        text_sha256   TEXT NOT NULL)""")
    conn.execute(f"CREATE INDEX {pt}_paper ON {pt}(paper_id)")
    conn.execute(f"CREATE INDEX {pt}_unit ON {pt}(unit_id)")
    conn.execute(f"""CREATE VIRTUAL TABLE {vt} USING vec0(
        passage_rowid INTEGER PRIMARY KEY,
        embedding float[{int(identity.dimension)}] distance_metric=cosine,
        paper_id text)""")
    _set_meta(conn, f"collection:{identity.key}", identity.to_json())


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


# --- writes -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ReplaceStats:
    """What one `replace_paper` wrote (and deleted)."""

    paper_id: str
    deleted_units: int
    body_units: int
    object_units: int
    passages: int
    short_ids_lengthened: int
    seconds: float


def _j(v: Any) -> str:
    return json.dumps(list(v), ensure_ascii=False)


def _call(hook: Hook | None, step: str) -> None:
    if hook is not None:
        hook(step)


_TUPLE_FIELDS = ("section_path", "block_ids", "page_span")


def as_unit(u: BodyUnit | ObjectUnit | Mapping[str, Any]) -> BodyUnit | ObjectUnit:
    """A unit from a dataclass or from its `to_dict()`/Parquet row form (lists become tuples)."""
    if isinstance(u, (BodyUnit, ObjectUnit)):
        return u
    if not isinstance(u, Mapping):
        raise TypeError(f"not a unit: {type(u).__name__}")
    d = {k: (tuple(v) if k in _TUPLE_FIELDS and v is not None else v) for k, v in u.items()}
    cls = ObjectUnit if "object_kind" in d else BodyUnit
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return cls(**{k: v for k, v in d.items() if k in names})


def _validate(paper_id: str, units: Sequence[BodyUnit], objects: Sequence[ObjectUnit],
              passages: Sequence[EmbeddedPassages]) -> None:
    if not valid_paper_key(paper_id):
        raise ValueError(f"invalid paper id {paper_id!r}")
    ids: set[str] = set()
    for u in (*units, *objects):
        if u.paper_id != paper_id:
            raise ValueError(f"unit {u.unit_id} belongs to paper {u.paper_id}, not {paper_id}")
        if u.unit_id in ids:
            raise ValueError(f"duplicate unit_id {u.unit_id}")
        ids.add(u.unit_id)
    for u in units:
        if not isinstance(u, BodyUnit):
            raise TypeError(f"units must be BodyUnit, got {type(u).__name__}")
    for o in objects:
        if not isinstance(o, ObjectUnit):
            raise TypeError(f"objects must be ObjectUnit, got {type(o).__name__}")
    seen_models: set[str] = set()
    for ep in passages:
        if ep.identity.key in seen_models:
            raise ValueError(f"two passage sets for one model {ep.identity.key}")
        seen_models.add(ep.identity.key)
        if not np.all(np.isfinite(ep.vectors)):
            raise ValueError("vectors contain NaN or infinity")
        pids: set[str] = set()
        for p in ep.passages:
            if p.paper_id != paper_id or p.unit_id not in ids:
                raise ValueError(f"passage {p.passage_id} does not belong to a unit of {paper_id}")
            if p.passage_id in pids:
                raise ValueError(f"duplicate passage_id {p.passage_id}")
            pids.add(p.passage_id)


def _as_list(passages: EmbeddedPassages | Sequence[EmbeddedPassages] | None) -> list[EmbeddedPassages]:
    from sheaf.vectors.embed import EmbeddedPassages

    if passages is None:
        return []
    if isinstance(passages, EmbeddedPassages):
        return [passages]
    return list(passages)


def _ensure_paper_row(conn: Conn, paper_id: str) -> None:
    if conn.execute("SELECT 1 FROM papers WHERE paper_id = ?", (paper_id,)).fetchone() is None:
        rowid = _next_rowid(conn, "papers", "paper_rowid", "papers_fts")
        conn.execute("INSERT INTO papers(paper_rowid, paper_id) VALUES (?, ?)", (rowid, paper_id))
        _fill_fts(conn, "papers_fts", "b.paper_rowid = ?", (rowid,))


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


def _unchanged_units(conn: Conn, paper_id: str, units: Sequence[BodyUnit],
                     objects: Sequence[ObjectUnit]) -> set[str]:
    """Unit ids whose indexed text (and section path, caption, label ...) a replace leaves as
    they are: their passages and vectors stay valid (the vector step re-checks them next)."""
    old: dict[str, tuple] = {}
    for uid, text, path in conn.execute(
            "SELECT unit_id, text, section_path FROM body_units WHERE paper_id = ?", (paper_id,)):
        old[uid] = ("b", text, path)
    for uid, cap, label, tt, near, path in conn.execute(
            "SELECT unit_id, caption, label, table_text, nearby_text, section_path FROM object_units "
            "WHERE paper_id = ?", (paper_id,)):
        old[uid] = ("o", cap, label, tt, near, path)
    if not old:
        return set()
    new: dict[str, tuple] = {u.unit_id: ("b", u.text, _j(u.section_path)) for u in units}
    new.update({o.unit_id: ("o", o.caption or "", o.label, o.table_text or "", o.nearby_text or "",
                            _j(o.section_path)) for o in objects})
    return {uid for uid, sig in new.items() if old.get(uid) == sig}


def _delete_units(conn: Conn, paper_id: str) -> int:
    n = 0
    for table in ("body_units", "object_units"):
        rows = _fts_rows(conn, f"{table}_fts", "b.paper_id = ?", (paper_id,))  # before the base rows go
        if rows:
            _fts_delete(conn, f"{table}_fts", rows)
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


def _insert_units(conn: Conn, units: Sequence[BodyUnit], objects: Sequence[ObjectUnit],
                  hook: Hook | None) -> int:
    shorts, lengthened = _assign_short_ids(conn, [*units, *objects])
    if units:
        r0 = _next_rowid(conn, "body_units", "unit_rowid", "body_units_fts")
        rows = []
        for i, u in enumerate(units):
            ps = u.page_span or (None, None)
            rows.append((r0 + i, u.unit_id, shorts[i], u.paper_id, u.node_id, _j(u.section_path),
                         u.section_level, ps[0], ps[1], _j(u.block_ids), u.text, u.token_count,
                         u.unit_kind, u.part_ordinal))
        conn.executemany("INSERT INTO body_units(unit_rowid, unit_id, short_id, paper_id, node_id, "
                         "section_path, section_level, page_start, page_end, block_ids, text, "
                         "token_count, unit_kind, part_ordinal) "
                         "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        _call(hook, "after_body_units")
        # what is indexed is computed from the rows just written, as every delete will compute it
        _fill_fts(conn, "body_units_fts", "b.unit_rowid >= ?", (r0,))
        _call(hook, "after_body_units_fts")
    if objects:
        r0 = _next_rowid(conn, "object_units", "unit_rowid", "object_units_fts")
        rows = []
        for i, o in enumerate(objects):
            rows.append((r0 + i, o.unit_id, shorts[len(units) + i], o.paper_id, o.object_kind,
                         o.label, o.caption or "", o.table_text or "", o.nearby_text or "",
                         o.node_id, _j(o.section_path), o.page, _j(o.block_ids)))
        conn.executemany("INSERT INTO object_units(unit_rowid, unit_id, short_id, paper_id, "
                         "object_kind, label, caption, table_text, nearby_text, node_id, "
                         "section_path, page, block_ids) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        _call(hook, "after_object_units")
        _fill_fts(conn, "object_units_fts", "b.unit_rowid >= ?", (r0,))
        _call(hook, "after_object_units_fts")
    return lengthened


def _insert_vectors(conn: Conn, paper_id: str, ep: EmbeddedPassages, hook: Hook | None) -> int:
    ident = ep.identity
    ensure_collection(conn, ident)
    if not ep.passages:
        return 0
    pt, vt = ident.passages_table, ident.vec_table
    r0 = _next_rowid(conn, pt, "passage_rowid")
    conn.executemany(
        f"INSERT INTO {pt}(passage_rowid, passage_id, unit_id, unit_type, paper_id, ordinal, "
        f"char_start, char_end, text_sha256) VALUES (?,?,?,?,?,?,?,?,?)",
        [(r0 + i, p.passage_id, p.unit_id, p.unit_type, paper_id, p.ordinal, p.char_start,
          p.char_end, p.text_sha256) for i, p in enumerate(ep.passages)])
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
    """
    import time

    t0 = time.perf_counter()
    units = [as_unit(u) for u in units]
    objects = [as_unit(o) for o in objects]
    eps = _as_list(passages)
    _validate(paper_id, units, objects, eps)
    with transaction(conn):
        _ensure_paper_row(conn, paper_id)
        given = {ep.identity.key for ep in eps}
        cols = collections(conn)
        keep = _unchanged_units(conn, paper_id, units, objects) if set(cols) - given else set()
        for ident in cols.values():
            _delete_vectors(conn, paper_id, ident, keep_units=None if ident.key in given else keep)
        deleted = _delete_units(conn, paper_id)
        _call(hook, "after_delete")
        lengthened = _insert_units(conn, units, objects, hook)
        n_pass = sum(_insert_vectors(conn, paper_id, ep, hook) for ep in eps)
        _call(hook, "before_commit")
    return ReplaceStats(paper_id, deleted, len(units), len(objects), n_pass, lengthened,
                        time.perf_counter() - t0)


def replace_paper_vectors(conn: Conn, paper_id: str, passages: EmbeddedPassages, *,
                          hook: Hook | None = None) -> int:
    """Replace one paper's passages and vectors in one model's collection only (one
    transaction); the units they point to must already be in the index."""
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
            _fts_delete(conn, "papers_fts", _fts_rows(conn, "papers_fts", "b.paper_rowid = ?", (row[0],)))
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


def _meta_sha(m: PaperMeta) -> str:
    return hashlib.sha256(json.dumps(m.to_dict(), sort_keys=True, ensure_ascii=False)
                          .encode("utf-8")).hexdigest()


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
            "abstract", "collections", "domain", "item_type", "has_metadata", "meta_sha256", "source")
    with transaction(conn):
        for m in metas:
            sha = _meta_sha(m)
            vals = (m.citation_key, m.title, _j(m.authors), m.first_author, m.year, m.journal, m.doi,
                    m.pmid, m.abstract, _j(m.collections), m.domain, m.item_type, 1, sha, m.source)
            row = conn.execute("SELECT paper_rowid, meta_sha256, title FROM papers WHERE paper_id = ?",
                               (m.key,)).fetchone()
            if row is not None and row[1] == sha:
                stats["unchanged"] += 1
                continue
            old_title = row[2] if row is not None else None  # units without a papers row: none
            retitle = (old_title or "") != (m.title or "")
            if retitle:  # the title is a column of every unit's FTS row: out under the old one
                for fts in ("body_units_fts", "object_units_fts"):
                    _fts_delete(conn, fts, _fts_rows(conn, fts, "b.paper_id = ?", (m.key,), title=old_title))
            if row is None:
                rowid = _next_rowid(conn, "papers", "paper_rowid", "papers_fts")
                conn.execute(f"INSERT INTO papers(paper_rowid, paper_id, {', '.join(cols)}) "
                             f"VALUES (?, ?, {', '.join('?' * len(cols))})", (rowid, m.key, *vals))
                stats["inserted"] += 1
            else:
                rowid = row[0]
                _fts_delete(conn, "papers_fts", _fts_rows(conn, "papers_fts", "b.paper_rowid = ?", (rowid,)))
                conn.execute(f"UPDATE papers SET {', '.join(c + ' = ?' for c in cols)} "
                             "WHERE paper_rowid = ?", (*vals, rowid))
                stats["updated"] += 1
            _fill_fts(conn, "papers_fts", "b.paper_rowid = ?", (rowid,))
            if retitle:
                _fill_unit_fts(conn, m.key)
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
            _fts_delete(conn, "papers_fts", _fts_rows(conn, "papers_fts", "b.paper_rowid = ?", (rowid,)))
            indexed = conn.execute("SELECT 1 FROM body_units WHERE paper_id = ? UNION ALL "
                                   "SELECT 1 FROM object_units WHERE paper_id = ? LIMIT 1", (pid, pid)).fetchone()
            if indexed is None:
                conn.execute("DELETE FROM papers WHERE paper_rowid = ?", (rowid,))
                stats["removed"] += 1
                continue
            if title:  # the title is a column of every unit's FTS row: out under the old one
                for fts in ("body_units_fts", "object_units_fts"):
                    _fts_delete(conn, fts, _fts_rows(conn, fts, "b.paper_id = ?", (pid,), title=title))
            conn.execute("UPDATE papers SET citation_key = NULL, title = NULL, authors = '[]', first_author = NULL, "
                         "year = NULL, journal = NULL, doi = NULL, pmid = NULL, abstract = NULL, collections = '[]', "
                         "domain = NULL, item_type = NULL, has_metadata = 0, meta_sha256 = NULL, source = NULL "
                         "WHERE paper_rowid = ?", (rowid,))
            _fill_fts(conn, "papers_fts", "b.paper_rowid = ?", (rowid,))
            if title:
                _fill_unit_fts(conn, pid)
            stats["stubbed"] += 1
        _call(hook, "before_commit")
    return stats


# --- reads ----------------------------------------------------------------------------------

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
                    domains: Sequence[str] | None = None, collection: str | None = None) -> list[str]:
    """Paper ids passing metadata filters (for the `paper_ids` argument of the searches).

    `collection` matches a collection path or any path below it ("Bone" matches "Bone/Reviews").
    """
    where, args = ["1"], []
    if year_min is not None:
        where.append("year >= ?")
        args.append(int(year_min))
    if year_max is not None:
        where.append("year <= ?")
        args.append(int(year_max))
    if domains is not None:
        where.append(f"domain IN ({','.join('?' * len(domains))})")
        args += list(domains)
    if collection is not None:
        where.append("EXISTS (SELECT 1 FROM json_each(papers.collections) c "
                     "WHERE c.value = ? OR substr(c.value, 1, ?) = ?)")
        args += [collection, len(collection) + 1, collection + "/"]
    return [r[0] for r in conn.execute(
        f"SELECT paper_id FROM papers WHERE {' AND '.join(where)} ORDER BY paper_id", args)]


def get_paper(conn: Conn, paper_id: str) -> PaperMeta | None:
    """A paper's metadata (None when absent or only a stub without metadata)."""
    r = conn.execute("SELECT paper_id, citation_key, title, authors, first_author, year, journal, "
                     "doi, pmid, abstract, collections, domain, item_type, source, has_metadata "
                     "FROM papers WHERE paper_id = ?", (paper_id,)).fetchone()
    if r is None or not r[14]:
        return None
    from sheaf.ingest.metadata import PaperMeta

    return PaperMeta(key=r[0], citation_key=r[1], title=r[2] or "", authors=tuple(json.loads(r[3])),
                     first_author=r[4], year=r[5], journal=r[6], doi=r[7], pmid=r[8], abstract=r[9],
                     collections=tuple(json.loads(r[10])), domain=r[11], item_type=r[12], source=r[13])


_BODY_COLS = ("unit_id, short_id, paper_id, node_id, section_path, section_level, page_start, "
              "page_end, block_ids, text, token_count, unit_kind, part_ordinal")
_OBJ_COLS = ("unit_id, short_id, paper_id, object_kind, label, caption, table_text, nearby_text, "
             "node_id, section_path, page, block_ids")


def _body(r: Sequence[Any]) -> BodyUnit:
    return BodyUnit(unit_id=r[0], short_id=r[1], paper_id=r[2], node_id=r[3],
                    section_path=tuple(json.loads(r[4])), section_level=r[5],
                    page_span=(r[6], r[7]) if r[6] is not None else None,
                    block_ids=tuple(json.loads(r[8])), text=r[9], token_count=r[10],
                    unit_kind=r[11], part_ordinal=r[12])


def _obj(r: Sequence[Any]) -> ObjectUnit:
    return ObjectUnit(unit_id=r[0], short_id=r[1], paper_id=r[2], object_kind=r[3], label=r[4],
                      caption=r[5], table_text=r[6], nearby_text=r[7], node_id=r[8],
                      section_path=tuple(json.loads(r[9])), page=r[10],
                      block_ids=tuple(json.loads(r[11])))


def get_units(conn: Conn, unit_ids: Iterable[str]) -> dict[str, BodyUnit | ObjectUnit]:
    """Units (body or object) by unit_id; ids not in the index are absent from the result."""
    ids = list(dict.fromkeys(unit_ids))
    out: dict[str, BodyUnit | ObjectUnit] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        marks = ",".join("?" * len(chunk))
        for r in conn.execute(f"SELECT {_BODY_COLS} FROM body_units WHERE unit_id IN ({marks})", chunk):
            out[r[0]] = _body(r)
        for r in conn.execute(f"SELECT {_OBJ_COLS} FROM object_units WHERE unit_id IN ({marks})", chunk):
            out[r[0]] = _obj(r)
    return out


def get_unit(conn: Conn, ref: str) -> BodyUnit | ObjectUnit | None:
    """One unit by unit_id or by short_id."""
    for cols, table, make in ((_BODY_COLS, "body_units", _body), (_OBJ_COLS, "object_units", _obj)):
        r = conn.execute(f"SELECT {cols} FROM {table} WHERE unit_id = ? OR short_id = ?",
                         (ref, ref)).fetchone()
        if r is not None:
            return make(r)
    return None


def paper_units(conn: Conn, paper_id: str) -> tuple[list[BodyUnit], list[ObjectUnit]]:
    """A paper's body units and object units, in insertion order."""
    b = [_body(r) for r in conn.execute(
        f"SELECT {_BODY_COLS} FROM body_units WHERE paper_id = ? ORDER BY unit_rowid", (paper_id,))]
    o = [_obj(r) for r in conn.execute(
        f"SELECT {_OBJ_COLS} FROM object_units WHERE paper_id = ? ORDER BY unit_rowid", (paper_id,))]
    return b, o


@dataclass(frozen=True, slots=True)
class FtsHit:
    """One lexical match: `ref` is a unit_id (body/object scope) or a paper_id (papers)."""

    ref: str
    paper_id: str
    score: float  # -bm25: higher is better


_SCOPES = {
    "body": ("body_units_fts", "body_units", "unit_rowid", "unit_id"),
    "object": ("object_units_fts", "object_units", "unit_rowid", "unit_id"),
    "papers": ("papers_fts", "papers", "paper_rowid", "paper_id"),
}


def _fts_scope(scope: str, weights: Sequence[float] | None) -> tuple[str, str, str, str, str]:
    """(fts table, base table, key column, ref column, bm25 call) of a scope."""
    if scope not in _SCOPES:
        raise ValueError(f"scope must be one of {sorted(_SCOPES)}")
    fts, base, key, ref = _SCOPES[scope]
    w = "" if not weights else ", " + ", ".join(str(float(x)) for x in weights)
    return fts, base, key, ref, f"bm25({fts}{w})"


def _ranked(conn: Conn, fts: str, bm25: str, match: str, limit: int = -1,
            weights: Sequence[float] | None = None, rowids: Sequence[int] | None = None) -> Any:
    """Cursor over (rowid, bm25) of the FTS rows matching `match`, best first (ties: rowid),
    at most `limit` (-1: all); only `rowids` when given. The base rows are joined afterwards,
    only for the rows used: joining every matching row before the sort costs more than the
    sort itself. A warm server's lexical accelerator (`sheaf.search.bm25`) answers the same from
    memory when it can."""
    if _LEXICAL_ACCELERATOR is not None:
        got = _LEXICAL_ACCELERATOR(conn, fts, weights, match, rowids)
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
        got = self._rows.fetchmany(n)
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
               weights: Sequence[float] | None = None) -> list[FtsHit]:
    """Run a MATCH expression (build it with `sheaf.store.sqlite.fts.build_match_query`) on one scope's
    FTS table, best first (ties: rowid). `weights` are bm25 column weights; `paper_ids`
    filters; `limit` -1: every hit."""
    fts, base, key, ref, bm25 = _fts_scope(scope, weights)
    with read_snapshot(conn):
        return _fts_search(conn, scope, match, limit, paper_ids, weights)


def _fts_search(conn: Conn, scope: str, match: str, limit: int, paper_ids: Sequence[str] | None,
                weights: Sequence[float] | None) -> list[FtsHit]:
    fts, base, key, ref, bm25 = _fts_scope(scope, weights)
    if limit >= 0:  # every hit (or a filter): the join below at once
        rowids = None
        if paper_ids is not None and _LEXICAL_ACCELERATOR is not None:
            rowids = paper_rowids(conn, scope, paper_ids)
            if not rowids:
                return []  # none of these papers has a row here
        cur = None if paper_ids is not None and rowids is None else \
            _ranked(conn, fts, bm25, match, limit, weights, rowids)
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
                       weights: Sequence[float] | None = None) -> list[FtsHit]:
    """Like `fts_search`, but only each paper's best hit (ties: rowid): best paper first
    (ties: paper_id), at most `limit` papers (-1: all); no paper is lost to a row limit.

    The ranked rows are read best first and joined to their base rows in batches, only until
    `limit` papers are certain: every paper not seen yet scores below the last one kept."""
    fts, base, key, ref, bm25 = _fts_scope(scope, weights)
    with read_snapshot(conn):
        return _best_per_paper(conn, fts, base, key, ref, bm25, match, limit, paper_ids, weights)


def _best_per_paper(conn: Conn, fts: str, base: str, key: str, ref: str, bm25: str, match: str, limit: int,
                    paper_ids: Sequence[str] | None, weights: Sequence[float] | None) -> list[FtsHit]:
    allowed = None if paper_ids is None else set(paper_ids)
    limit = int(limit)
    if limit == 0:
        return []
    best: dict[str, tuple[float, str]] = {}  # paper_id → (bm25, ref) of its first (best) row
    cut: float | None = None  # bm25 of the row that brought the limit-th paper
    batch = max(64, min(limit, 1000)) if limit > 0 else 1000
    cur = _ranked(conn, fts, bm25, match, weights=weights)
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


#: sqlite-vec refuses a KNN query with k above this ("k value in knn query too large").
MAX_KNN_K = 4096


def vector_search(conn: Conn, query: QueryVector, k: int = 10, *,
                  paper_ids: Sequence[str] | None = None) -> list[VectorHit]:
    """Exact KNN over the collection of the query's model identity, nearest first
    (`k` is capped at `MAX_KNN_K`).

    Refused with `ModelChangedError` (``MODEL_CHANGED``) when the index has vectors but none
    of the query's identity; ``VECTOR_NOT_BUILT`` when it has no vectors at all.
    """
    from sheaf.vectors.embed import ModelChangedError

    cols = collections(conn)
    ident = query.identity
    if ident.key not in cols:
        if not cols:
            raise SheafError("VECTOR_NOT_BUILT", "the index has no vectors yet",
                             hint="build the index (sheaf build)")
        raise ModelChangedError(
            f"the query was embedded with {ident.describe()}, but the index holds vectors of "
            + "; ".join(c.describe() for c in cols.values()),
            {"query_model": ident.to_dict(), "index_models": [c.to_dict() for c in cols.values()]},
            hint="set SHEAF_EMBEDDING_MODEL back, or rebuild the vectors with the new model")
    if cols[ident.key] != ident:
        raise ModelChangedError("collection key collision between two model identities",
                                {"key": ident.key})
    vec = np.ascontiguousarray(query.vector, dtype=np.float32).reshape(-1)
    if vec.shape != (ident.dimension,) or not np.all(np.isfinite(vec)):
        raise SheafError("BAD_QUERY", f"query vector has shape {vec.shape}, expected ({ident.dimension},)")
    pt, vt = ident.passages_table, ident.vec_table
    if paper_ids is not None and not paper_ids:
        return []
    k = max(1, min(int(k), MAX_KNN_K))
    if _VECTOR_ACCELERATOR is not None:  # a warm server's in-memory matrix (same answer, faster)
        hits = _VECTOR_ACCELERATOR(conn, query, k, paper_ids)
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


#: `fn(conn, query, k, paper_ids) -> list[VectorHit] | None`, consulted by `vector_search`
#: after its checks; None from it means "answer from sqlite-vec". Set by `sheaf serve`
#: (`sheaf.service.server.MatrixAccelerator`), which must return exactly what sqlite-vec would.
_VECTOR_ACCELERATOR: Callable[..., list[VectorHit] | None] | None = None


def set_vector_accelerator(fn: Callable[..., list[VectorHit] | None] | None) -> None:
    """Install (or with None remove) the process's vector-search accelerator."""
    global _VECTOR_ACCELERATOR
    _VECTOR_ACCELERATOR = fn


_LEXICAL_ACCELERATOR: Callable[..., Any] | None = None


def set_lexical_accelerator(fn: Callable[..., Any] | None) -> None:
    """Install (or with None remove) the process's full-text ranking accelerator
    (`sheaf.search.bm25.Bm25Accelerator`): called as ``fn(conn, fts, weights, match, rowids)``, it
    answers rows like ``ORDER BY bm25(...), rowid`` (a `fetchmany` cursor) or None."""
    global _LEXICAL_ACCELERATOR
    _LEXICAL_ACCELERATOR = fn
