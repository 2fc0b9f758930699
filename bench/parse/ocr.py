"""OCR of scanned pages (`sheaf.formats.pdf.ocr`): quality, speed, and the real scans.

1. Quality, against a text layer nobody here wrote: born-digital PDFs of ../shared/data (the two
   R vignettes, GROBID's three source PDFs, four EMNLP papers), `--pages` pages of each spread
   over the paper, each rendered to an image at each `--scales` (x 72 dpi) and read by OCR. Per
   page, against the page's own text layer (PDFium's text), the word recall: the share of the
   text layer's words (3+ letters, lower-cased, with multiplicity) among the OCR's words.
2. Speed: pages per second over those pages, on this machine's cores (the CPU named).
3. The two scanned papers of ../shared/data/zotero_dirs (Bühler 2000, Bavelas et al. 1995): read
   whole by `parse_paper` as a build does (their time is the "12-page scan" figure), then a
   phrase read by eye on one of their page images must be in the text.

Run from the project root:
    .venv/bin/python -m bench.parse.ocr                      # the table on stdout
    .venv/bin/python -m bench.parse.ocr --json bench/results/ocr.json
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from sheaf.formats import parse_paper
from sheaf.formats.pdf.ocr import PageOcr, page_ocr

ROOT = Path(__file__).resolve().parents[2]

SHARED = ROOT.parent / "shared" / "data"
BORN_DIGITAL = ["pdfs/zoo.pdf", "pdfs/sandwich-CL.pdf", "formats/grobid_tei/N18-3011.pdf",
                "formats/grobid_tei/s12984-016-0129-6.pdf", "formats/grobid_tei/2020.acl-main.207.pdf",
                "mineru/2024.emnlp-main.12/paper.pdf", "mineru/2024.emnlp-main.55/paper.pdf",
                "mineru/2024.emnlp-main.126/paper.pdf", "mineru/2024.emnlp-main.194/paper.pdf"]
#: The scanned papers, with a phrase read by eye on one of their page images.
SCANS = {"ND3Q8Y2H": ("zotero_dirs/FranziZimm__Literaturedatabase/storage/ND3Q8Y2H",
                      "A small group of hand gestures made during conversation"),
         "U3JDWJNH": ("zotero_dirs/FranziZimm__Literaturedatabase/storage/U3JDWJNH", "Sprachtheorie")}
WORD = re.compile(r"[A-Za-zÀ-ÿ]{3,}")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def words(text: str) -> Counter:
    return Counter(w.lower() for w in WORD.findall(text))


def compare(ref: str, hyp: list[str]) -> float:
    """Word recall of the OCR's lines `hyp` against the text layer `ref`: the share of the text
    layer's words (3+ letters, lower-cased, with multiplicity) among the OCR's words. Counted as
    bags of words, since the two read a page's columns and floats in different orders."""
    rw, hw = words(ref), words(" ".join(hyp))
    return sum((rw & hw).values()) / max(1, sum(rw.values()))


def quality(scales: list[float], pages_per_pdf: int) -> dict:
    import pypdfium2 as pdfium

    rows, timing = [], {}
    engines = {s: PageOcr("force", None) for s in scales}
    for rel in BORN_DIGITAL:
        path = SHARED / rel
        if not path.is_file():
            continue
        doc = pdfium.PdfDocument(str(path))
        n = len(doc)
        picks = sorted({round(k * (n - 1) / max(1, pages_per_pdf - 1)) for k in range(pages_per_pdf)}) if n > 1 else [0]
        for i in picks:
            page = doc[i]
            tp = page.get_textpage()
            ref = tp.get_text_range()
            tp.close()
            if len(ref.split()) < 50:
                page.close()
                continue
            for s in scales:
                image = page.render(scale=s).to_numpy()
                t = time.perf_counter()
                lines = engines[s].read_image(image, s)
                dt = time.perf_counter() - t
                timing.setdefault(s, []).append(dt)
                recall = compare(ref, [ln.text for ln in lines])
                rows.append({"pdf": rel, "page": i + 1, "scale": s, "recall": round(recall, 4), "seconds": round(dt, 2)})
            page.close()
        doc.close()
    summary = {}
    for s in scales:
        r = [x for x in rows if x["scale"] == s]
        if not r:
            continue
        rec = sorted(x["recall"] for x in r)
        summary[str(s)] = {"pages": len(r), "recall_median": rec[len(rec) // 2], "recall_min": rec[0],
                           "recall_mean": round(sum(rec) / len(rec), 4),
                           "pages_per_second": round(len(r) / sum(timing[s]), 3)}
    return {"rows": rows, "summary": summary}


def scans() -> list[dict]:
    out = []
    for key, (folder, phrase) in SCANS.items():
        pdfs = sorted((SHARED / folder).glob("*.pdf"))
        if not pdfs:
            continue
        with tempfile.TemporaryDirectory() as cache:  # a cold cache: every page read
            t = time.perf_counter()
            paper = parse_paper(pdfs[0], key, ocr=page_ocr("auto", Path(cache)))
            dt = time.perf_counter() - t
        text = " ".join(" ".join(b.text.split()) for b in paper.blocks)
        pages = len({b.page for b in paper.blocks if b.source_format == "ocr"})
        out.append({"paper": key, "file": pdfs[0].name, "pages": pages, "seconds": round(dt, 1),
                    "seconds_per_page": round(dt / max(1, pages), 2), "title": paper.title,
                    "phrase": phrase, "phrase_found": phrase.lower() in text.lower(), "words": len(text.split())})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", default="1.5,2.0,2.5", help="render scales to compare (x 72 dpi)")
    ap.add_argument("--pages", type=int, default=2, help="pages of each born-digital PDF")
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--no-scans", action="store_true", help="leave out the two scanned papers")
    args = ap.parse_args()
    if not SHARED.is_dir():
        sys.exit(f"real test data not found at {SHARED}")
    q = quality([float(s) for s in args.scales.split(",")], args.pages)
    s = [] if args.no_scans else scans()
    import os

    result = {"cpu": cpu_name(), "cores": os.cpu_count(), "quality": q, "scans": s}
    print(f"CPU: {result['cpu']} ({result['cores']} cores)")
    print("| scale (x 72 dpi) | pages | word recall median / mean / min | pages/s |")
    print("|---|---|---|---|")
    for scale, m in q["summary"].items():
        print(f"| {scale} | {m['pages']} | {m['recall_median']:.3f} / {m['recall_mean']:.3f} / {m['recall_min']:.3f} "
              f"| {m['pages_per_second']:.2f} |")
    print()
    print("| scanned paper | pages | seconds (s/page) | title | phrase found |")
    print("|---|---|---|---|---|")
    for r in s:
        print(f"| {r['file']} | {r['pages']} | {r['seconds']} ({r['seconds_per_page']}) | {r['title']} | {r['phrase_found']} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
