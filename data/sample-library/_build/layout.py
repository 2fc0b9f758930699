"""A small page-layout engine shared by the PDF writer and the OCR/layout-format writers.

It flows a `Paper` onto US-letter pages (612 × 792 pt, top-left origin) in one or two
columns, wrapping text with the real advance widths of the standard PDF fonts, and returns
positioned fragments. The PDF writer draws the fragments' lines; the PaddleOCR-VL, MinerU
and Docling writers turn the same fragments into blocks with bounding boxes, so that the
synthetic OCR outputs have a coherent geometry (columns, page breaks, furniture).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fontmetrics import WIDTHS
from model import Eq, Fig, Foot, H, L, P, Paper, Tab

PAGE_W, PAGE_H = 612.0, 792.0
LEFT, RIGHT, TOP, BOTTOM = 54.0, 558.0, 66.0, 738.0
GAP = 18.0

HEADER_Y = 40.0  # baseline of the running header
NUMBER_Y = 764.0  # baseline of the page number
FOOTER_Y = 778.0  # baseline of the footer line (where the writer uses one)


def char_width(ch: str, font: str) -> float:
    try:
        code = ch.encode("cp1252")[0]
    except UnicodeEncodeError:
        return 500.0 if not font.startswith("Helvetica") else 556.0
    if code < 32:
        return 0.0
    w = WIDTHS[font][code - 32]
    return float(w if w is not None else 500)


def text_width(s: str, font: str, size: float) -> float:
    return sum(char_width(c, font) for c in s) * size / 1000.0


def wrap(text: str, font: str, size: float, width: float) -> list[str]:
    """Greedy line breaking on spaces (words wider than the line stay whole)."""
    words = text.split()
    lines: list[str] = []
    cur = ""
    for w in words:
        cand = f"{cur} {w}" if cur else w
        if cur and text_width(cand, font, size) > width:
            lines.append(cur)
            cur = w
        else:
            cur = cand
    if cur:
        lines.append(cur)
    return lines or [""]


@dataclass
class Line:
    x: float
    y: float  # baseline, from the top of the page
    text: str
    font: str
    size: float


@dataclass
class Frag:
    """A positioned piece of one element on one page/column."""

    page: int  # 1-based
    kind: str
    bbox: tuple[float, float, float, float]  # x0, y0, x1, y1, top-left origin, points
    text: str
    lines: list[Line] = field(default_factory=list)
    elem: int = -1  # index of the source element (fragments of one paragraph share it)
    part: int = 0
    col: int = 0
    band: int = 1  # 0: full-width front matter; 1: column flow; 2: footnotes; -1/3: furniture
    obj: object = None  # the Fig/Tab/Eq/H behind the fragment
    rules: list[tuple[float, float, float, float]] = field(default_factory=list)  # table rules
    cells: list[tuple[int, int, tuple[float, float, float, float], str]] = field(default_factory=list)


@dataclass
class Style:
    body_font: str = "Times-Roman"
    body_size: float = 10.0
    leading: float = 1.22
    para_gap: float = 4.0
    title_size: float = 17.0
    head_sizes: tuple[float, float, float] = (11.0, 10.0, 10.0)
    head_fonts: tuple[str, str, str] = ("Helvetica-Bold", "Helvetica-Bold", "Helvetica-Oblique")
    caption_font: str = "Helvetica"
    caption_size: float = 8.0
    ref_size: float = 8.5
    foot_size: float = 7.5
    table_size: float = 8.0
    heading_style: str = "plain"  # plain "2.1 Title" | dot "2.1. Title"


def style_for(paper: Paper) -> Style:
    lay = paper.layout
    st = Style(body_size=lay.get("body_size", 10.0), heading_style=lay.get("heading_style", "plain"))
    st.leading = lay.get("leading", 1.22)
    st.ref_size = min(st.ref_size, st.body_size - 1)
    if lay.get("columns", 1) == 1:
        st.head_sizes = (12.0, 10.5, 10.5)
    return st


class Flow:
    """Flows the elements of a paper into columns and pages."""

    def __init__(self, paper: Paper, style: Style) -> None:
        self.paper = paper
        self.st = style
        self.ncols = paper.layout.get("columns", 1)
        cw = (RIGHT - LEFT - GAP * (self.ncols - 1)) / self.ncols
        self.cols = [(LEFT + i * (cw + GAP), cw) for i in range(self.ncols)]
        self.frags: list[Frag] = []
        self.page = 1
        self.col = 0
        self.y = TOP
        self.col_top = TOP
        self.bottoms: dict[tuple[int, int], float] = {}
        self.elem = 0

    # --- geometry -----------------------------------------------------------------
    @property
    def x0(self) -> float:
        return self.cols[self.col][0]

    @property
    def width(self) -> float:
        return self.cols[self.col][1]

    def bottom(self, page: int | None = None, col: int | None = None) -> float:
        return self.bottoms.get((page or self.page, self.col if col is None else col), BOTTOM)

    def space(self) -> float:
        return self.bottom() - self.y

    def next_column(self) -> None:
        if self.col + 1 < self.ncols:
            self.col += 1
        else:
            self.page += 1
            self.col = 0
            self.col_top = TOP
        self.y = self.col_top

    def lead(self, size: float) -> float:
        return round(size * self.st.leading, 2)

    # --- front matter ---------------------------------------------------------------
    def front(self) -> None:
        p, st = self.paper, self.st
        full = RIGHT - LEFT
        self.y = TOP + 10
        self._block("title", p.title, "Helvetica-Bold", st.title_size, LEFT, full, band=0,
                    leading=1.18, center=self.ncols == 2)
        self.y += 6
        self._block("authors", p.author_line(), "Helvetica", 10.0, LEFT, full, band=0, center=self.ncols == 2)
        for a in p.affiliations:
            self._block("affiliation", a, "Helvetica-Oblique", 8.0, LEFT, full, band=0, center=self.ncols == 2)
        self.y += 8
        if p.layout.get("abstract_heading", True):
            self._block("abstract_heading", "Abstract", "Helvetica-Bold", 10.0, LEFT, full, band=0)
            self.y += 1
        self._block("abstract", p.abstract, st.body_font, st.body_size - 0.5, LEFT, full, band=0)
        if p.keywords and p.layout.get("keywords", True):
            self.y += 2
            self._block("keywords", "Keywords: " + "; ".join(p.keywords), st.body_font,
                        st.body_size - 1, LEFT, full, band=0)
        self.y += 12
        self.col_top = self.y

    def _block(self, kind: str, text: str, font: str, size: float, x0: float, width: float, *,
               band: int = 1, leading: float | None = None, center: bool = False, obj=None) -> Frag:
        lines = wrap(text, font, size, width)
        lh = round(size * (leading or self.st.leading), 2)
        out = []
        y = self.y
        for ln in lines:
            y += lh
            w = text_width(ln, font, size)
            x = x0 + (width - w) / 2 if center else x0
            out.append(Line(x, y - size * 0.22, ln, font, size))
        x_min = min(l.x for l in out)
        x_max = max(l.x + text_width(l.text, font, size) for l in out)
        fr = Frag(self.page, kind, (x_min, self.y + 1, x_max, y + 1), " ".join(lines), out,
                  elem=self.elem, band=band, col=-1 if band == 0 else self.col, obj=obj)
        self.frags.append(fr)
        self.y = y
        self.elem += 1
        return fr

    # --- body -----------------------------------------------------------------------
    def text_elem(self, kind: str, text: str, font: str, size: float, *, keep: int = 1,
                  indent: float = 0.0, obj=None, gap_before: float = 0.0) -> list[Frag]:
        """Place a paragraph line by line, breaking across columns and pages."""
        lh = self.lead(size)
        lines = wrap(text, font, size, self.width - indent)
        if self.y > self.col_top:
            self.y += gap_before
        if self.space() < lh * min(keep, len(lines)):
            self.next_column()
        frags: list[Frag] = []
        cur: list[Line] = []
        start = self.y
        part = 0

        def close() -> None:
            nonlocal cur, part
            if not cur:
                return
            x_max = max(l.x + text_width(l.text, font, size) for l in cur)
            fr = Frag(self.page, kind, (self.x0 + indent, start + 1, x_max, self.y + 1),
                      " ".join(l.text for l in cur), cur, elem=self.elem, part=part, col=self.col, obj=obj)
            self.frags.append(fr)
            frags.append(fr)
            cur = []
            part += 1

        for ln in lines:
            if self.y + lh > self.bottom():
                close()
                self.next_column()
                start = self.y
            self.y += lh
            cur.append(Line(self.x0 + indent, self.y - size * 0.22, ln, font, size))
        close()
        self.elem += 1
        self.y += self.st.para_gap
        return frags

    def heading(self, h: H) -> None:
        st = self.st
        size = st.head_sizes[min(h.level, 3) - 1]
        font = st.head_fonts[min(h.level, 3) - 1]
        text = h.text(st.heading_style)
        lh = self.lead(size)
        need = lh * len(wrap(text, font, size, self.width)) + 3 * self.lead(st.body_size) + 8
        if self.y > self.col_top:
            self.y += 6 if h.level == 1 else 3
        if self.space() < need:
            self.next_column()
        self.text_elem("heading", text, font, size, keep=9, obj=h)
        self.y -= st.para_gap - 1.5

    def figure(self, f: Fig) -> None:
        st = self.st
        cap = wrap(f.full, st.caption_font, st.caption_size, self.width)
        cap_h = len(cap) * self.lead(st.caption_size)
        need = f.height + 6 + cap_h
        if self.y > self.col_top:
            self.y += 6
        if self.space() < need:
            self.next_column()
        box = (self.x0 + 8, self.y + 2, self.x0 + self.width - 8, self.y + 2 + f.height)
        self.frags.append(Frag(self.page, "figure", box, "", elem=self.elem, col=self.col, obj=f))
        self.y = box[3] + 4
        self.elem += 1
        self.text_elem("figure_caption", f.full, st.caption_font, st.caption_size, keep=99, obj=f)
        self.y += 4

    def table(self, t: Tab) -> None:
        st = self.st
        if self.y > self.col_top:
            self.y += 6
        size = st.table_size
        ncol = len(t.rows[0])
        while True:
            widths = [max(text_width(r[i], "Helvetica-Bold" if ri == 0 else "Helvetica", size)
                          for ri, r in enumerate(t.rows)) for i in range(ncol)]
            pad = 8.0
            if sum(widths) + pad * (ncol - 1) <= self.width or size <= 5.5:
                break
            size -= 0.25
        if sum(widths) + pad * (ncol - 1) > self.width:
            raise ValueError(f"{self.paper.key}: table {t.label} too wide for its column")
        extra = (self.width - sum(widths) - pad * (ncol - 1)) / max(1, ncol)
        widths = [w + extra for w in widths]
        cap = wrap(t.full, st.caption_font, st.caption_size, self.width)
        lh = round(size * 1.35, 2)
        note_lines = wrap(t.note, st.caption_font, st.caption_size - 0.5, self.width) if t.note else []
        need = len(cap) * self.lead(st.caption_size) + 4 + lh * len(t.rows) + 6 + \
            len(note_lines) * self.lead(st.caption_size - 0.5)
        if self.space() < need:
            self.next_column()
        self.text_elem("table_caption", t.full, st.caption_font, st.caption_size, keep=99, obj=t)
        top = self.y
        y = top + 2
        rules = [(self.x0, y, self.x0 + self.width, y)]
        lines, cells = [], []
        for ri, row in enumerate(t.rows):
            y += lh
            x = self.x0
            font = "Helvetica-Bold" if ri == 0 else "Helvetica"
            for ci, c in enumerate(row):
                lines.append(Line(x + 1, y - size * 0.3, c, font, size))
                cells.append((ri, ci, (x, y - lh, x + widths[ci], y), c))
                x += widths[ci] + pad
            if ri == 0:
                rules.append((self.x0, y + 1.5, self.x0 + self.width, y + 1.5))
        y += 3
        rules.append((self.x0, y, self.x0 + self.width, y))
        fr = Frag(self.page, "table", (self.x0, top + 2, self.x0 + self.width, y), t.html(), lines,
                  elem=self.elem, col=self.col, obj=t, rules=rules, cells=cells)
        self.frags.append(fr)
        self.elem += 1
        self.y = y + 3
        if t.note:
            self.text_elem("table_note", t.note, st.caption_font, st.caption_size - 0.5, keep=99, obj=t)
        self.y += 4

    def equation(self, e: Eq) -> None:
        size = self.st.body_size
        text = e.latex
        h = self.lead(size) + 6
        if self.space() < h:
            self.next_column()
        x0 = self.x0 + self.width * 0.18
        box = (x0, self.y + 2, self.x0 + self.width * 0.82, self.y + h)
        self.frags.append(Frag(self.page, "equation", box, text, elem=self.elem, col=self.col, obj=e))
        if e.number:
            nb = (self.x0 + self.width - 22, self.y + 4, self.x0 + self.width, self.y + h - 2)
            self.frags.append(Frag(self.page, "equation_number", nb, f"({e.number})", elem=self.elem,
                                   col=self.col, obj=e))
        self.elem += 1
        self.y += h + 3

    def footnote(self, f: Foot) -> None:
        """Place a footnote at the bottom of the current column (or of the next one)."""
        size = self.st.foot_size
        page, col = self.page, self.col
        lines = wrap(f.text, "Helvetica", size, self.cols[col][1])
        h = len(lines) * round(size * 1.2, 2) + 6
        bottom = self.bottom(page, col)
        if self.y > bottom - h:  # already below: use the next column / page
            if col + 1 < self.ncols:
                col += 1
            else:
                page, col = page + 1, 0
            bottom = self.bottoms.get((page, col), BOTTOM)
        new_bottom = bottom - h
        self.bottoms[(page, col)] = new_bottom
        y = new_bottom + 4
        out = []
        x0 = self.cols[col][0]
        for ln in lines:
            y += round(size * 1.2, 2)
            out.append(Line(x0, y - size * 0.22, ln, "Helvetica", size))
        x_max = max(l.x + text_width(l.text, "Helvetica", size) for l in out)
        self.frags.append(Frag(page, "footnote", (x0, new_bottom + 5, x_max, y + 1), f.text, out,
                               elem=self.elem, col=col, band=2, obj=f))
        self.elem += 1

    def run(self) -> list[Frag]:
        p, st = self.paper, self.st
        self.front()
        for el in p.body:
            if isinstance(el, H):
                self.heading(el)
            elif isinstance(el, P):
                self.text_elem("para", el.text, st.body_font, st.body_size, keep=2)
            elif isinstance(el, L):
                for it in el.items:
                    self.text_elem("list_item", "• " + it, st.body_font, st.body_size, keep=1, indent=8)
            elif isinstance(el, Fig):
                self.figure(el)
            elif isinstance(el, Tab):
                self.table(el)
            elif isinstance(el, Eq):
                self.equation(el)
            elif isinstance(el, Foot):
                self.footnote(el)
            else:
                raise TypeError(el)
        for title, paras in p.backmatter:
            self.heading(H("", title))
            self.frags[-1].kind = "back_heading"
            for t in paras:
                self.text_elem("back_para", t, st.body_font, st.body_size - 0.5, keep=2)
        if p.references:
            self.heading(H("", "References"))
            self.frags[-1].kind = "ref_heading"
            for r in p.ref_strings():
                self.text_elem("ref", r, st.body_font, st.ref_size, keep=2)
        return self.frags


def layout(paper: Paper) -> tuple[list[Frag], int]:
    """Fragments of the paper (without furniture) and the number of pages."""
    frags = Flow(paper, style_for(paper)).run()
    return frags, max(f.page for f in frags)


def reading_order(frags: list[Frag]) -> list[Frag]:
    """Fragments of one page in reading order: front matter, column by column, footnotes."""
    def key(f: Frag):
        if f.band == 0:
            return (0, 0, f.bbox[1])
        return (1, f.col, 1 if f.band == 2 else 0, f.bbox[1])
    return sorted(frags, key=key)


def printed_page(paper: Paper, page: int) -> int:
    return paper.first_page + page - 1
