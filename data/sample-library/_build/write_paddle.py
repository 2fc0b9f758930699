"""PaddleOCR-VL (layout-parsing API v2) `result.json` writer.

Mimics the real output: a JSON list of result lines, each holding up to `pages_per_line`
pages in `layoutParsingResults[]`; every page has `prunedResult` (width/height in pixels,
`parsing_res_list` blocks with block_label/block_content/block_bbox/block_id/block_order/
group_id, and `layout_det_res.boxes`) and a per-page `markdown`. Images are not embedded:
URLs point to example.invalid, and polygon points are omitted to keep the file small.
A paragraph broken across the two columns of one page is merged into its first block and
the continuation block is left empty with `group_id` pointing at the first, as the real
service does with `merge_layout_blocks`; a paragraph broken across pages stays split.
"""
from __future__ import annotations

import hashlib
import json

from layout import FOOTER_Y, HEADER_Y, NUMBER_Y, PAGE_W, Frag, layout, printed_page, reading_order, text_width
from model import Paper

SCALE = 2.0  # 612 × 792 pt → 1224 × 1584 px
CLS = {"abstract": 0, "chart": 3, "display_formula": 5, "doc_title": 6, "figure_title": 7, "footer": 8,
       "footnote": 10, "formula_number": 11, "header": 12, "image": 14, "number": 16,
       "paragraph_title": 17, "reference_content": 19, "table": 21, "text": 22, "vision_footnote": 24}
NO_ORDER = {"header", "footer", "number", "footnote", "image", "chart", "figure_title", "table",
            "vision_footnote", "aside_text", "header_image", "footer_image"}
LABEL = {"title": "doc_title", "authors": "text", "affiliation": "text", "abstract_heading": "paragraph_title",
         "abstract": "abstract", "keywords": "text", "heading": "paragraph_title", "para": "text",
         "list_item": "text", "figure_caption": "figure_title", "table_caption": "figure_title",
         "table": "table", "table_note": "vision_footnote", "equation": "display_formula",
         "equation_number": "formula_number", "footnote": "footnote", "back_heading": "paragraph_title",
         "back_para": "text", "ref_heading": "paragraph_title", "ref": "reference_content"}
SETTINGS = {"use_doc_preprocessor": False, "use_layout_detection": True, "use_chart_recognition": False,
            "use_seal_recognition": False, "use_ocr_for_image_block": False, "format_block_content": False,
            "merge_layout_blocks": True,
            "markdown_ignore_labels": ["number", "footnote", "header", "header_image", "footer",
                                       "footer_image", "aside_text"],
            "return_layout_polygon_points": False}
BASE = "https://example.invalid/sheaf-sample"


def _px(b) -> list[int]:
    return [int(round(v * SCALE)) for v in b]


def _score(key: str, i: int) -> float:
    h = int(hashlib.sha1(f"{key}:{i}".encode()).hexdigest()[:6], 16)
    return round(0.62 + (h % 3700) / 10000, 4)


def _furniture(paper: Paper, page: int) -> tuple[list[tuple], list[tuple]]:
    """(top, bottom) furniture blocks of a page: (label, text, bbox in points)."""
    num = str(printed_page(paper, page))
    top, bottom = [], []
    head = paper.running_head
    hw = text_width(head, "Helvetica", 8)
    if page % 2 == 0 and paper.running_title:
        # even pages: page number left, journal header centre-left, short title right
        top.append(("number", num, (54, HEADER_Y - 7, 54 + text_width(num, "Helvetica", 8), HEADER_Y + 2)))
        top.append(("header", head, (80, HEADER_Y - 7, 80 + hw, HEADER_Y + 2)))
        rt = paper.running_title
        rw = text_width(rt, "Helvetica-Oblique", 8)
        top.append(("header", rt, (558 - rw, HEADER_Y - 7, 558, HEADER_Y + 2)))
    else:
        top.append(("header", head, (54, HEADER_Y - 7, 54 + hw, HEADER_Y + 2)))
        if True:  # odd pages (and page 1): number centred at the bottom
            w = text_width(num, "Helvetica", 8)
            bottom.append(("number", num, ((PAGE_W - w) / 2, NUMBER_Y - 7, (PAGE_W + w) / 2, NUMBER_Y + 2)))
    foot = f"© {paper.year} Sheaf sample library · synthetic article · not a real publication"
    fw = text_width(foot, "Helvetica", 6.5)
    bottom.append(("footer", foot, ((PAGE_W - fw) / 2, FOOTER_Y - 6, (PAGE_W + fw) / 2, FOOTER_Y + 2)))
    return top, bottom


