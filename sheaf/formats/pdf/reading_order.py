"""Reading order: columns, full-width lines where they stand, tables row by row, crowded pages.
"""
from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter, defaultdict

from sheaf.formats.pdf.geometry import Line, Page, Run, median
from sheaf.formats.pdf.text_layer import column_starts


def order_page(pg: Page) -> list[Line]:
    """Lines in reading order: single column top to bottom; two columns left then right
    between full-width lines (titles, wide floats) that stand where they are. Running
    headers come first and footers/page numbers last, outside the columns."""
    furniture = [ln for ln in pg.lines if ln.band]
    head = [ln for ln in furniture if ln.base < pg.height / 2]
    foot = [ln for ln in furniture if ln.base >= pg.height / 2]
    body = [ln for ln in pg.lines if not ln.band]
    for ln in furniture:
        ln.side = "full"
    ordered = _order_body(pg, body)
    if pg.tabular:
        ordered = _table_cells(pg, ordered)
    return _rows_in_order(head) + ordered + _rows_in_order(foot)


def _order_body(pg: Page, lines: list[Line]) -> list[Line]:
    cols = _three_columns(pg, lines)
    if cols:
        return _order_columns(pg, lines, cols)
    return _order_two(pg, lines)


#: The largest page PDF allows (14,400 user units); a page box beyond it is damage.
MAX_PAGE_PT = 14_400


def _three_columns(pg: Page, lines: list[Line]) -> list[tuple[float, float]] | None:
    """Three (or more) columns, as (from, to) x ranges split at the gutters' middles: the
    gutters are the x ranges that (almost) no word of a narrow line (under a third of the page
    wide) crosses, between text on both sides; each column holds at least 4 lines filling half
    its width and a tenth of the characters. None otherwise (one or two columns: _order_two)."""
    W = pg.width
    narrow = [ln for ln in lines if ln.nchars >= 10 and ln.x1 - ln.x0 < 0.34 * W]  # a third of the page at most
    if len(narrow) < 12:
        return None
    n = int(min(W, MAX_PAGE_PT)) + 2  # a damaged page's absurd width must not size the array
    delta = [0] * (n + 1)  # words per x (1 pt), as a difference array
    for ln in narrow:
        for r in ln.runs:
            delta[min(n, max(0, int(r.x0)))] += 1
            delta[min(n, max(0, int(r.x1) + 1))] -= 1
    cover = list(itertools.accumulate(delta[:n]))
    peak = max(cover)
    thr = max(1, 0.04 * peak)
    xs = [x for x in range(n) if cover[x] > thr]
    if not xs:
        return None
    lo, hi = xs[0], xs[-1]
    gutters: list[tuple[int, int]] = []
    x = lo
    while x <= hi:
        if cover[x] <= thr:
            start = x
            while x <= hi and cover[x] <= thr:
                x += 1
            if x - start >= 4:
                gutters.append((start, x))
        x += 1
    if len(gutters) < 2:
        return None
    # a column reaches from one gutter's middle to the next (the page's edges outside)
    mids = [(a + b) / 2 for a, b in gutters]
    cols = list(zip([-1e9] + mids, mids + [1e9]))
    total = sum(ln.nchars for ln in lines) or 1
    for c0, c1 in cols:
        inside = [ln for ln in lines if ln.x0 >= c0 and ln.x1 <= c1]
        width = min(c1, hi) - max(c0, lo)
        if sum(ln.x1 - ln.x0 > 0.5 * width for ln in inside) < 4 or sum(ln.nchars for ln in inside) < 0.1 * total:
            return None
    return cols


def _split_at(ln: Line, cut: float) -> list[Line]:
    """A line whose runs stand on both sides of a gutter, a gutter's width apart: one line
    each side (two columns' lines the content stream set as one)."""
    left = [r for r in ln.runs if r.x1 <= cut]
    right = [r for r in ln.runs if r.x1 > cut]
    if not left or not right or min(r.x0 for r in right) < cut - 1 \
            or min(r.x0 for r in right) - max(r.x1 for r in left) < 0.6 * ln.size:
        return [ln]  # a word gap over the gutter of a full-width line (a title) is no gutter
    out = []
    for runs in (left, right):
        part = Line(runs[0], ln.page)
        for r in runs[1:]:
            part.add(r)
        part.finish()
        part.band, part.crowded = ln.band, ln.crowded
        out.append(part)
    return out


