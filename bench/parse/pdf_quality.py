"""Quality of the PDF text-layer adapter on real PDFs of many publishers.

Two comparisons, a row per PDF, then the medians and minimums:

1. Every PDF with a text layer under ../shared/data/zotero_dirs/*/storage/*/, against Zotero's
   own extraction of the same file (`.zotero-ft-cache`, pdftotext's), over 10-65% of Zotero's
   text (past the front matter, before the references):
   - words: the share of Zotero's words (4+ letters, lower-cased, with multiplicity) present in
     Sheaf's blocks (every block's text);
   - order: the share of 80 evenly spaced 4-word runs of Zotero's text present as runs in
     Sheaf's blocks (reading order);
   - searchable: the share of Zotero's words present in Sheaf's units (body and object units:
     what search can find).
   Words that Zotero's text itself has broken ("di'erent", "speciBc": a font's unmapped
   ligatures) are left out of both measures.
   Words are compared as tokens; a word of 7+ letters missing as a token may be found in the
   letter stream (both extractors sometimes glue words: "inawaythat"). Runs are compared on
   the letter stream, so spacing and hyphenation do not count.
2. The 14 EMNLP papers under ../shared/data/mineru/ against MinerU's content_list.json:
   heading recall (MinerU's headings, the title aside, found among Sheaf's headings), section
   precision (Sheaf's headings that are MinerU headings) and caption anchoring (MinerU's
   labelled figure and table captions, "Figure 3", "Table 2", found as Sheaf captions of the
   same label paired with their object; MinerU's sub-captions, "(a) SparseGPT", are counted
   apart: they are text of the figure, not captions of their own).

`--others pdfium,pdfminer` measures words and order of other extractors' plain text of the same
PDFs in the same run, beside Sheaf's: PDFium's own text order (pypdfium2's `get_text_range`, what
Sheaf's layout analysis starts from) and pdfminer.six's `extract_text` (its layout analysis; not a
dependency: `pip install pdfminer.six`). pdftotext is the reference itself, so it is not compared.

Run from the project root:
    .venv/bin/python -m bench.parse.pdf_quality                  # table on stdout
    .venv/bin/python -m bench.parse.pdf_quality --json out.json  # and every row
    .venv/bin/python -m bench.parse.pdf_quality --others pdfium,pdfminer
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sheaf.core.models import HEADING_ROLES, IngestError
from sheaf.formats.common import caption_label
from sheaf.transform.chain import process_paper

ROOT = Path(__file__).resolve().parents[2]

DATA = ROOT.parent / "shared" / "data"
_WORDS4 = re.compile(r"[^\W\d_]{4,}")
_TOKENS = re.compile(r"[^\W\d_]+")
#: A word the reference itself has broken: a capital or an ASCII mark between lower-case
#: letters ("di'erent", "speciBc", "a\"er": pdftotext keeps a font's unmapped ligatures too).
_BROKEN = re.compile(r"\S*[^\W\d_][A-Z'\"!#$%&*+<=>?\\^|~][a-z]\S*")
_GAP = "\u2060"  # stands for a broken word: counted nowhere, and no run crosses it
RUNS = 80


def _letters(text: str) -> str:
    return "".join(_TOKENS.findall(text.lower()))


def _word_share(ref_words: list[str], text: str) -> float:
    have = Counter(_TOKENS.findall(text.lower()))
    stream = None
    need = Counter(ref_words)
    found = 0
    for w, n in need.items():
        k = min(n, have[w])
        if k < n and len(w) >= 7:
            stream = stream if stream is not None else _letters(text)
            k = min(n, max(k, stream.count(w)))
        found += k
    return found / max(1, sum(need.values()))


def _order_share(ref_text: str, text: str) -> float:
    toks = re.findall(r"[^\W\d_]+|" + _GAP, ref_text.lower())
    if len(toks) < 8:
        return 0.0
    stream = _letters(text)
    starts = [round(k * (len(toks) - 4) / (RUNS - 1)) for k in range(RUNS)]
    runs = ["".join(toks[s:s + 4]) for s in starts if _GAP not in toks[s:s + 4]]
    runs = [r for r in runs if len(r) >= 12]
    return sum(r in stream for r in runs) / max(1, len(runs))


def other_text(pdf: Path, extractor: str) -> str:
    """The plain text another extractor gives of `pdf` (see the module doc)."""
    if extractor == "pdfium":
        import pypdfium2 as pdfium

        doc = pdfium.PdfDocument(str(pdf))
        try:
            parts = []
            for page in doc:
                tp = page.get_textpage()
                parts.append(tp.get_text_range())
                tp.close()
                page.close()
            return "\n".join(parts)
        finally:
            doc.close()
    if extractor == "pdfminer":
        from pdfminer.high_level import extract_text

        return extract_text(str(pdf))
    raise SystemExit(f"unknown extractor {extractor!r} (pdfium, pdfminer)")


def zotero_row(pdf: Path, others: tuple[str, ...] = ()) -> dict[str, Any]:
    key = pdf.parent.name
    cache = pdf.parent / ".zotero-ft-cache"
    row: dict[str, Any] = {"key": key, "library": pdf.parents[2].name}
    t = time.perf_counter()
    try:
        out = process_paper(pdf, key, "pdf")
    except IngestError as e:
        row["error"] = e.message if hasattr(e, "message") else str(e)
        return row
    row["parse_s"] = round(time.perf_counter() - t, 3)
    blocks = out.paper.blocks
    row["pages"] = max((b.page for b in blocks), default=0)
    row["sections"] = sum(b.role in HEADING_ROLES for b in blocks)
    row["title"] = (out.paper.title or "")[:70]
    if not cache.is_file():
        row["error"] = "no .zotero-ft-cache beside the PDF"
        return row
    ref = cache.read_text(encoding="utf-8", errors="replace")
    ref = _BROKEN.sub(f" {_GAP} ", ref[int(0.10 * len(ref)):int(0.65 * len(ref))])
    ref_words = _WORDS4.findall(ref.lower())
    text = "\n".join(b.text for b in blocks)
    units = "\n".join([u.text for u in out.body_units] + [f"{u.caption}\n{u.table_text}" for u in out.object_units])
    row["words"] = round(_word_share(ref_words, text), 3)
    row["order"] = round(_order_share(ref, text), 3)
    row["searchable"] = round(_word_share(ref_words, units), 3)
    for x in others:
        try:
            other = other_text(pdf, x)
        except Exception as e:  # noqa: BLE001 - a PDF the other extractor cannot read counts as nothing read
            row[f"{x}_error"] = f"{type(e).__name__}: {e}"[:120]
            other = ""
        row[f"{x}_words"] = round(_word_share(ref_words, other), 3)
        row[f"{x}_order"] = round(_order_share(ref, other), 3)
    return row


def _norm(text: str) -> str:
    text = re.sub(r"<[^>]+>|\$[^$]*\$", "", text)
    return re.sub(r"[^0-9a-z]+", "", text.lower())


def _same(a: str, b: str) -> bool:
    return a == b or bool(a and b and (a in b or b in a) and min(len(a), len(b)) / max(len(a), len(b)) >= 0.8)


def mineru_row(folder: Path) -> dict[str, Any]:
    gt = json.loads((folder / "content_list.json").read_text(encoding="utf-8"))
    row: dict[str, Any] = {"key": folder.name}
    try:
        out = process_paper(folder / "paper.pdf", folder.name, "pdf")
    except IngestError as e:
        row["error"] = str(e)
        return row
    blocks = out.paper.blocks
    heads = [x for x in gt if x.get("type") == "text" and x.get("text_level")]
    if heads and heads[0].get("page_idx") == 0:
        heads = heads[1:]  # the title
    gt_keys = [_norm(h["text"]) for h in heads]
    ours = [_norm(b.text) for b in blocks if b.role in HEADING_ROLES]
    row["gt_headings"] = len(gt_keys)
    row["sections"] = len(ours)
    row["heading_hits"] = sum(any(_same(o, g) for o in ours) for g in gt_keys)
    row["section_hits"] = sum(any(_same(o, g) for g in gt_keys) for o in ours)
    caps = [c for x in gt if x.get("type") in ("image", "table", "chart")
            for c in x.get("image_caption", []) + x.get("table_caption", []) + x.get("chart_caption", [])]
    labels = [caption_label(re.sub(r"<[^>]+>", "", c).strip()) for c in caps]
    row["subcaptions"] = sum(lab is None for lab in labels)  # "(a) SparseGPT": the figure's own text
    labels = [lab for lab in labels if lab]
    ours = {caption_label(b.text) for b in blocks if b.role in ("figure_caption", "table_caption") and b.attached_to}
    row["captions"] = len(labels)
    row["anchored"] = sum(lab in ours for lab in labels)
    row["heading_recall"] = round(row["heading_hits"] / max(1, row["gt_headings"]), 3)
    row["section_precision"] = round(row["section_hits"] / max(1, row["sections"]), 3)
    row["caption_anchoring"] = round(row["anchored"] / max(1, row["captions"]), 3)
    return row


def _summary(rows: list[dict], keys: tuple[str, ...]) -> dict[str, Any]:
    ok = [r for r in rows if "error" not in r]
    return {k: {"median": round(statistics.median(r[k] for r in ok), 3), "min": round(min(r[k] for r in ok), 3),
                "min_key": min(ok, key=lambda r: r[k])["key"]} for k in keys} if ok else {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path, help="write every row and the summary here")
    ap.add_argument("--only", help="comma-separated substrings of storage keys / MinerU folders")
    ap.add_argument("--others", default="", help="other extractors measured beside Sheaf: pdfium,pdfminer")
    args = ap.parse_args()
    others = tuple(x for x in args.others.split(",") if x)
    if not DATA.is_dir():
        print(f"no real data at {DATA} (a clone without ../shared): nothing to measure", file=sys.stderr)
        return 2
    only = [s for s in (args.only or "").split(",") if s]
    pick = (lambda k: any(s in k for s in only)) if only else (lambda k: True)
    zrows = [zotero_row(p, others) for p in sorted(DATA.glob("zotero_dirs/*/storage/*/*.pdf")) if pick(p.parent.name)]
    extra = "".join(f" {x[:6] + ' w':>8} {x[:6] + ' o':>8}" for x in others)
    print(f"{'key':10} {'pages':>5} {'secs':>5} {'words':>6} {'order':>6} {'search':>6} {'ms/pg':>6}{extra}  title / error")
    for r in zrows:
        if "error" in r and "words" not in r:
            print(f"{r['key']:10} {'':>5} {'':>5} {'':>6} {'':>6} {'':>6} {'':>6}  ERROR {r['error'][:70]}")
            continue
        ms = 1000 * r["parse_s"] / max(1, r["pages"])
        cells = "".join(f" {r[f'{x}_words']:8.3f} {r[f'{x}_order']:8.3f}" for x in others)
        print(f"{r['key']:10} {r['pages']:5d} {r['sections']:5d} {r['words']:6.3f} {r['order']:6.3f} "
              f"{r['searchable']:6.3f} {ms:6.1f}{cells}  {r['title']}")
    zsum = _summary(zrows, ("words", "order", "searchable") + tuple(f"{x}_{m}" for x in others for m in ("words", "order")))
    for k, v in zsum.items():
        print(f"  {k:11} median {v['median']:.3f}  min {v['min']:.3f} ({v['min_key']})")
    mrows = [mineru_row(d) for d in sorted(DATA.glob("mineru/*")) if (d / "paper.pdf").is_file()
             and (d / "content_list.json").is_file() and pick(d.name)]
    print(f"\n{'MinerU paper':22} {'heads':>5} {'recall':>6} {'secs':>5} {'prec':>6} {'caps':>5} {'anchor':>6}")
    for r in mrows:
        if "error" in r:
            print(f"{r['key']:22} ERROR {r['error'][:70]}")
            continue
        print(f"{r['key']:22} {r['gt_headings']:5d} {r['heading_recall']:6.3f} {r['sections']:5d} "
              f"{r['section_precision']:6.3f} {r['captions']:5d} {r['caption_anchoring']:6.3f}")
    ok = [r for r in mrows if "error" not in r]
    tot = {k: sum(r[k] for r in ok) for k in ("gt_headings", "heading_hits", "sections", "section_hits",
                                              "captions", "anchored", "subcaptions")}
    msum = {
        "heading_recall": round(tot["heading_hits"] / max(1, tot["gt_headings"]), 3),
        "section_precision": round(tot["section_hits"] / max(1, tot["sections"]), 3),
        "caption_anchoring": round(tot["anchored"] / max(1, tot["captions"]), 3),
        "counts": tot,
    }
    print(f"  overall: heading recall {msum['heading_recall']:.3f} ({tot['heading_hits']}/{tot['gt_headings']}), "
          f"section precision {msum['section_precision']:.3f} ({tot['section_hits']}/{tot['sections']}), "
          f"caption anchoring {msum['caption_anchoring']:.3f} ({tot['anchored']}/{tot['captions']}; "
          f"{tot['subcaptions']} sub-captions apart)")
    if args.json:
        args.json.write_text(json.dumps({"zotero": {"rows": zrows, "summary": zsum},
                                         "mineru": {"rows": mrows, "summary": msum}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
