"""Build small canonical papers for tests without any adapter."""
from __future__ import annotations

from sheaf.core.models import Block, EmittedBlock, HeadingEvent, ParsedPaper, RenderMap


def blk(role: str, text: str = "", level: int | None = None, page: int = 1,
        attached_to: str | None = None, bid: str | None = None) -> dict:
    return {"role": role, "text": text, "level": level, "page": page, "attached_to": attached_to, "bid": bid}


def make_paper(specs: list[dict], paper_id: str = "TEST1", title: str = "A Test Paper") -> ParsedPaper:
    """A ParsedPaper whose blocks follow `specs` in reading order; ids p{page}:{n}."""
    per_page: dict[int, int] = {}
    blocks = []
    for order, s in enumerate(specs):
        n = per_page.get(s["page"], 0)
        per_page[s["page"]] = n + 1
        bid = s["bid"] or f"p{s['page']}:{n}"
        blocks.append(Block(paper_id, bid, s["page"], order, None, s["role"], s["text"], s["role"],
                            s["level"], "test", s["attached_to"]))
    return ParsedPaper(paper_id, "test", "memory", "test/1", "0" * 64, tuple(blocks), (), title)


def make_render_map(items: list[tuple[str, str, str, int | None]]) -> RenderMap:
    """A render-map from (block_id, role, title_or_text, heading_level) in emitted order."""
    headings, emitted = [], []
    for i, (bid, role, text, level) in enumerate(items):
        line = i * 2 + 1
        if level is not None:
            headings.append(HeadingEvent(line, level + 1, text, 1, bid, i))
            emitted.append(EmittedBlock(i, line, line, 1, bid, role, "heading"))
        else:
            emitted.append(EmittedBlock(i, line, line, 1, bid, role, "paragraph"))
    return RenderMap(tuple(headings), tuple(emitted))
