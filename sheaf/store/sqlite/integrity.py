"""Index integrity (Dagster-free): is the SQLite file usable, what does it hold per paper, what
is orphaned, and how to recover a damaged one without losing the embedding work.

Used by `sheaf build` (before it writes: a damaged index is moved aside and rebuilt from the
artifacts) and by `sheaf doctor` (per-paper cross-checks). Nothing here deletes a user's file:
an unreadable index is *moved* to ``sheaf.db.corrupt-<timestamp>`` (a refused schema to
``sheaf.db.schema<N>-<timestamp>``), and its embedding cache is salvaged when it can be read.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError
from sheaf.store.health import IndexHealth, artifact_unit_digest, zero_filled
from sheaf.store.rows import IndexSchemaError
from sheaf.store.sqlite.db import sqlite3, transaction, vec_extension_path
from sheaf.store.sqlite.reader import counts
from sheaf.store.sqlite.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    VECTORS_EPOCH,
    collections,
    new_epoch,
    open_index,
    rebuild_fts,
    schema_version,
)

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

SQLITE_HEADER = b"SQLite format 3\x00"
#: ... and of those, the ones that mean the file's pages are damaged (not a missing table).
FILE_CORRUPTION_MARKERS = ("file is not a database", "malformed", "file is encrypted", "database corrupt")


def _raw_connect(path: Path, *, immutable: bool = False) -> sqlite3.Connection:
    """A read-only connection with sqlite-vec loaded, without `open_index`'s schema rules."""

    uri = path.resolve().as_uri() + ("?mode=ro&immutable=1" if immutable else "?mode=ro")
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=10, check_same_thread=False)
    conn.enable_load_extension(True)
    conn.load_extension(vec_extension_path())
    conn.enable_load_extension(False)
    conn.execute("PRAGMA busy_timeout = 10000")
    return conn


