"""The SQLite index (docs/index-and-embeddings.md): schema and migrations, atomic per-paper writes, reads.

One file (``data/index/sheaf.db`` unless configured) opened only through `sheaf.store.sqlite.db.connect`.

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
rowid is the base row's rowid; what is indexed is `sheaf.store.fulltext.fts_text` of the column (CJK
spaced, hyphen-joined forms added), written by this module inside the same transaction as the
base rows (no triggers). What a row indexes is always computed from its base row (and, for
units, its paper's current title) by `fts_rows`, both to insert it and to delete it: a
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
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from sheaf import __version__
from sheaf.core.lazy import lazy_module
from sheaf.core.settings import get_settings
from sheaf.store.fulltext import FTS_TEXT_VERSION, FTS_TOKENIZER
from sheaf.store.rows import IndexSchemaError, body_fts_row, object_fts_row, papers_fts_row
from sheaf.store.sqlite.db import connect, sqlite3, transaction
from sheaf.vectors.identity import ModelChangedError, ModelIdentity

if TYPE_CHECKING:  # sheaf.vectors.identity is imported where used: `sheaf search` never needs it
    from sheaf.core.settings import Settings
    from sheaf.vectors.identity import ModelIdentity

np = lazy_module("numpy")  # imported on first use: the lexical query path never needs it
hashlib = lazy_module("hashlib")  # its OpenSSL backend costs ~3-5 ms to load

__all__ = [
    "SCHEMA_VERSION", "MIGRATIONS", "IndexSchemaError", "open_index", "ensure_schema", "schema_version",
    "rebuild_fts", "FTS_TABLES", "collections", "ensure_collection", "new_epoch", "FTS_EPOCH", "VECTORS_EPOCH",
]

SCHEMA_VERSION = 4

Hook = Callable[[str], None]
Conn: TypeAlias = sqlite3.Connection


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


_CURRENT: Any = object()  # `fts_rows(title=...)` default: the paper's title in the papers table

_FTS_SELECT = {
    "papers_fts": ("SELECT b.paper_rowid, b.has_metadata, b.title, b.authors, b.abstract, b.journal, "
                   "b.domain, b.year FROM papers b"),
    "body_units_fts": ("SELECT b.unit_rowid, b.section_path, b.text, p.title FROM body_units b "
                       "LEFT JOIN papers p ON p.paper_id = b.paper_id"),
    "object_units_fts": ("SELECT b.unit_rowid, b.caption, b.label, b.table_text, b.nearby_text, p.title "
                         "FROM object_units b LEFT JOIN papers p ON p.paper_id = b.paper_id"),
}


def fts_rows(conn: Conn, fts: str, where: str = "1", args: Sequence[Any] = (), *,
              title: Any = _CURRENT) -> list[tuple[Any, ...]]:
    """``(rowid, *values)`` that `fts` indexes for the base rows matching `where` (columns
    qualified ``b.``): computed from the base rows and, for units, their paper's title as the
    papers table holds it now (or `title`, for units indexed under another one). The ONE
    definition of what is indexed: inserts and deletes both use it."""
    rows = conn.execute(f"{_FTS_SELECT[fts]} WHERE {where} ORDER BY 1", tuple(args)).fetchall()
    if fts == "papers_fts":
        return [papers_fts_row(*r) for r in rows]
    if fts == "body_units_fts":
        return [body_fts_row(r, json.loads(sp), t, ti if title is _CURRENT else title)
                for r, sp, t, ti in rows]
    return [object_fts_row(r[0], r[1], r[2], r[3], r[4], r[5] if title is _CURRENT else title) for r in rows]


def _fts_insert(conn: Conn, fts: str, rows: Sequence[tuple[Any, ...]]) -> None:
    cols = FTS_V2[fts]
    conn.executemany(f"INSERT INTO {fts}(rowid, {cols}) VALUES (?, {', '.join('?' * (cols.count(',') + 1))})",
                     rows)


def fts_delete(conn: Conn, fts: str, rows: Sequence[tuple[Any, ...]]) -> int:
    """Take rows out of a contentless FTS table: FTS5's ``'delete'`` command with exactly the
    values they indexed (`fts_rows`, computed before the base rows change). Rows the FTS
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


def fill_fts(conn: Conn, fts: str, where: str = "1", args: Sequence[Any] = ()) -> None:
    """Write the FTS rows of the base rows matching `where`; the caller has deleted the old ones."""
    _fts_insert(conn, fts, fts_rows(conn, fts, where, args))


def fill_unit_fts(conn: Conn, paper_id: str | None = None) -> None:
    """(Re)write the FTS rows of every unit (of one paper) from the base tables and the
    papers' titles; the caller has deleted the old rows."""
    where, args = ("b.paper_id = ?", (paper_id,)) if paper_id else ("1", ())
    for fts in ("body_units_fts", "object_units_fts"):
        fill_fts(conn, fts, where, args)


def _recreate_fts(conn: Conn, opts: str) -> None:
    """Drop the three FTS tables, create them with `opts` and refill them from the base tables
    (a full-text rebuild; units, vectors and the cache are untouched)."""
    for table, cols in FTS_V2.items():
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5({cols}, {opts})")
    for table in FTS_V2:
        fill_fts(conn, table)
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


def _migrate_3_tags_links(conn: Conn) -> None:
    """3 → 4: each paper's tags (JSON list) and its zotero:// link."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(papers)")}
    if "tags" not in have:
        conn.execute("ALTER TABLE papers ADD COLUMN tags TEXT NOT NULL DEFAULT '[]'")
    if "link" not in have:
        conn.execute("ALTER TABLE papers ADD COLUMN link TEXT")


MIGRATIONS[1] = _migrate_1_fts_porter_title
MIGRATIONS[2] = _migrate_2_fts_exact_deletes
MIGRATIONS[3] = _migrate_3_tags_links


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
        fill_fts(conn, t)
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
               settings: Settings | None = None, busy_timeout_ms: int | None = None) -> Conn:
    """Open (and create or migrate) the index at `path` (default: the settings' index path).

    `readonly=True` never writes: an index that needs creating or migrating is refused.
    """
    busy = 10_000 if busy_timeout_ms is None else busy_timeout_ms
    if path is None or settings is not None:
        if settings is None:
            settings = get_settings()
        busy = settings.sqlite_busy_timeout_ms if busy_timeout_ms is None else busy_timeout_ms
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

    return {k[len("collection:"):]: ModelIdentity.from_json(v) for k, v in
            conn.execute("SELECT key, value FROM meta WHERE key LIKE 'collection:%'")}


def ensure_collection(conn: Conn, identity: ModelIdentity) -> None:
    """Create `identity`'s passages table and vec0 table if missing (call inside a transaction
    or on its own: it opens one when none is open)."""

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


# --- writes -------------------------------------------------------------------------------


# --- reads ----------------------------------------------------------------------------------


