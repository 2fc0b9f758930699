"""Regenerate fontmetrics.py: advance widths of the standard PDF fonts, measured with pdfium.

Writes a probe PDF in which each WinAnsi character is followed by '|' at a known origin, and
reads back where pdfium places the '|'. Run only if fontmetrics.py must be rebuilt:
    /work/venv/bin/python data/sample-library/_build/measure_fonts.py
"""
from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as raw

FONTS = ["Helvetica", "Helvetica-Bold", "Helvetica-Oblique", "Times-Roman", "Times-Bold", "Times-Italic"]
CODES = list(range(32, 127)) + list(range(0xA0, 0x100)) + [0x85, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97]


def probe_pdf() -> bytes:
    objs: list[bytes] = []

    def obj(s: str | bytes) -> int:
        objs.append(s.encode("latin-1") if isinstance(s, str) else s)
        return len(objs)

    fonts = [obj(f"<< /Type /Font /Subtype /Type1 /BaseFont /{f} /Encoding /WinAnsiEncoding >>") for f in FONTS]
    streams = []
    for fi in range(len(FONTS)):
        ops = ["BT"] + [f"/F{fi} 10 Tf 1 0 0 1 20 {10 + n * 3} Tm <{c:02X}7C> Tj" for n, c in enumerate(CODES)] + ["ET"]
        data = "\n".join(ops).encode("latin-1")
        streams.append(obj(b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"))
    res = " ".join(f"/F{i} {fid} 0 R" for i, fid in enumerate(fonts))
    pages_id = len(objs) + len(streams) + 1
    kids = [obj(f"<< /Type /Page /Parent {pages_id} 0 R /MediaBox [0 0 612 792] "
                f"/Resources << /Font << {res} >> >> /Contents {s} 0 R >>") for s in streams]
    obj(f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>")
    cat = obj(f"<< /Type /Catalog /Pages {pages_id} 0 R >>")
    out = bytearray(b"%PDF-1.4\n")
    offs = []
    for i, o in enumerate(objs):
        offs.append(len(out))
        out += f"{i + 1} 0 obj\n".encode() + o + b"\nendobj\n"
    x = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    for o in offs:
        out += f"{o:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root {cat} 0 R >>\nstartxref\n{x}\n%%EOF\n".encode()
    return bytes(out)


def measure() -> dict[str, dict[int, int]]:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "probe.pdf"
        p.write_bytes(probe_pdf())
        pdf = pdfium.PdfDocument(str(p))
        res: dict[str, dict[int, int]] = {}
        for fi, f in enumerate(FONTS):
            tp = pdf[fi].get_textpage()
            rows: dict[float, list[tuple[float, int]]] = {}
            for i in range(tp.count_chars()):
                x, y = ctypes.c_double(), ctypes.c_double()
                raw.FPDFText_GetCharOrigin(tp.raw, i, ctypes.byref(x), ctypes.byref(y))
                rows.setdefault(round(y.value, 2), []).append((x.value, raw.FPDFText_GetUnicode(tp.raw, i)))
            w = {}
            for n, c in enumerate(CODES):
                pipes = [x for x, u in rows.get(round(10 + n * 3, 2), []) if u == 0x7C]
                if pipes:
                    w[c] = round((max(pipes) - 20) * 100)
            res[f] = w
        pdf.close()
    return res


def main() -> None:
    widths = measure()
    lines = ['"""Advance widths (1/1000 em) of the standard PDF fonts for WinAnsi (cp1252) codes 32-255.', "",
             "Measured once with `measure_fonts.py` (pdfium's built-in metrics for the standard 14 fonts,",
             "which match Adobe's core AFM widths). Codes the probe did not cover are None.", '"""', "",
             "WIDTHS: dict[str, list[int | None]] = {"]
    for f, d in widths.items():
        toks = ["None" if d.get(c) is None else str(d[c]) for c in range(32, 256)]
        lines.append(f'    "{f}": [')
        cur = "        "
        for t in toks:
            if len(cur) + len(t) + 2 > 96:
                lines.append(cur.rstrip())
                cur = "        "
            cur += t + ", "
        lines.append(cur.rstrip())
        lines.append("    ],")
    lines.append("}")
    (Path(__file__).parent / "fontmetrics.py").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
