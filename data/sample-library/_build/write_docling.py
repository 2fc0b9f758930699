"""Docling `paper.docling.json` writer (DoclingDocument, as produced by Docling's PDF pipeline).

`body.children` lists the document's items in reading order; texts carry `label`
(title, section_header with `level`, text, list_item, caption, footnote, page_header,
page_footer, formula), `prov` with `page_no` and a BOTTOMLEFT bbox in points, and
`content_layer` ("furniture" for running headers and page numbers). Pictures and tables
reference their caption texts; tables carry `table_cells` and a `grid`.
"""
from __future__ import annotations

import hashlib
import json
import re

from layout import HEADER_Y, NUMBER_Y, PAGE_H, PAGE_W, Frag, layout, printed_page, reading_order, text_width
from model import Paper

LABEL = {"title": "title", "authors": "text", "affiliation": "text", "abstract_heading": "section_header",
         "abstract": "text", "keywords": "text", "heading": "section_header", "para": "text",
         "back_heading": "section_header", "back_para": "text", "ref_heading": "section_header",
         "ref": "list_item", "footnote": "footnote", "equation": "formula"}


def _bbox(b, origin: str = "BOTTOMLEFT") -> dict:
    x0, y0, x1, y1 = (round(v, 2) for v in b)
    if origin == "TOPLEFT":
        return {"l": x0, "t": y0, "r": x1, "b": y1, "coord_origin": "TOPLEFT"}
    return {"l": x0, "t": round(PAGE_H - y0, 2), "r": x1, "b": round(PAGE_H - y1, 2), "coord_origin": "BOTTOMLEFT"}


def _prov(page: int, b, text: str) -> list[dict]:
    return [{"page_no": page, "bbox": _bbox(b), "charspan": [0, len(text)]}]