def _order_columns(pg: Page, lines: list[Line], cols: list[tuple[float, float]]) -> list[Line]:
    """Three or more columns: each column top to bottom between full-width lines (titles,
    wide floats), which stand where they are; lines run across a gutter are split there."""
    pieces: list[Line] = []
    for ln in lines:
        parts = [ln]
        for _, cut in cols[:-1]:
            parts = [q for p in parts for q in (_split_at(p, cut) if p.x0 < cut < p.x1 else [p])]
        pieces.extend(parts)
    tol = 3.0
    for ln in pieces:
        ln.side = "full"
        for k, (c0, c1) in enumerate(cols):
            if ln.x0 >= c0 and ln.x1 <= c1:
                ln.side = f"col{k}"
                break
    # a line across columns with column text beside it (a title over two of three columns)
    # is no table row: its own side, ordered like a full-width line
    cols_lines = [ln for ln in pieces if ln.side != "full"]
    for ln in pieces:
        if ln.side == "full" and any(c.top < ln.bottom and ln.top < c.bottom and (
                c.x1 <= ln.x0 + tol or c.x0 >= ln.x1 - tol) for c in cols_lines):
            ln.side = "span"
    pg.two_col = True
    if len(pieces) != len(lines):  # lines were split: the page holds the pieces instead
        gone = {id(ln) for ln in lines} - {id(ln) for ln in pieces}
        old = {id(ln) for ln in lines}
        pg.lines = [ln for ln in pg.lines if id(ln) not in gone] + [ln for ln in pieces if id(ln) not in old]
    out: list[Line] = []
    bands: dict[str, list[Line]] = defaultdict(list)

    def flush():
        for k in range(len(cols)):
            out.extend(bands.pop(f"col{k}", []))

    for ln in sorted(pieces, key=lambda ln: (ln.top, ln.x0)):
        if ln.side in ("full", "span"):
            flush()
            out.append(ln)
        else:
            bands[ln.side].append(ln)
    flush()
    return out


def _gutter(pg: Page, lines: list[Line]) -> float:
    """Where two columns part: the page's middle, or the middle of the gap between columns
    set off it (a book's pages shifted towards the spine: columns at 86-275 and 290-480 of
    a 595 pt page part at 283, not 298). The gap is the x range in the middle third that no
    line under 45% of the page wide crosses, with four such lines filling a column each side."""
    W = pg.width
    mid = W / 2
    narrow = [ln for ln in lines if ln.nchars >= 10 and 0.28 * W < ln.x1 - ln.x0 < 0.45 * W]
    if len(narrow) < 8 or W > MAX_PAGE_PT:
        return mid
    lo, hi = int(0.3 * W), int(0.7 * W)
    cover = [0] * (hi - lo + 2)
    for ln in narrow:
        a, b = max(lo, int(ln.x0)), min(hi + 1, int(ln.x1) + 1)
        if a < b:
            cover[a - lo] += 1
            cover[b - lo] -= 1
    cover = list(itertools.accumulate(cover))[:hi - lo + 1]
    if not cover[int(mid) - lo]:
        return mid  # the middle is free: the usual case
    best = None
    x = 0
    while x < len(cover):
        if cover[x] == 0:
            start = x
            while x < len(cover) and cover[x] == 0:
                x += 1
            c = lo + (start + x - 1) / 2
            if x - start >= 4 and (best is None or abs(c - mid) < abs(best - mid)):
                best = c
        x += 1
    if best is None:
        return mid
    left = sum(ln.x1 <= best for ln in narrow)
    right = sum(ln.x0 >= best for ln in narrow)
    return best if left >= 4 and right >= 4 else mid


