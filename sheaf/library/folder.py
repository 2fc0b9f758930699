"""A folder of PDFs as a library: every PDF at any depth is a paper, with its metadata from a
BibTeX or CSL-JSON file in the folder when one names it, else from the PDF itself.

Keys. A PDF that a `.bib` entry names (its `file` field, in JabRef's `description:path:type`,
Mendeley's escaped `{:C\\:/path.pdf:pdf}` or a plain path, several `;`-separated, relative to the
`.bib` or absolute) takes the entry's citation key (characters other than letters, digits, `.`,
`_` and `-` become `_`). Any other PDF takes `<name>-<hash>`: up to 40 letters and digits of its
file name, then 10 hex digits of the SHA-1 of its path in the folder, so a key is valid, stable
across builds, unchanged when the file's content changes, and distinct for distinct paths. A
renamed or moved PDF is a new key (the old one is dropped); its passages come from the embedding
cache, so nothing is embedded again.

A sub-folder holding an OCR/layout output (`result.json`, `content_list.json`, `.tei.xml`,
`.docling.json`) is one paper, read as a `papers/<KEY>/` folder is. Collections come from the
sub-folder path and the entries' JabRef `groups`; tags from their `keywords`. Hidden folders and
files are skipped; Markdown files are not papers here (in a folder of PDFs they are notes).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sheaf.core.files import write_atomic
from sheaf.core.models import valid_paper_key
from sheaf.library.mirror import file_hash, read_json, scratch_dir

#: Bump when the same folder would give other keys or metadata.
FOLDER_RULES = "1"
_OUTPUT_NAMES = re.compile(r"^(result\.json|(.*_)?content_list\.json|.*\.tei\.xml|.*\.docling\.json)$", re.I)


@dataclass(frozen=True, slots=True)
class FolderDiscovery:
    papers: dict[str, Path]  # key → the PDF, or the folder of an OCR/layout output
    metadata_only: dict[str, str]  # a .bib entry whose file is not there → why
    metadata_file: Path
    notes: tuple[str, ...]


def is_pdf_folder(path: Path) -> bool:
    """A folder holding at least one PDF or OCR/layout output at any depth."""
    for _root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if any(f.lower().endswith(".pdf") or _OUTPUT_NAMES.match(f) for f in files if not f.startswith(".")):
            return True
    return False


def path_key(rel: str) -> str:
    """`<name>-<hash>` of a PDF at `rel` (its path in the folder, with '/')."""
    stem = unicodedata.normalize("NFKD", Path(rel).name.rsplit(".", 1)[0])
    name = re.sub(r"[^A-Za-z0-9]+", "_", stem.encode("ascii", "ignore").decode()).strip("_")[:40] or "paper"
    digest = hashlib.sha1(unicodedata.normalize("NFC", rel).encode()).hexdigest()[:10]
    return f"{name}-{digest}"


def citation_key(key: str) -> str | None:
    k = re.sub(r"[^A-Za-z0-9._-]", "_", key.strip()).replace("..", "_")
    return k if k and valid_paper_key(k) else None


def file_field_paths(value: str) -> list[str]:
    """The paths of a BibTeX `file` field: JabRef `desc:path:type`, Mendeley `:C\\:/x.pdf:pdf`
    (escaped colons and backslashes), or plain paths; several separated by `;`."""
    out = []
    for part in _split_unescaped(value, ";"):
        fields = _split_unescaped(part, ":")
        if len(fields) >= 3:  # description:path:type (the path may hold unescaped ':' of a drive)
            path = ":".join(fields[1:-1])
        else:
            path = part
        path = path.replace("\\:", ":").replace("\\\\", "\\").replace("\\;", ";").strip()
        if path:
            out.append(path)
    return out


def _split_unescaped(s: str, sep: str) -> list[str]:
    parts, cur, i = [], [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            cur.append(s[i:i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def discover_folder(lib: Path, mirror: Path | None, *, write: bool = True) -> FolderDiscovery:
    """The folder's papers and the metadata export for them (written to the mirror)."""
    if mirror is None or not write:
        mirror = scratch_dir("folder")
    lib = Path(lib)
    state = read_json(mirror / "state.json") or {}
    files_cache: dict[str, list] = dict(state.get("files") or {})
    seen: dict[str, list] = {}
    pdfs: dict[str, Path] = {}  # path in the folder → file
    outputs: dict[str, Path] = {}  # path of a folder holding an OCR output → folder
    bibs: list[Path] = []
    csls: list[Path] = []
    for root, dirs, files in os.walk(lib):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rootp = Path(root)
        names = sorted(f for f in files if not f.startswith("."))
        if rootp != lib and any(_OUTPUT_NAMES.match(f) for f in names):
            outputs[rootp.relative_to(lib).as_posix()] = rootp
            dirs[:] = []
            continue
        for f in names:
            low = f.lower()
            if low.endswith(".pdf"):
                pdfs[(rootp / f).relative_to(lib).as_posix()] = rootp / f
            elif rootp == lib and low.endswith(".bib"):
                bibs.append(rootp / f)
            elif rootp == lib and low.endswith(".json"):
                csls.append(rootp / f)
    notes: list[str] = []
    entries = _bib_entries(bibs, notes) + _csl_entries(csls)
    by_file = {_norm(p): rel for rel, p in pdfs.items()}
    by_name = {}  # a PDF's file name, folded, without extension → its path (for entries without a file)
    for rel in pdfs:
        by_name.setdefault(_fold(Path(rel).name.rsplit(".", 1)[0]), rel)
    papers: dict[str, Path] = {}
    items: list[dict[str, Any]] = []
    metadata_only: dict[str, str] = {}
    claimed: set[str] = set()
    for e in entries:
        key = citation_key(e["key"]) if e.get("key") else None
        if key is None or key in papers or key in metadata_only:
            notes.append(f"{e['source']}: entry {e.get('key')!r} skipped: " + (
                "its key is used twice" if key else "no usable citation key"))
            continue
        rels = [by_file.get(_norm(_resolve(p, e["base"]))) for p in e.get("files", [])]
        if not e.get("files"):  # smith2020.pdf for @article{smith2020}, or a file named by its title
            rels = [by_name.get(_fold(e["key"])), by_name.get(_fold(e["item"].get("title", "")))]
        rels = [r for r in rels if r is not None and r not in claimed]
        if rels:
            claimed.add(rels[0])
            papers[key] = pdfs[rels[0]]
            items.append({**e["item"], "itemKey": key, "collections_paths": _folder_collections(rels[0]) + e["groups"]})
        elif e.get("files"):
            metadata_only[key] = "file not found: " + "; ".join(e["files"])
            items.append({**e["item"], "itemKey": key, "collections_paths": e["groups"]})
            notes.append(f"{e['source']}: entry {e['key']!r}: file not found: {'; '.join(e['files'])}")
    infos: dict[str, dict[str, Any]] = {}  # a PDF's sha256 → what its document information says
    for rel in sorted(set(pdfs) - claimed):
        key = path_key(rel)
        papers[key] = pdfs[rel]
        h = file_hash(pdfs[rel], files_cache, seen)
        info = _pdf_info(pdfs[rel], h[2], state.get("info") or {}) if h else {}
        if h:
            infos[h[2]] = info
        items.append({**info, "itemKey": key, "itemType": "document", "collections_paths": _folder_collections(rel)})
    for rel, folder in sorted(outputs.items()):
        key = path_key(rel + "/")
        papers[key] = folder
        items.append({"itemKey": key, "title": "", "itemType": "document",
                      "collections_paths": _folder_collections(rel + "/x")})
    export = _export(items)
    data = json.dumps(export, ensure_ascii=False, sort_keys=True).encode()
    if read_json(mirror / "library.json") != export:
        write_atomic(mirror / "library.json", data)
    new_state = {"rules": FOLDER_RULES, "files": seen, "info": infos}
    if new_state != state:
        write_atomic(mirror / "state.json", json.dumps(new_state, ensure_ascii=False).encode())
    return FolderDiscovery(dict(sorted(papers.items())), metadata_only, mirror / "library.json", tuple(notes))


