"""The adapter: a born-digital PDF's bytes to `RawBlock`s in reading order, with their roles.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from sheaf.core.models import IngestError
from sheaf.formats.common import RawBlock
from sheaf.formats.pdf.blocks import Para, body_size, join_lines, line_spacing, paragraphs
from sheaf.formats.pdf.geometry import Page
from sheaf.formats.pdf.glyphs import absorb_marks, merge_same_baseline, repair_glyphs
from sheaf.formats.pdf.ocr import PageOcr
from sheaf.formats.pdf.patterns import NO_TEXT_LAYER
from sheaf.formats.pdf.pdfium import LOCK, open_document, pdfium_api
from sheaf.formats.pdf.reading_order import mark_crowded, order_page
from sheaf.formats.pdf.roles import (
    assign_levels,
    block_bbox,
    classify,
    equations,
    footnotes,
    front_matter,
    mark_bands,
    numbered_headings,
    objects,
    pick_title,
    plausible_headings,
    plausible_references,
    plausible_structure,
    rank_levels,
)
from sheaf.formats.pdf.scans import no_text, ranges, read_scans
from sheaf.formats.pdf.text_layer import read_page


def parse(paper_id: str, path: Path, data: bytes, warnings: list[str], *,
          ocr: PageOcr | None = None) -> tuple[list[RawBlock], str | None]:
    """Blocks of a PDF in reading order, with typographic roles; the pages without a usable text
    layer read by `ocr` (none when it is None or off)."""
    api = pdfium_api()
    pages: list[Page] = []
    fonts: dict = {}
    with LOCK:  # PDFium is not thread-safe
        doc = open_document(paper_id, path, data, warnings)
        try:
            for i in range(len(doc)):
                try:
                    pages.append(read_page(api, doc, i, fonts))
                except api["pdfium"].PdfiumError as e:
                    warnings.append(f"page {i + 1}: unreadable ({e}); skipped")
        finally:
            doc.close()
    turned = [pg.number for pg in pages if pg.rotated > max(300, 2 * pg.chars)]
    if turned:
        warnings.append(f"pages with mostly rotated text (landscape tables/figures), left out: {ranges(turned)}")
    turned = [pg.number for pg in pages if pg.turned]
    if turned:
        warnings.append(f"pages with turned text (landscape tables/figures), read turned a quarter: {ranges(turned)}")
    for pg in pages:
        merge_same_baseline(pg)
        for ln in pg.lines:
            ln.finish()
        pg.lines = [ln for ln in pg.lines if ln.text]
    scores = read_scans(data, pages, ocr, warnings, paper_id) if ocr is not None and ocr.mode != "off" else {}
    total = sum(pg.chars for pg in pages)
    with_text = [pg for pg in pages if pg.chars >= 50]
    if total < 100 or not with_text:
        raise IngestError(paper_id, str(path), no_text(ocr))
    if len(with_text) < 0.5 * len(pages):
        raise IngestError(paper_id, str(path),
                          no_text(ocr, f" (only {len(with_text)} of {len(pages)} pages have a text layer)"))
    empty = [pg.number for pg in pages if pg.chars < 50]
    if empty:
        warnings.append(f"pages without a text layer (scanned or picture-only): {ranges(empty)}")
    for pg in pages:
        absorb_marks(pg)
    repaired: Counter = Counter()
    for _ in range(3):  # words repaired in one font back the guesses in another ("leftward")
        more = repair_glyphs(pages)
        if not more:
            break
        repaired.update(more)
    if repaired:
        warnings.append("ligature glyphs without a proper Unicode map, read as the letters they are: "
                        + ", ".join(f"{c!r} as {lig!r} ({n} words)" for (c, lig), n in sorted(repaired.items())))
    visible = sum(ln.nchars for pg in pages for ln in pg.lines)
    bad = sum(ln.text.count("\ufffd") for pg in pages for ln in pg.lines)
    if visible - bad < 0.3 * total:
        raise IngestError(paper_id, str(path), "the text layer is unusable (fonts without a Unicode mapping); "
                          + NO_TEXT_LAYER.split(": ", 1)[1])
    if bad > 0.05 * total:
        warnings.append(f"{bad} characters without a Unicode mapping: the text layer is partly garbled")
    body = body_size(pages)
    spacing = line_spacing(pages, body)
    mark_bands(pages, body)

    seq: list[Para] = []
    state: dict = {}
    for pg in pages:
        ordered = order_page(pg)
        mark_crowded(pg)
        paras = paragraphs(ordered, pg, body, spacing)
        for p in paras:
            p.text = join_lines(p.lines)
        classify(paras, body, spacing, state)
        plausible_headings(paras, pg.number == pages[0].number)
        seq.extend(paras)
    numbered_headings(seq, body)
    plausible_structure(seq, len(pages))
    plausible_references(seq)

    title = pick_title(seq, pages, body)
    assign_levels(seq, body, spacing)
    front_matter(seq, pages[0].number)
    rank_levels(seq, body)
    seq = objects(seq, body)
    seq = equations(seq, body)
    footnotes(seq, body, {pg.number: pg for pg in pages})
    by_number = {pg.number: pg for pg in pages}
    out: list[RawBlock] = []
    index = {id(p): k for k, p in enumerate(seq)}
    for p in seq:
        role = p.role
        label = role or p.kind
        if p.kind == "code":
            role = "body"
        elif p.kind == "maybe_heading":
            label = "text"
        raw = RawBlock(page=p.page, label=label, text=p.text, bbox=block_bbox(p.lines, by_number[p.page]),
                       role=role, heading_level=p.level)
        if p.page in scores:  # read by OCR: the block says so, with the page's mean score
            raw.source = "ocr"
            raw.reason = f"{raw.reason + '; ' if raw.reason else ''}OCR, confidence {scores[p.page]:.2f}"
        if p.obj is not None and id(p.obj) in index:
            raw.attach_to = index[id(p.obj)]
        out.append(raw)
    return out, title
