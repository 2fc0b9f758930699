"""The parse side's typed records (canonical blocks, parsed papers, the render and its map,
the structure tree), kept apart from `sheaf.core.models` so that the query path, which needs only
the units, does not pay for creating them (~6 ms of a cold `sheaf search`). Import them from
`sheaf.core.models` as always: it loads this module on first use.

Field names are the data contract: the artifacts and the JSON output use them as written here.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sheaf.core.record_dict import record_dict

__all__ = ["NO_PAGE", "Block", "ParsedPaper", "HeadingEvent", "EmittedBlock", "RenderMap", "Render", "SectionNode"]

#: The page of a block that has none (a Zotero note; an annotation Zotero gave no page): no page
#: marker, no page span, no page in `grep`. Only Zotero's own blocks may have it.
NO_PAGE = 0


@dataclass(frozen=True, slots=True)
class Block:
    """One canonical block of a paper: the same shape whatever the OCR or layout format."""

    paper_id: str
    block_id: str  # stable: p{page}:{n}
    page: int  # 1-based; NO_PAGE (0): none (a Zotero note)
    order: int  # reading order over the whole paper, 0-based
    bbox: tuple[float, float, float, float] | None  # x0, y0, x1, y1 in 0-1 of the page
    role: str
    text: str
    raw_label: str
    heading_level: int | None
    source_format: str
    attached_to: str | None = None  # captions: the block_id of their figure/table
    role_reason: str | None = None  # why the block got its role, when not from its label alone

    def to_dict(self) -> dict[str, Any]:
        d = record_dict(self)
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
            "headings": [record_dict(h) for h in self.headings],
            "emitted_blocks": [record_dict(e) for e in self.emitted_blocks],
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

    def walk(self) -> Iterator["SectionNode"]:
        """This section, then every section below it, depth first."""
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
