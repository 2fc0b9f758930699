"""DoclingDocument JSON (`*.docling.json`, or a `.json` whose `schema_name` is DoclingDocument).

Reading order is the tree under `body`: its `children` refs ("#/texts/3", "#/groups/0",
"#/tables/1", "#/pictures/0") walked depth first. Items of the furniture content layer
(running headers, page numbers) keep furniture roles wherever they sit: Docling lists
them among `body`'s children, not under `furniture`. The texts inside a picture (chart
labels, OCR of the image) are not body text and are skipped. Each table/picture is
followed by its caption (its `captions` refs, taken out of the flow where they also
appear) attached to it. `inline` groups (a paragraph split at formatting changes) are
joined back into one block.

Pages and boxes come from `prov[0]` (`page_no`, `bbox` l/t/r/b with `coord_origin`
BOTTOMLEFT or TOPLEFT) normalized by `pages[str(page_no)].size`; documents converted
from JATS/HTML have no prov: page 1 (or the page of the block before) and bbox None.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sheaf.core.models import IngestError
from sheaf.formats.common import (
    RawBlock,
    caption_kind,
    clean_text,
    file_head,
    heading_role,
    load_json,
    norm_key,
    numbering_depth,
)

VERSION = "2"  # 2: running headers merged into page-spanning paragraphs dropped

_REF = re.compile(r"^#/(texts|groups|tables|pictures|key_value_items|form_items)/(\d+)$")
_SCHEMA = re.compile(rb'"schema_name"\s*:\s*"DoclingDocument"')
#: a body text that reads as a caption ("Table 2: ...", "Fig. 3. ..."), not "Table 2 shows ..."
_CAPTION_LIKE = re.compile(
    r"^\s*(fig(?:ure)?s?\.?|table|tab\.|scheme|chart)\s*(S?\d+[A-Za-z]?|[IVX]+)\s*[:.|]", re.I)

_NUMBERED = re.compile(r"^(?:\d+(?:\.\d+)*\.?|[IVXLC]+\.|[A-Z]\.\d*)\s")

_TEXT_ROLES = {
    "title": "title",
    "section_header": "heading",
    "text": "body",
    "paragraph": "body",
    "list_item": "list",
    "footnote": "footnote",
    "formula": "equation",
    "code": "body",
    "reference": "reference",
    "page_header": "page_header",
    "page_footer": "page_footer",
    "caption": "figure_caption",
}
_FURNITURE_LABELS = {"page_header": "page_header", "page_footer": "page_footer"}
_HEADINGS = ("heading", "abstract_heading", "reference_heading", "backmatter_heading")


def matches(path: Path) -> bool:
    """`*.docling.json`, or a `.json` whose head says `"schema_name": "DoclingDocument"`."""
    name = path.name.lower()
    if name.endswith(".docling.json"):
        return True
    if not name.endswith(".json"):
        return False
    return bool(_SCHEMA.search(file_head(path)))


class _Doc:
    """Ref resolution and geometry over one DoclingDocument."""

    def __init__(self, paper_id: str, path: Path, doc: dict[str, Any], warnings: list[str]) -> None:
        self.doc = doc
        self.warnings = warnings
        self.bad_refs = 0
        self.arrays: dict[str, list[Any]] = {}
        for key in ("texts", "groups", "tables", "pictures", "key_value_items", "form_items"):
            val = doc.get(key, [])
            if val is None:
                val = []
            if not isinstance(val, list):
                raise IngestError(paper_id, str(path), f"DoclingDocument: '{key}' is not a list")
            self.arrays[key] = [_sanitize(it) for it in val]
        self.sizes: dict[int, tuple[float, float]] = {}
        pages = doc.get("pages") or {}
        if isinstance(pages, dict):
            for k, p in pages.items():
                try:
                    size = p["size"]
                    w, h = float(size["width"]), float(size["height"])
                    n = int(p.get("page_no", k))
                except (KeyError, TypeError, ValueError):
                    continue
                if w > 0 and h > 0:
                    self.sizes[n] = (w, h)

    def get(self, ref: Any) -> tuple[str, dict[str, Any]] | None:
        """(ref string, item) for a `{"$ref": ...}` or a ref string; None when it dangles."""
        if isinstance(ref, dict):
            ref = ref.get("$ref") or ref.get("cref")
        if not isinstance(ref, str):
            self.bad_refs += 1
            return None
        m = _REF.match(ref)
        if not m:
            self.bad_refs += 1
            return None
        arr = self.arrays.get(m.group(1), [])
        i = int(m.group(2))
        if i >= len(arr) or not isinstance(arr[i], dict):
            self.bad_refs += 1
            return None
        return ref, arr[i]

    def where(self, items: list[dict[str, Any]], default_page: int) -> tuple[int, tuple[float, float, float, float] | None]:
        """Page and normalized bbox of the first prov of `items` (boxes on that page merged)."""
        provs = [p for it in items for p in (it.get("prov") or []) if isinstance(p, dict)]
        if not provs:
            return default_page, None
        try:
            page = int(provs[0].get("page_no"))
        except (TypeError, ValueError):
            return default_page, None
        if page < 1:
            return default_page, None
        size = self.sizes.get(page)
        if size is None:
            return page, None
        w, h = size
        boxes = []
        for p in provs:
            try:
                if int(p.get("page_no")) != page:
                    continue
                b = p["bbox"]
                l, t, r, bt = (float(b[k]) for k in ("l", "t", "r", "b"))
            except (KeyError, TypeError, ValueError):
                continue
            origin = str(b.get("coord_origin", "TOPLEFT")).upper()
            if origin == "BOTTOMLEFT":
                y0, y1 = 1 - t / h, 1 - bt / h
            else:
                y0, y1 = t / h, bt / h
            x0, x1 = l / w, r / w
            boxes.append((min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)))
        if not boxes:
            return page, None
        return page, (min(b[0] for b in boxes), min(b[1] for b in boxes),
                      max(b[2] for b in boxes), max(b[3] for b in boxes))


def _sanitize(item: Any) -> dict[str, Any]:
    """One item with the fields the walker reads coerced to their schema types."""
    if not isinstance(item, dict):
        return {}
    item = dict(item)
    for key in ("children", "captions", "footnotes", "prov"):
        if not isinstance(item.get(key), list):
            item[key] = []
    for key in ("label", "content_layer", "text", "orig"):
        if not isinstance(item.get(key), str):
            item[key] = "" if key != "label" else ("" if item.get(key) is None else "unknown")
    level = item.get("level")
    item["level"] = level if isinstance(level, int) and not isinstance(level, bool) else None
    return item


def _text_of(item: dict[str, Any]) -> str:
    t = item.get("text")
    if not isinstance(t, str) or not t.strip():
        t = item.get("orig") if isinstance(item.get("orig"), str) else ""
    return t or ""


def _drop_running_spans(item: dict[str, Any], text: str, running: set[str]) -> str:
    """`text` without the spans that are a running header/footer of the document.

    Docling merges a paragraph that flows onto the next page with everything it passes on
    the way, the next page's running header included (one `prov` per piece, each with its
    `charspan` in `text`). Spans whose text is a known running header/footer are dropped.
    """
    provs = item.get("prov") or []
    if len(provs) < 2 or not running:
        return text
    spans: list[tuple[int, int]] = []
    for p in provs:
        cs = p.get("charspan") if isinstance(p, dict) else None
        if not (isinstance(cs, list) and len(cs) == 2 and all(isinstance(x, int) for x in cs)
                and 0 <= cs[0] <= cs[1] <= len(text)):
            return text  # spans we cannot trust: keep the text whole
        spans.append((cs[0], cs[1]))
    kept: list[str] = []
    dropped = False
    for a, b in spans:
        seg = text[a:b]
        key = norm_key(seg)
        if len(key) >= 8 and key in running:
            dropped = True
            continue
        if seg.strip():
            kept.append(seg.strip())
    return " ".join(kept) if dropped else text


def table_text(item: dict[str, Any]) -> str:
    """Rows 'cell | cell' from `data.grid` (or `data.table_cells`); spanned cells once per row."""
    data = item.get("data") or {}
    grid = data.get("grid") if isinstance(data, dict) else None
    rows: list[list[dict[str, Any]]] = []
    if isinstance(grid, list) and grid:
        rows = [r for r in grid if isinstance(r, list)]
    elif isinstance(data, dict) and isinstance(data.get("table_cells"), list):
        cells = [c for c in data["table_cells"] if isinstance(c, dict)]
        try:
            nrows = max((int(c.get("end_row_offset_idx", 0)) for c in cells), default=0)
            ncols = max((int(c.get("end_col_offset_idx", 0)) for c in cells), default=0)
            if nrows * ncols > 250_000:  # nonsense offsets: do not build a giant grid
                raise ValueError("table too large")
            table: list[list[dict[str, Any]]] = [[{} for _ in range(ncols)] for _ in range(nrows)]
            for c in cells:
                for r in range(int(c["start_row_offset_idx"]), int(c["end_row_offset_idx"])):
                    for k in range(int(c["start_col_offset_idx"]), int(c["end_col_offset_idx"])):
                        table[r][k] = c
            rows = table
        except (KeyError, TypeError, ValueError, IndexError):
            rows = [[c] for c in cells]
    out: list[str] = []
    for r_i, row in enumerate(rows):
        texts: list[str] = []
        seen: set[tuple[Any, Any]] = set()
        for c in row:
            if not isinstance(c, dict):
                continue
            start_row, start_col = c.get("start_row_offset_idx"), c.get("start_col_offset_idx")
            if isinstance(start_row, int) and isinstance(start_col, int):
                if (start_row, start_col) in seen:
                    continue  # a column span repeated in the grid
                seen.add((start_row, start_col))
            continued = isinstance(start_row, int) and start_row < r_i  # a row span from above
            texts.append("" if continued else clean_text(str(c.get("text") or "")).replace("\n", " "))
        if any(texts):
            out.append(" | ".join(texts))
    return "\n".join(out)


class _Walker:
    def __init__(self, paper_id: str, path: Path, d: _Doc, warnings: list[str]) -> None:
        self.paper_id = paper_id
        self.path = path
        self.d = d
        self.warnings = warnings
        self.raws: list[RawBlock] = []
        self.page = 1
        self.visited: set[str] = set()
        self.claimed: dict[str, str] = {}  # caption/footnote ref -> object ref
        self.emitted: set[str] = set()
        self.has_title = any(isinstance(t, dict) and t.get("label") == "title" for t in d.arrays["texts"])
        self.seen_content = False  # any non-furniture block emitted yet
        self.seen_heading = False
        self.have_authors = False
        self.title: str | None = None
        self.mode: str | None = None  # abstract | reference, from the last heading
        self.mode_level = 99
        self.last_numbered = 0
        levels = {t.get("level") for t in d.arrays["texts"]
                  if isinstance(t, dict) and t.get("label") == "section_header"}
        self.flat_levels = len(levels) <= 1  # PDF conversions: every section_header is level 1
        self.running = {norm_key(_text_of(t)) for t in d.arrays["texts"] if isinstance(t, dict)
                        and (t.get("label") in _FURNITURE_LABELS or t.get("content_layer") == "furniture")}
        self.captioned: set[int] = set()  # indices of objects that got a caption
        self.last_object: int | None = None  # an uncaptioned object just emitted

    # --- emission -----------------------------------------------------------------------

    def add(self, items: list[dict[str, Any]], label: str, text: str, role: str,
            level: int | None = None, attach_to: int | None = None) -> int:
        page, bbox = self.d.where(items, self.page)
        if role not in ("page_header", "page_footer", "page_number", "noise"):
            self.page = page  # floats and furniture do not move the flow's page
        self.raws.append(RawBlock(page=page, label=label, text=text, bbox=bbox, role=role,
                                  heading_level=level, attach_to=attach_to))
        if role not in ("page_header", "page_footer", "page_number", "noise"):
            self.seen_content = True
        return len(self.raws) - 1

    def furniture_role(self, item: dict[str, Any], text: str) -> str:
        label = item.get("label")
        if label in _FURNITURE_LABELS:
            return _FURNITURE_LABELS[label]
        if re.fullmatch(r"\d{1,4}", text.strip()):
            return "page_number"
        return "noise"

    # --- walking ---------------------------------------------------------------------------

    def walk(self, node: dict[str, Any], furniture: bool = False) -> None:
        for child in node.get("children") or []:
            got = self.d.get(child)
            if got is None:
                continue
            self.visit(got[0], got[1], furniture)

    def visit(self, ref: str, item: dict[str, Any], furniture: bool) -> None:
        if ref in self.visited:
            return  # a ref cycle or an item listed twice
        self.visited.add(ref)
        kind = ref.split("/")[1]
        furn = furniture or item.get("content_layer") in ("furniture", "background")
        if kind in ("tables", "pictures"):
            self.object(ref, item, furn)
            return  # texts inside a picture/table are its content, not the flow
        if kind == "groups":
            if item.get("label") == "inline":
                self.inline(ref, item, furn)
            else:
                self.walk(item, furn)
            return
        if kind == "texts":
            self.text(ref, item, furn)
            self.walk(item, furn)
            return
        # key_value_items / form_items: their text, if any, as body
        self.walk(item, furn)

    def inline(self, ref: str, group: dict[str, Any], furn: bool) -> None:
        """An inline group: the texts of its subtree joined into one block."""
        parts: list[dict[str, Any]] = []

        def collect(node: dict[str, Any]) -> None:
            for child in node.get("children") or []:
                got = self.d.get(child)
                if got is None or got[0] in self.visited:
                    continue
                self.visited.add(got[0])
                if got[0].startswith("#/texts/") and got[0] not in self.claimed:
                    parts.append(got[1])
                if not got[0].startswith(("#/pictures/", "#/tables/")):
                    collect(got[1])

        collect(group)
        parts = [p for p in parts if _text_of(p).strip()]
        if not parts:
            return
        text = " ".join(_text_of(p).strip() for p in parts)
        first = parts[0]
        label = str(first.get("label") or "text")
        self.emit_text(first, parts, label, text, furn)

    def text(self, ref: str, item: dict[str, Any], furn: bool) -> None:
        if ref in self.claimed:
            return  # a caption/footnote emitted with its table or picture
        text = _text_of(item)
        if not furn:
            text = _drop_running_spans(item, text, self.running)
        if not text.strip():
            return
        label = str(item.get("label") or "text")
        self.emit_text(item, [item], label, text, furn, parent=item.get("parent"))

    def emit_text(self, item: dict[str, Any], items: list[dict[str, Any]], label: str, text: str,
                  furn: bool, parent: Any = None) -> None:
        if furn or label in _FURNITURE_LABELS:
            self.add(items, label, text, self.furniture_role(item, text))
            return
        role = _TEXT_ROLES.get(label, "body")
        if role == "body" and len(key := norm_key(text)) >= 8 and key in self.running:
            # a running header/footer Docling missed on this page (labelled one elsewhere)
            page, bbox = self.d.where(items, self.page)
            self.add(items, label, text, "page_footer" if bbox and bbox[1] > 0.5 else "page_header")
            return
        pending = self.last_object
        self.last_object = None
        if label == "caption" or (role == "body" and pending is not None and _CAPTION_LIKE.match(text)):
            if pending is not None:  # right after a table/picture that has no caption of its own
                self.caption_for(pending, items, label, text)
                return
            kind = caption_kind(text) or "figure"
            self.add(items, label, text, f"{kind}_caption")  # an orphan: paired after the walk
            return
        if role == "heading":
            self.heading(items, label, text, item)
            return
        if role == "title":
            self.title = self.title or clean_text(text)
            self.add(items, label, text, "title")
            return
        if label == "paragraph" and not self.seen_heading and self.is_title_child(parent):
            # JATS front matter: the paragraphs under the title are the authors, then affiliations
            role = "affiliation" if self.have_authors else "authors"
            self.have_authors = True
        elif self.mode == "abstract" and role == "body":
            role = "abstract"
        elif self.mode == "reference" and role in ("body", "list"):
            role = "reference"
        self.add(items, label, text, role)

    def is_title_child(self, parent: Any) -> bool:
        got = self.d.get(parent) if parent else None
        if got is None:
            return False
        return got[1].get("label") == "title"

    def heading(self, items: list[dict[str, Any]], label: str, text: str, item: dict[str, Any]) -> None:
        clean = clean_text(text)
        role = heading_role(clean)
        depth = numbering_depth(clean)
        if (not self.has_title and self.title is None and not self.seen_content
                and role == "heading" and not _NUMBERED.match(clean)):
            # PDF conversions label the paper's title as the first section_header
            self.title = clean
            self.add(items, "section_header", text, "title")
            return
        self.seen_heading = True
        level = item.get("level")
        level = level if isinstance(level, int) and level >= 1 else None
        if role == "heading":
            if depth is not None:
                self.last_numbered = depth
            elif self.flat_levels and self.last_numbered:
                # docling gives every PDF heading level 1: an unnumbered heading in a
                # numbered paper is a sub-heading of the last numbered section
                level = self.last_numbered + 1
        else:
            self.last_numbered = 0
        eff = depth or level or 1
        if role == "abstract_heading":
            self.mode, self.mode_level = "abstract", eff
        elif role == "reference_heading":
            self.mode, self.mode_level = "reference", eff
        elif role == "backmatter_heading":
            self.mode, self.mode_level = None, 99
        elif self.mode is not None and (self.mode == "abstract" or eff <= self.mode_level):
            self.mode, self.mode_level = None, 99
        self.add(items, label, text, "heading" if role == "heading" else role, level=level)

    def caption_for(self, obj: int, items: list[dict[str, Any]], label: str, text: str) -> None:
        kind = caption_kind(text)
        if kind and self.raws[obj].role != kind:
            self.raws[obj].role = kind  # the caption's label is the best evidence of the kind
        self.captioned.add(obj)
        self.add(items, label, text, f"{self.raws[obj].role}_caption", attach_to=obj)

    def object(self, ref: str, item: dict[str, Any], furn: bool) -> None:
        is_table = ref.startswith("#/tables/")
        label = str(item.get("label") or ("table" if is_table else "picture"))
        caps: list[dict[str, Any]] = []
        for c in item.get("captions") or []:
            got = self.d.get(c)
            if got is not None and got[0] not in self.emitted and _text_of(got[1]).strip():
                caps.append(got[1])
                self.emitted.add(got[0])
        notes: list[dict[str, Any]] = []
        for c in item.get("footnotes") or []:
            got = self.d.get(c)
            if got is not None and got[0] not in self.emitted and _text_of(got[1]).strip():
                notes.append(got[1])
                self.emitted.add(got[0])
        if furn:
            return  # a logo or decoration in the furniture layer
        caption = " ".join(_text_of(c).strip() for c in caps)
        kind = caption_kind(caption) if caption else None
        role = kind or ("table" if is_table else "figure")
        text = table_text(item) if is_table else ""
        obj = self.add([item], label, text, role)
        self.last_object = obj
        if caps:
            self.captioned.add(obj)
            self.add(caps, "caption", caption, f"{role}_caption", attach_to=obj)
            self.last_object = None
        for n in notes:
            self.add([n], "footnote", _text_of(n), "footnote")

    # --- after the walk ------------------------------------------------------------------------

    def pair_orphans(self) -> list[RawBlock]:
        """Captions no object claimed: the nearest uncaptioned object on their page, or a
        placeholder object (the caption proves a figure/table Docling did not detect)."""
        raws = self.raws
        objects = [i for i, r in enumerate(raws) if r.role in ("figure", "table")]
        free = {i for i in objects if i not in self.captioned}
        synth: dict[int, RawBlock] = {}
        for i, r in enumerate(raws):
            if r.role not in ("figure_caption", "table_caption") or r.attach_to is not None:
                continue
            want = r.role.removesuffix("_caption")
            stated = caption_kind(r.text)
            cands = [j for j in free if raws[j].page == r.page]
            if cands:
                j = min(cands, key=lambda j: (raws[j].role != want, abs(j - i), j > i))
                free.discard(j)
                if stated:
                    raws[j].role = stated
                r.role = f"{raws[j].role}_caption"
                r.attach_to = j
            else:
                synth[i] = RawBlock(page=r.page, label="caption_only", text="", bbox=None, role=want)
        if not synth:
            return raws
        out: list[RawBlock] = []
        new_index: dict[int, int] = {}
        for i, r in enumerate(raws):
            if i in synth:
                out.append(synth[i])
                r.attach_to = len(out) - 1  # already a new index
            new_index[i] = len(out)
            out.append(r)
        for i, r in enumerate(raws):
            if r.attach_to is not None and i not in synth:
                r.attach_to = new_index.get(r.attach_to)
        self.warnings.append(
            f"{len(synth)} caption(s) with no detected figure/table: placeholder objects added")
        return out


def parse(paper_id: str, path: Path, data: bytes, warnings: list[str]) -> tuple[list[RawBlock], str | None]:
    """DoclingDocument → raw blocks in reading order, and the paper's title."""
    doc = load_json(paper_id, path, data, warnings)
    if not isinstance(doc, dict):
        raise IngestError(paper_id, str(path), f"not a DoclingDocument (top level is a JSON {type(doc).__name__})")
    schema = doc.get("schema_name")
    if schema != "DoclingDocument":
        if isinstance(doc.get("body"), dict) and isinstance(doc.get("texts"), list) and schema is None:
            warnings.append("no schema_name: read as a DoclingDocument")
        else:
            raise IngestError(paper_id, str(path),
                              f"not a DoclingDocument (schema_name {schema!r}, expected 'DoclingDocument')")
    body = doc.get("body")
    if not isinstance(body, dict):
        raise IngestError(paper_id, str(path), "DoclingDocument has no body tree")
    body = _sanitize(body)
    d = _Doc(paper_id, path, doc, warnings)
    w = _Walker(paper_id, path, d, warnings)
    # captions/footnotes claimed by an object are emitted with it, not where they sit in the flow
    for key in ("tables", "pictures"):
        for i, obj in enumerate(d.arrays[key]):
            if not isinstance(obj, dict):
                continue
            for c in (obj.get("captions") or []) + (obj.get("footnotes") or []):
                got = d.get(c)
                if got is not None:
                    w.claimed.setdefault(got[0], f"#/{key}/{i}")
    w.walk(body)
    furniture = doc.get("furniture")
    if isinstance(furniture, dict):
        w.walk(_sanitize(furniture), furniture=True)
    raws = w.pair_orphans()
    if d.bad_refs:
        warnings.append(f"{d.bad_refs} dangling or malformed $ref(s) skipped")
    if not any(r.text.strip() for r in raws if r.role not in ("page_header", "page_footer", "page_number", "noise")):
        raise IngestError(paper_id, str(path), "the DoclingDocument has no text")
    return raws, w.title
