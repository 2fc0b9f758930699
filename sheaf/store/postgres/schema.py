"""The Postgres index's schema: versioned in ``meta``, created and migrated like the SQLite side.

Tables (every row key starts with ``paper_id``, the partition key: a paper's rows are found,
replaced and removed by it; ``seq`` is a global insertion order, the tie-break that the
SQLite backend's rowids are)
------------------------------------------------------------------------------------------
``meta``               key/value: ``schema_version``, ``created_by``, ``collection:<key>`` → a
                       `ModelIdentity` as JSON (one per model), as on SQLite.
``papers``             one row per paper (library metadata, or a stub until metadata comes).
``body_units``,        the units, columns as on SQLite (JSON lists as text); ``unit_id`` and
``object_units``       ``short_id`` unique across the index.
``lex_rows``           one row per lexical row (scope ``body`` / ``object`` / ``papers``: a unit or
                       a paper's metadata): its ref (unit_id or paper_id), ``seq`` and length in
                       tokens. What FTS5's docsize table is.
``lex_postings``       (row, term) → the term's positions in the row (``column << 28 | offset``,
                       packed int32) and (schema 2) its count in each column of the scope (``freqs``,
                       what bm25 needs when the database ranks a query of single terms itself):
                       FTS5's inverted index, terms made by FTS5's own tokenizer
                       (`sheaf.store.tokens.FtsTokenizer`), btree on (scope, term) in the "C"
                       collation (exact and prefix lookups), covering (schema 2) the row, its
                       length and ``freqs``: a ranking reads the index alone.
``lex_stats``          per paper and scope: rows and tokens (FTS5's averages record, kept per
                       paper so that writers of different papers never touch one row).
``lex_terms``          (schema 3) per paper, scope and term: the paper's rows holding the term.
                       A term's rows over the scope (its idf) are the sum over the papers holding
                       it, read from an index on (scope, term): a few rows a paper instead of one a
                       posting (a function word's count read ~180,000 postings at 100k passages),
                       and, kept per paper, never a row two writers of different papers share.
``embedding_cache``    (model key, sha256 of passage text) → float32 bytes, content-addressed.
``vec_<key>``          per embedding model: its passages (unit, ordinal, char span, sha256) with
                       their ``vector(dim)``; HNSW (``vector_cosine_ops``) on the vectors.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sheaf import __version__
from sheaf.core.envelope import SheafError
from sheaf.store.postgres.db import Where, psycopg, unavailable
from sheaf.store.rows import IndexSchemaError
from sheaf.vectors.identity import ModelChangedError, ModelIdentity

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

SCHEMA_VERSION = 5

#: The scopes of the lexical tables and their columns (those of the SQLite FTS5 tables).
SCOPES = {"body": 0, "object": 1, "papers": 2}
SCOPE_COLUMNS = {
    "body": ("heading", "text", "title"),
    "object": ("caption", "label", "table_text", "nearby_text", "title"),
    "papers": ("title", "authors", "abstract", "journal", "domain", "year"),
}

SCHEMA_V1 = """
CREATE SEQUENCE sheaf_seq;
CREATE SEQUENCE sheaf_changes;
CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE papers (
    paper_id      text PRIMARY KEY,
    seq           bigint NOT NULL DEFAULT nextval('sheaf_seq'),
    citation_key  text,
    title         text,
    authors       text NOT NULL DEFAULT '[]',
    first_author  text,
    year          integer,
    journal       text,
    doi           text,
    pmid          text,
    abstract      text,
    collections   text NOT NULL DEFAULT '[]',
    domain        text,
    item_type     text,
    has_metadata  integer NOT NULL DEFAULT 0,
    meta_sha256   text,
    source        text
);
CREATE INDEX papers_year ON papers(year);
CREATE INDEX papers_domain ON papers(domain);
CREATE TABLE body_units (
    paper_id      text NOT NULL,
    unit_id       text NOT NULL,
    seq           bigint NOT NULL,
    short_id      text NOT NULL UNIQUE,
    node_id       text NOT NULL,
    section_path  text NOT NULL,
    section_level integer NOT NULL,
    page_start    integer,
    page_end      integer,
    block_ids     text NOT NULL,
    text          text NOT NULL,
    token_count   integer NOT NULL,
    unit_kind     text NOT NULL,
    part_ordinal  integer NOT NULL,
    PRIMARY KEY (paper_id, unit_id)
);
CREATE UNIQUE INDEX body_units_unit ON body_units(unit_id);
CREATE TABLE object_units (
    paper_id      text NOT NULL,
    unit_id       text NOT NULL,
    seq           bigint NOT NULL,
    short_id      text NOT NULL UNIQUE,
    object_kind   text NOT NULL,
    label         text,
    caption       text NOT NULL,
    table_text    text NOT NULL,
    nearby_text   text NOT NULL,
    node_id       text NOT NULL,
    section_path  text NOT NULL,
    page          integer NOT NULL,
    block_ids     text NOT NULL,
    PRIMARY KEY (paper_id, unit_id)
);
CREATE UNIQUE INDEX object_units_unit ON object_units(unit_id);
CREATE TABLE lex_rows (
    paper_id  text NOT NULL,
    scope     smallint NOT NULL,
    ref       text NOT NULL,
    seq       bigint NOT NULL,
    doclen    integer NOT NULL,
    PRIMARY KEY (paper_id, scope, ref)
);
CREATE UNIQUE INDEX lex_rows_seq ON lex_rows(scope, seq);
CREATE TABLE lex_postings (
    paper_id  text NOT NULL,
    scope     smallint NOT NULL,
    ref       text NOT NULL,
    term      text COLLATE "C" NOT NULL,
    seq       bigint NOT NULL,
    doclen    integer NOT NULL,
    codes     bytea NOT NULL,      -- int32 little-endian: column << 28 | offset, sorted
    PRIMARY KEY (paper_id, scope, ref, term)
);
CREATE INDEX lex_postings_term ON lex_postings(scope, term);
CREATE TABLE lex_stats (
    paper_id  text NOT NULL,
    scope     smallint NOT NULL,
    n_rows    bigint NOT NULL,
    n_tokens  bigint NOT NULL,
    PRIMARY KEY (paper_id, scope)
);
CREATE TABLE embedding_cache (
    model_key    text NOT NULL,
    text_sha256  text NOT NULL,
    vector       bytea NOT NULL,
    PRIMARY KEY (model_key, text_sha256)
);
"""

def _v1_to_v2(conn: Any) -> None:
    """Schema 2: each posting's count per column (``freqs``), computed from its packed positions
    (the column is the top four bits of each little-endian int32); the term index covers what a
    ranking reads."""
    conn.execute("ALTER TABLE lex_postings ADD COLUMN freqs integer[]")
    conn.execute(
        "UPDATE lex_postings SET freqs = ARRAY(SELECT (SELECT count(*) FROM generate_series(0, length(codes) / 4 - 1) i "
        "WHERE get_byte(codes, 4 * i + 3) >> 4 = c)::integer FROM generate_series(0, CASE scope "
        + " ".join(f"WHEN {sid} THEN {len(SCOPE_COLUMNS[name]) - 1}" for name, sid in SCOPES.items())
        + " END) c ORDER BY c)")
    conn.execute("ALTER TABLE lex_postings ALTER COLUMN freqs SET NOT NULL")
    # What ranking in the database reads, in the term index itself: index-only scans, no visit to
    # the table's pages (scattered: a term's rows were written paper by paper).
    conn.execute("DROP INDEX IF EXISTS lex_postings_term")
    conn.execute("CREATE INDEX lex_postings_term ON lex_postings(scope, term, seq) INCLUDE (paper_id, ref, doclen, freqs)")


def _v2_to_v3(conn: Any) -> None:
    """Schema 3: each paper's count of rows per term (``lex_terms``), counted from its postings."""
    conn.execute('CREATE TABLE lex_terms (paper_id text NOT NULL, scope smallint NOT NULL, term text COLLATE "C" '
                 "NOT NULL, n_rows integer NOT NULL, PRIMARY KEY (paper_id, scope, term))")
    conn.execute("INSERT INTO lex_terms SELECT paper_id, scope, term, count(*) FROM lex_postings GROUP BY 1, 2, 3")
    conn.execute("CREATE INDEX lex_terms_term ON lex_terms(scope, term) INCLUDE (n_rows)")


