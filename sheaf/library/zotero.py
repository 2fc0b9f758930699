"""Reading a Zotero data directory (`zotero.sqlite` + `storage/`) without disturbing Zotero.

Zotero is never written to and never blocked: the database and its `-wal` / `-journal` are
copied together into a temporary folder and opened there, so the copy is a consistent snapshot
whichever journal mode Zotero uses (a hot rollback journal is rolled back in the copy, a WAL's
committed frames are read from the copy), also while Zotero holds its exclusive lock. Every query
joins on names (`fieldsCombined.fieldName`, `itemTypesCombined.typeName`,
`baseFieldMappingsCombined` for type-specific fields), never on id numbers, which differ between
Zotero versions.

`read_catalog(data_dir)` returns a `Catalog`: one `ZoteroPaper` per live regular item (and per
standalone PDF), with its attachments, annotations, notes and metadata. What a paper's text is
made of (files, annotations, notes) goes into its source manifest (`sheaf.formats.zotero_source`);
its metadata goes into the library's metadata export.
"""
from __future__ import annotations

import contextlib
import html.parser
import json
import os
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sheaf.core.envelope import SheafError

ZOTERO_DB = "zotero.sqlite"
#: Item types that are not papers.
NON_PAPER_TYPES = frozenset({"attachment", "note", "annotation"})
PDF_TYPE = "application/pdf"
#: Tables and columns every query here needs; a database without them is older than Zotero 5.
_REQUIRED = {
    "items": {"itemID", "itemTypeID", "libraryID", "key", "dateAdded", "dateModified"},
    "itemAttachments": {"itemID", "parentItemID", "linkMode", "contentType", "path"},
    "itemTypesCombined": {"itemTypeID", "typeName"},
    "fieldsCombined": {"fieldID", "fieldName"},
    "libraries": {"libraryID", "type"},
}
_ANNOTATION_TYPES = {1: "highlight", 2: "note", 3: "image", 4: "ink", 5: "underline", 6: "text"}
#: Attempts at copying a database that changes while it is copied.
_COPY_TRIES = 5


def is_zotero_dir(path: Path) -> bool:
    """A folder holding `zotero.sqlite` is a Zotero data directory."""
    return (path / ZOTERO_DB).is_file()


