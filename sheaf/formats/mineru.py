"""MinerU `content_list.json` (also `<name>_content_list.json`; the v2 file is not read).

Shape: a JSON list of items in reading order, each with `type`, `page_idx` (0-based; may
be a string), `bbox` (0-1000 of the page) and type-specific fields:
- `text` with `text` and, for headings, `text_level` (flat: 1 or 2, so depth comes from the
  numbering, which `finalize` reads; unnumbered headings get a level from context);
- `image` / `chart` with `img_caption`|`image_caption`|`chart_caption` and `*_footnote`
  lists (a chart may carry `content`); `table` with `table_caption`, `table_body` (HTML)
  and `table_footnote`; `code` with `code_body`/`code_caption`;
- `equation` (`text`, LaTeX), `list` (`list_items`; `sub_type` `ref_text` = references);
- furniture: `page_number`, `header`, `footer`, `page_footnote`, `aside_text`, `discarded`.

The first `text_level` item on the first page is the title. Captions are emitted next to
their object and attached to it explicitly. `<sup>` footnote markers are dropped; a
`header` that reads like "Appendix A Prompts" and occurs once is a heading (MinerU
mislabels appendix titles at the top of a page as running headers).
"""
from __future__ import annotations

import re
from pathlib import Path

from sheaf.core.models import IngestError
from sheaf.formats.common import CAPTION_RE, MAX_PAGES, RawBlock, heading_role, load_json, norm_key, numbering_depth
from sheaf.formats.paddleocr_vl import (
    assign_unnumbered_levels,
    clean_inline,
    html_table_rows,
    mark_abstract,
    mark_front_matter,
    rows_text,
    settle_title,
    split_table_caption,
    strip_tags,
)

VERSION = "2"  # 2: no empty caption block for panel-label-only captions

_FURNITURE = {
    "page_number": "page_number",
    "header": "page_header",
    "page_header": "page_header",
    "footer": "page_footer",
    "page_footer": "page_footer",
    "aside_text": "noise",
    "discarded": "noise",
}
_OBJECT_TYPES = {"image", "chart", "figure", "table"}
_APPENDIX_HEAD = re.compile(r"^appendix\s+[A-Z0-9]\b", re.I)
_BULLET = re.compile(r"^\s*[•●▪■◦‣∙·]\s+")


def matches(path: Path) -> bool:
    """`content_list.json` or `*_content_list.json` (never `content_list_v2.json`)."""
    name = path.name
    return name == "content_list.json" or name.endswith("_content_list.json")


def _page(v, prev: int | None) -> int | None:
    """0-based page index from an int or a numeric string."""
    if isinstance(v, bool):
        return prev
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v.strip())
    return prev


def _bbox(v) -> tuple[float, float, float, float] | None:
    if not isinstance(v, (list, tuple)) or len(v) != 4:
        return None
    try:
        x0, y0, x1, y1 = (float(x) / 1000.0 for x in v)
    except (TypeError, ValueError):
        return None
    return (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))


def _texts(v) -> list[str]:
    """A caption/footnote field: a list of strings, a string, or missing."""
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list):
        return []
    out = []
    for s in v:
        if isinstance(s, str) and s.strip():
            out.append(clean_inline(s).strip())
    return [s for s in out if s]


def _caption_text(parts: list[str]) -> str:
    """Caption lines with the "Figure N: ..." line first ("(b)" panel labels after it)."""
    main = [p for p in parts if CAPTION_RE.match(p)]
    rest = [p for p in parts if not CAPTION_RE.match(p) and len(p) > 3]
    return "\n".join(main + rest)


def _str(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v)
    return ""