def _v3_to_v4(conn: Any) -> None:
    """Schema 4: each collection's HNSW graph built again with ``ef_construction`` 200 (it was 64,
    pgvector's default): recall@10 against the exact scan at 102k passages 0.972 → 0.997 at
    ``ef_search`` 200 (docs/benchmarks.md). One rebuild per collection (161 s for 102k vectors of
    384 dimensions on 2 cores); searches and writes wait for it."""
    conn.execute("SET LOCAL maintenance_work_mem = '512MB'")  # the graph in memory while it is built
    for (value,) in conn.execute("SELECT value FROM meta WHERE key LIKE 'collection:%%'").fetchall():
        vt = ModelIdentity.from_json(value).vec_table
        conn.execute(f"DROP INDEX IF EXISTS {vt}_hnsw")
        conn.execute(_hnsw_index(vt))


#: Forward migrations: ``MIGRATIONS[v](cur)`` upgrades a version-``v`` index to ``v + 1`` (in the
#: transaction of the version bump). A new database is made at version 1, then migrated.
def _v4_to_v5(conn: Any) -> None:
    """Schema 5: each paper's tags (JSON list) and its zotero:// link."""
    conn.execute("ALTER TABLE papers ADD COLUMN IF NOT EXISTS tags text NOT NULL DEFAULT '[]'")
    conn.execute("ALTER TABLE papers ADD COLUMN IF NOT EXISTS link text")