def _order_two(pg: Page, lines: list[Line]) -> list[Line]:
    W = pg.width
    mid = _gutter(pg, lines)
    tol = 0.012 * W
    wide_l = wide_r = 0
    chars_l = chars_r = total = 0
    for ln in lines:
        total += ln.nchars
        if ln.x1 <= mid + tol:
            ln.side = "left"
            chars_l += ln.nchars
            wide_l += ln.x1 - ln.x0 > 0.28 * W
        elif ln.x0 >= mid - tol:
            ln.side = "right"
            chars_r += ln.nchars
            wide_r += ln.x1 - ln.x0 > 0.28 * W
        else:
            ln.side = "full"
    pg.two_col = (wide_l >= 4 and wide_r >= 4 and chars_l > 0.15 * total and chars_r > 0.15 * total)
    if not pg.two_col:
        for ln in lines:
            ln.side = "full"
        return _rows_in_order(lines)
    # a line that crosses the middle but has column text beside it belongs to a column
    cols = [ln for ln in lines if ln.side != "full"]
    for ln in lines:
        if ln.side != "full":
            continue
        for c in cols:
            if c.top < ln.bottom and ln.top < c.bottom and (
                (c.side == "right" and c.x0 >= ln.x1 - tol) or (c.side == "left" and c.x1 <= ln.x0 + tol)
            ):
                ln.side = "left" if (ln.x0 + ln.x1) / 2 < mid else "right"
                break
    lines = sorted(lines, key=lambda ln: (ln.top, ln.x0))
    spacing = median([b.base - a.base for a, b in zip(lines, lines[1:]) if a.side == b.side == "left"
                       and 0 < b.base - a.base < 3 * a.size] or [12.0])
    out: list[Line] = []
    band_l: list[Line] = []
    band_r: list[Line] = []
    last_bottom = None

    def flush():
        out.extend(band_l)
        out.extend(band_r)
        band_l.clear()
        band_r.clear()

    for ln in lines:
        if ln.side == "full":
            flush()
            out.append(ln)
        else:
            if last_bottom is not None and ln.top - last_bottom > 2.6 * spacing and (band_l or band_r) \
                    and len(band_l) <= 6 and len(band_r) <= 6:
                flush()  # a gap across both columns below a few side-by-side lines (author blocks)
            (band_l if ln.side == "left" else band_r).append(ln)
        last_bottom = ln.bottom if last_bottom is None else max(last_bottom, ln.bottom)
    flush()
    return out


_LONG_WORD = re.compile(r"[^\W\d_]{4,}")
_FIGURE = re.compile(r"^[-+\u2212\u00b1]?\d[\d.,]*%?$")


def _pieces(ln: Line) -> list[list[Run]]:
    """A line's runs in groups parted by gaps wider than a word space (0.6 em): its cells'
    texts where the line crosses a table's columns."""
    out: list[list[Run]] = []
    for r in ln.runs:
        if out and r.x0 - out[-1][-1].x1 < 0.6 * max(r.size, ln.size):
            out[-1].append(r)
        else:
            out.append([r])
    return out


def _table_cells(pg: Page, ordered: list[Line]) -> list[Line]:
    """Tables whose cells wrap over several lines, read cell by cell: each stretch of
    full-width lines (those the column order leaves where they stand) is searched for a table
    (see _find_table); its lines are cut at the columns and come out row by row, each cell's
    lines together, so that a cell's text reads as the phrase it is."""
    out: list[Line] = []
    k = 0
    tables = 0
    while k < len(ordered):
        if ordered[k].side != "full":
            out.append(ordered[k])
            k += 1
            continue
        j = k
        while j < len(ordered) and ordered[j].side == "full":
            j += 1
        stretch = ordered[k:j]
        while len(stretch) >= 6:
            found = _find_table(stretch)
            if found is None:
                break
            band, cuts = found
            cells = _cells_in_order(pg, band, cuts, (pg.number, tables))
            if cells is None:
                break
            tables += 1
            inside = {id(ln) for ln in band}
            at = next(q for q, ln in enumerate(stretch) if id(ln) in inside)
            rest = [ln for ln in stretch if id(ln) not in inside]
            out.extend(rest[:at] + cells)
            stretch = rest[at:]
        out.extend(stretch)
        k = j
    return out


