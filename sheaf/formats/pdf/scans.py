"""Scanned pages: which pages of a PDF OCR reads, and what it read as the text layer's `Line`s,
so that reading order, paragraphs, roles and furniture are found as for a born-digital page.

OCR gives each line its text, box and score, not its font: the size comes from the line's own
height (`ocr.BOX_PAD`), sizes near the body's are the body's (a box does not tell 9.5 pt from
10 pt), and weight from the ink its strokes hold.
"""
from __future__ import annotations

import hashlib

from sheaf.formats.pdf.blocks import body_size
from sheaf.formats.pdf.geometry import Line, Page, Run
from sheaf.formats.pdf.ocr import BOX_PAD, MAX_SIDE, SCALE, OcrLine, PageOcr
from sheaf.formats.pdf.patterns import NO_TEXT_LAYER
from sheaf.formats.pdf.pdfium import LOCK, UNMAPPED, pdfium_api
from sheaf.formats.pdf.text_layer import SCAN_TEXT

_DESCENDERS = set("gjpqy,;()[]{}|/")
#: OCR sizes this close to the body size are the body size (a box's height varies with the ink).
SNAP = 0.25
#: A line whose ink per column (per point of size) is this many times running text's is bold.
BOLD_INK = 1.5


def needs_ocr(pg: Page, mode: str) -> bool:
    """A page OCR reads: every page when forced; else one with (almost) no text, one that is a
    picture under a little text, or one whose text is mostly characters without a Unicode mapping
    (fonts that carry no map: glyph ids, not text)."""
    if mode == "force" or pg.chars < 50:
        return True
    if pg.chars < SCAN_TEXT and pg.picture > 0.6:  # a scan under a stamp ("Downloaded from ..."): the picture is the page
        return True
    bad = sum(len(UNMAPPED.findall(ln.text)) for ln in pg.lines)
    return bad > 0.3 * max(1, pg.chars)