def db_files(data_dir: Path) -> list[Path]:
    """The database and the journal files that belong with it, those that exist."""
    db = data_dir / ZOTERO_DB
    return [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-journal")) if p.exists()]


def db_stamp(data_dir: Path) -> list[list[Any]]:
    """(name, size, mtime_ns) of the database and its journal files: the cheap change check."""
    out = []
    for p in db_files(data_dir):
        with contextlib.suppress(FileNotFoundError):
            st = p.stat()
            out.append([p.name, st.st_size, st.st_mtime_ns])
    return out


def _error(data_dir: Path, problem: str, hint: str) -> SheafError:
    db = data_dir / ZOTERO_DB
    return SheafError("BAD_INPUT", f"Zotero database {db}: {problem}", {"path": str(db)}, hint=hint)


@contextlib.contextmanager
def snapshot(data_dir: Path) -> Iterator[tuple[sqlite3.Connection, bool]]:
    """A read-only connection to a consistent copy of the database, and whether the copy may be
    behind (Zotero kept writing through every attempt). The user's files are only read."""
    data_dir = Path(data_dir)
    with tempfile.TemporaryDirectory(prefix="sheaf-zotero-") as tmp:
        behind = True
        for _ in range(_COPY_TRIES):
            before = db_stamp(data_dir)
            if not before or before[0][0] != ZOTERO_DB:
                raise _error(data_dir, "file not found", "point --library at the Zotero data directory "
                             "(Zotero: Settings > Advanced > Files and Folders > Data Directory Location)")
            for name in os.listdir(tmp):
                os.unlink(os.path.join(tmp, name))
            try:
                for name, _size, _mtime in before:
                    shutil.copyfile(data_dir / name, os.path.join(tmp, name))
            except FileNotFoundError:
                continue  # a journal went away while copying: copy again
            except OSError as e:
                raise _error(data_dir, f"cannot be read ({e.strerror or e})",
                             "check the file's permissions") from None
            if db_stamp(data_dir) == before:
                behind = False
                break
        copy = os.path.join(tmp, ZOTERO_DB)
        try:
            conn = sqlite3.connect(copy, isolation_level=None)
            conn.execute("PRAGMA query_only = 1")
            _schema_check(conn, data_dir)
        except sqlite3.DatabaseError as e:
            raise _error(data_dir, f"not a readable SQLite database ({e})",
                         "the file is damaged: restore it from Zotero's backup (zotero.sqlite.bak)") from None
        try:
            yield conn, behind
        finally:
            conn.close()


def _schema_check(conn: sqlite3.Connection, data_dir: Path) -> None:
    """A database without the tables and columns the reader needs is refused (older than Zotero 5,
    or not Zotero's), naming its `userdata` schema version."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    version = None
    if "version" in tables:
        row = conn.execute("SELECT version FROM version WHERE schema = 'userdata'").fetchone()
        version = int(row[0]) if row else None
    for table, cols in _REQUIRED.items():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")} if table in tables else set()
        if not cols <= have:
            what = f"userdata schema {version}" if version is not None else "no Zotero schema"
            raise _error(data_dir, f"a database older than Zotero 5 or not Zotero's ({what}; "
                         f"{table} lacks {', '.join(sorted(cols - have))})",
                         "open the library once in Zotero 5 or later, which upgrades the database")


# --- the catalog ---------------------------------------------------------------------------------

@dataclass(slots=True)
class Attachment:
    key: str
    item_id: int
    title: str | None
    content_type: str | None
    link_mode: int
    path: str | None  # as Zotero stores it: storage:NAME, attachments:REL, an absolute path
    file: str | None  # its path on this machine, or None
    problem: str | None  # why `file` is None or absent ("missing from storage/", ...)
    storage_dir: str | None  # storage/<key>/ of a stored file (its .zotero-ft-cache)


@dataclass(slots=True)
class ZoteroPaper:
    key: str  # the paper key: the item key, prefixed for a group library
    item_key: str
    item_id: int
    library: str  # "user" or "group:<id>"
    link: str  # zotero://select/... of the item
    item_type: str
    fields: dict[str, str]
    creators: list[dict[str, str]]
    tags: list[str]
    collections: list[str]
    date_added: str | None
    date_modified: str | None
    attachments: list[Attachment] = field(default_factory=list)
    annotations: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class Catalog:
    papers: list[ZoteroPaper]
    libraries: dict[str, str]  # "user" / "group:<id>" → its name
    behind: bool  # the snapshot may miss Zotero's latest writes
    base_dir: Path | None


def group_key(group_id: int, item_key: str) -> str:
    """A group library item's paper key: `g<groupID>_<KEY>` (Zotero keys never hold '_')."""
    return f"g{group_id}_{item_key}"


def read_catalog(data_dir: Path | str, *, base_dir: Path | None = None, libraries: str = "all") -> Catalog:
    """Every paper of a Zotero data directory: live regular items (not in the trash, nor whose
    parent is) and standalone PDFs, of the libraries chosen (`all`, `user`, or a comma list of
    `user`, group ids and group names)."""
    data_dir = Path(data_dir)
    base = base_dir if base_dir is not None else base_dir_from_prefs(data_dir)
    with snapshot(data_dir) as (conn, behind):
        return Catalog(*_read(conn, data_dir, base, libraries), behind=behind, base_dir=base)


def _has(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is not None


def _read(conn: sqlite3.Connection, data_dir: Path, base: Path | None, which: str):
    libs: dict[int, tuple[str, str, int | None]] = {}  # libraryID → (label, name, groupID)
    groups = {}
    if _has(conn, "groups"):
        groups = {lib: (gid, name) for gid, lib, name in conn.execute("SELECT groupID, libraryID, name FROM groups")}
    for lib_id, typ in conn.execute("SELECT libraryID, type FROM libraries"):
        if typ == "user":
            libs[lib_id] = ("user", "My Library", None)
        elif typ == "group" and lib_id in groups:
            gid, name = groups[lib_id]
            libs[lib_id] = (f"group:{gid}", name, gid)
    chosen = _choose(libs, which)
    if not chosen:
        return [], {lab: name for lab, name, _ in libs.values()}
    marks = ",".join("?" * len(chosen))
    deleted = {r[0] for r in conn.execute("SELECT itemID FROM deletedItems")} if _has(conn, "deletedItems") else set()
    types = dict(conn.execute("SELECT itemTypeID, typeName FROM itemTypesCombined"))
    items: dict[int, tuple[str, str, int, str, str]] = {}
    for iid, tid, lib, key, added, modified in conn.execute(
            f"SELECT itemID, itemTypeID, libraryID, key, dateAdded, dateModified FROM items "
            f"WHERE libraryID IN ({marks})", chosen):
        items[iid] = (types.get(tid, ""), key, lib, added, modified)
    fields = _fields(conn)
    atts: dict[int, int | None] = {}  # attachment → parent
    att_rows = {}
    for iid, parent, mode, ctype, path in conn.execute(
            "SELECT itemID, parentItemID, linkMode, contentType, path FROM itemAttachments"):
        if iid in items:
            atts[iid] = parent
            att_rows[iid] = (mode, ctype, path)

    def live(iid: int | None) -> bool:
        return iid is not None and iid in items and iid not in deleted

    storage_root = os.path.join(data_dir, "storage")
    base_str = str(base) if base is not None else None
    papers: dict[int, ZoteroPaper] = {}
    for iid, (typ, key, lib, added, modified) in items.items():
        if iid in deleted:
            continue
        standalone_pdf = typ == "attachment" and atts.get(iid, 0) is None and _is_pdf(*att_rows[iid][1:])
        if typ in NON_PAPER_TYPES and not standalone_pdf:
            continue
        label, _name, gid = libs[lib]
        pkey = key if gid is None else group_key(gid, key)
        link = (f"zotero://select/library/items/{key}" if gid is None
                else f"zotero://select/groups/{gid}/items/{key}")
        papers[iid] = ZoteroPaper(pkey, key, iid, label, link, "document" if standalone_pdf else typ,
                                  fields.get(iid, {}), [], [], [], added, modified)
    for iid, parent in atts.items():
        owner = iid if iid in papers and papers[iid].item_id == iid and parent is None else parent
        if owner not in papers or not live(iid) or (parent is not None and not live(parent)):
            continue
        mode, ctype, path = att_rows[iid]
        papers[owner].attachments.append(_attachment(iid, items[iid][1], fields.get(iid, {}).get("title"),
                                                     mode, ctype, path, storage_root, base_str))
    _creators(conn, papers)
    _tags(conn, papers)
    _collections(conn, papers, chosen)
    by_attachment = {a.item_id: p for p in papers.values() for a in p.attachments}
    if _has(conn, "itemAnnotations"):
        for iid, parent, typ, text, comment, label, sort, pos in conn.execute(
                "SELECT itemID, parentItemID, type, text, comment, pageLabel, sortIndex, position "
                "FROM itemAnnotations ORDER BY parentItemID, sortIndex, itemID"):
            p = by_attachment.get(parent)
            if p is None or not live(iid) or not ((text or "").strip() or (comment or "").strip()):
                continue
            att = next(a for a in p.attachments if a.item_id == parent)
            p.annotations.append({"key": items[iid][1], "attachment": att.key, "type": _ANNOTATION_TYPES.get(typ, str(typ)),
                                  "text": (text or "").strip(), "comment": (comment or "").strip(),
                                  "page": _page_index(pos), "page_label": label or ""})
    for iid, parent, note in conn.execute("SELECT itemID, parentItemID, note FROM itemNotes "
                                          "WHERE parentItemID IS NOT NULL ORDER BY itemID"):
        p = papers.get(parent)
        text = html_to_text(note or "")
        if p is not None and live(iid) and text:
            p.notes.append({"key": items[iid][1], "text": text})
    out = sorted(papers.values(), key=lambda p: p.key)
    return out, {lab: name for lab, name, _ in libs.values()}


def _choose(libs: dict[int, tuple[str, str, int | None]], which: str) -> list[int]:
    if which.strip().lower() in ("", "all"):
        return sorted(libs)
    wanted = {w.strip().lower() for w in which.split(",") if w.strip()}
    return sorted(lib for lib, (label, name, gid) in libs.items()
                  if label in wanted or name.lower() in wanted or (gid is not None and str(gid) in wanted))


def _is_pdf(ctype: str | None, path: str | None) -> bool:
    return ctype == PDF_TYPE or bool(path and path.lower().endswith(".pdf"))


def _fields(conn: sqlite3.Connection) -> dict[int, dict[str, str]]:
    """item → {field name: value}, a type-specific field also under its base field's name
    (`caseName` → `title`, `bookTitle` → `publicationTitle`)."""
    names = dict(conn.execute("SELECT fieldID, fieldName FROM fieldsCombined"))
    base: dict[tuple[int, int], str] = {}
    if _has(conn, "baseFieldMappingsCombined"):
        for tid, bid, fid in conn.execute("SELECT itemTypeID, baseFieldID, fieldID FROM baseFieldMappingsCombined"):
            if bid in names:
                base[(tid, fid)] = names[bid]
    out: dict[int, dict[str, str]] = {}
    for iid, tid, fid, value in conn.execute(
            "SELECT d.itemID, i.itemTypeID, d.fieldID, v.value FROM itemData d "
            "JOIN itemDataValues v ON v.valueID = d.valueID JOIN items i ON i.itemID = d.itemID"):
        if value is None or fid not in names:
            continue
        f = out.setdefault(iid, {})
        f[names[fid]] = str(value)
        b = base.get((tid, fid))
        if b:
            f.setdefault(b, str(value))
    return out


def _attachment(iid: int, key: str, title: str | None, mode: int, ctype: str | None, path: str | None,
                storage_root: str, base: str | None) -> Attachment:
    """One attachment with its file resolved on this machine. Stored files' paths are strings joined
    and checked with `os.path`: a Path each cost about a tenth of a 10,000-item reading."""
    file: str | None = None
    problem: str | None = None
    storage: str | None = None
    if path is None:
        problem = "a link to a web page (no file)"
    elif path.startswith("storage:"):
        storage = os.path.join(storage_root, key)
        file = os.path.join(storage, path[len("storage:"):])
    elif path.startswith("attachments:"):
        if base is None:
            problem = (f"a linked file relative to Zotero's base directory ({path}), which is not known: "
                       "set SHEAF_ZOTERO_BASE_DIR")
        else:
            file = str(Path(base) / path[len("attachments:"):].replace("\\", "/"))
    elif path.startswith("\\\\") or re.match(r"^[A-Za-z]:[\\/]", path):
        if os.name != "nt":
            problem = f"a linked file on a Windows path ({path}), not reachable here"
        else:
            file = str(Path(path))
    else:
        file = str(Path(path))  # linked files are few: their paths normalized as Path writes them
    if file is not None and problem is None and not os.path.isfile(file):
        problem = _file_problem(file, key, storage is not None)
    return Attachment(key, iid, title, ctype, int(mode if mode is not None else -1), path,
                      file if problem is None else None, problem, storage)


def _file_problem(file: str, key: str, stored: bool) -> str:
    """Why an attachment's file cannot be used: missing, or there but unreadable (a folder that
    cannot be listed, a loop of links, not a file), with the system's reason."""
    try:
        os.stat(file)
    except FileNotFoundError:
        return f"file missing from storage/{key}/" if stored else f"linked file not found: {file}"
    except OSError as e:
        return f"file cannot be read ({e.strerror or e}): {file}"
    return f"not a file: {file}"


def _creators(conn: sqlite3.Connection, papers: dict[int, ZoteroPaper]) -> None:
    for iid, first, last, mode, role in conn.execute(
            "SELECT ic.itemID, c.firstName, c.lastName, c.fieldMode, t.creatorType FROM itemCreators ic "
            "JOIN creators c ON c.creatorID = ic.creatorID JOIN creatorTypes t ON t.creatorTypeID = ic.creatorTypeID "
            "ORDER BY ic.itemID, ic.orderIndex"):
        p = papers.get(iid)
        if p is None:
            continue
        if mode == 1 or not first:
            p.creators.append({"creatorType": role, "name": (last or first or "").strip()})
        else:
            p.creators.append({"creatorType": role, "firstName": first.strip(), "lastName": (last or "").strip()})


def _tags(conn: sqlite3.Connection, papers: dict[int, ZoteroPaper]) -> None:
    for iid, name in conn.execute("SELECT it.itemID, t.name FROM itemTags it JOIN tags t ON t.tagID = it.tagID "
                                  "ORDER BY it.itemID, t.name"):
        if iid in papers and name:
            papers[iid].tags.append(name)


def _collections(conn: sqlite3.Connection, papers: dict[int, ZoteroPaper], libs: list[int]) -> None:
    gone = {r[0] for r in conn.execute("SELECT collectionID FROM deletedCollections")} if _has(conn, "deletedCollections") else set()
    rows = {cid: (name, parent) for cid, name, parent in conn.execute(
        "SELECT collectionID, collectionName, parentCollectionID FROM collections")}

    def path(cid: int) -> str | None:
        parts, seen = [], set()
        while cid is not None and cid not in seen:
            seen.add(cid)
            if cid in gone or cid not in rows:
                return None
            name, cid = rows[cid]
            parts.append(name)
        return "/".join(reversed(parts))

    for cid, iid in conn.execute("SELECT collectionID, itemID FROM collectionItems ORDER BY collectionID, orderIndex"):
        p = papers.get(iid)
        c = path(cid)
        if p is not None and c and c not in p.collections:
            p.collections.append(c)


def _page_index(position: str | None) -> int | None:
    try:
        i = json.loads(position or "{}").get("pageIndex")
        return int(i) + 1 if i is not None else None
    except (ValueError, TypeError, AttributeError):
        return None


class _Text(html.parser.HTMLParser):
    _BREAKS = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "blockquote", "pre"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in self._BREAKS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self._BREAKS:
            self.parts.append("\n")

    def handle_data(self, data):
        self.parts.append(data)


def html_to_text(note: str) -> str:
    """A Zotero note's HTML as plain text: paragraphs kept, tags dropped."""
    p = _Text()
    p.feed(note)
    p.close()
    lines = [" ".join(ln.split()) for ln in "".join(p.parts).splitlines()]
    return "\n".join(ln for ln in lines if ln).strip()


# --- Zotero's settings -----------------------------------------------------------------------------

def profile_dirs() -> list[Path]:
    """Zotero profile folders on this machine (Linux, macOS and Windows locations)."""
    home = Path.home()
    roots = [home / ".zotero" / "zotero", home / "Library" / "Application Support" / "Zotero" / "Profiles"]
    if os.environ.get("APPDATA"):
        roots.append(Path(os.environ["APPDATA"]) / "Zotero" / "Zotero" / "Profiles")
    out = []
    for r in roots:
        with contextlib.suppress(OSError):
            out += sorted(p for p in r.iterdir() if (p / "prefs.js").is_file())
    return out


_PREF = re.compile(r'user_pref\("extensions\.zotero\.(dataDir|baseAttachmentPath)",\s*"((?:[^"\\]|\\.)*)"\);')


def base_dir_from_prefs(data_dir: Path, profiles: list[Path] | None = None) -> Path | None:
    """Zotero's base directory for linked files (`attachments:` paths), from the prefs.js of the
    profile whose data directory is `data_dir` (or of the only profile using the default one)."""
    target = _resolve(data_dir)
    for prof in profiles if profiles is not None else profile_dirs():
        try:
            prefs = dict((k, json.loads(f'"{v}"')) for k, v in _PREF.findall((prof / "prefs.js").read_text("utf-8", "replace")))
        except (OSError, ValueError):
            continue
        data = Path(prefs["dataDir"]) if "dataDir" in prefs else Path.home() / "Zotero"
        if _resolve(data) == target and prefs.get("baseAttachmentPath"):
            return Path(prefs["baseAttachmentPath"])
    return None


def _resolve(p: Path) -> Path:
    try:
        return p.resolve()
    except OSError:
        return p