MIGRATIONS: dict[int, "Callable[[Any], None]"] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5}

_LOCK_SCHEMA = 0x5E4F0001  # advisory locks: the schema, collections
_LOCK_COLLECTION = 0x5E4F0002


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def schema_version(conn: psycopg.Connection) -> int | None:
    """The index's schema version; None for a database without Sheaf's tables."""
    names = {r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
    if "meta" not in names:
        if {"papers", "body_units"} & names:
            raise IndexSchemaError("this Postgres database holds tables named like Sheaf's but no meta table",
                                   {"tables": sorted(names)[:20]}, hint="point SHEAF_INDEX_URL at another database")
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        raise IndexSchemaError("the Postgres index has no schema_version; it was not written by Sheaf or is damaged",
                               hint="point SHEAF_INDEX_URL at an empty database, or copy an index into one")
    return int(row[0])


def _check_version(version: int | None, where: Where, *, readonly: bool) -> None:
    if version == SCHEMA_VERSION:
        return
    if version is None:
        if readonly:
            raise SheafError("INDEX_NOT_FOUND", f"the Postgres database {where.dbname} at {where.host} holds no "
                             "Sheaf index yet", where.details(),
                             hint="build the index (sheaf build), or copy one: sheaf index copy --to URL")
        return
    newer = version > SCHEMA_VERSION
    raise IndexSchemaError(
        f"the Postgres index at {where.host}, database {where.dbname}, has schema {version}; this Sheaf "
        f"reads schema {SCHEMA_VERSION}" + ("; it was written by a newer Sheaf" if newer else ""),
        {**where.details(), "found": version, "supported": SCHEMA_VERSION},
        hint="upgrade Sheaf" if newer else "run a build to migrate it")


def ensure_schema(conn: psycopg.Connection, where: Where, *, readonly: bool = False) -> int:
    """Check the schema (`readonly`) or create / migrate it (one transaction, under an advisory
    lock, so concurrent first builds create it once). The ``vector`` extension must be there or
    creatable: BACKEND_UNAVAILABLE otherwise."""
    version = schema_version(conn)
    if readonly or version == SCHEMA_VERSION:
        _check_version(version, where, readonly=readonly)
        return SCHEMA_VERSION
    if version is not None and (version > SCHEMA_VERSION
                                or any(v not in MIGRATIONS for v in range(version, SCHEMA_VERSION))):
        _check_version(version, where, readonly=False)
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_SCHEMA,))
            try:
                with conn.transaction():
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as e:
                raise unavailable(where, f"the pgvector extension (vector) is not available: {e}".strip(),
                                  hint="install pgvector on the server (CREATE EXTENSION vector needs it), "
                                       "or ask its administrator to") from None
            v = schema_version(conn)
            if v is None:
                for stmt in _statements(SCHEMA_V1):
                    conn.execute(stmt)
                conn.execute("INSERT INTO meta VALUES ('schema_version', '1'), ('created_by', %s)",
                             (f"sheaf {__version__}",))
                v = 1
            while v < SCHEMA_VERSION:
                MIGRATIONS[v](conn)
                v += 1
                conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(v),))
    except psycopg.OperationalError as e:
        raise unavailable(where, e) from None
    return SCHEMA_VERSION


