"""Heading recall and caption anchoring per real paper of ../shared/data (docs/benchmarks.md, "Heading recall and caption anchoring").

Heading recall: the format's own heading labels (PaddleOCR-VL `paragraph_title`, MinerU
`text_level` items after the title, GROBID `div/head`, Docling `section_header`; for the
PDFs of the MinerU papers, MinerU's headings) found among the blocks with a heading role
(same text, or one inside the other at 80% of the length). Caption anchoring: caption
blocks that end up in exactly one object unit under a real section (as
`tests/transform/test_units_realdata.py` checks).

Run from the project root: `python -m tests.kits.edge_metrics` (prints a Markdown table).
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from sheaf.core.models import CAPTION_ROLES, HEADING_ROLES
from sheaf.formats.paddleocr_vl import clean_inline
from sheaf.transform.chain import process_paper
from tests.kits.papers import heading_key

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


_norm = heading_key


def _paddle_heads(path: Path) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [b["block_content"] for line in data for lp in line["layoutParsingResults"]
            for b in lp["prunedResult"]["parsing_res_list"] if b["block_label"] == "paragraph_title"]


def _mineru_heads(folder: Path) -> list[str]:
    items = json.loads((folder / "content_list.json").read_text(encoding="utf-8"))
    heads = [clean_inline(x["text"]) for x in items if x.get("type") == "text" and x.get("text_level")]
    return heads[1:]


def _grobid_heads(path: Path) -> list[str]:
    ns = "{http://www.tei-c.org/ns/1.0}"
    root = ET.parse(path).getroot()
    body = root.find(f".//{ns}text")
    return ["".join(h.itertext()) for h in body.iter(f"{ns}head")] if body is not None else []


def _docling_heads(path: Path) -> list[str]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [t.get("text", "") for t in doc.get("texts", []) if t.get("label") == "section_header"]


def papers() -> list[tuple[str, str, Path, list[str] | None]]:
    """(format, paper id, path, ground-truth headings or None) of every real paper."""
    out: list[tuple[str, str, Path, list[str] | None]] = []
    for p in sorted(DATA.glob("paddleocr_vl/*/result.json")):
        out.append(("paddleocr-vl", p.parent.name, p, _paddle_heads(p)))
    for p in sorted(DATA.glob("mineru/*/content_list.json")):
        out.append(("mineru", p.parent.name, p, _mineru_heads(p.parent)))
    for p in sorted(DATA.glob("formats/grobid_tei/*.tei.xml")):
        out.append(("grobid", p.name.removesuffix(".tei.xml"), p, _grobid_heads(p)))
    for p in sorted(DATA.glob("formats/docling/**/*.json")):
        out.append(("docling", p.name.removesuffix(".json").removesuffix(".docling"), p, _docling_heads(p)))
    for p in sorted(DATA.glob("pdfs/*.pdf")):
        out.append(("pdf", p.stem, p, None))
    for p in sorted(DATA.glob("mineru/*/paper.pdf")):
        out.append(("pdf", p.parent.name, p, _mineru_heads(p.parent)))
    return out


def _same(g: str, k: str) -> bool:
    return g == k or bool(g and k and (g in k or k in g) and min(len(g), len(k)) / max(len(g), len(k)) >= 0.8)


def _found(heads: list[str], blocks) -> tuple[int, int]:
    """(headings found, headings not found whose block was moved with a reason)."""
    got = [_norm(b.text) for b in blocks if b.role in HEADING_ROLES]
    moved = [_norm(b.text) for b in blocks if b.role not in HEADING_ROLES and getattr(b, "role_reason", None)]
    n = m = 0
    for h in heads:
        k = _norm(h)
        if k and any(_same(g, k) for g in got):
            n += 1
        elif k and any(_same(g, k) for g in moved):
            m += 1
    return n, m


def measure(fmt: str, paper_id: str, path: Path, heads: list[str] | None) -> dict:
    out = process_paper(path, paper_id=paper_id)
    blocks = out.paper.blocks
    sections = {n.node_id for n in out.tree.walk() if n.node_id != "root"}
    caps = [b for b in blocks if b.role in CAPTION_ROLES]
    anchored = 0
    for b in caps:
        owners = [o for o in out.object_units if b.block_id in o.block_ids]
        anchored += len(owners) == 1 and owners[0].node_id in sections
    heads = [h for h in heads or [] if _norm(h)] if heads is not None else None
    found, moved = _found(heads, blocks) if heads is not None else (None, None)
    return {
        "format": fmt, "paper": paper_id,
        "headings": len(heads) if heads is not None else None,
        "found": found, "moved_headings": moved,
        "heading_blocks": sum(b.role in HEADING_ROLES for b in blocks),
        "captions": len(caps), "anchored": anchored,
        "body_units": len(out.body_units),
    }


def main() -> None:
    rows = [measure(*p) for p in papers()]
    print("| format | paper | headings found | moved with a reason | heading blocks | captions anchored | body units |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        hf = f"{r['found']}/{r['headings']}" if r["headings"] is not None else "n/a"
        print(f"| {r['format']} | {r['paper']} | {hf} | {r['moved_headings'] if r['headings'] is not None else ''} | "
              f"{r['heading_blocks']} | {r['anchored']}/{r['captions']} | {r['body_units']} |")


if __name__ == "__main__":
    main()
