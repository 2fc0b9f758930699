"""OCR of scanned pages (`sheaf.formats.pdf.ocr`): quality, speed, and the real scans.

1. Quality, against a text layer nobody here wrote: born-digital PDFs of ../shared/data (the two
   R vignettes, GROBID's three source PDFs, four EMNLP papers), `--pages` pages of each spread
   over the paper, each rendered to an image at each `--scales` (x 72 dpi) and read by OCR with
   each recognition model of `--precisions` (fp32: RapidOCR's own; int8: `ocr_int8`'s). Per page,
   against the page's own text layer (PDFium's text):
   - word recall: the share of the text layer's words (3+ letters, lower-cased, with
     multiplicity) among the OCR's words, as bags (the two read columns in different orders);
   - character error rate: each OCR line against the text layer's characters inside the middle
     half of its box (PDFium's bounded text; aligned by place, so reading order cannot count as
     errors), the edit distance over the text layer's characters (NFKC, spaces collapsed). Text
     OCR missed is in the word recall, not here.
2. Speed: pages per second over those pages, on this machine's cores (the CPU named).
3. The two scanned papers of ../shared/data/zotero_dirs (Bühler 2000, Bavelas et al. 1995): read
   whole by `parse_paper` as a build does, with a cold page cache, by each recognition model
   (their time is the "12-page scan" figure), then a phrase read by eye on one of their page
   images must be in the text.

Run from the project root:
    .venv/bin/python -m bench.parse.ocr                      # the table on stdout
    .venv/bin/python -m bench.parse.ocr --json bench/results/ocr.json
    .venv/bin/python -m bench.parse.ocr --scales 1.5,2.0 --precisions fp32 --no-scans   # the scale
    .venv/bin/python -m bench.parse.ocr --no-quality --only ND3Q8Y2H --rounds 3 --json bench/results/ocr-scan.json
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
import time
import unicodedata
from collections import Counter
from pathlib import Path

from sheaf.formats import parse_paper
from sheaf.formats.pdf.ocr import OcrLine, PageOcr

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


def edits(a: str, b: str) -> int:
    """The Levenshtein distance between `a` and `b`."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


def char_errors(textpage, page_height: float, lines: list[OcrLine]) -> tuple[int, int]:
    """(edits, reference characters) of OCR's `lines` against the text layer under each line's box:
    the characters PDFium finds in the middle half of the box's height (not the lines above and
    below), the whole width and a point more."""
    e = n = 0
    for ln in lines:
        mid, quarter = (ln.top + ln.bottom) / 2, (ln.bottom - ln.top) / 4
        ref = _norm(textpage.get_text_bounded(ln.x0 - 1, page_height - (mid + quarter), ln.x1 + 1,
                                              page_height - (mid - quarter)))
        if ref:
            e += edits(ref, _norm(ln.text))
            n += len(ref)
    return e, n


def engines(scales: list[float], precisions: list[str], models: Path) -> dict[tuple[float, str], PageOcr]:
    """A `PageOcr` for each (scale, precision); the int8 model made in `models` (a machine cache)."""
    return {(s, p): PageOcr("force", models, precision=p) for s in scales for p in precisions}


