"""Library metadata: Better BibTeX JSON and CSL-JSON exports → `PaperMeta` records.

A PaperForge vault's ``System/PaperForge/exports/*.json`` (one Better BibTeX export per
domain, the file stem is the domain), a plain library's ``library.json`` (Better BibTeX JSON or
CSL-JSON), and the exports Sheaf writes itself for a Zotero data directory or a folder of PDFs
(`sheaf.library.zotero_mirror`, `sheaf.library.folder`: Better BibTeX-style, with tags and links).
Attachments, notes and annotations are skipped. A malformed item is reported by key (or
position) in the warnings and skipped; it never stops the load.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sheaf.core.models import PaperMeta, valid_paper_key

__all__ = [
    "PaperMeta", "MetadataWarning", "MetadataLoad", "load_metadata_file", "load_metadata_files",
    "load_library_metadata", "parse_bbt", "parse_csl",
]

SKIPPED_TYPES = frozenset({"attachment", "note", "annotation"})
PAPERFORGE_EXPORTS = Path("System/PaperForge/exports")

_YEAR_RE = re.compile(r"(?<!\d)(1[0-9]{3}|20[0-9]{2}|21[0-9]{2})(?!\d)")
_DOI_RE = re.compile(r"10\.\d{3,9}/\S+|10/[a-z0-9]+", re.I)
_DOI_PREFIX_RE = re.compile(r"^(?:https?://(?:dx\.)?doi\.org/|doi:\s*)", re.I)
_EXTRA_FIELD_RE = re.compile(r"^\s*([A-Za-z][A-Za-z -]*?)\s*:\s*(.+?)\s*$")
_CONTAINER_FIELDS = (
    "publicationTitle", "bookTitle", "proceedingsTitle", "conferenceName", "websiteTitle",
    "blogTitle", "forumTitle", "encyclopediaTitle", "dictionaryTitle", "programTitle",
    "seriesTitle", "journalAbbreviation",
)
_AUTHOR_ROLES = ("author", "editor", "bookAuthor", "seriesEditor", "contributor")


@dataclass(frozen=True, slots=True)
class MetadataWarning:
    """A problem with one item (or file): which file, which item, what."""

    source: str
    item: str  # the item's key, or "#<position>" when it has none
    message: str

    def __str__(self) -> str:
        return f"{self.source}: item {self.item}: {self.message}"


@dataclass(frozen=True, slots=True)
class MetadataLoad:
    """The papers read from one or more exports, what was skipped silently, and the warnings."""

    papers: tuple[PaperMeta, ...]
    warnings: tuple[MetadataWarning, ...]
    skipped_non_papers: int = 0  # attachments, notes, annotations

    def by_key(self) -> dict[str, PaperMeta]:
        return {p.key: p for p in self.papers}


class _Malformed(ValueError):
    pass


# --- small field helpers ---------------------------------------------------------------

def _str(item: Mapping[str, Any], field: str) -> str | None:
    v = item.get(field)
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = str(v)
    if not isinstance(v, str):
        raise _Malformed(f"field {field!r} is a {type(v).__name__}, expected a string")
    v = v.strip()
    return v or None


def _extra_lines(item: Mapping[str, Any]) -> list[str]:
    extra = item.get("extra")
    if extra is None:
        return []
    if isinstance(extra, str):
        return extra.splitlines()
    if isinstance(extra, list) and all(isinstance(x, str) for x in extra):
        return [ln for x in extra for ln in x.splitlines()]
    raise _Malformed(f"field 'extra' is a {type(extra).__name__}, expected text")


def _extra_fields(lines: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for ln in lines:
        m = _EXTRA_FIELD_RE.match(ln)
        if m:
            out.setdefault(m.group(1).strip().lower(), m.group(2))
    return out


def _year(*candidates: str | None) -> int | None:
    for c in candidates:
        if c:
            m = _YEAR_RE.search(c)
            if m:
                return int(m.group(1))
    return None


def _doi(value: str | None) -> str | None:
    if not value:
        return None
    v = _DOI_PREFIX_RE.sub("", value.strip())
    m = _DOI_RE.search(v)
    return m.group(0).rstrip(".,;") if m else None


def _pmid(value: str | None) -> str | None:
    if not value:
        return None
    m = re.search(r"\d{1,9}", value)
    return m.group(0) if m else None


def _key_from_uri(uri: str | None) -> str | None:
    if uri and "/items/" in uri:
        return uri.rstrip("/").rsplit("/", 1)[-1] or None
    return None


def _clean_key(candidate: str | None) -> str | None:
    return candidate.strip() if isinstance(candidate, str) and candidate.strip() else None


# --- Better BibTeX JSON ----------------------------------------------------------------

def _bbt_person(c: Any) -> tuple[str, str] | None:
    if not isinstance(c, Mapping):
        raise _Malformed(f"a creator is a {type(c).__name__}, expected an object")
    role = c.get("creatorType") or "author"
    name = c.get("name")
    if isinstance(name, str) and name.strip():
        return str(role), name.strip()
    first, last = c.get("firstName"), c.get("lastName")
    for v, f in ((first, "firstName"), (last, "lastName")):
        if v is not None and not isinstance(v, str):
            raise _Malformed(f"creator {f} is a {type(v).__name__}, expected a string")
    full = " ".join(x.strip() for x in (first or "", last or "") if x and x.strip())
    return (str(role), full) if full else None


def _pick_authors(people: list[tuple[str, str]]) -> tuple[str, ...]:
    for role in _AUTHOR_ROLES:
        names = [n for r, n in people if r == role]
        if names:
            return tuple(names)
    return tuple(n for _, n in people)


def _bbt_collection_paths(collections: Any) -> tuple[dict[str, str], dict[Any, list[str]]]:
    """(collection key → "Parent/Child" path, itemID/itemKey → paths) from a BBT export."""
    if not isinstance(collections, Mapping):
        return {}, {}
    names: dict[str, str] = {}
    parents: dict[str, str | None] = {}
    for ckey, c in collections.items():
        if isinstance(c, Mapping) and isinstance(c.get("name"), str):
            names[str(ckey)] = c["name"]
            p = c.get("parent")
            parents[str(ckey)] = str(p) if isinstance(p, (str, int)) and p else None

    def path(k: str) -> str:
        parts, seen = [], set()
        while k and k in names and k not in seen:
            seen.add(k)
            parts.append(names[k])
            k = parents.get(k) or ""
        return "/".join(reversed(parts))

    paths = {k: path(k) for k in names}
    members: dict[Any, list[str]] = {}
    for ckey, c in collections.items():
        if isinstance(c, Mapping) and isinstance(c.get("items"), list):
            for it in c["items"]:
                if isinstance(it, (str, int)):
                    members.setdefault(it, []).append(paths.get(str(ckey), ""))
    return paths, members


def _bbt_keys(item: Mapping[str, Any], extra: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(the paper key, the citation key) of a Better BibTeX item: what `_bbt_item` and
    `_bbt_key` derive, one rule."""
    citation_key = _clean_key(item.get("citationKey") if isinstance(item.get("citationKey"), str)
                              else None) or _clean_key(extra.get("citation key"))
    key = (_clean_key(item.get("key") if isinstance(item.get("key"), str) else None)
           or _clean_key(item.get("itemKey") if isinstance(item.get("itemKey"), str) else None)
           or _key_from_uri(item.get("uri") if isinstance(item.get("uri"), str) else None)
           or citation_key
           or (str(item["itemID"]) if isinstance(item.get("itemID"), int) else None))
    return key, citation_key


