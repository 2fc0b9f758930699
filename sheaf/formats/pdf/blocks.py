"""Lines into blocks: paragraphs, headings, captions and code, by spacing and typography.
"""
from __future__ import annotations

import re
from collections import Counter

from sheaf.formats.common import heading_role, numbering_depth
from sheaf.formats.pdf.geometry import Line, Page
from sheaf.formats.pdf.patterns import BULLET, CAPTION_START, NOT_A_HEADING, OPEN_END


class Para:
    __slots__ = ("lines", "kind", "role", "level", "text", "gap_after", "gap_before", "page", "obj",
                 "indented", "short", "x0", "x1")

    def __init__(self, line: Line):
        self.lines = [line]
        self.kind = "text"  # text | heading | maybe_heading | code | title | object | equation
        self.role: str | None = None
        self.level: int | None = None
        self.text = ""
        self.gap_after: float | None = None  # baseline distance to the next block of the column
        self.gap_before: float | None = None  # baseline distance from the previous block of the column
        self.page = line.page
        self.obj: Para | None = None  # captions: their figure/table block
        self.indented = False  # starts right of the column's left edge without being centred
        self.short = True  # the first line ends well before the column's right edge
        self.x0, self.x1 = line.x0, line.x1  # horizontal extent of the lines so far

    @property
    def size(self) -> float:
        c: Counter[float] = Counter()
        for ln in self.lines:
            c[ln.size] += ln.nchars
        return c.most_common(1)[0][0]

    @property
    def bold(self) -> float:
        n = sum(ln.nchars for ln in self.lines) or 1
        return sum(ln.bold * ln.nchars for ln in self.lines) / n

    @property
    def crowded(self) -> float:
        return sum(ln.crowded for ln in self.lines) / len(self.lines)


def body_size(pages: list[Page]) -> float:
    """The size covering the most characters of body-like lines (long lines of running text),
    not the most common span: an appendix or reference list in small type must not win."""
    c: Counter[float] = Counter()
    for pg in _before_references(pages):
        for ln in pg.lines:
            if ln.nchars >= 30 and ln.mono < 0.5 and _prose_like(ln.text):
                c[round(ln.size * 2) / 2] += ln.nchars
    if not c:
        for pg in pages:
            for ln in pg.lines:
                c[round(ln.size * 2) / 2] += ln.nchars
    if not c:
        return 10.0
    bucket = c.most_common(1)[0][0]
    exact: Counter[float] = Counter()
    for pg in pages:
        for ln in pg.lines:
            if round(ln.size * 2) / 2 == bucket:
                exact[round(ln.size, 1)] += ln.nchars
    return exact.most_common(1)[0][0]


def _prose_like(text: str) -> bool:
    """Running text, not a table row: words of letters, few digits."""
    if text.count(" ") < 4:
        return False
    digits = sum(map(str.isdigit, text))
    return digits <= 0.1 * len(text) and sum(map(str.isalpha, text)) >= 0.6 * len(text)


