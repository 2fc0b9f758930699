"""Born-digital PDF writer: raw PDF syntax with the standard Type 1 fonts, no dependencies.

The text layer uses Helvetica, Helvetica-Bold, Helvetica-Oblique, Times-Roman and
Times-Italic with WinAnsiEncoding (so the text must be cp1252-encodable). Every page gets a
running header with a rule and a page number at the bottom; figures are drawn as simple
vector charts or grey panels; tables are positioned text between horizontal rules. Output is
deterministic: no dates, fixed /ID, zlib-compressed content streams.
"""
from __future__ import annotations

import hashlib
import zlib

from layout import HEADER_Y, NUMBER_Y, PAGE_H, PAGE_W, Frag, layout, printed_page, text_width
from model import Paper

FONTS = {"Helvetica": "F1", "Helvetica-Bold": "F2", "Helvetica-Oblique": "F3", "Times-Roman": "F4",
         "Times-Italic": "F5"}


def _pdfstr(s: str) -> bytes:
    try:
        b = s.encode("cp1252")
    except UnicodeEncodeError as e:
        raise ValueError(f"not encodable in WinAnsi: {s[e.start:e.end]!r} in {s!r}") from None
    return b"(" + b.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def _info_str(s: str) -> bytes:
    """A text string for the Info dictionary: UTF-16BE with BOM, as hex."""
    return b"<FEFF" + s.encode("utf-16-be").hex().upper().encode() + b">"


def _n(v: float) -> str:
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return s if s not in ("-0", "") else "0"


def _text(x: float, y: float, font: str, size: float, s: str) -> bytes:
    return (f"BT /{FONTS[font]} {_n(size)} Tf 1 0 0 1 {_n(x)} {_n(PAGE_H - y)} Tm ".encode()
            + _pdfstr(s) + b" Tj ET\n")


def _line(x0: float, y0: float, x1: float, y1: float, w: float = 0.5, gray: float = 0.0) -> bytes:
    return (f"{_n(gray)} G {_n(w)} w {_n(x0)} {_n(PAGE_H - y0)} m {_n(x1)} {_n(PAGE_H - y1)} l S\n").encode()


def _figure(f: Frag, seed: str) -> bytes:
    x0, y0, x1, y1 = f.bbox
    out = [f"q 0.55 G 0.6 w {_n(x0)} {_n(PAGE_H - y1)} {_n(x1 - x0)} {_n(y1 - y0)} re S Q\n".encode()]
    h = hashlib.sha256(seed.encode()).digest()
    if f.obj.kind == "chart":
        ax, ay, bx, by = x0 + 24, y1 - 18, x1 - 10, y0 + 10  # axes box (top-left coordinates)
        out.append(_line(ax, ay, bx, ay, 0.7))
        out.append(_line(ax, ay, ax, by, 0.7))
        for k in range(5):  # ticks
            tx = ax + (bx - ax) * k / 4
            out.append(_line(tx, ay, tx, ay + 3, 0.5))
            ty = ay + (by - ay) * k / 4
            out.append(_line(ax - 3, ty, ax, ty, 0.5))
        for s in range(3):  # three deterministic curves
            gray = [0.0, 0.35, 0.6][s]
            pts = []
            for k in range(9):
                v = h[(s * 9 + k) % len(h)] / 255
                frac = (k / 8) ** (0.5 + s * 0.4)
                yy = ay + (by - ay) * min(0.95, 0.15 + 0.6 * frac + 0.15 * v)
                pts.append((ax + (bx - ax) * k / 8, yy))
            path = f"{_n(pts[0][0])} {_n(PAGE_H - pts[0][1])} m " + " ".join(
                f"{_n(px)} {_n(PAGE_H - py)} l" for px, py in pts[1:])
            out.append(f"q {_n(gray)} G 0.9 w {path} S Q\n".encode())
    else:
        n = 2 if (x1 - x0) > 200 else 1
        pw = (x1 - x0 - 12 - 6 * (n - 1)) / n
        for i in range(n):
            px = x0 + 6 + i * (pw + 6)
            g = 0.72 + 0.1 * (h[i] / 255)
            out.append(f"q {_n(g)} g {_n(px)} {_n(PAGE_H - (y1 - 6))} {_n(pw)} {_n(y1 - y0 - 12)} re f Q\n".encode())
            for k in range(6):  # a few "grains"
                cx = px + pw * (0.1 + 0.8 * h[(i * 6 + k) % 32] / 255)
                cy = y0 + 10 + (y1 - y0 - 20) * (h[(i * 6 + k + 7) % 32] / 255)
                r = 4 + 10 * (h[(k + 3) % 32] / 255)
                out.append(f"q 0.45 G 0.5 w {_n(cx - r)} {_n(PAGE_H - cy - r)} {_n(2 * r)} {_n(2 * r)} re S Q\n".encode())
            if n == 2:
                out.append(_text(px + 3, y0 + 16, "Helvetica-Bold", 8, f"({'ab'[i]})"))
    return b"".join(out)