def _bbt_key(item: Mapping[str, Any]) -> str | None:
    """The item's paper key alone (its extra field read only when the key is there)."""
    return _bbt_keys(item, _extra_fields(_extra_lines(item)) if "extra" in item else {})[0]


def _bbt_item(item: Mapping[str, Any], domain: str | None, source: str,
              col_paths: dict[str, str], col_members: dict[Any, list[str]]) -> PaperMeta:
    extra = _extra_fields(_extra_lines(item))
    key, citation_key = _bbt_keys(item, extra)
    if not key:
        raise _Malformed("no key (key, itemKey, uri, citationKey or itemID)")
    if not valid_paper_key(key):
        raise _Malformed(f"key {key!r} is not a valid paper key")
    title = _str(item, "title") or ""
    creators = item.get("creators")
    if creators is None:
        creators = []
    if not isinstance(creators, list):
        raise _Malformed(f"field 'creators' is a {type(creators).__name__}, expected a list")
    people = [p for p in (_bbt_person(c) for c in creators) if p]
    authors = _pick_authors(people)
    journal = None
    for f in _CONTAINER_FIELDS:
        journal = _str(item, f)
        if journal:
            break
    date = _str(item, "date")
    cols: list[str] = []
    item_cols = item.get("collections")
    if isinstance(item_cols, list):
        cols += [col_paths.get(str(c), str(c)) for c in item_cols if isinstance(c, (str, int))]
    for ident in (item.get("itemID"), item.get("itemKey"), item.get("key")):
        if ident is not None and not isinstance(ident, (list, dict)):
            cols += col_members.get(ident, [])
    return PaperMeta(
        key=key,
        citation_key=citation_key,
        title=title,
        authors=authors,
        first_author=authors[0] if authors else None,
        year=_year(date, extra.get("original-date"), extra.get("issued")),
        journal=journal,
        doi=_doi(_str(item, "DOI") or extra.get("doi")),
        pmid=_pmid(_str(item, "PMID") or extra.get("pmid")),
        abstract=_str(item, "abstractNote"),
        collections=tuple(dict.fromkeys(c for c in cols if c)),
        domain=domain,
        item_type=_str(item, "itemType"),
        source=source,
        tags=_bbt_tags(item.get("tags")),
        link=_zotero_link(item, key),
    )


