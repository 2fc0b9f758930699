"""The Zotero mirror: what Sheaf keeps of a Zotero data directory in its own home.

`<mirror>/papers/<KEY>.zotero.json` is each paper's source manifest (`sheaf.formats.zotero_source`),
`<mirror>/library.json` the library's metadata as a Better BibTeX-style export (so metadata flows
as from any export), `<mirror>/state.json` what the last reading saw: the database's size and
mtime (with its `-wal` and `-journal`), the catalog read then, each file's size, mtime and
SHA-256, and each manifest's `ocr_result_hash` with the files it was made of. A reading whose
database stamp is unchanged reuses the catalog without opening the database, a file whose size
and mtime are unchanged is not hashed again, and a paper whose catalog entry is unchanged and
whose files are the same ones, unchanged, keeps its manifest and hash without serializing it
again: a build with nothing to do reads one JSON file and stats each attachment, and the source
scan takes the hashes from here (`ZoteroDiscovery.hashes`) instead of reading each manifest.

The mirror is a cache: deleting it costs one reading of the database and one hash of each
file. Nothing is ever written to the Zotero data directory.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sheaf.core.files import write_atomic
from sheaf.core.models import IngestError
from sheaf.formats import find_input
from sheaf.formats.common import content_hash
from sheaf.formats.zotero_source import FT_CACHE, MANIFEST_FORMAT, SUFFIX, VERSION
from sheaf.library.mirror import file_hash, read_json, scratch_dir
from sheaf.library.zotero import Catalog, ZoteroPaper, db_stamp, read_catalog

#: Bump when the catalog or manifests would be made differently from the same database.
MIRROR_RULES = "1"
#: The manifests' input format and version, as `sheaf.formats.source_hash` names them in the hash.
HASH_TAG = f"zotero/{VERSION}"


@dataclass(frozen=True, slots=True)
class ZoteroDiscovery:
    papers: dict[str, str]  # paper key → its manifest's path
    hashes: dict[str, str]  # paper key → its manifest's ocr_result_hash (as `source_hash` makes it)
    metadata_only: dict[str, str]  # paper key → why it has no text to index
    metadata_file: Path
    notes: tuple[str, ...]  # said to the user (a snapshot that may be behind)


def discover_zotero(data_dir: Path, mirror: Path | None, *, base_dir: Path | None = None,
                    libraries: str = "all", write: bool = True) -> ZoteroDiscovery:
    """Bring the mirror in step with the data directory and list its papers. `write=False`
    (`sheaf status`): the home is not written; a mirror that is not current is made in a
    temporary folder for this process."""
    if mirror is None or (not write and not _current(mirror, data_dir, base_dir, libraries)):
        mirror = scratch_dir("zotero")
    state = read_json(mirror / "state.json") or {}
    stamp = {"db": db_stamp(data_dir), "base_dir": str(base_dir or ""), "libraries": libraries,
             "rules": MIRROR_RULES, "source_version": VERSION}
    notes: list[str] = []
    old_stamp = state.get("stamp") or {}
    same_rules = {**old_stamp, "db": None} == {**stamp, "db": None}
    old_catalog = state.get("catalog")
    if old_stamp == stamp and isinstance(old_catalog, dict):
        catalog = old_catalog
    else:
        cat = read_catalog(data_dir, base_dir=base_dir, libraries=libraries)
        if cat.behind:
            notes.append(f"{data_dir / 'zotero.sqlite'} changed while it was read (Zotero is writing): "
                         "this build may miss the latest changes; the next one picks them up")
        catalog = _catalog_json(cat)
        write_atomic(mirror / "library.json", json.dumps(_export(cat), ensure_ascii=False, sort_keys=True).encode())
    old_entries = (old_catalog or {}).get("papers") or {} if same_rules else {}
    files: dict[str, list] = dict(state.get("files") or {})
    seen_files: dict[str, list] = {}
    papers: dict[str, str] = {}
    metadata_only: dict[str, str] = {}
    written: dict[str, list] = {}
    old_manifests = state.get("manifests") or {}
    folder = mirror / "papers"
    prefix = f"{folder}{os.sep}"  # a string a manifest: a Path each costs more than the rest of its check
    try:  # one listing instead of a stat per manifest
        on_disk = set(os.listdir(folder))
    except OSError:
        on_disk = set()
    for key, entry in catalog["papers"].items():
        used: list[tuple[str, bool]] = []  # (file, unchanged since the last reading) of each file read
        manifest, why = _manifest(entry, files, seen_files, used)
        if manifest is None:
            metadata_only[key] = why
            continue
        name = f"{key}{SUFFIX}"
        old = old_manifests.get(key)
        inputs = _inputs_digest(used)
        # the same entry and the same files, unchanged: the same manifest as last time (its bytes on disk)
        if (isinstance(old, list) and len(old) == 2 and old[1] == inputs and name in on_disk
                and all(unchanged for _, unchanged in used)
                and (entry is old_entries.get(key) or entry == old_entries.get(key))):
            h = old[0]
        else:
            data = json.dumps(manifest, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
            h = content_hash(data, HASH_TAG)
            if not isinstance(old, list) or old[0] != h or name not in on_disk:
                write_atomic(folder / name, data)
        written[key] = [h, inputs]
        papers[key] = prefix + name
    for stale in set(old_manifests) - set(written):
        (mirror / "papers" / f"{stale}{SUFFIX}").unlink(missing_ok=True)
    new_state = {"stamp": stamp, "catalog": catalog, "files": seen_files, "manifests": written}
    if new_state != state:
        write_atomic(mirror / "state.json", json.dumps(new_state, ensure_ascii=False, separators=(",", ":")).encode())
    return ZoteroDiscovery(papers, {k: v[0] for k, v in written.items()}, metadata_only, mirror / "library.json",
                           tuple(notes))


def _inputs_digest(used: list[tuple[str, bool]]) -> str:
    """A short digest of which files a manifest was made of, in order: the same entry can make
    another manifest from the same unchanged files only by choosing others (an OCR output
    added beside a PDF)."""
    return hashlib.blake2b("\0".join(f for f, _ in used).encode(), digest_size=8).hexdigest()


def _current(mirror: Path, data_dir: Path, base_dir: Path | None, libraries: str) -> bool:
    state = read_json(mirror / "state.json") or {}
    st = state.get("stamp") or {}
    return (st.get("db") == db_stamp(data_dir) and st.get("base_dir") == str(base_dir or "")
            and st.get("libraries") == libraries and st.get("rules") == MIRROR_RULES
            and (mirror / "library.json").is_file())


# --- catalog → JSON ------------------------------------------------------------------------------

def _catalog_json(cat: Catalog) -> dict[str, Any]:
    papers = {}
    for p in cat.papers:
        papers[p.key] = {
            "link": p.link, "library": p.library,
            "attachments": [{"key": a.key, "title": a.title, "content_type": a.content_type,
                             "file": a.file, "problem": a.problem,
                             "storage": a.storage_dir, "stored": bool(a.path and a.path.startswith("storage:"))}
                            for a in p.attachments],
            "annotations": p.annotations, "notes": p.notes,
        }
    return {"papers": papers, "libraries": cat.libraries}


def _is_pdf(a: dict[str, Any]) -> bool:
    f = a.get("file") or ""
    return a.get("content_type") == "application/pdf" or f.lower().endswith(".pdf")


def _manifest(entry: dict[str, Any], files: dict[str, list], seen: dict[str, list],
              used: list[tuple[str, bool]]) -> tuple[dict | None, str]:
    """A paper's manifest (its text sources with their hashes, annotations, notes), or None and
    why the paper has no text; `used` collects the files read and whether each is unchanged."""
    sources = []
    reasons = []
    atts = entry["attachments"]
    pdfs = [a for a in atts if _is_pdf(a)]
    for a in pdfs or [a for a in atts if a.get("storage")]:
        ft = _ft_cache(a, files, seen, used)
        src: dict[str, Any] = {"attachment": a["key"], "title": a.get("title") or a["key"], "ft_cache": ft}
        inp = None
        if a.get("file") and _is_pdf(a):
            inp = _input(a, files, seen, used)
            if inp is None:
                src["problem"] = f"file not readable: {a['file']}"
        else:
            src["problem"] = a.get("problem") or ("no PDF: a web page snapshot" if a.get("file") else "no file")
        if inp:
            src.update(inp)
        if inp or ft:
            sources.append(src)
        else:
            reasons.append(f"{a['key']}: {src['problem']}" + (f" and Zotero's {FT_CACHE} {_ft_state(a['storage'])}"
                                                              if a.get("storage") else ""))
    if not sources and not entry["annotations"] and not entry["notes"]:
        if not atts:
            return None, "no attachment: metadata only"
        return None, "no text to index: " + "; ".join(reasons or ["only links to web pages"])
    return {"format": MANIFEST_FORMAT, "version": VERSION, "link": entry["link"], "library": entry["library"],
            "sources": sources, "annotations": entry["annotations"], "notes": entry["notes"]}, ""


def _ft_state(storage: str) -> str:
    """What is wrong with an attachment's ft-cache that gave no text (said only for such a paper)."""
    try:
        os.stat(os.path.join(storage, FT_CACHE))
    except FileNotFoundError:
        return "is absent (Zotero never extracted its text)"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    return "is empty"  # `_ft_cache` gave none: size 0, or unreadable past its stat