def _norm(p: Path) -> str:
    return unicodedata.normalize("NFC", os.path.normcase(os.path.normpath(str(p))))


def _resolve(path: str, base: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else base / p


def _folder_collections(rel: str) -> list[str]:
    parent = Path(rel).parent.as_posix()
    return [] if parent in ("", ".") else [parent]


def _export(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A Better BibTeX-style export of the items (what `sheaf.library.metadata` reads)."""
    collections: dict[str, dict[str, Any]] = {}
    out = []
    for it in items:
        paths = it.pop("collections_paths", [])
        for c in paths:
            parts = c.split("/")
            parent = None
            for i in range(len(parts)):
                ck = "/".join(parts[: i + 1])
                collections.setdefault(ck, {"name": parts[i], "parent": parent, "items": []})
                parent = ck
            collections[c]["items"].append(it["itemKey"])
        out.append(it)
    return {"config": {"label": "folder of PDFs", "sheaf": FOLDER_RULES}, "items": out, "collections": collections}


def _fold(s: str) -> str:
    s = unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode().lower()
    return " ".join(re.sub(r"[^a-z0-9]+", " ", s).split())


# --- metadata ---------------------------------------------------------------------------------

_TYPES = {"article": "journalArticle", "inproceedings": "conferencePaper", "conference": "conferencePaper",
          "book": "book", "incollection": "bookSection", "inbook": "bookSection", "phdthesis": "thesis",
          "mastersthesis": "thesis", "techreport": "report", "misc": "document", "online": "webpage",
          "unpublished": "manuscript"}
_TEXT_FIELDS = ("title", "author", "editor", "journal", "journaltitle", "booktitle", "abstract", "keywords", "groups")


def _bib_entries(bibs: list[Path], notes: list[str]) -> list[dict[str, Any]]:
    """Each entry of the folder's .bib files: key, BBT-style item, its files, its groups."""
    import bibtexparser
    from pylatexenc.latex2text import LatexNodes2Text

    latex = LatexNodes2Text()
    out = []
    for bib in bibs:
        try:
            text = bib.read_bytes().decode("utf-8-sig", "replace")
        except OSError as e:
            notes.append(f"{bib.name}: cannot be read ({e.strerror or e})")
            continue
        lib = bibtexparser.parse_string(text)
        for block in lib.failed_blocks:
            notes.append(f"{bib.name}: line {getattr(block, 'start_line', 0) + 1}: not a BibTeX entry; skipped")
        for e in lib.entries:
            f = {k.lower(): str(v.value) for k, v in e.fields_dict.items()}
            for k in _TEXT_FIELDS:
                if k in f:
                    try:
                        f[k] = " ".join(latex.latex_to_text(f[k]).split())
                    except Exception:  # noqa: BLE001 - a field pylatexenc cannot read stays as written
                        f[k] = " ".join(f[k].replace("{", "").replace("}", "").split())
            files = [p for k in ("file", "pdf", "local-url") if k in f for p in file_field_paths(f[k])]
            item = {"title": f.get("title", ""), "itemType": _TYPES.get(e.entry_type.lower(), e.entry_type.lower()),
                    "creators": _bib_people(f.get("author", ""), "author") + _bib_people(f.get("editor", ""), "editor"),
                    "date": f.get("date") or f.get("year") or "",
                    "publicationTitle": f.get("journal") or f.get("journaltitle") or f.get("booktitle") or "",
                    "DOI": f.get("doi", ""), "abstractNote": f.get("abstract", ""), "citationKey": e.key,
                    "tags": [{"tag": t} for t in _split_list(f.get("keywords", ""))]}
            out.append({"key": e.key, "item": {k: v for k, v in item.items() if v}, "files": files,
                        "groups": _split_list(f.get("groups", "")), "base": bib.parent, "source": bib.name})
    return out


def _split_list(value: str) -> list[str]:
    return list(dict.fromkeys(x.strip() for x in re.split(r"[;,]", value) if x.strip()))


def _bib_people(value: str, role: str) -> list[dict[str, str]]:
    out = []
    for name in re.split(r"\s+and\s+", value.strip()) if value.strip() else []:
        if "," in name:
            last, _, first = name.partition(",")
            out.append({"creatorType": role, "firstName": first.strip(), "lastName": last.strip()})
        elif name.strip().lower() != "others":
            out.append({"creatorType": role, "name": name.strip()})
    return out


def _csl_entries(files: list[Path]) -> list[dict[str, Any]]:
    """Each item of the folder's CSL-JSON files, matched to a PDF by a `file` field or its title."""
    out = []
    for path in files:
        data = read_json(path)
        if not isinstance(data, list):
            continue
        for it in data:
            if not isinstance(it, dict) or not isinstance(it.get("title"), str):
                continue
            key = it.get("citation-key") or it.get("id")
            if not isinstance(key, str):
                continue
            issued = (it.get("issued") or {}).get("date-parts") if isinstance(it.get("issued"), dict) else None
            year = str(issued[0][0]) if issued and issued[0] else ""
            creators = [{"creatorType": "author", "firstName": a.get("given", ""), "lastName": a.get("family", "")}
                        if a.get("family") else {"creatorType": "author", "name": a.get("literal", "")}
                        for a in it.get("author", []) if isinstance(a, dict)]
            item = {"title": it["title"], "itemType": "document", "creators": creators, "date": year,
                    "publicationTitle": it.get("container-title", ""), "DOI": it.get("DOI", ""),
                    "abstractNote": it.get("abstract", ""),
                    "tags": [{"tag": t} for t in _split_list(it.get("keyword", "") if isinstance(it.get("keyword"), str) else "")]}
            files_ = [it[k] for k in ("file", "path") if isinstance(it.get(k), str)]
            out.append({"key": key, "item": {k: v for k, v in item.items() if v}, "files": files_, "groups": [],
                        "base": path.parent, "source": path.name})
    return out


_JUNK_TITLE = re.compile(r"(^untitled|^microsoft word|^document\d*$|\.(pdf|docx?|tex|dvi|ps|indd)$|^slide \d)", re.I)


def _pdf_info(pdf: Path, sha: str, cache: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Title and authors from a PDF's document information, when they are real (not a file name,
    not a word processor's placeholder); cached by the file's SHA-256."""
    if sha in cache:
        return cache[sha]
    import pypdfium2 as pdfium

    info: dict[str, Any] = {}
    try:
        doc = pdfium.PdfDocument(str(pdf))
        try:
            meta = doc.get_metadata_dict()
        finally:
            doc.close()
    except Exception:  # noqa: BLE001 - a damaged PDF: its parse says why; its metadata is empty
        return info
    title = " ".join((meta.get("Title") or "").split())
    if len(title) >= 6 and " " in title and not _JUNK_TITLE.search(title) and title != pdf.stem:
        info["title"] = title
    author = " ".join((meta.get("Author") or "").split())
    if author and not _JUNK_TITLE.search(author):
        names = re.split(r";|\s+and\s+", author)
        if len(names) == 1 and "," in author and all(" " in n.strip() for n in author.split(",")):
            names = author.split(",")
        info["creators"] = [{"creatorType": "author", "name": n.strip()} for n in names if n.strip()]
    return info
