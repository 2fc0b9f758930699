"""OCR render: canonical blocks → Markdown plus the render-map (docs/architecture.md, "Per-paper transforms in detail").

The render-map records every heading event and every emitted block with its Markdown line
range, so the structure tree is built from what was emitted, in emitted order. Page
furniture is never emitted. A caption is emitted right after the figure/table it belongs
to (so emitted order can differ from reading order); reference items with no heading of
their own get a synthetic "References" heading so that they form their own section.
"""
from __future__ import annotations

from sheaf.core.models import (
    FURNITURE_ROLES,
    HEADING_ROLES,
    Block,
    EmittedBlock,
    HeadingEvent,
    ParsedPaper,
    Render,
    RenderMap,
)
from sheaf.core.parsed import NO_PAGE

_EMITTED_AS = {
    "title": "title",
    "authors": "metadata",
    "affiliation": "metadata",
    "abstract": "paragraph",
    "body": "paragraph",
    "backmatter_body": "paragraph",
    "list": "list",
    "equation": "equation",
    "figure": "figure",
    "table": "table",
    "figure_caption": "caption",
    "table_caption": "caption",
    "footnote": "footnote",
    "reference": "reference",
}


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.headings: list[HeadingEvent] = []
        self.emitted: list[EmittedBlock] = []
        self.page = 0

    def _add(self, text_lines: list[str]) -> tuple[int, int]:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")
        start = len(self.lines) + 1  # 1-based line numbers
        self.lines.extend(text_lines)
        return start, len(self.lines)

    def page_marker(self, page: int) -> None:
        if page != self.page and page != NO_PAGE:
            self.page = page
            self._add([f"<!-- page {page} -->"])

    def emit(self, b: Block, text_lines: list[str], emitted_as: str) -> None:
        start, end = self._add(text_lines)
        self.emitted.append(EmittedBlock(len(self.emitted), start, end, b.page, b.block_id, b.role, emitted_as))

    def heading(self, block_id: str, role: str, page: int, title: str, md_level: int) -> None:
        start, end = self._add([f"{'#' * md_level} {title}"])
        order = len(self.emitted)
        self.headings.append(HeadingEvent(start, md_level, title, page, block_id, order))
        self.emitted.append(EmittedBlock(order, start, end, page, block_id, role, "heading"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _block_lines(b: Block) -> list[str]:
    text = b.text
    if b.role == "equation":
        body = text.strip()
        if not body.startswith("$$"):
            body = f"$$\n{body}\n$$"
        return body.split("\n")
    if b.role == "figure":
        return [f"*[Figure{': ' + _one_line(text) if text else ''}]*"]
    if b.role == "table":
        return ["```table", *text.split("\n"), "```"] if text else ["*[Table]*"]
    if b.role in ("figure_caption", "table_caption"):
        return [f"> {_one_line(text)}"]
    if b.role == "footnote":
        return [f"> Note: {_one_line(text)}"]
    if b.role == "reference":
        return [f"- {_one_line(text)}"]
    if b.role in ("authors", "affiliation"):
        return [f"> {_one_line(text)}"]
    return text.split("\n")


def render_paper(paper: ParsedPaper, heading_offset: int = 1) -> Render:
    """Markdown and render-map of one paper; headings at `heading_level + heading_offset`."""
    blocks = [b for b in paper.blocks if b.role not in FURNITURE_ROLES and (b.text or b.role in ("figure", "table"))]
    captions_of: dict[str, list[Block]] = {}
    for b in blocks:
        if b.attached_to:
            captions_of.setdefault(b.attached_to, []).append(b)
    objects = {b.block_id for b in blocks if b.role in ("figure", "table")}
    w = _Writer()

    title_block = next((b for b in blocks if b.role == "title"), None)
    title = _one_line(title_block.text) if title_block else (paper.title or paper.paper_id)
    if title_block is not None:
        w.emit(title_block, [f"# {title}"], "title")
    else:
        w._add([f"# {title}"])
    w._add([f"> paper: {paper.paper_id} · source: {paper.source_format} · ocr_result_hash: {paper.ocr_result_hash[:12]}"])

    in_references = False
    for b in blocks:
        if b is title_block or (b.attached_to and b.attached_to in objects):
            continue  # the title went first; attached captions follow their object
        if b.role == "title":
            # a second title-like block: keep its text as metadata
            w.page_marker(b.page)
            w.emit(b, [f"> {_one_line(b.text)}"], "metadata")
            continue
        w.page_marker(b.page)
        if b.role in HEADING_ROLES:
            md = min(6, max(2, (b.heading_level or 1) + heading_offset))
            w.heading(b.block_id, b.role, b.page, _one_line(b.text), md)
            in_references = b.role == "reference_heading"
            continue
        if b.role == "reference" and not in_references:
            w.heading(f"{b.block_id}#references", "reference_heading", b.page, "References", 1 + heading_offset)
            in_references = True
        w.emit(b, _block_lines(b), _EMITTED_AS.get(b.role, "paragraph"))
        for cap in captions_of.get(b.block_id, ()):
            w.emit(cap, _block_lines(cap), "caption")
    markdown = "\n".join(w.lines).rstrip() + "\n"
    return Render(markdown, RenderMap(tuple(w.headings), tuple(w.emitted)))