def parse(paper_id: str, path: Path, data: bytes, warnings: list[str]) -> tuple[list[RawBlock], str | None]:
    items = load_json(paper_id, path, data, warnings)
    where = str(path)
    if isinstance(items, dict):
        for key in ("content_list", "result", "data"):
            if isinstance(items.get(key), list):
                items = items[key]
                break
    if not isinstance(items, list):
        keys = ", ".join(sorted(map(str, items))[:8]) if isinstance(items, dict) else ""
        raise IngestError(
            paper_id, where,
            f"MinerU: expected a JSON list of content items, found {type(items).__name__}"
            + (f" with keys: {keys}" if keys else ""),
        )
    if not items:
        raise IngestError(paper_id, where, "MinerU: the content list is empty")
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            raise IngestError(
                paper_id, where,
                f"MinerU: content item {i} is {type(it).__name__}, expected an object with `type`",
            )
    if not any("type" in it for it in items):
        raise IngestError(paper_id, where, "MinerU: no content item has a `type` (not a content_list.json)")

    # pages: 0-based -> 1-based, keeping MinerU's reading order inside a page
    page_items: dict[int, list[tuple[int, dict]]] = {}
    prev: int | None = 0
    bad_pages = 0
    unknown: set[str] = set()
    for i, it in enumerate(items):
        if "type" not in it:
            warnings.append(f"content item {i} has no `type`; skipped")
            continue
        p = _page(it.get("page_idx"), None)
        if p is None or p < 0:
            bad_pages += 1
            p = prev if prev is not None else 0
        prev = p
        if p + 1 > MAX_PAGES:
            raise IngestError(paper_id, where, f"MinerU: page_idx {p} beyond {MAX_PAGES} pages")
        page_items.setdefault(p, []).append((i, it))
    if bad_pages:
        warnings.append(f"{bad_pages} content item(s) without a usable page_idx: put on the previous item's page")

    # headers that occur on one page only and read like an appendix title are headings
    header_pages: dict[str, set[int]] = {}
    for p, lst in page_items.items():
        for _, it in lst:
            if it.get("type") in ("header", "page_header"):
                header_pages.setdefault(norm_key(_str(it.get("text"))), set()).add(p)

    raws: list[RawBlock] = []
    title: str | None = None
    title_at: int | None = None
    first_page = min(page_items) if page_items else 0
    for p in sorted(page_items):
        page = p + 1
        start = len(raws)
        promoted: list[RawBlock] = []
        for i, it in page_items[p]:
            typ = str(it.get("type")).strip().lower()
            bbox = _bbox(it.get("bbox"))

            def add(text: str, role: str | None, label: str = typ, level: int | None = None) -> int:
                raws.append(RawBlock(page=page, label=label, text=text, bbox=bbox, role=role, heading_level=level))
                return len(raws) - 1

            if typ == "text" or typ == "title":
                raw_text = _str(it.get("text"))
                text = clean_inline(raw_text)
                if not text.strip():
                    continue
                lvl = it.get("text_level")
                is_head = typ == "title" or (isinstance(lvl, (int, float, str)) and str(lvl).strip() not in ("", "0"))
                if is_head and len(text) <= 300 and not CAPTION_RE.match(text):
                    text = " ".join(text.split())
                    if (title is None and p == first_page and not any(r.role == "heading" for r in raws)
                            and heading_role(text) == "heading" and numbering_depth(text) is None):
                        title = text
                        title_at = add(text, "title")
                    else:
                        add(text, "heading")
                elif _BULLET.match(text):
                    add(text, "list")
                else:
                    add(raw_text, None)  # inline HTML kept until the front matter is known
            elif typ in ("image", "chart", "figure"):
                caps = _texts(it.get("img_caption")) + _texts(it.get("image_caption")) + _texts(
                    it.get("chart_caption"))
                notes = _texts(it.get("img_footnote")) + _texts(it.get("image_footnote")) + _texts(
                    it.get("chart_footnote"))
                content = _str(it.get("content"))
                content = html_table_text_or_text(content)
                obj = add(content, "figure")
                cap_text = _caption_text(caps)  # empty when the captions are only "(a)" panel labels
                if cap_text:
                    raws.append(RawBlock(page=page, label=f"{typ}_caption", text=cap_text, bbox=bbox,
                                         role="figure_caption", attach_to=obj))
                for n in notes:
                    add(n, "footnote", f"{typ}_footnote")
            elif typ == "table":
                caps = _texts(it.get("table_caption"))
                notes = _texts(it.get("table_footnote"))
                body = _str(it.get("table_body"))
                rows = html_table_rows(body) if "<" in body else ([[body]] if body.strip() else [])
                if not caps:
                    cap, rows = split_table_caption(rows)
                    caps = [cap] if cap else []
                cap_at = None
                if cap_text := _caption_text(caps):
                    cap_at = add(cap_text, "table_caption", "table_caption")
                obj = add(rows_text(rows), "table")
                if cap_at is not None:
                    raws[cap_at].attach_to = obj
                for n in notes:
                    add(n, "footnote", "table_footnote")
            elif typ == "equation" or typ == "interline_equation":
                text = _str(it.get("text")) or _str(it.get("latex"))
                if text.strip():
                    add(text, "equation")
            elif typ == "list":
                its = [clean_inline(x).strip() for x in it.get("list_items") or [] if isinstance(x, str)]
                its = [x for x in its if x]
                if not its and _str(it.get("text")).strip():
                    its = [clean_inline(_str(it.get("text"))).strip()]
                if str(it.get("sub_type", "")).lower() in ("ref_text", "reference", "references"):
                    for x in its:
                        add(x, "reference")
                elif its:
                    add("\n".join(its), "list")
            elif typ == "code" or typ == "algorithm":
                body = clean_inline(_str(it.get("code_body")) or _str(it.get("text")), drop_markers=False)
                caps = _texts(it.get("code_caption"))
                text = "\n".join(caps + [body]) if body.strip() else "\n".join(caps)
                if text.strip():
                    add(text, "body")
                for n in _texts(it.get("code_footnote")):
                    add(n, "footnote", "code_footnote")
            elif typ in ("page_footnote", "footnote", "ref_text"):
                text = clean_inline(_str(it.get("text")))
                if text.strip():
                    add(text, "reference" if typ == "ref_text" else "footnote")
            elif typ in _FURNITURE:
                text = clean_inline(_str(it.get("text")))
                role = _FURNITURE[typ]
                if (role == "page_header" and _APPENDIX_HEAD.match(text.strip())
                        and len(header_pages.get(norm_key(text), ())) == 1 and len(text) < 150):
                    promoted.append(RawBlock(page=page, label=typ, text=" ".join(text.split()), bbox=bbox,
                                             role="heading"))
                    continue
                add(text, role)
            else:
                unknown.add(typ)
                text = clean_inline(_str(it.get("text")) or _str(it.get("content")))
                if text.strip():
                    add(text, None)
        for h in promoted:  # an appendix title at the top of the page goes before what it heads
            at = len(raws)
            for k in range(start, len(raws)):
                r = raws[k]
                if r.role not in ("page_header", "page_number", "noise") and (
                    r.bbox is None or h.bbox is None or r.bbox[1] >= h.bbox[1]
                ):
                    at = k
                    break
            raws.insert(at, h)
            for r in raws:
                if r.attach_to is not None and r.attach_to >= at and r is not h:
                    r.attach_to += 1
            if title_at is not None and title_at >= at:
                title_at += 1
    if unknown:
        warnings.append(f"unknown MinerU item types (role from text): {', '.join(sorted(unknown))}")
    if title_at is not None:  # a banner taken for the title: the real one stands above the authors
        title_at = settle_title(raws)
        title = raws[title_at].text if title_at is not None else title
    if title_at is not None:
        mark_front_matter(raws, title_at)
    for r in raws:
        if r.label == "text" and r.role is None:
            r.text = clean_inline(r.text)
    mark_abstract(raws)
    assign_unnumbered_levels(raws)
    return raws, title


def html_table_text_or_text(s: str) -> str:
    """A chart's `content` (sometimes an HTML table, sometimes plain text)."""
    if not s.strip():
        return ""
    if "<table" in s.lower():
        return rows_text(html_table_rows(s))
    return strip_tags(s) if "<" in s else s