def _page_blocks(paper: Paper, page: int, frags: list[Frag]) -> list[dict]:
    top, bottom = _furniture(paper, page)
    raw: list[tuple[str, str, list[int], Frag | None]] = []
    for label, text, bb in top:
        raw.append((label, text, _px(bb), None))
    for f in reading_order(frags):
        if f.kind == "figure":
            label = "chart" if f.obj.kind == "chart" else "image"
            text = ""
        elif f.kind == "equation":
            label, text = "display_formula", f" $$ {f.text} $$ "
        else:
            label, text = LABEL[f.kind], f.text
        raw.append((label, text, _px(f.bbox), f))
    for label, text, bb in bottom:
        raw.append((label, text, _px(bb), None))

    blocks: list[dict] = []
    order = 0
    first_of: dict[int, int] = {}  # elem → block_id of its first fragment on this page
    for i, (label, text, bb, f) in enumerate(raw):
        group = i
        if f is not None and f.kind in ("para", "abstract", "back_para", "ref", "list_item"):
            if f.elem in first_of:
                head = blocks[first_of[f.elem]]
                head["block_content"] = head["block_content"] + " " + text
                group, text = first_of[f.elem], ""
            else:
                first_of[f.elem] = i
        bo = None
        if label not in NO_ORDER:
            order += 1
            bo = order
        blocks.append({"block_label": label, "block_content": text, "block_bbox": bb,
                       "block_id": i, "block_order": bo, "group_id": group})
    return blocks


def _markdown(key: str, pidx: int, blocks: list[dict]) -> dict:
    out, images = [], {}
    for b in blocks:
        lab, t = b["block_label"], b["block_content"]
        if lab in SETTINGS["markdown_ignore_labels"]:
            continue
        if lab == "doc_title":
            out.append(f"# {t}")
        elif lab == "paragraph_title":
            out.append(f"### {t}")
        elif lab in ("image", "chart"):
            x0, y0, x1, y1 = b["block_bbox"]
            path = f"imgs/img_in_{lab}_box_{x0}_{y0}_{x1}_{y1}.jpg"
            images[path] = f"{BASE}/{key}/markdown_{pidx}/{path}"
            width = round((x1 - x0) / 1224 * 100)
            out.append(f'<div style="text-align: center;"><img src="{path}" alt="Image" width="{width}%" /></div>')
        elif lab in ("figure_title", "vision_footnote"):
            out.append(f'<div style="text-align: center;">{t}</div>')
        elif lab == "table":
            t = t.replace("<table>", "<table border=1 style='margin: auto; word-wrap: break-word;'>").replace(
                "<td>", "<td style='text-align: center; word-wrap: break-word;'>")
            out.append(t)
        elif lab == "display_formula":
            out.append(t.strip())
        elif t:
            out.append(t)
    return {"text": "\n\n".join(out), "images": images}


def write(paper: Paper) -> bytes:
    frags, npages = layout(paper)
    per_line = paper.layout.get("pages_per_line", 5)
    lines = []
    for start in range(1, npages + 1, per_line):
        pages = list(range(start, min(npages, start + per_line - 1) + 1))
        results = []
        for pidx, page in enumerate(pages):
            blocks = _page_blocks(paper, page, [f for f in frags if f.page == page])
            boxes = [{"cls_id": CLS[b["block_label"]], "label": b["block_label"],
                      "score": _score(paper.key, page * 1000 + b["block_id"]),
                      "coordinate": b["block_bbox"], "order": b["block_order"]}
                     for b in blocks]
            results.append({
                "prunedResult": {"page_count": len(pages), "width": 1224, "height": 1584,
                                 "model_settings": SETTINGS, "parsing_res_list": blocks,
                                 "layout_det_res": {"boxes": boxes}},
                "markdown": _markdown(paper.key, pidx, blocks),
                "outputImages": {"layout_det_res": f"{BASE}/{paper.key}/layout_det_res_{page - 1}.jpg"},
                "inputImage": f"{BASE}/{paper.key}/input_img_{page - 1}.jpg",
            })
        lines.append({
            "layoutParsingResults": results,
            "dataInfo": {"numPages": len(pages), "pages": [{"width": 1224, "height": 1584} for _ in pages],
                         "type": "pdf"},
            "preprocessedImages": [f"{BASE}/{paper.key}/preprocessed_img_{p - 1}.jpg" for p in pages],
        })
    return (json.dumps(lines, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