def _hashed(file: Path | str, files: dict[str, list], seen: dict[str, list], used: list[tuple[str, bool]]) -> list | None:
    """`file_hash`, noting in `used` the file and whether it is unchanged since the last reading."""
    h = file_hash(file, files, seen)
    key = str(file)
    used.append((key, h is not None and h is files.get(key)))
    return h


def _input(a: dict[str, Any], files: dict[str, list], seen: dict[str, list],
           used: list[tuple[str, bool]]) -> dict[str, Any] | None:
    """The attachment's chosen input: an OCR/layout output in its storage folder, else the file."""
    where = Path(a["storage"]) if a.get("stored") and a.get("storage") else Path(a["file"])
    try:
        file, fmt = find_input(a["key"], where)
    except IngestError:
        file, fmt = Path(a["file"]), "pdf"
    h = _hashed(file, files, seen, used)
    if h is None:
        return None
    return {"path": str(file), "format": fmt, "size": h[0], "sha256": h[2]}


def _ft_cache(a: dict[str, Any], files: dict[str, list], seen: dict[str, list],
              used: list[tuple[str, bool]]) -> dict[str, Any] | None:
    if not a.get("storage"):
        return None
    f = os.path.join(a["storage"], FT_CACHE)  # a string: a Path a file costs more than the stat
    h = _hashed(f, files, seen, used)
    if h is None or h[0] == 0:
        return None
    return {"path": f, "size": h[0], "sha256": h[2]}


