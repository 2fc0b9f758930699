"""MinerU `content_list.json` writer.

A flat JSON list of typed blocks with `bbox` scaled to 0-1000 per page and `page_idx`.
Style "v3" mimics MinerU 3.x (title text_level 1, every section heading text_level 2,
chart blocks, references as `list` with sub_type `ref_text`); style "v1" mimics older
releases (every heading text_level 1, charts as images, references as text blocks, a
running `header` block per page). A paragraph broken across columns or pages is merged into
its first block and later pieces are left as empty text blocks, as MinerU does.
"""
from __future__ import annotations

import hashlib
import json

from layout import HEADER_Y, NUMBER_Y, PAGE_H, PAGE_W, Frag, layout, printed_page, reading_order, text_width
from model import Paper


def _bb(b) -> list[int]:
    x0, y0, x1, y1 = b
    return [int(round(x0 / PAGE_W * 1000)), int(round(y0 / PAGE_H * 1000)),
            int(round(x1 / PAGE_W * 1000)), int(round(y1 / PAGE_H * 1000))]


def _img(key: str, n: int) -> str:
    return "images/" + hashlib.sha256(f"{key}:{n}".encode()).hexdigest() + ".jpg"


def write(paper: Paper) -> bytes:
    style = paper.layout.get("mineru_style", "v3")
    head_level = 2 if style == "v3" else 1
    frags, npages = layout(paper)
    out: list[dict] = []
    first_block: dict[int, dict] = {}  # elem → the block holding the merged text
    for page in range(1, npages + 1):
        pidx = page - 1
        if paper.layout.get("running_header"):
            w = text_width(paper.running_head, "Helvetica", 8)
            out.append({"type": "header", "text": paper.running_head,
                        "bbox": _bb((54, HEADER_Y - 7, 54 + w, HEADER_Y + 2)), "page_idx": pidx})
        page_frags = reading_order([f for f in frags if f.page == page])
        by_elem = {}
        for f in page_frags:
            by_elem.setdefault((f.elem, f.kind), f)
        ref_list: dict | None = None
        for f in page_frags:
            k = f.kind
            base = {"bbox": _bb(f.bbox), "page_idx": pidx}
            if k in ("figure_caption", "table_caption", "table_note", "equation_number"):
                continue  # folded into their figure/table/equation block
            if k == "ref" and style == "v3":
                if ref_list is None or ref_list["_col"] != f.col:
                    ref_list = {"type": "list", "sub_type": "ref_text", "list_items": [], "bbox": list(base["bbox"]),
                                "page_idx": pidx, "_col": f.col}
                    out.append(ref_list)
                if f.part == 0:
                    ref_list["list_items"].append(f.text)
                else:  # a reference broken across columns continues as its own item, as MinerU does
                    ref_list["list_items"].append(f.text)
                b = ref_list["bbox"]
                b[0], b[1] = min(b[0], base["bbox"][0]), min(b[1], base["bbox"][1])
                b[2], b[3] = max(b[2], base["bbox"][2]), max(b[3], base["bbox"][3])
                continue
            ref_list = None if k not in ("ref",) else ref_list
            if k == "title":
                out.append({"type": "text", "text": f.text, "text_level": 1, **base})
            elif k in ("heading", "abstract_heading", "back_heading", "ref_heading"):
                out.append({"type": "text", "text": f.text, "text_level": head_level, **base})
            elif k == "figure":
                fig = f.obj
                cap = [fig.full]
                if fig.kind == "chart" and style == "v3":
                    out.append({"type": "chart", "img_path": _img(paper.key, f.elem), "content": "",
                                "chart_caption": cap, "chart_footnote": [], **base})
                else:
                    out.append({"type": "image", "img_path": _img(paper.key, f.elem), "image_caption": cap,
                                "image_footnote": [], **base})
            elif k == "table":
                t = f.obj
                out.append({"type": "table", "img_path": _img(paper.key, f.elem), "table_caption": [t.full],
                            "table_footnote": [t.note] if t.note else [], "table_body": t.html(), **base})
            elif k == "equation":
                tag = f"\\tag{{{f.obj.number}}}" if f.obj.number else ""
                out.append({"type": "equation", "img_path": _img(paper.key, f.elem),
                            "text": f"$$\n{f.text}{tag}\n$$", "text_format": "latex", **base})
            elif k == "footnote":
                out.append({"type": "page_footnote", "text": f.text, **base})
            elif k == "list_item":
                # consecutive items of one list share a list block
                prev = out[-1] if out else None
                item = f.text[2:] if f.text.startswith("• ") else f.text
                if prev and prev.get("type") == "list" and prev.get("sub_type") == "text" and prev["page_idx"] == pidx:
                    prev["list_items"].append(item)
                    prev["bbox"][2] = max(prev["bbox"][2], base["bbox"][2])
                    prev["bbox"][3] = max(prev["bbox"][3], base["bbox"][3])
                else:
                    out.append({"type": "list", "sub_type": "text", "list_items": [item], **base})
            else:  # para, abstract, authors, affiliation, keywords, back_para, ref (v1)
                if f.part > 0 and f.elem in first_block:
                    first_block[f.elem]["text"] += " " + f.text
                    out.append({"type": "text", "text": "", **base})
                else:
                    blk = {"type": "text", "text": f.text, **base}
                    first_block[f.elem] = blk
                    out.append(blk)
        num = str(printed_page(paper, page))
        w = text_width(num, "Helvetica", 9)
        out.append({"type": "page_number", "text": num,
                    "bbox": _bb(((PAGE_W - w) / 2, NUMBER_Y - 8, (PAGE_W + w) / 2, NUMBER_Y + 2)), "page_idx": pidx})
        if page == 1 and paper.layout.get("footer_first_page"):
            y, m, d = paper.date.split("-")
            month = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
                     "October", "November", "December"][int(m) - 1]
            foot = (f"{paper.running_head} {month} {int(d)}, {y} ©{y} Sheaf sample library "
                    f"(synthetic article, not a real publication)")
            out.append({"type": "footer", "text": foot, "bbox": [159, 945, 838, 973], "page_idx": pidx})
    for b in out:
        b.pop("_col", None)
    return (json.dumps(out, ensure_ascii=False, indent=4) + "\n").encode("utf-8")