def _before_references(pages: list[Page]) -> list[Page]:
    """The pages up to the one holding a references heading (the last such page when the
    heading shows up in the first half, e.g. in a table of contents, is ignored): the
    reference list and appendix tables in small type after it must not decide the body size."""
    n = len(pages)
    for k in range(n - 1, n // 3, -1):
        if any(ln.nchars <= 40 and heading_role(ln.text) == "reference_heading" for ln in pages[k].lines):
            return pages[:k + 1]
    return pages


def line_spacing(pages: list[Page], body: float) -> float:
    """The usual baseline distance between two lines of a body paragraph."""
    c: Counter[float] = Counter()
    for pg in pages:
        prev = None
        for ln in pg.lines:  # content order: consecutive lines of a paragraph
            if prev is not None and abs(ln.size - body) < 0.5 and abs(prev.size - body) < 0.5:
                d = ln.base - prev.base
                if 0.9 * body <= d <= 2.2 * body:
                    c[round(d * 2) / 2] += 1
            prev = ln
    return c.most_common(1)[0][0] if c else 1.2 * body


def is_big(size: float, body: float) -> bool:
    return size >= body * 1.08 and size - body >= 0.8


def is_heading_line(ln: Line, body: float, cont: bool = False) -> bool:
    """Typographically a heading line: large, or wholly bold at body size. `cont`: the
    line would continue a heading (so it may start in lower case)."""
    if ln.nchars == 0 or ln.nchars > 160 or ln.mono > 0.5 or ln.crowded or ln.band:
        return False
    if is_big(ln.size, body):
        return True
    return (ln.bold >= 0.9 and ln.bold_end and ln.size >= body * 0.85
            and ln.text[-1:] not in ",;" and (cont or not ln.text[:1].islower()))


def paragraphs(ordered: list[Line], pg: Page, body: float, spacing: float) -> list[Para]:
    """Group a page's ordered lines into blocks."""
    right_edge = {}
    left_edge = {}
    for side in {ln.side for ln in ordered} | {"full"}:
        xs = sorted(ln.x1 for ln in ordered if ln.side == side and ln.nchars >= 20)
        right_edge[side] = xs[int(len(xs) * 0.9)] if xs else pg.width
        xs = sorted(ln.x0 for ln in ordered if ln.side == side and ln.nchars >= 20)
        left_edge[side] = xs[int(len(xs) * 0.1)] if xs else 0.0
    paras: list[Para] = []
    cur: Para | None = None
    for ln in ordered:
        if cur is None or ln.band or cur.lines[-1].band or _breaks(cur, ln, body, spacing, right_edge):
            gap = None
            if cur is not None and not cur.lines[-1].band and ln.side == cur.lines[-1].side:
                gap = cur.gap_after = ln.base - cur.lines[-1].base
            cur = Para(ln)
            cur.gap_before = gap
            lm = ln.x0 - left_edge[ln.side]
            rm = right_edge[ln.side] - ln.x1
            cur.indented = lm > 0.8 * ln.size and abs(lm - rm) > 2 * ln.size
            cur.short = rm > 2 * ln.size
            paras.append(cur)
        else:
            cur.lines.append(ln)
            cur.x0, cur.x1 = min(cur.x0, ln.x0), max(cur.x1, ln.x1)
    return paras


def _breaks(cur: Para, ln: Line, body: float, spacing: float, right_edge: dict) -> bool:
    """True when `ln` starts a new block rather than continuing `cur`."""
    prev = cur.lines[-1]
    if ln.cell is not None or prev.cell is not None:
        return ln.cell != prev.cell  # a table cell's lines are one block (see _table_cells)
    d = ln.base - prev.base
    size = max(ln.size, prev.size)
    if ln.side != prev.side:
        # the short last line of a full-width caption/paragraph lands in a column: let it continue
        if not (prev.side == "full" and abs(ln.x0 - cur.lines[0].x0) < 0.6 * size
                and 0.3 * size < d <= spacing * size / body * 1.3 and abs(ln.size - prev.size) < 0.5):
            return True
    if d <= 0.3 * size:  # upward jump (new column / float) or the same baseline
        return True
    tol = max(0.6, 0.06 * size)
    if abs(ln.size - prev.size) > tol and abs(ln.top_size - prev.top_size) > tol:
        return True
    scaled = spacing * size / body
    if d > max(scaled * 1.35, 1.5 * prev.size) + 0.5:
        return True
    h_prev = is_heading_line(prev, body, cont=len(cur.lines) > 1)
    h_ln = is_heading_line(ln, body, cont=h_prev)
    if h_prev != h_ln:
        return True
    if h_prev:  # a heading continues only on a tight, unnumbered line of the same weight
        return (d > 1.2 * scaled or abs(ln.bold - prev.bold) > 0.3 or numbering_depth(ln.text) is not None
                or len(cur.lines) >= (6 if size >= 1.5 * body else 3))
    if prev.crowded != ln.crowded:
        return True
    if (prev.mono > 0.5) != (ln.mono > 0.5):
        return True
    if ln.mono > 0.5:
        return False
    # horizontal: the new line must overlap the paragraph
    px0, px1 = cur.x0, cur.x1
    ov = min(px1, ln.x1) - max(px0, ln.x0)
    if ov < 0.5 * min(px1 - px0, ln.x1 - ln.x0):
        return True
    if CAPTION_START.match(ln.text) and (prev.text[-1:] in ".:!?)" or d > 1.15 * scaled):
        return True  # "Figure 2: ..." opens a caption unless it merely wraps inside a sentence
    if BULLET.match(ln.text):
        if BULLET.match(cur.lines[0].text) or ln.x0 <= prev.x0 + 0.3 * size:
            return True
    edge = right_edge[ln.side]
    # first-line indent: the new line starts indented while the previous one was flush left
    if ln.x0 - prev.x0 >= 0.6 * size and abs(prev.x0 - px0) < 0.3 * size \
            and ln.x1 >= edge - 2 * size and not BULLET.match(cur.lines[0].text):
        if len(cur.lines) > 1 or prev.x1 < edge - 2 * size:
            return True
    # a short previous line that ends a sentence closes the paragraph
    if prev.x1 < edge - 3 * size and prev.text[-1:] in ".:?!":
        return True
    # a numbered short line of its own ("1. INTRODUCTION" in body type) is a heading
    # the paragraph under it must not swallow
    if len(cur.lines) == 1 and prev.x1 < edge - 3 * size and numbered_title(prev.text):
        return True
    return False


def numbered_title(text: str) -> bool:
    """Shaped like a numbered section title: '2.4. Wavelength calibration', '1 INTRODUCTION':
    a section number (at most 30 at the top level), then a capitalised phrase of at most
    10 words without closing punctuation."""
    m = SECTION_NUM.match(text)
    if not m or int(m.group(1)) > 30 or text[-1:] in ".,;:" or len(text.split()) > 11:
        return False
    rest = text[m.end():]
    return rest[:1].isupper() and sum(ch.isalpha() for ch in rest) >= 3


def never_heading(text: str) -> bool:
    """Text no paper sets as a heading, whatever its type says: a URL or DOI, an author line, a
    reference, an equation or numbered condition (`NOT_A_HEADING`), or a sentence that stops
    mid-way (its last word, in lower case, one that cannot end a phrase: "can be written as")."""
    if NOT_A_HEADING.search(text):
        return True
    words = text.rstrip(" .:").split()
    return len(words) >= 4 and words[-1] in OPEN_END


SECTION_NUM = re.compile(r"^(\d{1,2})(?:\.\d{1,2}){0,3}\.?\s+")


def join_lines(lines: list[Line]) -> str:
    """Lines of one paragraph joined with spaces; line-end hyphens removed inside words."""
    out = ""
    for ln in lines:
        t = ln.text
        if not out:
            out = t
            continue
        if out.endswith("\x02") or (out.endswith("-") and len(out) > 1 and out[-2].isalpha()):
            if out[-2:-1].islower() and t[:1].islower():
                out = out[:-1] + t  # "tradi-" + "tional"
            else:
                out = out[:-1] + "-" + t  # "LLM-" + "based"
        else:
            out += " " + t
    return out.replace("\x02", "-")