# --- metadata export -----------------------------------------------------------------------------

def _export(cat: Catalog) -> dict[str, Any]:
    """The library's metadata as a Better BibTeX-style JSON export (what `sheaf.library.metadata`
    reads): one item a paper, its collections by path."""
    items = []
    collections: dict[str, dict[str, Any]] = {}
    for p in cat.papers:
        items.append(_item(p))
        for c in p.collections:
            parent = None
            parts = c.split("/")
            for i in range(len(parts)):
                ck = "/".join(parts[: i + 1])
                collections.setdefault(ck, {"name": parts[i], "parent": parent, "items": []})
                parent = ck
            collections[c]["items"].append(p.key)
    return {"config": {"label": "Zotero data directory", "sheaf": MIRROR_RULES}, "items": items,
            "collections": collections}


def _item(p: ZoteroPaper) -> dict[str, Any]:
    f = dict(p.fields)
    item: dict[str, Any] = {k: v for k, v in f.items() if k not in ("extra",)}
    if f.get("date"):
        item["date"] = _zotero_date(f["date"])
    extra = f.get("extra")
    if extra:
        item["extra"] = extra
    if not item.get("title"):
        item["title"] = next((a.title for a in p.attachments if a.title), "") if p.item_type == "document" else ""
    item.update({"itemKey": p.key, "itemType": p.item_type, "creators": p.creators,
                 "tags": [{"tag": t} for t in p.tags], "dateAdded": p.date_added, "dateModified": p.date_modified,
                 "uri": p.link, "library": p.library})
    return item


def _zotero_date(value: str) -> str:
    """Zotero's stored date ("2020-09-00 2020-09": SQL form, then the text as entered) as the text
    entered, or the SQL part when the year is known."""
    sql, _, entered = value.partition(" ")
    if len(sql) == 10 and sql[4] == "-" and sql[:4].isdigit():
        return entered or (sql[:4] if sql[:4] != "0000" else "")
    return value