def _find_table(lines: list[Line]) -> tuple[list[Line], list[float]] | None:
    """The first table among lines: consecutive baselines (at least 4) over which at least
    three column starts hold, each a left edge where 3+ cells of those lines begin (see
    _pieces) and across which no line's text runs. Its first row holds two cells at least; a
    row at either end that hides a column (a caption running across the columns' edges) is
    left out, and so is a single cell below the table unless it continues a column (the last
    lines of a tall cell stay, a "(Continued)" goes). None if none."""
    rows: list[list[Line]] = []
    for ln in sorted(lines, key=lambda ln: ln.base):
        if rows and ln.base - rows[-1][0].base <= 0.3 * min(ln.size, rows[-1][0].size):
            rows[-1].append(ln)
        else:
            rows.append([ln])
    if len(rows) < 4:
        return None
    spans = [[(p[0].x0, p[-1].x1) for ln in row for p in _pieces(ln)] for row in rows]
    cands = column_starts([a for row in spans for a, _ in row], median([ln.size for ln in lines]))
    if len(cands) < 3:
        return None
    free = [frozenset(c for c in cands if not any(a < c - 1.5 and b > c + 1.5 for a, b in row)) for row in spans]
    step = median([b[0].base - a[0].base for a, b in zip(rows, rows[1:])])

    def support(i: int, j: int) -> list[float]:
        cols = frozenset.intersection(*free[i:j])
        starts = Counter(c for row in spans[i:j] for a, _ in row for c in cols if abs(a - c) <= 1.5)
        return sorted(c for c in cols if starts[c] >= 3)

    i = 0
    while i < len(rows) - 3:
        if len(spans[i]) < 2:  # a table's first row holds two cells at least
            i += 1
            continue
        cols = free[i]
        j = i + 1
        while j < len(rows) and len(cols & free[j]) >= 3:
            cols &= free[j]
            j += 1
        if j - i < 4:
            i += 1
            continue
        cuts = support(i, j)
        while j - i > 4:
            if len(spans[i + 1]) >= 2 and len(support(i + 1, j)) > len(cuts):
                i += 1
            elif len(support(i, j - 1)) > len(cuts):
                j -= 1
            else:
                break
            cuts = support(i, j)
        while j - i > 1 and len(spans[j - 1]) < 2 and not (
                any(abs(spans[j - 1][0][0] - c) <= 1.5 for c in cuts)
                and rows[j - 1][0].base - rows[j - 2][0].base <= 1.4 * step):
            j -= 1
        if j - i >= 4 and len(cuts) >= 3:
            return [ln for row in rows[i:j] for ln in row], cuts
        i += 1
    return None


class _Piece:
    """What of a line stands in one column of a table (its runs), while the table is read."""
    __slots__ = ("col", "runs", "src", "base", "size", "x0", "text", "level")

    def __init__(self, col: int, runs: list[Run], src: Line):
        self.col, self.runs, self.src = col, runs, src
        self.base, self.size, self.x0 = src.base, src.size, runs[0].x0
        self.text = src.text if runs is src.runs else " ".join(r.text.strip() for r in runs)
        self.level = 0


