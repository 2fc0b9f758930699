"""Typed records shared by every stage: canonical blocks, parsed papers, units.

Field names follow ../shared/DESIGN.md §2-3 exactly; they are the data contract.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

ROLES: tuple[str, ...] = (
    "title", "authors", "affiliation", "abstract_heading", "abstract", "heading", "body",
    "list", "equation", "figure", "figure_caption", "table", "table_caption", "footnote",
    "reference_heading", "reference", "backmatter_heading", "backmatter_body",
    "page_header", "page_footer", "page_number", "noise",
)
#: Roles that never reach units, the render or the tree.
FURNITURE_ROLES: frozenset[str] = frozenset({"page_header", "page_footer", "page_number", "noise"})
#: Roles that open a section in the tree.
HEADING_ROLES: frozenset[str] = frozenset(
    {"heading", "abstract_heading", "reference_heading", "backmatter_heading"}
)
#: Roles whose text goes into `body` units.
BODY_ROLES: frozenset[str] = frozenset({"body", "abstract", "list", "equation"})
#: Roles whose text goes into `backmatter_body` units.
BACKMATTER_ROLES: frozenset[str] = frozenset({"backmatter_body", "footnote"})
#: Roles that make an object unit, and the caption roles paired with them.
OBJECT_ROLES: frozenset[str] = frozenset({"figure", "table"})
CAPTION_ROLES: frozenset[str] = frozenset({"figure_caption", "table_caption"})
#: Roles kept out of units although they are rendered (metadata lives in the papers table).
METADATA_ROLES: frozenset[str] = frozenset({"title", "authors", "affiliation"})

PAPER_KEY_RE = re.compile(r"^[A-Za-z0-9._-]+$")


def valid_paper_key(key: str) -> bool:
    """True when `key` is a safe paper key (DESIGN §4): no path separators, no `..`."""
    return bool(PAPER_KEY_RE.fullmatch(key)) and ".." not in key and key not in {".", ""}


class IngestError(Exception):
    """A paper's input could not be read; names the paper, the file and the problem."""

    def __init__(self, paper_id: str, path: str | None, message: str) -> None:
        self.paper_id = paper_id
        self.path = path
        self.message = message
        where = f" ({path})" if path else ""
        super().__init__(f"paper {paper_id}{where}: {message}")

    def to_dict(self) -> dict[str, Any]:
        return {"paper_id": self.paper_id, "path": self.path, "message": self.message}


@dataclass(frozen=True, slots=True)
class Block:
    """One canonical block of a paper (DESIGN §2)."""

    paper_id: str
    block_id: str  # stable: p{page}:{n}
    page: int  # 1-based
    order: int  # reading order over the whole paper, 0-based
    bbox: tuple[float, float, float, float] | None  # x0, y0, x1, y1 in 0-1 of the page
    role: str
    text: str
    raw_label: str
    heading_level: int | None
    source_format: str
    attached_to: str | None = None  # captions: the block_id of their figure/table

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bbox"] = list(self.bbox) if self.bbox is not None else None
        return d


@dataclass(frozen=True, slots=True)
class ParsedPaper:
    """One paper after an adapter: its blocks in reading order plus what the adapter noticed."""

    paper_id: str
    source_format: str
    source_path: str
    adapter: str  # "name/version"
    ocr_result_hash: str
    blocks: tuple[Block, ...]
    warnings: tuple[str, ...] = ()
    title: str | None = None


@dataclass(frozen=True, slots=True)
class HeadingEvent:
    line_number: int
    markdown_level: int
    title: str
    page: int
    block_id: str
    emitted_order: int


@dataclass(frozen=True, slots=True)
class EmittedBlock:
    emitted_order: int
    line_start: int
    line_end: int
    page: int
    block_id: str
    role: str
    emitted_as: str


@dataclass(frozen=True, slots=True)
class RenderMap:
    headings: tuple[HeadingEvent, ...]
    emitted_blocks: tuple[EmittedBlock, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "headings": [asdict(h) for h in self.headings],
            "emitted_blocks": [asdict(e) for e in self.emitted_blocks],
        }


@dataclass(frozen=True, slots=True)
class Render:
    markdown: str
    render_map: RenderMap


@dataclass(slots=True)
class SectionNode:
    """A section of the structure tree; `children` nest by heading level."""

    node_id: str
    title: str
    level: int  # 0 = the paper root
    kind: str  # root | front | body | backmatter | references
    heading_block_id: str | None
    section_path: tuple[str, ...]
    start: int  # emitted_order of the heading (or first block), inclusive
    end: int  # exclusive
    own_block_ids: tuple[str, ...] = ()
    subtree_block_ids: tuple[str, ...] = ()
    object_block_ids: tuple[str, ...] = ()  # figures/tables whose most specific section this is
    page_span: tuple[int, int] | None = None
    children: list["SectionNode"] = field(default_factory=list)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "title": self.title,
            "level": self.level,
            "kind": self.kind,
            "heading_block_id": self.heading_block_id,
            "section_path": list(self.section_path),
            "start": self.start,
            "end": self.end,
            "own_block_ids": list(self.own_block_ids),
            "subtree_block_ids": list(self.subtree_block_ids),
            "object_block_ids": list(self.object_block_ids),
            "page_span": list(self.page_span) if self.page_span else None,
            "children": [c.to_dict() for c in self.children],
        }


@dataclass(frozen=True, slots=True)
class BodyUnit:
    """Section-level text unit (DESIGN §3)."""

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
        d = asdict(self)
        d["section_path"] = list(self.section_path)
        d["page_span"] = list(self.page_span) if self.page_span else None
        d["block_ids"] = list(self.block_ids)
        return d


@dataclass(frozen=True, slots=True)
class ObjectUnit:
    """A figure or table with its caption, text and citing paragraph (DESIGN §3)."""

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
        d = asdict(self)
        d["section_path"] = list(self.section_path)
        d["block_ids"] = list(self.block_ids)
        return d
