"""Reading a page's text layer: characters into runs, runs into lines (same baseline,
horizontally adjacent), pages whose text is turned a quarter.
"""
from __future__ import annotations

import bisect
import ctypes

from sheaf.formats.pdf.geometry import Line, Page, Run, median
from sheaf.formats.pdf.patterns import BOLD_NAME, CTRL, LIGATURES, LIGHT_NAME, MONO_NAME


def read_page(api, doc, index: int, fonts: dict) -> Page:
    page = doc[index]
    try:
        l, b, r, t = page.get_bbox()
        pg = Page(index + 1, l, t, max(1.0, r - l), max(1.0, t - b))
        tp = page.get_textpage()
        try:
            _read_text(api, tp.raw, pg, fonts)
        finally:
            tp.close()
        if pg.rotated > max(300, 2 * pg.chars):
            pg = _read_turned(api, page, pg, fonts)
        if pg.chars < SCAN_TEXT:
            pg.picture = _picture_share(api["raw"], page.raw, pg.width * pg.height)
    finally:
        page.close()
    return pg


#: A page with less text than this is looked at for a picture covering it (a scan with a stamp).
SCAN_TEXT = 600


def _picture_share(raw, page, area: float) -> float:
    """The share of the page its largest image covers (0-1): a scanned page is one picture."""
    best = 0.0
    l_, b_, r_, t_ = (ctypes.c_float() for _ in range(4))
    for k in range(raw.FPDFPage_CountObjects(page)):
        obj = raw.FPDFPage_GetObject(page, k)
        if raw.FPDFPageObj_GetType(obj) != raw.FPDF_PAGEOBJ_IMAGE:
            continue
        if raw.FPDFPageObj_GetBounds(obj, l_, b_, r_, t_):
            best = max(best, (r_.value - l_.value) * (t_.value - b_.value) / max(1.0, area))
    return min(1.0, best)


def _read_turned(api, page, pg: Page, fonts: dict) -> Page:
    """A landscape table or figure set on a portrait page (its text runs up or down): every
    object of the page turned a quarter in memory (the file is never written) so that the text
    runs left to right, then read again as a page of the turned size."""
    raw = api["raw"]
    l, b, r, t = page.get_bbox()
    up = pg.turned_up * 2 >= pg.rotated
    # text running upwards turns right: (x, y) -> (y - b, r - x); downwards turns left
    m = (0, -1, 1, 0, -b, r) if up else (0, 1, -1, 0, t, -l)
    for k in range(raw.FPDFPage_CountObjects(page.raw)):
        raw.FPDFPageObj_Transform(raw.FPDFPage_GetObject(page.raw, k), *m)
    turned = Page(pg.number, 0.0, max(1.0, r - l), max(1.0, t - b), max(1.0, r - l))
    turned.turned = "up" if up else "down"
    tp = page.get_textpage()
    try:
        _read_text(api, tp.raw, turned, fonts)
    finally:
        tp.close()
    return turned if turned.chars > pg.chars else pg


