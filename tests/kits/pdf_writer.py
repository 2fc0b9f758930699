"""PDFs written byte by byte for the PDF adapter's tests: what pypdfium2's page-object API
cannot make (glyph names without Unicode values, text turned a quarter, fonts of our choice)."""
from __future__ import annotations

from pathlib import Path

PAGE = (595, 842)


def _escape(b: bytes) -> bytes:
    return b.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def pdf_bytes(objs: list[bytes], trailer: bytes = b"") -> bytes:
    """A PDF of `objs` (object 1 the catalog), with its cross-reference table; `trailer`: more
    trailer entries (an /Encrypt, an /ID)."""
    out = b"%PDF-1.4\n"
    offsets = []
    for i, o in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + o + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, trailer, xref)


def raw_pdf(path: Path, pages: list[list[tuple]], differences: bytes = b"", size: tuple = PAGE) -> Path:
    """Each page is a list of items (x, y_from_top, font_size, text, font[, turn]): `text` in
    font codes (bytes, or str encoded Latin-1), `font` one of "R" (Times-Roman, WinAnsi with
    `differences`, e.g. b"128 /f_i 129 /g7"), "B" (Times-Bold), "H" (Helvetica); `turn` 90 draws
    the text running upwards from (x, y), -90 downwards."""
    fonts = {"R": b"Times-Roman", "B": b"Times-Bold", "H": b"Helvetica"}
    objs: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    kids = []
    first_font = 3 + 2 * len(pages)
    res = b" ".join(b"/F%s %d 0 R" % (k.encode(), first_font + n) for n, k in enumerate(fonts))
    for items in pages:
        ops = []
        for x, y, fs, text, font, *turn in items:
            t = text.encode("latin-1") if isinstance(text, str) else text
            a, b, c, d = {0: (1, 0, 0, 1), 90: (0, 1, -1, 0), -90: (0, -1, 1, 0)}[turn[0] if turn else 0]
            ops.append(b"BT /F%s %g Tf %d %d %d %d %g %g Tm (%s) Tj ET"
                       % (font.encode(), fs, a, b, c, d, x, size[1] - y, _escape(t)))
        content = b"\n".join(ops)
        kids.append(len(objs) + 1)
        objs.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources << /Font << %s >> >>"
                    b" /Contents %d 0 R >>" % (size[0], size[1], res, len(objs) + 2))
        objs.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
    objs[1] = b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids) + b"] /Count %d >>" % len(kids)
    for k, base in fonts.items():
        enc = (b" /Encoding << /Type /Encoding /BaseEncoding /WinAnsiEncoding /Differences [" + differences
               + b"] >>") if k == "R" and differences else b" /Encoding /WinAnsiEncoding"
        objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /" + base + enc + b" >>")
    path.write_bytes(pdf_bytes(objs))
    return path


def lines_page(lines: list, font: str = "R", size: float = 10, x: float = 57, top: float = 52) -> list[tuple]:
    """A page of lines set one under the other, `size` points apart plus 3."""
    return [(x, top + k * (size + 3), size, ln, font) for k, ln in enumerate(lines)]


def scanned_pdf(path: Path, source: Path, scan: set[int] | None = None, scale: float = 2.0) -> Path:
    """A copy of the PDF `source` whose pages in `scan` (0-based; default all) are pictures of
    themselves, as a scanner makes them: the page rendered at `scale` x 72 dpi, put back as one
    image covering the page, with no text layer."""
    import pypdfium2 as pdfium

    src = pdfium.PdfDocument(str(source))
    out = pdfium.PdfDocument.new()
    try:
        for i in range(len(src)):
            if scan is not None and i not in scan:
                out.import_pages(src, [i], len(out))
                continue
            page = src[i]
            w, h = page.get_size()
            bitmap = page.render(scale=scale)
            image = pdfium.PdfImage.new(out)
            image.set_bitmap(bitmap)
            image.set_matrix(pdfium.PdfMatrix().scale(w, h))
            new = out.new_page(w, h)
            new.insert_obj(image)
            new.gen_content()
            page.close()
        out.save(str(path))
    finally:
        out.close()
        src.close()
    return path


QUOKKA_TITLE = "Quokka Counts on Rottnest Island"
PAGE_ONE = [
    "The quokka census counted seventeen animals near the lighthouse",
    "during the dry season, and twice as many after the first rains.",
    "Each count was made at dawn by two observers walking the same",
    "transect, and their tallies were compared before they were kept.",
]
PAGE_TWO = [
    "Burrows were mapped with a handheld receiver along the coast road",
    "and each burrow was visited three times in the following month.",
    "Tracks in the sand were photographed and matched by their length.",
]


def quokka_pdf(path: Path) -> Path:
    """A two-page text PDF: a bold title, a paragraph, a bold "Methods" heading, a paragraph."""
    title = [(57, 120, 18, QUOKKA_TITLE, "B")]
    heading = [(57, 120, 14, "Methods", "B")]
    return raw_pdf(path, [title + lines_page(PAGE_ONE, size=11, top=160),
                          heading + lines_page(PAGE_TWO, size=11, top=150)])