def has_vector_type(conn: psycopg.Connection) -> bool:
    return conn.execute("SELECT 1 FROM pg_type WHERE typname = 'vector'").fetchone() is not None


def collections(conn: psycopg.Connection) -> dict[str, ModelIdentity]:
    """Every vector collection: identity key → identity (as `sheaf.store.sqlite.schema.collections`)."""
    return {k[len("collection:"):]: ModelIdentity.from_json(v) for k, v in
            conn.execute("SELECT key, value FROM meta WHERE key LIKE 'collection:%%'")}


def ensure_collection(conn: psycopg.Connection, identity: ModelIdentity) -> None:
    """Create `identity`'s table (passages with their vectors, HNSW index) if missing, in its own
    committed transaction under an advisory lock (called before a paper's write transaction,
    so DDL never holds a lock across writers)."""
    row = conn.execute("SELECT value FROM meta WHERE key = %s", (f"collection:{identity.key}",)).fetchone()
    if row is None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_COLLECTION,))
            row = conn.execute("SELECT value FROM meta WHERE key = %s",
                               (f"collection:{identity.key}",)).fetchone()
            if row is None:
                vt = identity.vec_table
                conn.execute(f"""CREATE TABLE {vt} (
                    paper_id     text NOT NULL,
                    passage_id   text NOT NULL,
                    seq          bigint NOT NULL,
                    unit_id      text NOT NULL,
                    unit_type    text NOT NULL,
                    ordinal      integer NOT NULL,
                    char_start   integer NOT NULL,
                    char_end     integer NOT NULL,
                    text_sha256  text NOT NULL,
                    embedding    vector({int(identity.dimension)}) NOT NULL,
                    PRIMARY KEY (paper_id, passage_id))""")
                conn.execute(f"CREATE UNIQUE INDEX {vt}_passage ON {vt}(passage_id)")
                conn.execute(f"CREATE INDEX {vt}_unit ON {vt}(unit_id)")
                conn.execute(_hnsw_index(vt))
                conn.execute("INSERT INTO meta VALUES (%s, %s)", (f"collection:{identity.key}", identity.to_json()))
                return
    if ModelIdentity.from_json(row[0]) != identity:  # a 12-hex collision: never share
        raise ModelChangedError("two model identities hash to one collection key", {"key": identity.key})


def _hnsw_index(vt: str) -> str:
    return (f"CREATE INDEX {vt}_hnsw ON {vt} USING hnsw (embedding vector_cosine_ops) "
            f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})")


#: HNSW build parameters, chosen by measurement (docs/benchmarks.md, 102k passages, 100 claims:
#: recall@10 against the exact scan at ``ef_search`` 200 was 0.972 with pgvector's default
#: ``ef_construction`` 64 and 0.988 even at 800; with 200 it is 0.997, and 1.0 from 400) and the
#: query side: below `EXACT_BELOW` passages (or with a paper filter) the search is an exact scan;
#: above it HNSW answers with ``hnsw.ef_search`` = max(`EF_SEARCH`, 4k), its candidates re-ranked exactly.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 200
EF_SEARCH = 200
EXACT_BELOW = 50_000