def _read_text(api, tp, pg: Page, fonts: dict) -> None:
    raw = api["raw"]
    nc = raw.FPDFText_CountChars(tp)
    if nc <= 0:
        return
    tpv = ctypes.cast(tp, ctypes.c_void_p)
    buf = (ctypes.c_ushort * (nc + 1))()
    n = raw.FPDFText_GetText(tp, 0, nc, buf)
    text = bytes(memoryview(buf)[: max(0, n - 1)]).decode("utf-16-le", "replace") if n > 0 else ""
    if len(text) != nc:  # PDFium skipped or inserted characters: read them one by one
        gu = api["get_uni"]
        text = "".join(chr(c) if c < 0x110000 and not 0xD800 <= c < 0xE000 else "\ufffd"
                       for c in (gu(tpv, i) for i in range(nc)))
    go = api["get_obj"]
    objs = [go(tpv, i) for i in range(nc)]

    l_, r_, b_, t_ = (ctypes.c_double() for _ in range(4))
    ox, oy = ctypes.c_double(), ctypes.c_double()
    mat = raw.FS_MATRIX()
    fbuf = ctypes.create_string_buffer(128)
    flags = ctypes.c_int()
    top = pg.y0
    left = pg.x0
    mid = pg.mid
    lines = pg.lines
    cur: Line | None = None
    drawn: set[tuple[str, int, int]] = set()
    chars = 0
    i = 0
    while i < nc:
        o = objs[i]
        if o is None:
            i += 1
            continue
        j = i + 1
        while j < nc and objs[j] == o:
            j += 1
        a, z = i, j - 1
        while a <= z and text[a].isspace():
            a += 1
        while z >= a and text[z].isspace():
            z -= 1
        i = j
        if a > z:
            continue
        raw.FPDFText_GetMatrix(tp, a, mat)
        if abs(mat.b) > 0.2 * abs(mat.a) + 1e-9 or abs(mat.c) > 0.2 * abs(mat.d) + 1e-9 or mat.a < 0:
            pg.rotated += z - a + 1
            pg.turned_up += (z - a + 1) * (mat.b > 0)
            continue  # rotated or mirrored text (margin stamps, axis labels): not part of the flow
        scale = (mat.c * mat.c + mat.d * mat.d) ** 0.5 or 1.0  # vertical scale: immune to microtype expansion
        size = raw.FPDFText_GetFontSize(tp, a) * scale
        if size <= 0.5:
            continue
        font = api["get_font"](o)
        fi = fonts.get(font)
        if fi is None:
            raw.FPDFText_GetFontInfo(tp, a, fbuf, 128, flags)
            name = fbuf.value.decode("latin-1", "replace")
            name = name.split("+", 1)[-1]
            weight = raw.FPDFText_GetFontWeight(tp, a)
            bold = bool(BOLD_NAME.search(name)) or (weight >= 700 and not LIGHT_NAME.search(name))
            mono = bool(MONO_NAME.search(name)) or bool(flags.value & 1)  # FixedPitch flag
            fi = fonts[font] = (bold, mono, len(fonts))
        raw.FPDFText_GetCharOrigin(tp, a, ox, oy)
        raw.FPDFText_GetCharBox(tp, a, l_, r_, b_, t_)
        x0 = l_.value
        raw.FPDFText_GetCharBox(tp, z, l_, r_, b_, t_)
        x1 = max(r_.value, x0 + 0.1)
        s = text[a:z + 1]
        base = top - oy.value
        nvis = z - a + 1
        chars += nvis
        pieces = [(s, x0, x1)]
        if x1 - x0 > nvis * size * 0.9 + 2 * size and " " in s:
            pieces = _split_wide(raw, tp, text, a, z, size, l_, r_, b_, t_)
        for s, x0, x1 in pieces:
            s = CTRL.sub("", s.translate(LIGATURES))
            if not s.strip():
                continue
            run = Run(s, x0 - left, x1 - left, base, size, fi[0], fi[1], fi[2],
                      (a, z) if len(pieces) == 1 and " " in s else None)  # words: _cut_at_cells may cut it
            if cur is not None:
                last = cur.runs[-1]
                if last.text == s and abs(last.x0 - run.x0) < 0.3 * size and abs(last.base - base) < 0.3 * size:
                    last.bold = True  # the same text printed twice, slightly offset: "fake bold"
                    continue
            if _drawn_before(drawn, s, run.x0, base):
                continue
            if cur is not None and cur.fits(run, mid - left):
                cur.add(run)
            else:
                cur = Line(run, pg.number)
                lines.append(cur)
    pg.chars = chars
    _cut_at_cells(raw, tp, text, pg, l_, r_, b_, t_)
    for ln in lines:  # the page's text is gone after this: its indices mean nothing
        for r in ln.runs:
            r.chars = None


def _drawn_before(drawn: set[tuple[str, int, int]], s: str, x0: float, base: float) -> bool:
    """Whether the run `s` was drawn before at the same place on this page (within a point): a
    second text layer over the first, as some publishers' PDFs draw a page's text twice, away
    from the first in the content stream. Read once; the first is kept. `drawn` holds the page's
    runs so far."""
    kx, ky = round(x0), round(base)
    if any((s, kx + dx, ky + dy) in drawn for dx in (-1, 0, 1) for dy in (-1, 0, 1)):
        return True
    drawn.add((s, kx, ky))
    return False