def _bbt_tags(tags: Any) -> tuple[str, ...]:
    """A Better BibTeX item's tags (``[{"tag": "x"}]`` or ``["x"]``), in order, once each."""
    if not isinstance(tags, list):
        return ()
    out = (t.get("tag") if isinstance(t, Mapping) else t for t in tags)
    return tuple(dict.fromkeys(t.strip() for t in out if isinstance(t, str) and t.strip()))


_ZOTERO_URI = re.compile(r"^https?://zotero\.org/(users|groups)/(\d+)/items/([A-Z0-9]{8})$")


def _zotero_link(item: Mapping[str, Any], key: str) -> str | None:
    """The item's `zotero://select` link: its uri's (a Zotero uri or an export's zotero.org uri),
    else, for an item keyed by a Zotero item key, the personal library's."""
    uri = item.get("uri") if isinstance(item.get("uri"), str) else ""
    if uri.startswith("zotero://select/"):
        return uri
    m = _ZOTERO_URI.match(uri)
    if m:
        return (f"zotero://select/library/items/{m[3]}" if m[1] == "users"
                else f"zotero://select/groups/{m[2]}/items/{m[3]}")
    item_key = item.get("itemKey") if isinstance(item.get("itemKey"), str) else None
    if item_key == key and re.fullmatch(r"[A-Z0-9]{8}", key):
        return f"zotero://select/library/items/{key}"
    return None


def parse_bbt(data: Mapping[str, Any], *, domain: str | None, source: str,
              keys: Collection[str] | None = None) -> MetadataLoad:
    """Papers of one Better BibTeX JSON export (``{"config":…, "items":[…], "collections":…}``);
    `keys`: only those papers (see `_collect`)."""
    items = data.get("items")
    if not isinstance(items, list):
        return MetadataLoad((), (MetadataWarning(source, "-", "no 'items' list: not a Better BibTeX JSON export"),))
    col_paths, col_members = _bbt_collection_paths(data.get("collections"))
    return _collect(items, source, lambda it: _bbt_item(it, domain, source, col_paths, col_members),
                    type_field="itemType", ident_fields=("key", "itemKey", "citationKey", "itemID"),
                    key_of=_bbt_key, keys=keys)


# --- CSL-JSON --------------------------------------------------------------------------

def _csl_person(c: Any) -> str | None:
    if not isinstance(c, Mapping):
        raise _Malformed(f"a name is a {type(c).__name__}, expected an object")
    lit = c.get("literal")
    if isinstance(lit, str) and lit.strip():
        return lit.strip()
    parts = [c.get("given"), c.get("non-dropping-particle"), c.get("family"), c.get("suffix")]
    for v in parts:
        if v is not None and not isinstance(v, str):
            raise _Malformed(f"a name part is a {type(v).__name__}, expected a string")
    full = " ".join(p.strip() for p in parts if p and p.strip())
    return full or None


