"""Typed records shared by every stage: canonical blocks, parsed papers, units (the parse
side's records live in `sheaf.core.parsed` and are loaded from here on first use).

Field names are the data contract: the artifacts, the index and the JSON output use them as
written here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sheaf.core.record_dict import record_dict

if TYPE_CHECKING:
    # re-exported, as `__getattr__` below does at run time
    from sheaf.core.parsed import Block as Block
    from sheaf.core.parsed import EmittedBlock as EmittedBlock
    from sheaf.core.parsed import HeadingEvent as HeadingEvent
    from sheaf.core.parsed import ParsedPaper as ParsedPaper
    from sheaf.core.parsed import Render as Render
    from sheaf.core.parsed import RenderMap as RenderMap
    from sheaf.core.parsed import SectionNode as SectionNode

ROLES: tuple[str, ...] = (
    "title", "authors", "affiliation", "abstract_heading", "abstract", "heading", "body",
    "list", "equation", "figure", "figure_caption", "table", "table_caption", "footnote",
    "reference_heading", "reference", "backmatter_heading", "backmatter_body",
    "page_header", "page_footer", "page_number", "noise", "annotation", "note",
)
#: Roles that never reach units, the render or the tree.
FURNITURE_ROLES: frozenset[str] = frozenset({"page_header", "page_footer", "page_number", "noise"})
#: Roles that open a section in the tree.
HEADING_ROLES: frozenset[str] = frozenset(
    {"heading", "abstract_heading", "reference_heading", "backmatter_heading"}
)
#: Roles whose text goes into `body` units.
BODY_ROLES: frozenset[str] = frozenset({"body", "abstract", "list", "equation"})
#: Roles of a reader's own text (Zotero annotations and notes): each makes units of its own kind.
READER_ROLES: frozenset[str] = frozenset({"annotation", "note"})
#: Roles whose text goes into `backmatter_body` units.
BACKMATTER_ROLES: frozenset[str] = frozenset({"backmatter_body", "footnote"})
#: Roles that make an object unit, and the caption roles paired with them.
OBJECT_ROLES: frozenset[str] = frozenset({"figure", "table"})
CAPTION_ROLES: frozenset[str] = frozenset({"figure_caption", "table_caption"})
#: Roles kept out of units although they are rendered (metadata lives in the papers table).
METADATA_ROLES: frozenset[str] = frozenset({"title", "authors", "affiliation"})

PAPER_KEY_RE = re.compile(r"^[A-Za-z0-9._-]+$")


def valid_paper_key(key: str) -> bool:
    """True when `key` is a safe paper key (it names a folder and an artifact path): no path separators, no `..`."""
    return bool(PAPER_KEY_RE.fullmatch(key)) and ".." not in key and key not in {".", ""}


_CHAR_NAMES = {" ": "a space", "/": "a slash", "\\": "a backslash", "\t": "a tab", ":": "a colon"}


def paper_key_problem(key: str) -> str | None:
    """Why `key` is not a valid paper key, in words ("it contains a space"), or None when it is.
    A paper key is the Zotero item key: letters, digits, '.', '_' and '-' only, no '..'."""
    if valid_paper_key(key):
        return None
    if key in {".", ""}:
        return "it is empty or '.'"
    if ".." in key:
        return "it contains '..'"
    bad = list(dict.fromkeys(c for c in key if not PAPER_KEY_RE.fullmatch(c)))
    names = [_CHAR_NAMES.get(c, repr(c)) for c in bad[:3]]
    return f"it contains {' and '.join(names)} (a paper key has only letters, digits, '.', '_' and '-')"


class IngestError(Exception):
    """A paper's input could not be read; names the paper, the file and the problem.
    `bug`: the reader itself failed on the input (an exception it did not foresee), as opposed
    to a file that cannot be read (corrupt, truncated, empty, no text): the paper is then
    *failed*, not *unreadable*, and the build exits 1. `upstream`: not this step's input but an
    earlier step's missing output (the paper's state comes from that step's error)."""

    def __init__(self, paper_id: str, path: str | None, message: str, *, bug: bool = False,
                 upstream: bool = False) -> None:
        self.paper_id = paper_id
        self.path = path
        self.message = message
        self.bug = bug
        self.upstream = upstream
        #: the input's hash, where the step that failed knows it (recorded with the error)
        self.ocr_result_hash: str | None = None
        where = f" ({path})" if path else ""
        super().__init__(f"paper {paper_id}{where}: {message}")

    def to_dict(self) -> dict[str, Any]:
        return {"paper_id": self.paper_id, "path": self.path, "message": self.message}