def _split_wide(raw, tp, text, a, z, size, l_, r_, b_, t_):
    """A run much wider than its characters: split it where the gap between words is wide."""
    out = []
    start = a
    prev_right = None
    raw.FPDFText_GetCharBox(tp, a, l_, r_, b_, t_)
    seg_x0 = l_.value
    k = a
    while k <= z:
        if text[k] == " " and k > a:
            raw.FPDFText_GetCharBox(tp, k - 1, l_, r_, b_, t_)
            prev_right = r_.value
            n = k + 1
            while n <= z and text[n] == " ":
                n += 1
            if n > z:
                break
            raw.FPDFText_GetCharBox(tp, n, l_, r_, b_, t_)
            if l_.value - prev_right > 1.5 * size:
                out.append((text[start:k], seg_x0, prev_right))
                start, seg_x0 = n, l_.value
            k = n
            continue
        k += 1
    raw.FPDFText_GetCharBox(tp, z, l_, r_, b_, t_)
    out.append((text[start:z + 1], seg_x0, max(r_.value, seg_x0 + 0.1)))
    return [p for p in out if p[0].strip()]


def column_starts(xs: list[float], size: float, min_lines: int = 4, spans=None) -> list[float]:
    """x positions where at least `min_lines` lines (or cells) start (within 1.5 pt): where the
    cells of a table's columns (or a page's text columns) begin. A start within 2.5 em (of
    `size`) right of a start shared by more lines is a paragraph indent, not a column; so is
    one that more of `spans` (lines' x ranges, sorted) starting within 2.5 em left of it run
    across than start there (a column's paragraphs indented: its lines run across the indent)."""
    xs = sorted(xs)
    clusters: list[list[float]] = []
    for x in xs:
        if clusters and x - clusters[-1][0] <= 1.5:
            clusters[-1].append(x)
        else:
            clusters.append([x])
    found: list[tuple[float, int]] = []
    for c in clusters:
        if len(c) < min_lines:
            continue
        if found and c[0] - found[-1][0] <= size and len(c) <= found[-1][1]:
            continue  # within 1 em of a start shared by as many lines: the same edge, ragged
        if found and c[0] - found[-1][0] <= size:
            found.pop()
        found.append((c[len(c) // 2], len(c)))
    found = [(x, n) for x, n in found if not any(0 < x - x2 <= 2.5 * size and n2 > n for x2, n2 in found)]
    if spans is not None and len(found) >= 3:  # spans: (x0, x1) sorted by x0
        starts = [a for a, _ in spans]

        def crossing(x: float) -> int:  # lines from within 2.5 em left of x that run across it
            lo, hi = bisect.bisect_left(starts, x - 2.5 * size), bisect.bisect_left(starts, x - 2)
            return sum(b > x + 2 for _, b in spans[lo:hi])

        found = [(x, n) for x, n in found if crossing(x) < n]
    return [x for x, _ in found]


def _cut_at_cells(raw, tp, text, pg: Page, l_, r_, b_, t_) -> None:
    """A table whose cells' lines the content stream set as one text object per row ("Back and
    forth, Index finger and (1) different pattern, Change"): such runs are cut before a word
    that starts at a column's left edge (within 1.5 pt) after a gap wider than a word space
    (0.6 em), and, in lines across a column's edge, where a run wider than its letters need
    holds a gap of 1 em or more, so that the reading order can take the table cell by cell
    (_table_cells).
    Only on pages where at least three column starts are found (where 4+ lines begin, then
    also counting cells inside lines; ordinary one- and two-column pages are left alone) and
    only runs across such a start, 2.5 em or more from where they begin (a hanging indent is
    no column)."""
    if len(pg.lines) < 8:
        return
    size = median([ln.size for ln in pg.lines])
    xs = [ln.x0 for ln in pg.lines]

    def columns(cuts: list[float]) -> int:  # a hanging indent (within 2.5 em) is no column of its own
        return sum(k == 0 or c - cuts[k - 1] > 2.5 * size for k, c in enumerate(cuts))

    if columns(column_starts(xs, size)) < 3:
        return  # one or two columns of text
    spans = sorted((ln.x0, ln.x1) for ln in pg.lines)
    if columns(column_starts(xs, size, spans=spans)) < 3:
        return
    for ln in pg.lines:  # and where cells begin inside lines, after a gap wider than a word space
        runs = ln.runs
        for k in range(1, len(runs)):
            if runs[k].x0 - runs[k - 1].x1 > 0.6 * runs[k].size:
                xs.append(runs[k].x0)
    cuts = column_starts(xs, size, spans=spans)
    if columns(cuts) < 3:
        return
    pg.tabular = True
    left = pg.x0

    def across(x0: float, x1: float) -> bool:
        k = bisect.bisect_right(cuts, x0)
        return k < len(cuts) and cuts[k] < x1 - 2

    for ln in pg.lines:
        if not across(ln.x0 + 2.5 * size, ln.x1):  # a start 2.5 em in at least: no hanging indent
            continue
        out = []
        edge = ln.x0 + 2.5 * size
        for r in ln.runs:
            if r.chars is None:  # one word (or not cuttable)
                out.append(r)
                continue
            if r.x1 - r.x0 > 0.5 * r.size * len(r.text):
                # wider than its letters need (about 0.45 em each): a cell's gap inside it
                parts = _cut_at_gaps(raw, tp, text, r, left, l_, r_, b_, t_)
                out.extend(parts[:-1])
                r = parts[-1]
            if not across(max(r.x0 + 2, edge), r.x1):
                out.append(r)
                continue
            for c in cuts:
                if not (max(r.x0 + 2, edge) < c < r.x1 - 2) or r.chars is None:
                    continue
                a, z = r.chars
                # the word beginning nearest c: from the character where c falls pro rata,
                # word by word towards c (x grows along the run)
                k = text.rfind(" ", a, a + int((c - r.x0) / (r.x1 - r.x0) * (z - a)) + 1) + 1
                if k <= a:
                    k = text.find(" ", a, z) + 1
                    if k <= a:
                        continue
                moved = 0
                for _ in range(6):
                    raw.FPDFText_GetCharBox(tp, k, l_, r_, b_, t_)
                    x = l_.value - left
                    if x < c - 1.5 and moved >= 0:  # on to the next word
                        n = text.find(" ", k, z)
                        if n < 0:
                            break
                        while n < z and text[n + 1] == " ":
                            n += 1
                        k, moved = n + 1, 1
                    elif x > c + 1.5 and moved <= 0:  # back to the previous one
                        e = k - 1
                        while e > a and text[e] == " ":
                            e -= 1
                        n = text.rfind(" ", a, e) + 1
                        if n <= a:
                            break
                        k, moved = n, -1
                    else:
                        break
                e = k - 1
                while e > a and text[e] == " ":
                    e -= 1
                raw.FPDFText_GetCharBox(tp, e, l_, r_, b_, t_)
                right = r_.value - left
                if abs(x - c) > 1.5 or x - right < 0.6 * r.size:
                    continue  # no word begins at the column, or only a word space before it
                head = CTRL.sub("", text[a:k].translate(LIGATURES))  # its space kept: the words stay apart
                tail = CTRL.sub("", text[k:z + 1].translate(LIGATURES))
                if not head.strip() or not tail.strip():
                    continue
                out.append(Run(head, r.x0, max(r.x0 + 0.1, right), r.base, r.size, r.bold, r.mono, r.font, (a, e)))
                r = Run(tail, x, r.x1, r.base, r.size, r.bold, r.mono, r.font, (k, z))
            out.append(r)
        if len(out) > len(ln.runs):
            ln.runs = out


def _cut_at_gaps(raw, tp, text, r: Run, left: float, l_, r_, b_, t_) -> list[Run]:
    """A run cut where the gap between two words is a cell's (1 em or more), not a word space."""
    a, z = r.chars
    out: list[Run] = []
    start, x0 = a, r.x0
    k = text.find(" ", a, z)
    while k >= 0:
        e = k - 1
        while k < z and text[k + 1] == " ":
            k += 1
        k += 1  # the next word's first character
        raw.FPDFText_GetCharBox(tp, e, l_, r_, b_, t_)
        right = r_.value - left
        raw.FPDFText_GetCharBox(tp, k, l_, r_, b_, t_)
        x = l_.value - left
        if x - right >= r.size and e >= start:
            head = CTRL.sub("", text[start:k].translate(LIGATURES))  # its space kept: the words stay apart
            if head.strip():
                out.append(Run(head, x0, max(x0 + 0.1, right), r.base, r.size, r.bold, r.mono, r.font, (start, e)))
                start, x0 = k, x
        k = text.find(" ", k, z)
    if not out:
        return [r]
    tail = CTRL.sub("", text[start:z + 1].translate(LIGATURES))
    out.append(Run(tail, x0, r.x1, r.base, r.size, r.bold, r.mono, r.font, (start, z)))
    return out