def _page_stream(paper: Paper, page: int, frags: list[Frag]) -> bytes:
    out: list[bytes] = []
    # running header: the journal on every page (left), the short title on even pages (right)
    out.append(_text(54, HEADER_Y, "Helvetica-Oblique", 8, paper.running_head))
    if page % 2 == 0 and paper.running_title:
        w = text_width(paper.running_title, "Helvetica-Oblique", 8)
        out.append(_text(558 - w, HEADER_Y, "Helvetica-Oblique", 8, paper.running_title))
    out.append(_line(54, HEADER_Y + 5, 558, HEADER_Y + 5, 0.4))
    for f in frags:
        if f.kind == "figure":
            out.append(_figure(f, f"{paper.key}:{f.elem}"))
            continue
        if f.kind == "table":
            for (x0, y0, x1, y1) in f.rules:
                out.append(_line(x0, y0, x1, y1, 0.6))
        if f.band == 0 and f.kind == "keywords" and paper.layout.get("columns", 1) == 2:
            out.append(_line(54, f.bbox[3] + 6, 558, f.bbox[3] + 6, 0.4))
        for ln in f.lines:
            out.append(_text(ln.x, ln.y, ln.font, ln.size, ln.text))
    num = str(printed_page(paper, page))
    nw = text_width(num, "Helvetica", 9)
    out.append(_text((PAGE_W - nw) / 2, NUMBER_Y, "Helvetica", 9, num))
    return b"".join(out)


def write(paper: Paper) -> bytes:
    frags, npages = layout(paper)
    objs: list[bytes] = []

    def add(b: bytes | str) -> int:
        objs.append(b.encode("latin-1") if isinstance(b, str) else b)
        return len(objs)

    font_ids = {name: add(f"<< /Type /Font /Subtype /Type1 /BaseFont /{name} /Encoding /WinAnsiEncoding >>")
                for name in FONTS}
    res = "<< /Font << " + " ".join(f"/{FONTS[n]} {i} 0 R" for n, i in font_ids.items()) + " >> >>"
    res_id = add(res)
    pages_id = len(objs) + 2 * npages + 1
    page_ids = []
    for page in range(1, npages + 1):
        data = zlib.compress(_page_stream(paper, page, [f for f in frags if f.page == page]), 9)
        sid = add(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream")
        page_ids.append(add(f"<< /Type /Page /Parent {pages_id} 0 R /MediaBox [0 0 {_n(PAGE_W)} {_n(PAGE_H)}] "
                            f"/Resources {res_id} 0 R /Contents {sid} 0 R >>"))
    assert add(f"<< /Type /Pages /Kids [{' '.join(f'{p} 0 R' for p in page_ids)}] /Count {npages} >>") == pages_id
    cat = add(f"<< /Type /Catalog /Pages {pages_id} 0 R >>")
    info = add(b"<< /Title " + _info_str(paper.title) + b" /Author " + _info_str(paper.author_line())
               + b" /Subject " + _info_str(f"{paper.journal} {paper.year}") + b" /Keywords "
               + _info_str("; ".join(paper.keywords)) + b" /Creator (Sheaf sample library make_samples.py)"
               + b" /Producer (Sheaf raw PDF writer) >>")
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, o in enumerate(objs):
        offsets.append(len(out))
        out += f"{i + 1} 0 obj\n".encode() + o + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    fid = hashlib.md5(paper.key.encode()).hexdigest().upper()
    out += (f"trailer\n<< /Size {len(objs) + 1} /Root {cat} 0 R /Info {info} 0 R "
            f"/ID [<{fid}> <{fid}>] >>\nstartxref\n{xref}\n%%EOF\n").encode()
    return bytes(out)