def _csl_year(issued: Any) -> int | None:
    if isinstance(issued, Mapping):
        dp = issued.get("date-parts")
        if isinstance(dp, list) and dp and isinstance(dp[0], list) and dp[0]:
            y = dp[0][0]
            try:
                return int(y)
            except (TypeError, ValueError):
                pass
        for f in ("raw", "literal"):
            if isinstance(issued.get(f), str):
                return _year(issued[f])
        return None
    if isinstance(issued, str):
        return _year(issued)
    return None


def _csl_keys(item: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(the paper key, the citation key) of a CSL item: what `_csl_item` derives."""
    citation_key = _clean_key(item.get("citation-key") if isinstance(item.get("citation-key"), str)
                              else None)
    raw_id = item.get("id")
    key = None
    if isinstance(raw_id, str):
        key = _key_from_uri(raw_id) or _clean_key(raw_id)
    elif isinstance(raw_id, int):
        key = str(raw_id)
    return key or citation_key, citation_key


def _csl_item(item: Mapping[str, Any], domain: str | None, source: str) -> PaperMeta:
    key, citation_key = _csl_keys(item)
    raw_id = item.get("id")
    if not key:
        raise _Malformed("no key (id or citation-key)")
    if not valid_paper_key(key):
        raise _Malformed(f"key {key!r} is not a valid paper key")
    title = _str(item, "title") or ""
    names: tuple[str, ...] = ()
    for role in ("author", "editor", "container-author", "translator"):
        v = item.get(role)
        if v is None:
            continue
        if not isinstance(v, list):
            raise _Malformed(f"field {role!r} is a {type(v).__name__}, expected a list")
        got = tuple(n for n in (_csl_person(c) for c in v) if n)
        if got:
            names = got
            break
    note_fields = _extra_fields((_str(item, "note") or "").splitlines())
    return PaperMeta(
        key=key,
        citation_key=citation_key or (raw_id if isinstance(raw_id, str) and raw_id == key else None),
        title=title,
        authors=names,
        first_author=names[0] if names else None,
        year=_csl_year(item.get("issued")) or _csl_year(item.get("original-date")),
        journal=_str(item, "container-title") or _str(item, "container-title-short")
        or _str(item, "collection-title"),
        doi=_doi(_str(item, "DOI") or note_fields.get("doi")),
        pmid=_pmid(_str(item, "PMID") or note_fields.get("pmid")),
        abstract=_str(item, "abstract"),
        collections=(),
        domain=domain,
        item_type=_str(item, "type"),
        source=source,
    )


def parse_csl(items: list[Any], *, domain: str | None, source: str,
              keys: Collection[str] | None = None) -> MetadataLoad:
    """Papers of one CSL-JSON file (a list of CSL items); `keys`: only those papers (`_collect`)."""
    return _collect(items, source, lambda it: _csl_item(it, domain, source), type_field="type",
                    ident_fields=("id", "citation-key"), key_of=lambda it: _csl_keys(it)[0], keys=keys)


# --- shared loop -----------------------------------------------------------------------

def _collect(items: list[Any], source: str, parse, *, type_field: str, ident_fields: tuple[str, ...],
             key_of: Callable[[Mapping[str, Any]], str | None], keys: Collection[str] | None = None) -> MetadataLoad:
    """`keys` given: only those papers, an item of another key passed over after its key alone
    is read (`key_of`, the rule `parse` keys an item by), before the whole item is (what one
    paper's step needs of a 10,000-item export: 0.5 s → its JSON parse); warnings are then only
    about the items read."""
    papers: dict[str, PaperMeta] = {}
    warnings: list[MetadataWarning] = []
    skipped = 0
    want = None if keys is None else set(keys)
    for pos, item in enumerate(items):
        if not isinstance(item, Mapping):
            warnings.append(MetadataWarning(source, f"#{pos}",
                                            f"is a {type(item).__name__}, expected an object; skipped"))
            continue
        if want is not None:
            try:
                if key_of(item) not in want:
                    continue
            except _Malformed:
                pass  # parsed whole below, which reports it
        ident = next((str(item[f]) for f in ident_fields
                      if isinstance(item.get(f), (str, int)) and str(item[f]).strip()), f"#{pos}")
        if item.get(type_field) in SKIPPED_TYPES:
            skipped += 1
            continue
        try:
            meta = parse(item)
        except _Malformed as e:
            warnings.append(MetadataWarning(source, ident, f"{e}; skipped"))
            continue
        if meta.key in papers:
            warnings.append(MetadataWarning(source, meta.key, "duplicate key; kept the first"))
            continue
        papers[meta.key] = meta
    return MetadataLoad(tuple(papers.values()), tuple(warnings), skipped)


def _domain_of(path: Path) -> str | None:
    """A PaperForge export's domain (the file stem); a plain library's ``library.json`` has none."""
    name = path.name
    if name.lower() == "library.json" and path.parent.name != "exports":
        return None
    for suffix in (".csl.json", ".json"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


_STEM: Any = object()


def load_metadata_file(path: str | Path, *, domain: str | None = _STEM,
                       keys: Collection[str] | None = None) -> MetadataLoad:
    """Read one Better BibTeX JSON or CSL-JSON export (format detected from the content).

    `domain` defaults to the file stem (``exports/bone.json`` → ``bone``; pass None for
    none); `keys`: only those papers. A file that cannot
    be read or parsed gives no papers and one warning; it never raises.
    """
    p = Path(path)
    source = str(p)
    dom = _domain_of(p) if domain is _STEM else domain
    try:
        data = json.loads(p.read_bytes().decode("utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return MetadataLoad((), (MetadataWarning(source, "-", f"cannot read export: {e}"),))
    if isinstance(data, Mapping) and "items" in data:
        return parse_bbt(data, domain=dom, source=source, keys=keys)
    if isinstance(data, list):
        return parse_csl(data, domain=dom, source=source, keys=keys)
    return MetadataLoad((), (MetadataWarning(
        source, "-", "neither Better BibTeX JSON (an object with 'items') nor CSL-JSON (a list)"),))


def load_metadata_files(paths: Iterable[str | Path], *, domain: str | None = _STEM,
                        keys: Collection[str] | None = None) -> MetadataLoad:
    """Several exports merged in the given order; a key seen twice keeps its first record;
    `keys`: only those papers."""
    papers: dict[str, PaperMeta] = {}
    warnings: list[MetadataWarning] = []
    skipped = 0
    for path in paths:
        got = load_metadata_file(path, domain=domain, keys=keys)
        warnings += got.warnings
        skipped += got.skipped_non_papers
        for m in got.papers:
            if m.key in papers:
                warnings.append(MetadataWarning(
                    str(path), m.key, f"also in {papers[m.key].source}; kept the first"))
            else:
                papers[m.key] = m
    return MetadataLoad(tuple(papers.values()), tuple(warnings), skipped)


def load_library_metadata(library: str | Path) -> MetadataLoad:
    """The metadata of a library folder: a PaperForge vault's ``exports/*.json`` (domain =
    file stem, files in name order) or a plain library's ``library.json`` (no domain)."""
    lib = Path(library)
    exports = lib / PAPERFORGE_EXPORTS
    if exports.is_dir():
        return load_metadata_files(sorted(exports.glob("*.json")))
    lj = lib / "library.json"
    if lj.is_file():
        return load_metadata_file(lj, domain=None)
    return MetadataLoad((), ())


#: Part of `export_hash`: bump it when the same export files load differently.
METADATA_RULES = "3"


def export_files_metadata(files: Iterable[str | Path], keys: Collection[str] | None = None) -> MetadataLoad:
    """The metadata of a library's export files as discovery lists them: PaperForge exports
    give their file stem as the domain; a plain library's `library.json` gives none (its
    Better BibTeX collections are the filter there: `--collection`). `keys`: only those papers."""
    paths = [Path(f) for f in files]
    plain = len(paths) == 1 and paths[0].name == "library.json" and paths[0].parent.name != "exports"
    return load_metadata_files(paths, domain=None, keys=keys) if plain else load_metadata_files(paths, keys=keys)


def export_hash(files: Iterable[str | Path]) -> str:
    """What the loaded metadata depends on: the export files' names and bytes, and the rules."""
    h = hashlib.sha256(f"rules={METADATA_RULES}\0".encode())
    for f in files:
        f = Path(f)
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()