def quality(scales: list[float], precisions: list[str], pages_per_pdf: int, models: Path) -> dict:
    import pypdfium2 as pdfium

    rows, timing = [], {}
    readers = engines(scales, precisions, models)
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
            if len(ref.split()) < 50:
                tp.close()
                page.close()
                continue
            for (s, p), reader in readers.items():
                image = page.render(scale=s).to_numpy()
                t = time.perf_counter()
                lines = reader.read_image(image, s)
                dt = time.perf_counter() - t
                timing.setdefault((s, p), []).append(dt)
                e, chars = char_errors(tp, page.get_height(), lines)
                rows.append({"pdf": rel, "page": i + 1, "scale": s, "precision": p,
                             "recall": round(compare(ref, [ln.text for ln in lines]), 4),
                             "edits": e, "chars": chars, "cer": round(e / max(1, chars), 4), "seconds": round(dt, 2)})
            tp.close()
            page.close()
        doc.close()
    summary = {}
    for (s, p) in readers:
        r = [x for x in rows if x["scale"] == s and x["precision"] == p]
        if not r:
            continue
        rec = sorted(x["recall"] for x in r)
        cer = sorted(x["cer"] for x in r)
        summary[f"{s} {p}"] = {"scale": s, "precision": p, "pages": len(r), "recall_median": rec[len(rec) // 2],
                               "recall_min": rec[0], "recall_mean": round(sum(rec) / len(rec), 4),
                               "cer": round(sum(x["edits"] for x in r) / max(1, sum(x["chars"] for x in r)), 4),
                               "cer_median": cer[len(cer) // 2], "cer_max": cer[-1],
                               "pages_per_second": round(len(r) / sum(timing[(s, p)]), 3)}
    return {"rows": rows, "summary": summary}


def scans(precisions: list[str], models: Path, rounds: int = 1, only: list[str] | None = None) -> list[dict]:
    """Each scanned paper read whole by each model, `rounds` times with the models taking turns
    (this machine's speed drifts by tens of percent): the median time of each, every run's listed."""
    out = []
    for key, (folder, phrase) in SCANS.items():
        pdfs = sorted((SHARED / folder).glob("*.pdf"))
        if not pdfs or (only and key not in only):
            continue
        runs: dict[str, list[float]] = {p: [] for p in precisions}
        last = {}
        for _ in range(rounds):
            for p in precisions:
                with tempfile.TemporaryDirectory() as cache:  # a cold page cache: every page read
                    ocr = PageOcr("auto", Path(cache), precision=p)
                    _link_models(models, Path(cache))
                    t = time.perf_counter()
                    last[p] = parse_paper(pdfs[0], key, ocr=ocr)
                    runs[p].append(round(time.perf_counter() - t, 1))
        for p in precisions:
            paper = last[p]
            text = " ".join(" ".join(b.text.split()) for b in paper.blocks)
            pages = len({b.page for b in paper.blocks if b.source_format == "ocr"})
            dt = sorted(runs[p])[len(runs[p]) // 2]
            out.append({"paper": key, "file": pdfs[0].name, "precision": p, "pages": pages, "seconds": dt,
                        "runs": runs[p], "seconds_per_page": round(dt / max(1, pages), 2), "title": paper.title,
                        "phrase": phrase, "phrase_found": phrase.lower() in text.lower(), "words": len(text.split())})
    return out


def _link_models(models: Path, cache: Path) -> None:
    """The int8 model made in `models` linked into the cache `cache`: what a machine holds after its
    first OCR (making it, ~10 s once per machine, is not a scan's cost)."""
    import os

    for src in (models / "models").rglob("*.onnx"):
        dest = cache / "models" / src.relative_to(models / "models")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.link(src, dest)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", default="2.0", help="render scales to compare (x 72 dpi)")
    ap.add_argument("--precisions", default="fp32,int8", help="recognition models to compare")
    ap.add_argument("--pages", type=int, default=2, help="pages of each born-digital PDF")
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--no-scans", action="store_true", help="leave out the two scanned papers")
    ap.add_argument("--no-quality", action="store_true", help="leave out the born-digital pages")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each scan per model, taking turns (median)")
    ap.add_argument("--only", help="comma-separated keys of the scans to read (ND3Q8Y2H, U3JDWJNH)")
    args = ap.parse_args()
    if not SHARED.is_dir():
        sys.exit(f"real test data not found at {SHARED}")
    precisions = args.precisions.split(",")
    import os

    with tempfile.TemporaryDirectory() as models:
        t = time.perf_counter()
        PageOcr("force", Path(models))._load()  # the int8 model, made as on a machine's first OCR
        made = round(time.perf_counter() - t, 1)
        q = {"rows": [], "summary": {}} if args.no_quality else \
            quality([float(s) for s in args.scales.split(",")], precisions, args.pages, Path(models))
        s = [] if args.no_scans else scans(precisions, Path(models), args.rounds,
                                           args.only.split(",") if args.only else None)
    result = {"cpu": cpu_name(), "cores": os.cpu_count(), "int8_model_seconds": made, "quality": q, "scans": s}
    print(f"CPU: {result['cpu']} ({result['cores']} cores); the int8 model made in {made} s")
    print("| scale (x 72 dpi) | model | pages | word recall median / mean / min | CER all / median / max | pages/s |")
    print("|---|---|---|---|---|---|")
    for m in q["summary"].values():
        print(f"| {m['scale']} | {m['precision']} | {m['pages']} | {m['recall_median']:.3f} / {m['recall_mean']:.3f} / "
              f"{m['recall_min']:.3f} | {m['cer']:.2%} / {m['cer_median']:.2%} / {m['cer_max']:.2%} "
              f"| {m['pages_per_second']:.2f} |")
    print()
    print("| scanned paper | model | pages | median seconds (s/page) | runs | title | phrase found |")
    print("|---|---|---|---|---|---|---|")
    for r in s:
        print(f"| {r['file']} | {r['precision']} | {r['pages']} | {r['seconds']} ({r['seconds_per_page']}) | "
              f"{', '.join(map(str, r['runs']))} | {r['title']} | {r['phrase_found']} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