def read_scans(data: bytes, pages: list[Page], ocr: PageOcr, warnings: list[str], label: str = "") -> dict[int, float]:
    """OCR the pages that need it, in place (their lines become the OCR's); {page number: mean
    score} of the pages it read."""
    need = [pg for pg in pages if needs_ocr(pg, ocr.mode)]
    if not need:
        return {}
    if not ocr.enabled:
        warnings.append(f"{ocr.problem}: {len(need)} page(s) without a usable text layer left unread")
        return {}
    api = pdfium_api()
    held: dict = {}

    def render(i: int):
        with LOCK:  # PDFium is not thread-safe; OCR itself runs outside the lock
            if "doc" not in held:
                held["doc"] = api["pdfium"].PdfDocument(data)
            page = held["doc"][i]
            try:
                scale = min(SCALE, MAX_SIDE / max(1.0, *page.get_size()))
                return page.render(scale=scale).to_numpy(), scale
            finally:
                page.close()

    try:
        pages_read = ocr.read_pages(hashlib.sha256(data).hexdigest(), [pg.number - 1 for pg in need], render, label)
    finally:
        if "doc" in held:
            with LOCK:
                held["doc"].close()
    if ocr.fallback:
        warnings.append(ocr.fallback)
    for pg in need:  # a page read turned: its geometry is the turned page's, as for a text layer read turned
        turn = pages_read[pg.number - 1].turn if pg.number - 1 in pages_read else 0
        if turn in (1, 3):
            pg.width, pg.height = pg.height, pg.width
            pg.mid = pg.width / 2
            pg.turned = "up" if turn == 1 else "down"
    lines = {pg.number: pages_read[pg.number - 1].lines if pg.number - 1 in pages_read else [] for pg in need}
    # a page forced to OCR where OCR read nothing keeps its text layer
    read_now = [pg for pg in need if lines[pg.number] or not (ocr.mode == "force" and pg.chars)]
    sizes = {pg.number: _sizes(lines[pg.number]) for pg in read_now}
    # the body size OCR pages are snapped to: the text layer's where the PDF has one, else the usual OCR size
    usual = sorted(sz for pg in read_now for sz, ol in zip(sizes[pg.number], lines[pg.number]) if len(ol.text) >= 20)
    body = usual[len(usual) // 2] if usual else 10.0
    kept = [pg for pg in pages if pg not in read_now and pg.chars >= 50]
    if kept:
        layer = body_size(kept)
        body = layer if abs(layer - body) <= SNAP * layer else body
    for pg in read_now:
        sizes[pg.number] = [_snap(sz, body, ol) for sz, ol in zip(sizes[pg.number], lines[pg.number])]
    # the usual weight of running text: ink per column of a line, per point of its size
    weights = sorted(ol.ink * ol.height / sz for pg in read_now
                     for sz, ol in zip(sizes[pg.number], lines[pg.number]) if len(ol.text) >= 20)
    regular = weights[len(weights) // 2] if weights else 0.0
    scores: dict[int, float] = {}
    for pg in read_now:
        pg.lines = _lines(lines[pg.number], sizes[pg.number], pg, regular)
        pg.chars = sum(ln.nchars for ln in pg.lines)
        if lines[pg.number]:
            scores[pg.number] = sum(ol.score for ol in lines[pg.number]) / len(lines[pg.number])
    if scores:
        mean = sum(scores.values()) / len(scores)
        warnings.append(f"pages read by OCR (no usable text layer): {ranges(sorted(scores))}; "
                        f"mean confidence {mean:.2f}")
    return scores


def _sizes(lines: list[OcrLine]) -> list[float]:
    """Each OCR line's font size from the height of its box (the line's own, skew removed)."""
    return [max(1.0, ol.height - BOX_PAD) for ol in lines]


def _snap(size: float, body: float, ol: OcrLine) -> float:
    """A size within `SNAP` of the body's is the body's; a long line's within a little more
    (running text, unless far larger: a title is)."""
    return body if abs(size - body) <= (SNAP + 0.1 * (len(ol.text) >= 40)) * body else size


def _capitals(text: str) -> bool:
    """A short line of words in capitals: a heading's look in a scan, where weight is not known."""
    letters = [c for c in text if c.isalpha()]
    return (len(letters) >= 6 and len(text) <= 90 and len(letters) >= 0.6 * len(text.replace(" ", ""))
            and all(c.isupper() for c in letters))


def _lines(lines: list[OcrLine], sizes: list[float], page: Page, regular: float) -> list[Line]:
    """A page's OCR lines as the text layer's `Line`s, in the order a content stream has them
    (column by column: what the line-spacing statistics read). OCR tells no weight: a line is bold
    when its strokes hold far more ink than running text's (`regular`: ink per column per point)
    and it is shaped like a heading, or when it is a short line in capitals ("STUDY 1: METHOD"),
    which stands in for weight."""
    out = []
    for size, ol in zip(sizes, lines):
        # the baseline: below the line's middle by a quarter of its size (less without descenders)
        base = (ol.top + ol.bottom) / 2 + (0.25 if set(ol.text) & _DESCENDERS else 0.14) * size
        heavy = regular > 0 and ol.ink * ol.height / size > BOLD_INK * regular
        # a heading's shape: it opens with a capital or a number and ends without a sentence's stop
        bold = (heavy and ol.text[:1].isalnum() and not ol.text[:1].islower() and ol.text[-1:] not in ".,;:") \
            or _capitals(ol.text)
        ln = Line(Run(ol.text, ol.x0, ol.x1, base, size, bold, False, font=-1), page.number)
        ln.finish()
        out.append(ln)
    mid = page.width / 2

    def column(ln: Line) -> int:
        return 0 if ln.x1 <= mid + ln.size else (1 if ln.x0 >= mid - ln.size else 0)

    return sorted(out, key=lambda ln: (column(ln), ln.base))


def no_text(ocr: PageOcr | None, detail: str = "") -> str:
    """Why a PDF gives no text, and what a user can do about it as the OCR setting stands."""
    if ocr is None:
        return NO_TEXT_LAYER + detail
    if ocr.mode == "off":
        return f"no text layer (a scan){detail}: OCR is off (SHEAF_OCR=off); SHEAF_OCR=auto reads such pages"
    if ocr.problem:
        return f"no text layer (a scan){detail}: {ocr.problem}"
    return f"no text layer, and OCR read no text on its pages{detail}"


def ranges(nums: list[int]) -> str:
    """Page numbers as ranges: "1-3, 7"."""
    out = []
    start = prev = nums[0]
    for n in nums[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(out)