def _cells_in_order(pg: Page, band: list[Line], cuts: list[float], table: tuple[int, int]) -> list[Line] | None:
    """The lines of a table cut at its columns (`cuts`: left edges), ordered row by row and,
    within a row, cell by cell (each cell's lines top to bottom); None when no cell wraps
    (rows of one-line cells already read row by row). A row begins where a column's text
    starts after a gap (more than 1.4 line steps), at the column's first line or at a figure
    (figures do not wrap); a row in which a column begins below the row's first baseline,
    every column holds a line at every baseline, or two columns hold capitalised entries on
    the same baselines, is rows of one-line cells."""
    pieces: list[_Piece] = []
    for ln in band:
        groups: dict[int, list[Run]] = defaultdict(list)
        for p in _pieces(ln):
            col = bisect.bisect_right(cuts, p[0].x0 + 1.5) - 1
            groups[max(0, col)].extend(p)
        if len(groups) == 1:
            pieces.append(_Piece(next(iter(groups)), ln.runs, ln))
        else:
            pieces.extend(_Piece(col, runs, ln) for col, runs in sorted(groups.items()))
    size = median([q.size for q in pieces])
    bases: list[float] = []  # baselines within 0.3 em are one
    for q in sorted(pieces, key=lambda q: q.base):
        if not bases or q.base - bases[-1] > 0.3 * size:
            bases.append(q.base)
        q.level = len(bases) - 1
    step = median([b - a for a, b in zip(bases, bases[1:])]) or 1.2 * size
    by_col: dict[int, list[_Piece]] = defaultdict(list)
    for q in pieces:
        by_col[q.col].append(q)
    opens: set[float] = set()
    for qs in by_col.values():
        qs.sort(key=lambda q: q.base)
        prev = None
        for q in qs:
            if prev is None or q.base - prev > 1.4 * step or _FIGURE.match(q.text):
                opens.add(q.base)  # a figure ("34", "2.5%") is a one-line cell: its row starts there
            prev = q.base
    starts = sorted(opens)
    rows: list[list[_Piece]] = [[] for _ in starts]
    for q in pieces:
        rows[max(0, bisect.bisect_right(starts, q.base + 0.3 * q.size) - 1)].append(q)
    grid: list[list[_Piece]] = []
    for row in rows:
        at: dict[int, set[int]] = defaultdict(set)  # baseline -> columns with a line there
        for q in row:
            at[q.level].add(q.col)
        first = at[min(at)] if at else set()
        cols = {q.col for q in row}
        lists: Counter[tuple] = Counter()  # columns of 2+ lines none of which continues a sentence
        for col in cols:
            qs = [q for q in row if q.col == col]
            if len(qs) > 1 and not any(q.text[:1].islower() for q in qs):
                lists[tuple(sorted(q.level for q in qs))] += 1
        # cells start at the row's top: a column that begins lower, every column on every
        # baseline, or two columns of entries side by side line for line (values and their
        # codes beside a label spanning the rows) are rows of one-line cells
        if len(at) > 1 and (cols != first or all(c == cols for c in at.values())
                            or any(n > 1 for n in lists.values())):
            grid.extend([[q for q in row if q.level == b] for b in sorted(at)])
        else:
            grid.append(row)
    wrapped = [q for row in grid for q in row if len({p.level for p in row if p.col == q.col}) > 1]
    if len(grid) < 2 or sum(bool(_LONG_WORD.search(q.text)) for q in wrapped) < max(1, 0.6 * len(wrapped)):
        return None  # no cell wraps, or only figures and symbols do (display maths): rows read as they are
    out: list[Line] = []
    split: set[int] = set()
    for r, row in enumerate(grid):
        for q in sorted(row, key=lambda q: (q.col, q.base, q.x0)):
            ln = q.src
            if q.runs is not ln.runs:  # the line crosses columns: this column's part of it
                split.add(id(ln))
                ln = Line(q.runs[0], ln.page)
                for run in q.runs[1:]:
                    ln.add(run)
                ln.finish()
                ln.band, ln.crowded, ln.side = q.src.band, q.src.crowded, q.src.side
            ln.cell = (*table, r, q.col)
            out.append(ln)
    if split:  # the page holds the parts instead of the lines they came from
        keep = [ln for ln in pg.lines if id(ln) not in split]
        have = {id(ln) for ln in keep}
        pg.lines = keep + [ln for ln in out if id(ln) not in have]
    return out


def _rows_in_order(lines: list[Line]) -> list[Line]:
    """Top to bottom; lines on one baseline (within a third of their size) left to right."""
    out: list[Line] = []
    row: list[Line] = []
    for ln in sorted(lines, key=lambda ln: ln.base):
        if row and ln.base - row[0].base > 0.3 * min(ln.size, row[0].size):
            out.extend(sorted(row, key=lambda q: q.x0))
            row = []
        row.append(ln)
    out.extend(sorted(row, key=lambda q: q.x0))
    return out


def mark_crowded(pg: Page) -> None:
    """A line sharing its height with another line of the same column is a table cell, a
    figure label or an equation with its number: never a heading or running text."""
    ls = sorted(pg.lines, key=lambda ln: ln.top)
    for i, a in enumerate(ls):
        ha = a.bottom - a.top
        for b in ls[i + 1:]:
            if b.top >= a.bottom:
                break
            if a.band or b.band:
                continue
            ov = min(a.bottom, b.bottom) - max(a.top, b.top)
            if ov > 0.5 * min(ha, b.bottom - b.top) and (
                not pg.two_col or a.side == b.side or "full" in (a.side, b.side)
            ):
                a.crowded = b.crowded = True