def collection_tables(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """Every collection named in `meta`, with whether its tables exist and can be read."""
    out: dict[str, dict[str, Any]] = {}
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    for key, value in conn.execute("SELECT key, value FROM meta WHERE key LIKE 'collection:%'").fetchall():
        k = key[len("collection:"):]
        info: dict[str, Any] = {"key": k, "problems": []}
        try:
            ident = json.loads(value)
            dim = int(ident["dimension"])
        except (ValueError, KeyError, TypeError) as e:
            info["problems"].append(f"unreadable identity: {e}")
            out[k] = info
            continue
        pt, vt = f"passages_{k}", f"vec_{k}"
        for t in (pt, vt):
            if t not in names:
                info["problems"].append(f"table {t} is missing")
        if not info["problems"]:
            try:
                conn.execute(f"SELECT count(*) FROM {pt}").fetchone()
                conn.execute(f"SELECT count(*) FROM {vt}").fetchone()
                probe = json.dumps([1.0] + [0.0] * (dim - 1))
                conn.execute(f"SELECT passage_rowid FROM {vt} WHERE embedding MATCH ? AND k = 1",
                             (probe,)).fetchall()
            except sqlite3.DatabaseError as e:
                info["problems"].append(f"{vt} unreadable: {e}")
        out[k] = info
    return out


def _first(rows: list[str]) -> str:
    """The gist of a quick_check report (its first lines can be a long list of pages)."""
    lines = [ln.strip() for ln in "\n".join(rows).splitlines() if ln.strip() and not ln.startswith("***")]
    return "; ".join(lines[:2]) + (f" (+{len(lines) - 2} more)" if len(lines) > 2 else "")


def check_index(path: str | Path, *, deep: bool = False) -> IndexHealth:
    """Can the index file be used? Cheap by default (header, schema, collections); `deep` adds
    SQLite's `PRAGMA quick_check` (reads every page)."""

    p = Path(path)
    if not p.exists():
        return IndexHealth(str(p), "missing", "no index yet")
    try:
        size = p.stat().st_size
        with p.open("rb") as f:
            head = f.read(100)
    except OSError as e:
        return IndexHealth(str(p), "unreadable", f"cannot read {p}: {e}")
    if size == 0:
        return IndexHealth(str(p), "empty", "the index file is empty")
    if not head.startswith(SQLITE_HEADER):
        return IndexHealth(str(p), "not_sqlite", f"{p} is not an SQLite database (bad header)")
    try:
        conn = _raw_connect(p)
    except sqlite3.DatabaseError as e:
        return IndexHealth(str(p), "corrupt", f"cannot open {p}: {e}")
    try:
        try:
            v = schema_version(conn)
        except IndexSchemaError as e:
            return IndexHealth(str(p), "schema", e.message, dict(e.details))
        if v is None:
            return IndexHealth(str(p), "empty", "the index holds no tables yet")

        # An older schema with a migration path is fine: the next read-write open migrates it.
        if v != SCHEMA_VERSION and not (v < SCHEMA_VERSION and all(x in MIGRATIONS for x in range(v, SCHEMA_VERSION))):
            return IndexHealth(str(p), "schema", f"the index has schema {v}, this Sheaf reads {SCHEMA_VERSION}",
                               {"found": v, "supported": SCHEMA_VERSION})
        if deep:
            rows = [r[0] for r in conn.execute("PRAGMA quick_check(20)")]
            if rows != ["ok"]:
                return IndexHealth(str(p), "corrupt", f"{p} is damaged: {_first(rows)}", {"quick_check": rows})
        for t in ("papers", "body_units", "object_units", "body_units_fts", "object_units_fts", "papers_fts",
                  "embedding_cache"):
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()
        damaged = {k: c["problems"] for k, c in collection_tables(conn).items() if c["problems"]}
        broken = [x for v in damaged.values() for x in v if any(m in x.lower() for m in FILE_CORRUPTION_MARKERS)]
        if broken:  # the pages under a collection are damaged: the file is, not just a table
            return IndexHealth(str(p), "corrupt", f"{p} is damaged: {broken[0]}", {"problems": damaged})
        if damaged and not deep:  # a damaged table: is it the table, or the file's pages under it?
            rows = [r[0] for r in conn.execute("PRAGMA quick_check(20)")]
            if rows != ["ok"]:
                return IndexHealth(str(p), "corrupt", f"{p} is damaged: {_first(rows)}",
                                   {"quick_check": rows, "problems": damaged})
        if damaged:
            return IndexHealth(str(p), "damaged_collections",
                               "vector collection(s) damaged: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in damaged.items()),
                               {"problems": damaged}, damaged_collections=sorted(damaged))
        return IndexHealth(str(p), "ok")
    except sqlite3.DatabaseError as e:
        return IndexHealth(str(p), "corrupt", f"{p} is damaged: {e}")
    finally:
        conn.close()


def quarantine_index(path: str | Path, reason: str = "corrupt", *, now: float | None = None) -> Path:
    """Move the index file (and its -wal/-shm) aside: ``<name>.<reason>-<YYYYmmddTHHMMSS>``.
    Returns the new path of the main file."""
    p = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now if now is not None else time.time()))
    target = p.with_name(f"{p.name}.{reason}-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = p.with_name(f"{p.name}.{reason}-{stamp}-{n}")
    for suffix in ("-wal", "-shm"):  # a WAL belongs to its file: keep them together
        side = p.with_name(p.name + suffix)
        if side.exists():
            side.replace(target.with_name(target.name + suffix))
    p.replace(target)
    return target


def salvage_cache(source: str | Path, conn: sqlite3.Connection) -> int:
    """Copy what can be read of `source`'s embedding cache into `conn`'s (INSERT OR IGNORE).

    Only vectors that are finite and unit-length (the collections are normalized) are kept, so
    random bytes that landed inside a vector are not carried over. Returns the rows copied."""

    try:
        src = _raw_connect(Path(source), immutable=True)
    except Exception:  # noqa: BLE001 - an unreadable file salvages nothing
        return 0
    rows: list[tuple[str, str, bytes]] = []
    try:
        cur = src.execute("SELECT model_key, text_sha256, vector FROM embedding_cache")
        while True:
            try:
                batch = cur.fetchmany(1000)
            except sqlite3.DatabaseError:
                break
            if not batch:
                break
            for key, sha, blob in batch:
                if isinstance(key, str) and isinstance(sha, str) and len(sha) == 64 and isinstance(blob, bytes) \
                        and _plausible_vector(blob):
                    rows.append((key, sha, blob))
    except sqlite3.DatabaseError:
        pass
    finally:
        src.close()
    if not rows:
        return 0
    before = conn.total_changes
    with transaction(conn):
        conn.executemany("INSERT OR IGNORE INTO embedding_cache(model_key, text_sha256, vector) VALUES (?, ?, ?)",
                         rows)
    return conn.total_changes - before


def _plausible_vector(blob: bytes) -> bool:
    import array

    if len(blob) == 0 or len(blob) % 4:
        return False
    a = array.array("f")
    a.frombytes(blob)
    s = 0.0
    for x in a:
        if not math.isfinite(x):
            return False
        s += x * x
    return abs(s - 1.0) < 1e-2


def drop_collection(conn: sqlite3.Connection, key: str) -> list[str]:
    """Remove a damaged collection entirely (its passages, its vec0 table and shadow tables, its
    `meta` row) in one transaction; the vectors are rebuilt from the embedding cache.
    Returns the tables dropped."""

    pt, vt = f"passages_{key}", f"vec_{key}"
    dropped: list[str] = []
    with transaction(conn):
        names = {r[0]: r[1] for r in conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table'")}
        if vt in names:
            try:
                conn.execute(f"DROP TABLE {vt}")
                dropped.append(vt)
            except sqlite3.DatabaseError:
                pass  # a vec0 table missing a shadow table cannot be dropped normally: below
        names = {r[0]: r[1] for r in conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table'")}
        for name in sorted(names):
            if name == pt or (name.startswith(vt + "_")):
                conn.execute(f"DROP TABLE IF EXISTS {name}")
                dropped.append(name)
        if vt in names:  # still there: remove the broken virtual table's schema entry
            conn.execute("PRAGMA writable_schema = ON")
            conn.execute("DELETE FROM sqlite_master WHERE name = ?", (vt,))
            conn.execute("PRAGMA writable_schema = OFF")
            dropped.append(vt + " (schema entry)")
        conn.execute("DELETE FROM meta WHERE key = ?", (f"collection:{key}",))
    return dropped


# --- what the index holds ----------------------------------------------------------------------

def paper_index_stats(conn: sqlite3.Connection, collection_key: str | None = None,
                      paper_ids: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
    """Per paper: body/object units, their FTS rows, and (for `collection_key`) passages,
    vectors and passages whose unit is gone. Papers with no row anywhere are absent.
    `paper_ids`: only those papers' rows are counted (a build checking the papers it just
    rebuilt reads theirs, not the whole index)."""
    stats: dict[str | None, dict[str, int]] = {}  # None: vectors without a passage (below)
    args = () if paper_ids is None else (json.dumps(list(paper_ids)),)

    def only(col: str, joiner: str = "WHERE") -> str:
        return "" if paper_ids is None else f" {joiner} {col} IN (SELECT value FROM json_each(?))"

    def put(name: str, sql: str) -> None:
        for pid, n in conn.execute(sql, args):
            stats.setdefault(pid, {})[name] = int(n)

    put("body_units", f"SELECT paper_id, count(*) FROM body_units{only('paper_id')} GROUP BY paper_id")
    put("object_units", f"SELECT paper_id, count(*) FROM object_units{only('paper_id')} GROUP BY paper_id")
    put("body_fts", "SELECT b.paper_id, count(*) FROM body_units_fts f JOIN body_units b "
                    f"ON b.unit_rowid = f.rowid{only('b.paper_id')} GROUP BY b.paper_id")
    put("object_fts", "SELECT o.paper_id, count(*) FROM object_units_fts f JOIN object_units o "
                      f"ON o.unit_rowid = f.rowid{only('o.paper_id')} GROUP BY o.paper_id")
    if collection_key:
        pt, vt = f"passages_{collection_key}", f"vec_{collection_key}"
        put("passages", f"SELECT paper_id, count(*) FROM {pt}{only('paper_id')} GROUP BY paper_id")
        # A paper's vectors counted through its passages (a look-up of each by its rowid): the vec0
        # table's own paper_id is read from its metadata chunks row by row (at 21,000 vectors 83-165 ms
        # against 34, the most of a build's drift check). A vector whose passage is gone (a damaged
        # index: the drift check is there to see it) has no passage to count it by: when the table holds more
        # vectors than that (every paper) or than there are passages (some papers), they are counted
        # by the table's own paper_id, as before.
        if paper_ids is None:  # one scan of the vectors: those with no passage are counted under NULL
            put("vectors", f"SELECT p.paper_id, count(*) FROM {vt} v LEFT JOIN {pt} p "
                           "ON p.passage_rowid = v.passage_rowid GROUP BY p.paper_id")
            stray = stats.pop(None, {}).get("vectors", 0)
        else:
            put("vectors", f"SELECT p.paper_id, count(*) FROM {pt} p JOIN {vt} v ON v.passage_rowid = p.passage_rowid"
                           f"{only('p.paper_id')} GROUP BY p.paper_id")
            stray = conn.execute(f"SELECT count(*) FROM {vt}").fetchone()[0] - \
                conn.execute(f"SELECT count(*) FROM {pt}").fetchone()[0]
        if stray > 0:
            for s in stats.values():
                s.pop("vectors", None)
            put("vectors", f"SELECT paper_id, count(*) FROM {vt}{only('paper_id')} GROUP BY paper_id")
        put("dangling_passages", (
            f"SELECT p.paper_id, count(*) FROM {pt} p WHERE NOT EXISTS (SELECT 1 FROM body_units b "
            f"WHERE b.unit_id = p.unit_id AND b.paper_id = p.paper_id) AND NOT EXISTS (SELECT 1 FROM "
            f"object_units o WHERE o.unit_id = p.unit_id AND o.paper_id = p.paper_id){only('p.paper_id', 'AND')} "
            "GROUP BY p.paper_id"))
    return zero_filled({pid: s for pid, s in stats.items() if pid is not None}, collection_key)


def unit_digest(conn: sqlite3.Connection, paper_id: str) -> str:
    """A hash of a paper's units as indexed (ids and texts, body then objects): what
    `artifact_unit_digest` gives for the units artifacts of the same units."""
    body = [{"unit_id": r[0], "text": r[1]} for r in conn.execute(
        "SELECT unit_id, text FROM body_units WHERE paper_id = ?", (paper_id,))]
    objects = [dict(zip(("unit_id", "caption", "table_text", "nearby_text"), r)) for r in conn.execute(
        "SELECT unit_id, caption, table_text, nearby_text FROM object_units WHERE paper_id = ?", (paper_id,))]
    return artifact_unit_digest(body, objects)


def global_orphans(conn: sqlite3.Connection) -> dict[str, int]:
    """Rows that belong to nothing: FTS rows without a base row, units without a papers row,
    vectors without a passage (and the reverse), per collection."""

    out: dict[str, int] = {}

    def n(sql: str) -> int:
        return int(conn.execute(sql).fetchone()[0])

    out["body_fts_without_unit"] = n("SELECT count(*) FROM body_units_fts WHERE rowid NOT IN "
                                     "(SELECT unit_rowid FROM body_units)")
    out["object_fts_without_unit"] = n("SELECT count(*) FROM object_units_fts WHERE rowid NOT IN "
                                       "(SELECT unit_rowid FROM object_units)")
    out["papers_fts_without_paper"] = n("SELECT count(*) FROM papers_fts WHERE rowid NOT IN "
                                        "(SELECT paper_rowid FROM papers)")
    out["units_without_fts"] = n("SELECT count(*) FROM body_units WHERE unit_rowid NOT IN "
                                 "(SELECT rowid FROM body_units_fts)") + \
        n("SELECT count(*) FROM object_units WHERE unit_rowid NOT IN (SELECT rowid FROM object_units_fts)")
    out["units_without_paper"] = n("SELECT count(*) FROM body_units WHERE paper_id NOT IN "
                                   "(SELECT paper_id FROM papers)") + \
        n("SELECT count(*) FROM object_units WHERE paper_id NOT IN (SELECT paper_id FROM papers)")
    for ident in collections(conn).values():
        pt, vt = ident.passages_table, ident.vec_table
        try:
            a = n(f"SELECT count(*) FROM {vt} WHERE passage_rowid NOT IN (SELECT passage_rowid FROM {pt})")
            b = n(f"SELECT count(*) FROM {pt} WHERE passage_rowid NOT IN (SELECT passage_rowid FROM {vt})")
            c = n(f"SELECT count(*) FROM {pt} p WHERE NOT EXISTS (SELECT 1 FROM body_units b WHERE "
                  f"b.unit_id = p.unit_id) AND NOT EXISTS (SELECT 1 FROM object_units o WHERE o.unit_id = p.unit_id)")
        except sqlite3.DatabaseError:
            continue  # a damaged collection: `check_index` reports it
        out[f"{vt}_without_passage"], out[f"{pt}_without_vector"], out[f"{pt}_without_unit"] = a, b, c
    return out


def remove_global_orphans(conn: sqlite3.Connection) -> dict[str, int]:
    """Delete what `global_orphans` counts (one transaction); returns rows deleted per kind.
    An FTS table with orphan (or missing) rows is rebuilt from the base tables."""

    out: dict[str, int] = {}
    with transaction(conn):
        def run(name: str, sql: str) -> None:
            before = conn.total_changes
            conn.execute(sql)
            out[name] = out.get(name, 0) + conn.total_changes - before

        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        for ident in collections(conn).values():
            pt, vt = ident.passages_table, ident.vec_table
            if pt not in names or vt not in names:
                continue  # a damaged collection: dropped and rebuilt by `prepare_index`, not here
            dangling = [r[0] for r in conn.execute(
                f"SELECT passage_rowid FROM {pt} p WHERE NOT EXISTS (SELECT 1 FROM body_units b WHERE "
                f"b.unit_id = p.unit_id) AND NOT EXISTS (SELECT 1 FROM object_units o WHERE o.unit_id = p.unit_id)")]
            no_vec = [r[0] for r in conn.execute(
                f"SELECT passage_rowid FROM {pt} WHERE passage_rowid NOT IN (SELECT passage_rowid FROM {vt})")]
            stray = [r[0] for r in conn.execute(
                f"SELECT passage_rowid FROM {vt} WHERE passage_rowid NOT IN (SELECT passage_rowid FROM {pt})")]
            conn.executemany(f"DELETE FROM {vt} WHERE passage_rowid = ?", [(r,) for r in set(dangling) | set(stray)])
            conn.executemany(f"DELETE FROM {pt} WHERE passage_rowid = ?", [(r,) for r in set(dangling) | set(no_vec)])
            out[f"{pt}_removed"] = len(set(dangling) | set(no_vec))
            out[f"{vt}_removed"] = len(set(dangling) | set(stray))
            if dangling or no_vec or stray:
                new_epoch(conn, VECTORS_EPOCH)
        # An FTS row without its base row cannot be deleted alone (a contentless row is deleted
        # with the values it indexed, and those went with the base row): the table is rebuilt
        # from the base tables, which also restores base rows' missing FTS rows.
        for fts, base, key in (("body_units_fts", "body_units", "unit_rowid"),
                               ("object_units_fts", "object_units", "unit_rowid"),
                               ("papers_fts", "papers", "paper_rowid")):
            orphans = int(conn.execute(f"SELECT count(*) FROM {fts} WHERE rowid NOT IN "
                                       f"(SELECT {key} FROM {base})").fetchone()[0])
            missing = int(conn.execute(f"SELECT count(*) FROM {base} WHERE {key} NOT IN "
                                       f"(SELECT rowid FROM {fts})").fetchone()[0])
            if orphans or missing:
                rebuild_fts(conn, [fts])
            out[f"{base}_fts_removed"] = orphans
    return out


def probe_file(settings: Settings) -> dict[str, Any]:
    """What `sheaf status` and the PaperForge Memory card say of the SQLite index file: exists,
    papers indexed, collections, whether a vector query runs on each, row counts; a problem
    (unreadable, damaged) as a field with a hint, never raised."""
    if not settings.index_path.exists():
        return {"path": str(settings.index_path), "exists": False, "problem": "no index yet"}
    try:
        conn = open_index(settings=settings, readonly=True)
    except SheafError as e:
        return {"path": str(settings.index_path), "exists": True, "problem": f"{e.code}: {e.message}"}
    except Exception as e:  # noqa: BLE001 - a file SQLite cannot read: what the probe reports
        return {"path": str(settings.index_path), "exists": True, "problem": f"unreadable index: {e}",
                "hint": "run `sheaf build --full` (it moves a damaged file aside) or `sheaf doctor`"}
    try:
        try:
            c = counts(conn)
        except Exception as e:  # noqa: BLE001 - a damaged or missing table: reported, not raised
            return {"path": str(settings.index_path), "exists": True, "problem": f"index damaged: {e}",
                    "vectors_queryable": False, "hint": "run `sheaf doctor --repair` or `sheaf build --full`"}
        out: dict[str, Any] = {"path": str(settings.index_path), "exists": True,
                               "indexed": conn.execute("SELECT count(DISTINCT paper_id) FROM body_units").fetchone()[0]}
        cols = collections(conn)
        out["collections"] = {k: v.name for k, v in cols.items()}
        embedded = 0
        for ident in cols.values():
            try:
                probe = json.dumps([1.0] + [0.0] * (ident.dimension - 1))
                conn.execute(f"SELECT passage_rowid, distance FROM {ident.vec_table} "
                             "WHERE embedding MATCH ? AND k = 1", (probe,)).fetchall()
                embedded = max(embedded, conn.execute(
                    f"SELECT count(DISTINCT paper_id) FROM {ident.passages_table}").fetchone()[0])
                out["vectors_queryable"] = True
            except Exception as e:  # noqa: BLE001 - a damaged vec table is what the probe reports
                out["problem"] = f"vector table {ident.vec_table} unreadable: {e}"
                out["vectors_queryable"] = False
        out["embedded"] = embedded
        out["rows"] = c
        return out
    finally:
        conn.close()
