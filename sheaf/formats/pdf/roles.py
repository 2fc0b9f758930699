"""Roles from typography: the body size, headings and their levels, the title, page furniture
(running headers, footers, page numbers), footnotes, equations, figures and tables.
"""
from __future__ import annotations

import re
from collections import defaultdict

from sheaf.formats.common import caption_kind, heading_role, norm_key, numbering_depth
from sheaf.formats.pdf.blocks import (
    SECTION_NUM,
    Para,
    is_big,
    is_heading_line,
    join_lines,
    never_heading,
    numbered_title,
)
from sheaf.formats.pdf.geometry import Line, Page
from sheaf.formats.pdf.patterns import AFFIL, BAND, CAPTION_START, EQ_NUM, FOOTER_TEXT, MATH, NUMERIC, PAGE_NUM


def mark_bands(pages: list[Page], body: float) -> None:
    """Page numbers and repeated running text in the top/bottom band of each page; in the
    top band also a small line set well apart from the text below it (a running head that
    occurs once, e.g. on the only even page of a short paper)."""
    seen: dict[str, set[int]] = defaultdict(set)
    for pg in pages:
        if not pg.lines:
            continue
        # the band: the top/bottom 7% of the page, and the first/last row of text when it
        # lies within the outer 12% (running heads sit lower on some page sizes)
        first_top = min(ln.top for ln in pg.lines)
        last_bottom = max(ln.bottom for ln in pg.lines)
        for ln in pg.lines:
            c = (ln.top + ln.bottom) / 2
            if c < pg.height * BAND or (c < pg.height * 0.12 and ln.top <= first_top + 0.5 * ln.size):
                ln.band = "top"
            elif c > pg.height * (1 - BAND) or (c > pg.height * 0.88 and ln.bottom >= last_bottom - 0.5 * ln.size):
                ln.band = "bottom"
            if ln.band:
                seen[norm_key(ln.text)].add(pg.number)
    threshold = max(2, len(pages) // 4)
    for pg in pages:
        for ln in pg.lines:
            if not ln.band:
                continue
            if PAGE_NUM.match(ln.text.strip()):
                ln.band = "page_number"
            elif len(pages) >= 3 and len(seen[norm_key(ln.text)]) >= threshold:
                ln.band = "page_header" if ln.band == "top" else "page_footer"
            elif ln.band == "bottom" and FOOTER_TEXT.search(ln.text) and ln.size < 10.5:
                ln.band = "page_footer"
            elif ln.band == "top" and (ln.top + ln.bottom) / 2 < pg.height * BAND and ln.size <= body * 1.05 \
                    and _gap_below(pg, ln) > 2 * ln.size:
                ln.band = "page_header"
            else:
                ln.band = None  # text near the edge that is not furniture: a normal line


def _gap_below(pg: Page, ln: Line) -> float:
    """Distance from `ln` down to the nearest line under it that shares some of its width."""
    below = [o.top - ln.bottom for o in pg.lines
             if o is not ln and o.top >= ln.bottom - 0.1 and o.x0 < ln.x1 and ln.x0 < o.x1]
    return min(below, default=pg.height)


def _numbered(text: str, state: dict) -> bool:
    """Numbered like a section; a bare letter ('A Prompts') only after the references."""
    return numbering_depth(text, allow_letter=state.get("after_refs", False)) is not None


def classify(paras: list[Para], body: float, spacing: float, state: dict) -> None:
    for p in paras:
        first = p.lines[0]
        if first.band:
            p.role = first.band
            continue
        text = p.text
        if not text:
            p.role = "noise"
            continue
        nch = sum(ln.nchars for ln in p.lines) or 1
        mono = sum(ln.mono * ln.nchars for ln in p.lines) / nch
        if CAPTION_START.match(text) or (first.bold_start and p.crowded < 0.5 and caption_kind(text)):
            p.role = f"{caption_kind(text)}_caption"
            continue
        if mono > 0.6:
            p.kind = "code"
            p.text = "\n".join(ln.text for ln in p.lines)
            continue
        if len(p.lines) == 1 and len(text.split()) <= 3 and heading_role(text) in (
                "reference_heading", "abstract_heading") and not first.crowded \
                and ((p.gap_before or 0) > 1.5 * spacing or first.bold >= 0.9 or is_big(p.size, body)):
            p.kind = "heading"  # "References" on a line of its own, whatever its typography
            if heading_role(text) == "reference_heading":
                state["after_refs"] = True
            continue
        if len(p.lines) <= 3 and len(text) <= 200 and sum(ch.isalpha() for ch in text) >= 2 \
                and all(is_heading_line(ln, body, cont=k > 0) for k, ln in enumerate(p.lines)) \
                and not never_heading(text):
            words = len(text.split())
            named = heading_role(text) != "heading"
            numbered = _numbered(text, state)
            if is_big(p.size, body):
                if words <= 25 and text[-1:] not in ",;":
                    p.kind = "heading"
            elif named or (numbered and text[-1:] not in "-\x02,;"):
                p.kind = "heading"
            elif words <= 10 and text[:1].isupper() and text[-1:] not in ".,;:-\x02" and len(p.lines) == 1:
                p.kind = "maybe_heading"  # decided by assign_levels: does it stand apart?
            if p.kind == "heading" and heading_role(text) == "reference_heading":
                state["after_refs"] = True


#: Text set large above a title that is not one: a journal's article type, a publisher, a cover.
_BANNER = re.compile(
    r"^(?:(?:research|original|review|short|brief|full[- ]length|regular|technical|invited|rapid)\s+)?"
    r"(?:articles?|papers?|communications?|reports?|letters?|contributions?|notes?)$|"
    r"journal pre-?proof|^pre-?proof$|accepted manuscript|author'?s? (?:accepted )?manuscript|^open access$|"
    r"^copyright\b|publishing (?:company|group|house)|^(?:editorial|commentary|perspectives?|review|"
    r"case report|erratum|corrigendum|retraction)$|^(?:downloaded|brought to you) ",
    re.I,
)
#: Page 1 of a download that is a cover sheet, not the paper: the title is on page 2.
_COVER_SHEET = re.compile(
    r"this is a contribution from|jstor|all rights reserved|terms (?:&|and) conditions of use|"
    r"prior written permission|for personal use only|brought to you by|downloaded from", re.I)


def pick_title(seq: list[Para], pages: list[Page], body: float) -> str | None:
    """The paper's title: the largest text on page 1, clearly above body size, never a banner
    ("Research Article", "Journal Pre-proof", a publisher); on page 2 when page 1 is a cover
    sheet (a publisher's or an archive's, holding no title of its own); failing size, a short
    bold or capitalised block centred near the top of page 1. Blocks above it are banners."""
    def candidates(number: int) -> list[Para]:
        return [p for p in seq if p.page == number and p.role is None and p.crowded < 0.5]

    def best(ps: list[Para]) -> Para | None:
        ok = [p for p in ps if p.size >= body * 1.15 and sum(ch.isalpha() for ch in p.text) >= 3
              and len(p.text) <= 400 and not _BANNER.search(p.text.strip(" .:"))]
        return max(ok, key=lambda p: p.size) if ok else None

    first = candidates(pages[0].number)
    top = best(first)
    page1 = " ".join(p.text for p in seq if p.page == pages[0].number)
    cover = len(pages) > 2 and len(_COVER_SHEET.findall(page1)) >= 2 and not any(
        heading_role(p.text) == "abstract_heading" for p in first)
    if (top is None or cover) and len(pages) > 1:
        second = candidates(pages[1].number)
        alt = best(second)
        if alt is not None and (cover or top is None and len(page1) < 1500):
            top, first = alt, second
    if top is None:
        top = _plain_title(first, pages[0])
        seq[:] = [p for p in seq if p.lines]
    if top is None:
        return None
    top.role = "title"
    top.kind = "title"
    page = next(pg for pg in pages if pg.number == top.page)
    for p in first[: first.index(top)]:  # banners above the title: journal, DOI, "Open Access"
        # only single short lines standing above it near the top of the page: the end of the
        # previous article on a page where this one's title stands lower down stays text
        if len(p.text) < 150 and p.role in (None, "heading") and len(p.lines) == 1 \
                and p.lines[-1].bottom <= top.lines[0].top + 1 and p.lines[0].top < 0.3 * page.height:
            p.role, p.kind = "page_header", "text"
    return top.text


def _plain_title(first: list[Para], pg: Page) -> Para | None:
    """A title set near body size: in the top 40% of page 1, centred, 3+ words in at most three
    lines, a heading by its type or in capitals; a second such block right under it joins it."""
    def plain(p: Para) -> bool:
        letters = [ch for ch in p.text if ch.isalpha()]
        return (p.lines[0].top < 0.4 * pg.height and len(p.lines) <= 3 and len(p.text.split()) >= 3
                and abs((p.x0 + p.x1) / 2 - pg.width / 2) < 0.06 * pg.width and p.x1 - p.x0 < 0.9 * pg.width
                and (p.kind != "text" or p.bold >= 0.9 or sum(ch.isupper() for ch in letters) >= 0.8 * len(letters))
                and not _BANNER.search(p.text.strip(" .:")) and not FOOTER_TEXT.search(p.text)
                and not AFFIL.search(p.text))
    for k, p in enumerate(first):
        if p.kind not in ("text", "heading", "maybe_heading") or not plain(p):
            continue
        if k + 1 < len(first) and plain(first[k + 1]) and first[k + 1].size == p.size \
                and first[k + 1].lines[0].top - p.lines[-1].bottom < p.size:
            nxt = first.pop(k + 1)
            p.lines.extend(nxt.lines)
            p.text = f"{p.text} {nxt.text}"
            nxt.lines = []  # merged: pick_title drops it from the sequence
        return p
    return None


def numbered_headings(seq: list[Para], body: float) -> None:
    """Headings set in body type (small capitals, italics) on papers that number them: a
    one-line block shaped like a numbered section title, not a figure label (small type,
    crowded) and not one of a list of such lines (its neighbours are not numbered lines)."""
    def candidate(p: Para) -> bool:
        return (p.role is None and p.kind == "text" and len(p.lines) == 1 and numbered_title(p.text)
                and not p.lines[0].crowded and p.lines[0].size >= 0.75 * body and not AFFIL.search(p.text)
                and not never_heading(p.text))
    for k, p in enumerate(seq):
        if not candidate(p):
            continue
        near = [q for q in seq[max(0, k - 1):k] + seq[k + 1:k + 2]
                if q.role is None and len(q.lines) == 1 and SECTION_NUM.match(q.text)]
        if not near:
            p.kind = "heading"


def _size_heading(p: Para) -> bool:
    """A heading only by its type size: neither numbered nor a known section name."""
    return p.kind in ("heading", "maybe_heading") and heading_role(p.text) == "heading" \
        and numbering_depth(p.text, allow_letter=True) is None


def plausible_headings(paras: list[Para], first_page: bool) -> None:
    """A page whose type-size "headings" hold more words than its running text is a page of
    body text set larger (a scanned page's text layer, an essay's larger-type pages): its long
    ones are paragraphs. The first page (title, authors) keeps them."""
    if first_page:
        return
    heads = [p for p in paras if _size_heading(p)]
    if len(heads) < 3:
        return
    head_words = sum(len(p.text.split()) for p in heads)
    text_words = sum(len(p.text.split()) for p in paras if p.role is None and p.kind == "text")
    if head_words > text_words:
        for p in heads:
            if len(p.text.split()) >= 6:
                p.kind = "text"


def plausible_structure(seq: list[Para], n_pages: int) -> None:
    """A structure that cannot run away: far more headings than a paper of this length holds
    (a real paper has a few a page) means the type sizes misled us; only the numbered and
    named ones stay headings, the rest are paragraphs."""
    heads = [p for p in seq if p.kind in ("heading", "maybe_heading")]
    if len(heads) > 4 * n_pages + 20:
        for p in heads:
            if _size_heading(p):
                p.kind = "text"


#: What a reference entry holds: a year, a bracketed/numbered label, "et al.", initials, a DOI,
#: a leading "Surname, Firstname".
_REF_SHAPE = re.compile(
    r"\b(?:1[6-9]|20)\d{2}[a-z]?\b|^\s*\[\d{1,3}\]|^\s*\d{1,3}\.\s|\b[A-Z]\.\s?(?:[A-Z]\.)?,|"
    r"(?i:\bet al\b|\bdoi\b|\bvol\.|\bpp\.|\bin:|\bproc(?:eedings|\.))|"
    r"^\s*[A-Z][^\W\d_]+(?:[- ][A-Z][^\W\d_]+)?,\s+[A-Z]")


def _reference_shaped(text: str) -> bool:
    """An entry (or a piece of one, when the list comes apart in lines) with a cue; a long
    block is entries run together only with a year every 400 characters or so."""
    if len(text) < 500:
        return bool(_REF_SHAPE.search(text))
    return len(_YEAR.findall(text)) >= len(text) / 400


_YEAR = re.compile(r"\b(?:1[6-9]|20)\d{2}[a-z]?\b")


def plausible_references(seq: list[Para]) -> None:
    """A references heading opens a reference list only where reference-shaped text follows:
    a table's column header "Reference" or a word on its own line before running text is no
    heading (the paragraphs after it stay body text, searchable)."""
    for k, p in enumerate(seq):
        if p.kind != "heading" or heading_role(p.text) != "reference_heading":
            continue
        after = []
        for q in seq[k + 1:]:
            if q.kind in ("heading", "maybe_heading") and q.role is None:
                break
            if q.role is None and q.kind == "text" and len(q.text) >= 3:
                after.append(q)
                if len(after) == 12:
                    break
        if after and sum(_reference_shaped(q.text) for q in after) < 0.3 * len(after):
            p.kind = "text"


def objects(seq: list[Para], body: float) -> list[Para]:
    """Figure and table content: the fragments next to a caption become its object block.

    A PDF figure is a picture (no text) or vector art whose labels come out as scattered
    short lines; a table is rows of cells. Both sit right before their caption in reading
    order (a table caption may also stand above its table). Every figure caption gets an
    object block, empty when the figure has no text, so that captions can pair.
    """
    def fragment(p: Para) -> bool:
        if p.role == "heading" and heading_role(p.text) == "heading" and len(p.lines) == 1 \
                and numbering_depth(p.text, allow_letter=True) is None:
            return True  # a table's bold column header or a figure's big label, not a section
        if p.role is not None or p.kind not in ("text", "maybe_heading"):
            return False
        if p.crowded >= 0.5:
            return True
        if p.size <= 0.85 * body:
            return True
        tokens = p.text.split()
        numeric = sum(1 for t in tokens if NUMERIC.match(t))
        if len(tokens) >= 3 and numeric >= 0.4 * len(tokens):
            return True  # a row of figures
        short = all(ln.nchars < 45 for ln in p.lines)
        return short and p.text[-1:] not in ".?!" and len(p.lines) <= 3 and p.kind != "maybe_heading"

    out: list[Para] = []
    taken: set[int] = set()
    objs: dict[int, tuple[Para, list[Para], bool]] = {}  # caption index -> (object, parts, before)
    for k, p in enumerate(seq):
        if p.role not in ("figure_caption", "table_caption"):
            continue
        kind = p.role.removesuffix("_caption")
        parts: list[int] = []
        j = k - 1
        while j >= 0 and seq[j].page == p.page and j not in taken and fragment(seq[j]):
            parts.append(j)
            j -= 1
        before = True
        if not parts and kind == "table":
            j = k + 1
            while j < len(seq) and seq[j].page == p.page and fragment(seq[j]) \
                    and seq[j].role not in ("figure_caption", "table_caption"):
                parts.append(j)
                j += 1
            before = not parts
        taken.update(parts)
        lines = [ln for j in sorted(parts) for ln in seq[j].lines]
        obj = Para(lines[0] if lines else p.lines[0])
        obj.lines = lines
        obj.kind = "object"
        obj.role = kind
        obj.text = _rows(lines, " | " if kind == "table" else " ") if lines else ""
        objs[k] = (obj, parts, before)
        p.obj = obj
    for k, p in enumerate(seq):
        if k in taken:
            continue
        if k in objs and objs[k][2]:
            out.append(objs[k][0])
        out.append(p)
        if k in objs and not objs[k][2]:
            out.append(objs[k][0])
    return out


def equations(seq: list[Para], body: float) -> list[Para]:
    """Display maths comes out as scattered pieces (operators, limits, the number): runs of
    such pieces in one column become one `equation` block."""
    def piece(p: Para) -> bool:
        if p.role is not None or p.kind != "text" or not p.lines:
            return False
        t = p.text
        if EQ_NUM.match(t):
            return True
        if len(p.lines) > 3 or len(t) > 80:
            return False
        return p.crowded >= 0.5 or len(t) < 25 or bool(MATH.search(t)) and t[-1:] not in ".?!"

    out: list[Para] = []
    k = 0
    while k < len(seq):
        p = seq[k]
        if not piece(p):
            out.append(p)
            k += 1
            continue
        j = k
        while j + 1 < len(seq) and piece(seq[j + 1]) and seq[j + 1].page == p.page \
                and seq[j + 1].lines[0].side == p.lines[0].side:
            j += 1
        group = seq[k:j + 1]
        text = " ".join(g.text for g in group)
        maths = len(MATH.findall(text))
        if maths >= 1 and (len(group) > 1 or EQ_NUM.search(text) or maths >= 2):
            eq = Para(group[0].lines[0])
            eq.lines = [ln for g in group for ln in g.lines]
            eq.role, eq.kind = "equation", "equation"
            eq.text = _rows(eq.lines, " ")
            out.append(eq)
        else:
            out.extend(group)
        k = j + 1
    return out


def _rows(lines: list[Line], sep: str) -> str:
    """Lines regrouped by baseline into rows (cells left to right), rows top to bottom; the
    lines of a table's wrapped cells (see _table_cells) as their rows, each cell's lines joined."""
    rows: list[list[Line]] = []
    cells: dict[tuple, list[Line]] = {}
    for ln in sorted(lines, key=lambda ln: ln.base):
        if ln.cell is not None:
            key = ln.cell[:3]
            if key not in cells:
                cells[key] = []
                rows.append(cells[key])
            cells[key].append(ln)
        elif rows and rows[-1][0].cell is None and abs(ln.base - rows[-1][0].base) <= 0.4 * ln.size:
            rows[-1].append(ln)
        else:
            rows.append([ln])
    out = []
    for r in rows:
        if r[0].cell is None:
            out.append(sep.join(c.text for c in sorted(r, key=lambda ln: ln.x0)))
            continue
        by_col: dict[int, list[Line]] = defaultdict(list)
        for ln in r:
            by_col[ln.cell[3]].append(ln)
        out.append(sep.join(join_lines(by_col[c]) for c in sorted(by_col)))
    return "\n".join(out)


def footnotes(seq: list[Para], body: float, pages: dict[int, Page]) -> None:
    """Small text closing a column at the bottom of a page, opened by a marker: a footnote."""
    by_col: dict[tuple[int, str], list[Para]] = defaultdict(list)
    refs = next((k for k, p in enumerate(seq) if p.kind == "heading" and heading_role(p.text) == "reference_heading"),
                len(seq))
    for p in seq[:refs]:  # a reference list in small type is no footnote
        if p.lines and p.role not in ("page_number", "page_header", "page_footer"):
            by_col[(p.page, p.lines[0].side)].append(p)
    for (page, _), ps in by_col.items():
        H = pages[page].height
        for p in reversed(ps):
            if p.role is not None or p.kind != "text" or p.size > 0.93 * body or p.lines[0].top < 0.5 * H:
                break
            first = p.lines[0]
            t = p.text
            marker = t[:1] in "*\u2020\u2021\u00a7\u00b6\u2217#\u22c6" or t[:1].isdigit()
            if marker or first.runs[0].size < 0.8 * first.size:
                p.role = "footnote"
            elif t.lower().startswith(("http", "www.", "code", "data", "our code", "equal contribution",
                                       "corresponding author", "work done")):
                p.role = "footnote"
            else:
                break


def assign_levels(seq: list[Para], body: float, spacing: float) -> None:
    for p in seq:
        if p.kind == "maybe_heading":
            # an unnumbered bold line at body size is a heading only if it stands apart
            apart = 1.2 * spacing * p.size / body
            p.kind = "heading" if (((p.gap_after or 0) > apart or ((p.gap_before or 0) > apart and p.short))
                                   and not p.indented) else "text"
    for p in seq:
        if p.kind == "heading" and p.role is None:
            p.role = "heading"


def rank_levels(seq: list[Para], body: float) -> None:
    """Heading level from size buckets: the largest heading size is level 1, bold body-size
    headings come last (finalize lets numbering override this)."""
    heads = [p for p in seq if p.role == "heading"]
    sizes = sorted({round(p.size * 2) / 2 for p in heads if is_big(p.size, body)}, reverse=True)
    rank = {s: k + 1 for k, s in enumerate(sizes)}
    for p in heads:
        p.level = rank.get(round(p.size * 2) / 2, len(sizes) + 1)
        if heading_role(p.text) != "heading":
            p.level = 1  # Abstract, References, Acknowledgments: top-level whatever their type


def front_matter(seq: list[Para], first_page: int) -> None:
    """Page 1: authors/affiliations between the title and the first real heading; the abstract."""
    ti = next((k for k, p in enumerate(seq) if p.role == "title"), None)
    if ti is not None:
        hk = next((k for k in range(ti + 1, len(seq)) if seq[k].role == "heading"
                   and heading_role(seq[k].text) == "abstract_heading"), None)
        if hk is None or seq[hk].page != first_page:
            hk = next((k for k in range(ti + 1, len(seq)) if seq[k].role == "heading" and (
                seq[k].page != first_page or (numbering_depth(seq[k].text) is not None
                                              and not AFFIL.search(seq[k].text)
                                              and seq[k].lines[0].runs[0].size >= 0.8 * seq[k].lines[0].size))
            ), None)
        if hk is not None and seq[hk].page == first_page and hk - ti <= 20:
            between = [p for p in seq[ti + 1:hk] if (p.role is None and p.kind == "text") or p.role == "heading"]
            if all(len(p.text) < 400 for p in between):
                for p in between:
                    p.role = "affiliation" if AFFIL.search(p.text) else "authors"
                    p.level = None
    in_abstract = None
    for p in seq:
        if p.role == "heading":
            in_abstract = p.page if heading_role(p.text) == "abstract_heading" else None
            continue
        if in_abstract is not None and p.page > in_abstract + 1:
            in_abstract = None  # an abstract is short: the body went on without a heading we saw
        if in_abstract is not None and p.role is None and p.kind == "text":
            p.role = "abstract"


def block_bbox(lines: list[Line], pg: Page) -> tuple[float, float, float, float] | None:
    if not lines:
        return None
    x0 = min(ln.x0 for ln in lines) / pg.width
    x1 = max(ln.x1 for ln in lines) / pg.width
    y0 = min(ln.top for ln in lines) / pg.height
    y1 = max(ln.bottom for ln in lines) / pg.height
    if pg.turned == "up":  # back to the page as it is printed (see _read_turned)
        return (y0, 1 - x1, y1, 1 - x0)
    if pg.turned == "down":
        return (1 - y1, x0, 1 - y0, x1)
    return (x0, y0, x1, y1)