#: What to do about an unreadable paper (every surface says the same).
UNREADABLE_FIX = "replace the file (a Zotero item: its attachment, in Zotero), then run `sheaf build`"


def unreadable_reason(error: BaseException) -> str | None:
    """Why a paper's file cannot be read, when `error` says that (a corrupt, truncated, empty or
    missing file, a PDF without text): the paper is then *unreadable*, a state of the paper and
    not a failed build. None for anything else (a reader's bug: the paper is *failed*)."""
    if isinstance(error, IngestError):
        return None if error.bug or error.upstream else error.message
    if isinstance(error, FileNotFoundError):
        return f"file not found: {error.filename or error}"
    if getattr(error, "code", None) == "BAD_INPUT":  # a SheafError about an input file
        return str(error)
    return None


_PARSED = frozenset({"Block", "ParsedPaper", "HeadingEvent", "EmittedBlock", "RenderMap", "Render", "SectionNode"})


def __getattr__(name: str) -> Any:
    """The parse side's records (`sheaf.core.parsed`), loaded on first use."""
    if name in _PARSED:
        from sheaf.core import parsed

        return getattr(parsed, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class BodyUnit:
    """Section-level text unit: a section's own text (or one part of it) under its heading path."""

    unit_id: str  # {paper}:body:{node_id}[:backmatter][:part_NNN]
    short_id: str
    paper_id: str
    node_id: str
    section_path: tuple[str, ...]
    section_level: int
    page_span: tuple[int, int] | None
    block_ids: tuple[str, ...]
    text: str
    token_count: int
    unit_kind: str  # body | backmatter_body
    part_ordinal: int  # 0 when the section is not split, else 1..n

    def to_dict(self) -> dict[str, Any]:
        d = record_dict(self)
        d["section_path"] = list(self.section_path)
        d["page_span"] = list(self.page_span) if self.page_span else None
        d["block_ids"] = list(self.block_ids)
        return d


@dataclass(frozen=True, slots=True)
class ObjectUnit:
    """A figure or table with its caption, text and citing paragraph."""

    unit_id: str  # {paper}:{figure|table}:{block_id}
    short_id: str
    paper_id: str
    object_kind: str  # figure | table
    label: str | None  # "Figure 3"
    caption: str
    table_text: str
    nearby_text: str
    node_id: str
    section_path: tuple[str, ...]
    page: int
    block_ids: tuple[str, ...]  # the object block and its caption

    def to_dict(self) -> dict[str, Any]:
        d = record_dict(self)
        d["section_path"] = list(self.section_path)
        d["block_ids"] = list(self.block_ids)
        return d


@dataclass(frozen=True, slots=True)
class PaperMeta:
    """One paper's library metadata (the `papers` table row)."""

    key: str  # the paper id: Zotero item key, else citation key, else the export's item id
    citation_key: str | None
    title: str
    authors: tuple[str, ...]  # "Given Family" (or the literal name), in export order
    first_author: str | None
    year: int | None
    journal: str | None
    doi: str | None
    pmid: str | None
    abstract: str | None
    collections: tuple[str, ...]  # collection paths, "Parent/Child"
    domain: str | None
    item_type: str | None = None
    source: str | None = None  # the export file it came from
    tags: tuple[str, ...] = ()  # Zotero tags / keywords
    link: str | None = None  # zotero://select/... of the item, when it is a Zotero item


    @property
    def paper_id(self) -> str:
        return self.key

    def to_dict(self) -> dict[str, Any]:
        d = record_dict(self)
        d["authors"] = list(self.authors)
        d["collections"] = list(self.collections)
        d["tags"] = list(self.tags)
        return d