def write(paper: Paper) -> bytes:
    frags, npages = layout(paper)
    texts: list[dict] = []
    pictures: list[dict] = []
    tables: list[dict] = []
    groups: list[dict] = []
    body: list[dict] = []

    def ref(kind: str, i: int) -> dict:
        return {"$ref": f"#/{kind}/{i}"}

    def add_text(label: str, text: str, page: int, b, parent: dict, layer: str = "body", **extra) -> dict:
        i = len(texts)
        item = {"self_ref": f"#/texts/{i}", "parent": parent, "children": [], "content_layer": layer,
                "label": label, "prov": _prov(page, b, text), "orig": text, "text": text}
        item.update(extra)
        texts.append(item)
        return ref("texts", i)

    def new_group(name: str) -> dict:
        i = len(groups)
        g = {"self_ref": f"#/groups/{i}", "parent": {"$ref": "#/body"}, "children": [],
             "content_layer": "body", "name": name, "label": "list"}
        groups.append(g)
        body.append(ref("groups", i))
        return g

    root = {"$ref": "#/body"}
    for page in range(1, npages + 1):
        hw = text_width(paper.running_head, "Helvetica", 8)
        body.append(add_text("page_header", paper.running_head, page, (54, HEADER_Y - 7, 54 + hw, HEADER_Y + 2),
                             root, "furniture"))
        if page % 2 == 0 and paper.running_title:
            rw = text_width(paper.running_title, "Helvetica", 8)
            body.append(add_text("page_header", paper.running_title, page,
                                 (558 - rw, HEADER_Y - 7, 558, HEADER_Y + 2), root, "furniture"))
        current_list: dict | None = None
        current_list_kind = ""
        page_frags = reading_order([f for f in frags if f.page == page])
        captions = {id(f.obj): f for f in page_frags if f.kind in ("figure_caption", "table_caption")}
        notes = {id(f.obj): f for f in page_frags if f.kind == "table_note"}
        for f in page_frags:
            k = f.kind
            if k in ("figure_caption", "table_caption", "table_note", "equation_number"):
                continue
            if k in ("list_item", "ref"):
                if current_list is None or current_list_kind != k:
                    current_list = new_group("list")
                    current_list_kind = k
                text = f.text[2:] if f.text.startswith("• ") else f.text
                marker = "•"
                if k == "ref" and f.part == 0 and re.match(r"^\d+\.\s", text):
                    marker, text = text.split(" ", 1)
                elif k == "ref":
                    marker = ""
                extra = {"enumerated": k == "ref", "marker": marker}
                current_list["children"].append(add_text("list_item", text, page, f.bbox, {"$ref": current_list["self_ref"]}, **extra))
                continue
            current_list = None
            if k == "figure":
                i = len(pictures)
                pic = {"self_ref": f"#/pictures/{i}", "parent": root, "children": [], "content_layer": "body",
                       "label": "picture", "prov": [{"page_no": page, "bbox": _bbox(f.bbox), "charspan": [0, 0]}],
                       "captions": [], "references": [], "footnotes": [], "annotations": []}
                pictures.append(pic)
                cap = captions.get(id(f.obj))
                if cap is not None:
                    r = add_text("caption", cap.text, page, cap.bbox, ref("pictures", i))
                    pic["children"].append(r)
                    pic["captions"].append(r)
                body.append(ref("pictures", i))
            elif k == "table":
                t = f.obj
                i = len(tables)
                cells = []
                for ri, ci, cb, txt in f.cells:
                    cells.append({"bbox": _bbox(cb, "TOPLEFT"), "row_span": 1, "col_span": 1,
                                  "start_row_offset_idx": ri, "end_row_offset_idx": ri + 1,
                                  "start_col_offset_idx": ci, "end_col_offset_idx": ci + 1, "text": txt,
                                  "column_header": ri == 0, "row_header": False, "row_section": False,
                                  "fillable": False})
                nrows, ncols = len(t.rows), len(t.rows[0])
                grid = [[c for c in cells if c["start_row_offset_idx"] == r] for r in range(nrows)]
                tab = {"self_ref": f"#/tables/{i}", "parent": root, "children": [], "content_layer": "body",
                       "label": "table", "prov": [{"page_no": page, "bbox": _bbox(f.bbox), "charspan": [0, 0]}],
                       "captions": [], "references": [], "footnotes": [],
                       "data": {"table_cells": cells, "num_rows": nrows, "num_cols": ncols, "grid": grid},
                       "annotations": []}
                tables.append(tab)
                cap = captions.get(id(t))
                if cap is not None:
                    r = add_text("caption", cap.text, page, cap.bbox, ref("tables", i))
                    tab["children"].append(r)
                    tab["captions"].append(r)
                note = notes.get(id(t))
                if note is not None:
                    r = add_text("footnote", note.text, page, note.bbox, ref("tables", i))
                    tab["children"].append(r)
                    tab["footnotes"].append(r)
                body.append(ref("tables", i))
            else:
                label = LABEL[k]
                extra = {}
                if label == "section_header":
                    extra["level"] = f.obj.level if f.obj is not None else 1
                if k == "abstract_heading":
                    extra["level"] = 1
                body.append(add_text(label, f.text, page, f.bbox, root, **extra))
        num = str(printed_page(paper, page))
        w = text_width(num, "Helvetica", 9)
        body.append(add_text("page_footer", num, page, ((PAGE_W - w) / 2, NUMBER_Y - 8, (PAGE_W + w) / 2, NUMBER_Y + 2),
                             root, "furniture"))

    digest = int(hashlib.sha256(paper.key.encode()).hexdigest()[:16], 16)
    doc = {
        "schema_name": "DoclingDocument",
        "version": "1.10.0",
        "name": "paper",
        "origin": {"mimetype": "application/pdf", "binary_hash": digest, "filename": "paper.pdf"},
        "furniture": {"self_ref": "#/furniture", "children": [], "content_layer": "furniture",
                      "name": "_root_", "label": "unspecified"},
        "body": {"self_ref": "#/body", "children": body, "content_layer": "body", "name": "_root_",
                 "label": "unspecified"},
        "groups": groups,
        "texts": texts,
        "pictures": pictures,
        "tables": tables,
        "key_value_items": [],
        "form_items": [],
        "pages": {str(p): {"size": {"width": PAGE_W, "height": PAGE_H}, "page_no": p} for p in range(1, npages + 1)},
    }
    return (json.dumps(doc, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
