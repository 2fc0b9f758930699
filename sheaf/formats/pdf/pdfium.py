"""PDFium access (pypdfium2's raw API through ctypes): opening a document, the per-character calls,
and `text_layer_problem`. PDFium is not thread-safe: every call runs under `LOCK`.
"""
from __future__ import annotations

import ctypes
import re
import threading
from pathlib import Path

from sheaf.core.models import IngestError
from sheaf.formats.common import file_head
from sheaf.formats.pdf.patterns import LIGATURES


def _fast(fn, restype, *argtypes):
    """A second ctypes prototype over a PDFium function, returning plain ints (no pointer objects)."""
    return ctypes.CFUNCTYPE(restype, *argtypes)(ctypes.cast(fn, ctypes.c_void_p).value)


_api = None
LOCK = threading.Lock()


def pdfium_api():
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


def draw_text(doc, page, fonts: dict, font: bytes, size: float, x: float, y: float, text: str) -> None:
    """`text` drawn on `page` of the new document `doc` (pypdfium2 objects) as one text object in
    the PDF standard font `font` (b"Helvetica", b"Times-Bold", ...) at `size` points, its origin
    at (x, y) from the page's bottom left. `fonts` keeps the document's loaded fonts by name.
    The caller holds `LOCK` and generates the page's content when done."""
    import pypdfium2.raw as raw

    if font not in fonts:
        fonts[font] = raw.FPDFText_LoadStandardFont(doc.raw, font)
    obj = raw.FPDFPageObj_CreateTextObj(doc.raw, fonts[font], size)
    u16 = (text + "\0").encode("utf-16-le")
    buf = ctypes.create_string_buffer(u16, len(u16))
    raw.FPDFText_SetText(obj, ctypes.cast(buf, ctypes.POINTER(raw.FPDF_WCHAR)))
    raw.FPDFPageObj_Transform(obj, 1, 0, 0, 1, x, y)
    raw.FPDFPage_InsertObject(page.raw, obj)


def matches(path: Path) -> bool:
    """A `.pdf` file, or any other file (not a known text format) that starts with `%PDF-`."""
    if path.suffix.lower() == ".pdf":
        return True
    if path.suffix.lower() in {".json", ".md", ".markdown", ".xml", ".txt", ".csv", ".html"}:
        return False
    return file_head(path, 1024).lstrip().startswith(b"%PDF-")


def open_document(paper_id: str, path: Path, data: bytes, warnings: list[str]):
    api = pdfium_api()
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
UNMAPPED = re.compile(r"[\x00\x01\x03-\x08\x0e-\x1f\x7f-\x9f\ufffd\ue000-\uf8ff]")
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
        api = pdfium_api()
        with LOCK:
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
            for w in _WORD.findall(text.translate(LIGATURES)):
                words += 1
                bad += bool(UNMAPPED.search(w))
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
