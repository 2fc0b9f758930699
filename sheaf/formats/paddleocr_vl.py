"""PaddleOCR-VL layout-parsing output (`result.json`, as PaperForge stores it).

Shape: a JSON list of result lines, each `{"layoutParsingResults": [page, ...]}`; one
entry per page (the page index is a running counter over all lines); each page holds
`prunedResult = {width, height, parsing_res_list: [block, ...]}` and each block
`block_label, block_content, block_bbox` (page pixels) and `block_order` (null for
furniture, figures and captions). A single line (a dict), the API envelope
`{"result": {...}}` and JSON Lines are accepted as well.

What the real files look like (and what this adapter does about it):
- `block_order` is set for the text flow only; blocks without it are placed by position
  (running headers/footers/page numbers at the top/bottom of the page, figures, tables
  and captions after the last ordered block above them in their column).
- Running headers are sometimes labelled `text` (a page's header merged into one block,
  or a header the layout model missed): a `text` block in the top/bottom margin that
  consists only of strings labelled `header`/`footer`/`number` elsewhere in the paper is
  furniture.
- Continuation paragraphs are often empty `text` blocks (their text was merged into the
  previous block): dropped.
- `figure_title` covers captions, caption labels split from their text ("Fig. 1" +
  "Schematic drawings ...": merged), panel letters ("(a)", "(ii) ...": noise) and
  panel captions ("Fig. 2-A" when "Figs. 2-A through 2-D ..." exists: noise).
- Captions labelled `text` ("FIG. 1. Both IM and ...") become captions when the page has
  a figure or table; a table whose first row is its caption gets that row split off.

Helpers shared with the MinerU adapter live here too (HTML tables to text, front matter,
heading levels for unnumbered headings, abstract marking).
"""
from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from sheaf.core.models import IngestError
from sheaf.formats.common import (
    CAPTION_RE,
    MATH_MARK,
    MAX_PAGES,
    SUP,
    SYMBOLS,
    RawBlock,
    caption_kind,
    caption_label,
    decode_text,
    file_head,
    heading_role,
    is_name,
    load_json,
    mark_cover_page,
    name_parts,
    norm_key,
    numbering_depth,
)

VERSION = "1"
SNIFF_BYTES = 64 * 1024

#: PaddleOCR-VL / PP-DocLayout labels -> canonical role (None: finalize decides from the text).
LABEL_ROLES: dict[str, str | None] = {
    "doc_title": "title",
    "paragraph_title": "heading",
    "abstract": "abstract",
    "reference_content": "reference",
    "reference": "reference",
    "figure_title": "figure_caption",  # refined from the text
    "table_title": "table_caption",
    "chart_title": "figure_caption",
    "figure_table_chart_title": "figure_caption",
    "image": "figure",
    "chart": "figure",
    "figure": "figure",
    "table": "table",
    "header": "page_header",
    "header_image": "page_header",
    "footer": "page_footer",
    "footer_image": "page_footer",
    "number": "page_number",
    "aside_text": "noise",
    "seal": "noise",
    "display_formula": "equation",
    "formula": "equation",
    "inline_formula": "equation",
    "formula_number": "noise",
    "footnote": "footnote",
    "vision_footnote": "footnote",
    "algorithm": "body",
    "code": "body",
    "content": "body",
    "vertical_text": None,
    "text": None,
}
#: Blocks without a reading order that go to the top or bottom of their page.
_EDGE_LABELS = frozenset(
    {"header", "header_image", "footer", "footer_image", "number", "aside_text", "seal", "footnote"}
)
_CAPTION_LABELS = frozenset({"figure_title", "table_title", "chart_title", "figure_table_chart_title"})
_OBJECT_ROLES = ("figure", "table")


def matches(path: Path) -> bool:
    """A file named `result.json` whose head mentions `layoutParsingResults`."""
    if path.name != "result.json":
        return False
    return b"layoutParsingResults" in file_head(path, SNIFF_BYTES)


# --- shared helpers (also used by the MinerU adapter) -----------------------------------

class _TableText(HTMLParser):
    """Collects the rows and cells of an HTML table (nested tables are flattened)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.loose: list[str] = []  # text outside any cell

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "tr":
            self._close_row()
            self._row = []
        elif tag in ("td", "th"):
            self._close_cell()
            if self._row is None:
                self._row = []
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._close_cell()
        elif tag == "tr":
            self._close_row()
        elif tag == "table":
            self._close_row()

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        elif data.strip():
            self.loose.append(data.strip())

    def _close_cell(self) -> None:
        if self._cell is not None:
            text = " ".join("".join(self._cell).split())
            if self._row is None:
                self._row = []
            self._row.append(text)
            self._cell = None

    def _close_row(self) -> None:
        self._close_cell()
        if self._row is not None:
            if any(c for c in self._row):
                self.rows.append(self._row)
            self._row = None

    def close(self) -> None:
        super().close()
        self._close_row()


def html_table_rows(markup: str) -> list[list[str]]:
    """The rows of an HTML table as lists of cell texts (empty rows dropped)."""
    p = _TableText()
    try:
        p.feed(markup)
        p.close()
    except Exception:  # noqa: BLE001 - malformed markup: fall back to the text without tags
        return [[strip_tags(markup)]] if strip_tags(markup) else []
    rows = p.rows
    if p.loose:
        rows = [[" ".join(p.loose)]] + rows
    return rows


def rows_text(rows: list[list[str]]) -> str:
    return "\n".join(" | ".join(c for c in row) for row in rows)


def html_table_text(markup: str) -> str:
    """An HTML table as plain text: one line per row, cells joined with ' | '."""
    if "<" not in markup:
        return html.unescape(markup)
    return rows_text(html_table_rows(markup))


def split_table_caption(rows: list[list[str]]) -> tuple[str | None, list[list[str]]]:
    """A table whose first row is one cell reading 'TABLE III ...' has its caption inside."""
    if rows:
        cells = [c for c in rows[0] if c]
        if len(cells) == 1 and caption_kind(cells[0]) == "table" and len(rows) > 1:
            return cells[0], rows[1:]
    return None, rows


_TAG = re.compile(r"<[^>]*>")


def strip_tags(text: str) -> str:
    return html.unescape(_TAG.sub(" ", text)).strip()


_SUB = re.compile(r"<sub>(.*?)</sub>", re.I | re.S)
_INLINE_TAGS = re.compile(r"</?(?:b|i|em|strong|u|span|small|br\s*/?|p|div)(?:\s[^>]*)?>", re.I)
_MD_ESCAPE = re.compile(r"\\([_*~#`\[\]|<>])")
_MATH_SPLIT = re.compile(r"(\$[^$]*\$)")
_MARKER = re.compile(r"^[\s\d,;*†‡§¶∗#a-z\-–]{1,12}$")


def clean_inline(text: str, *, drop_markers: bool = True) -> str:
    """Remove MinerU's inline HTML: `<sup>1</sup>` footnote markers go, `<sup>x</sup>` → ^x,
    `<sub>x</sub>` → x, simple formatting tags are dropped; other angle-bracket text stays
    (it is often real text, e.g. a prompt template's `<word X>`)."""

    def sup(m: re.Match[str]) -> str:
        inner = m.group(1).strip()
        if not inner:
            return ""
        after_digit = m.start() > 0 and m.string[m.start() - 1].isdigit()
        if after_digit:  # 10<sup>-5</sup>, 19<sup>th</sup>
            return inner if inner.lower() in ("st", "nd", "rd", "th") else f"^{inner}"
        if drop_markers and _MARKER.match(inner):
            return ""
        return f"^{inner}"

    text = SUP.sub(sup, text)
    text = _SUB.sub(lambda m: m.group(1), text)
    text = _INLINE_TAGS.sub(lambda m: "\n" if m.group(0).lower().startswith("<br") else "", text)
    if "\\" in text:  # Markdown escapes ("fra\_Latn", "\*") outside $math$
        text = "".join(
            seg if seg.startswith("$") else _MD_ESCAPE.sub(r"\1", seg) for seg in _MATH_SPLIT.split(text)
        )
    return text


def _next_text(raws: list[RawBlock], i: int) -> int | None:
    """Index of the next block after `i` on its page that is not furniture."""
    for j in range(i + 1, min(len(raws), i + 6)):
        if raws[j].page != raws[i].page:
            return None
        if raws[j].role not in ("page_header", "page_footer", "page_number", "noise"):
            return j
    return None


def settle_title(raws: list[RawBlock], skip_page: int | None = None) -> int | None:
    """Choose the document title among the blocks labelled `title`; returns its index.

    A journal banner or series name labelled as the title ("SCIENTIFIC REPORTS" above the real
    title) is told apart by what follows: the real title is the title-like line followed by
    the author line. Candidates are the title blocks of the first page that has one (the
    cover page excepted) and a heading printed right after one of them. The blocks above the
    chosen title on its page become furniture ("above the title"); later title blocks are
    part titles (headings).
    """
    titles = [i for i, r in enumerate(raws) if r.role == "title" and r.page != skip_page]
    if not titles:
        for r in raws:
            if r.role == "title":
                r.role, r.reason = "affiliation", r.reason or "cover page"
        return None
    page = raws[titles[0]].page
    cands = [i for i in titles if raws[i].page == page]
    for i in list(cands):
        j = _next_text(raws, i)
        if j is not None and raws[j].role == "heading":
            cands.append(j)
    cands = sorted(set(cands))

    def followed_by_authors(i: int) -> bool:
        j = _next_text(raws, i)
        return j is not None and raws[j].role is None and classify_front(raws[j].text) == "authors"

    def words(i: int) -> int:
        return len(raws[i].text.split())

    # a banner is shorter than the title it stands above (a subtitle under the title is too)
    chosen = next((i for i in cands if followed_by_authors(i)), cands[0])
    if chosen != cands[0] and words(chosen) <= words(cands[0]):
        chosen = cands[0]
    t_box = raws[chosen].bbox
    for j, r in enumerate(raws):
        if j == chosen:
            r.role = "title"
        elif r.role == "title" and r.page == skip_page:
            r.role, r.reason = "affiliation", "cover page"
        elif r.role == "title" or (j in cands and j < chosen):
            if r.page == page and j < chosen:
                r.role, r.reason = "page_header", "banner above the title"
            elif r.role == "title":
                r.role, r.reason = "heading", "a second title: a part title"
        elif r.page == page and j < chosen and r.role is None and r.bbox and t_box \
                and r.bbox[3] <= t_box[1] + 0.005:
            r.role, r.reason = "page_header", "above the title"  # journal banners, copyright lines
    if chosen != cands[0]:
        raws[chosen].reason = "title-like line above the author line"
    return chosen


# Front matter: author lines and affiliations between the title and the abstract.
_AFFIL = re.compile(
    r"\b(universit\w*|institut\w*|department|dept\.?|college|school|laborator\w*|lab|centre|center|"
    r"hospital|faculty|academy|research|inc\.?|ltd\.?|corporation|company|foundation|ministry|"
    r"clinic|division|program(?:me)?|graduate|national|province|street|road|avenue|usa|china|japan|"
    r"germany|korea|france|canada|india|italy|spain|netherlands|switzerland|kingdom)\b",
    re.I,
)
_PLAIN_NAME_WORD = re.compile(r"^[A-Z][a-z]+(?:-[A-Z]?[a-z]+)?$")


def strip_affiliation_marks(text: str) -> str:
    """'$ ^{a} $ Dept. of ...' / '<sup>1</sup>IBM Research' / '†Okinawa ...' without the markers."""
    t = SYMBOLS.sub(" ", MATH_MARK.sub(" ", SUP.sub(" ", text)))
    return "\n".join(" ".join(ln.split()) for ln in t.split("\n")).strip()


def classify_front(text: str) -> str | None:
    """'authors' for a list of person names, 'affiliation' for an address/email line, else None."""
    if not text or len(text) > 2000:
        return None
    plain = strip_affiliation_marks(text)
    if not plain:
        return None
    if "@" in plain or _AFFIL.search(plain):
        return "affiliation"
    parts, marked = name_parts(text)
    if not parts:
        return None
    if len(parts) == 1 and not marked:
        # "Xiangyang Liu Junliang He Xipeng Qiu": names with nothing between them
        words = parts[0].split()
        ok = 4 <= len(words) <= 12 and len(words) % 2 == 0 and all(_PLAIN_NAME_WORD.match(w) for w in words)
        return "authors" if ok else None
    good = sum(1 for p in parts if is_name(p) and not (len(parts) > 1 and len(p) <= 2))
    return "authors" if good / len(parts) >= 0.8 else None


def authors_text(text: str) -> str:
    """A name line normalized: markers and degrees gone, names joined with ', '."""
    parts, _ = name_parts(text)
    return ", ".join(parts)


def mark_front_matter(raws: list[RawBlock], title_at: int, stop_labels: frozenset[str] = frozenset()) -> None:
    """Author and affiliation lines after the title, on its page, before the abstract/first heading."""
    page = raws[title_at].page
    seen_authors = seen_affiliation = False
    for r in raws[title_at + 1: title_at + 16]:
        if r.page != page or r.label in stop_labels:
            break
        if r.role in ("heading", "abstract", "abstract_heading", "reference"):
            break
        if r.role is not None:
            continue
        if len(r.text) > 1500:  # a body paragraph: the front matter is over
            break
        kind = classify_front(r.text)
        if kind == "authors" and not seen_authors:
            seen_authors = True
            r.role = "authors"
            r.text = authors_text(r.text)
        elif kind == "affiliation" and seen_authors and len(r.text) < 800:
            seen_affiliation = True
            r.role = "affiliation"
            r.text = strip_affiliation_marks(r.text)
        elif kind == "authors" and seen_authors and not seen_affiliation and len(r.text) < 400:
            r.role = "authors"  # a second line of names
            r.text = authors_text(r.text)


_TOP_LEVEL = re.compile(
    r"^(introduction|background|related work|preliminaries|methods?|methodology|materials and methods|"
    r"patients and methods|experiments?|experimental(?: setup| results)?|results?(?: and discussion)?|"
    r"discussion|conclusions?(?: and future work)?|future work|evaluation|appendix|appendices|"
    r"ethic(?:s|al)(?: statement| considerations?| impact)?|broader impacts?|impact statement|"
    r"keywords?|summary)\b",
    re.I,
)


_APPENDIX_LETTER = re.compile(r"^[A-Z]\.?\s+[A-Z0-9]")


def assign_unnumbered_levels(raws: list[RawBlock]) -> None:
    """Levels for headings without a number, from the numbered headings around them.

    Numbered headings get their depth in `finalize`. An unnumbered one is level 1 when its
    text names a top-level part (Abstract, References, Acknowledgements, Introduction,
    Limitations ...) or when no numbered heading precedes it in the current part; otherwise it
    sits one level below the last numbered heading ("Example 1" under "B Examples ...").
    """
    ctx = 0
    after_refs = False  # as in `finalize`: a bare letter ("A Prompts") numbers appendices only
    for r in raws:
        if r.role != "heading" or not r.text:
            continue
        depth = numbering_depth(r.text, allow_letter=after_refs)
        if depth is not None:
            ctx = depth
            continue
        if after_refs and _APPENDIX_LETTER.match(r.text):  # "C PIXEL vs PIXEL-bigrams"
            r.heading_level = ctx = 1
            continue
        role = heading_role(r.text)
        after_refs = after_refs or role == "reference_heading"
        if role != "heading" or _TOP_LEVEL.match(r.text.strip()):
            r.heading_level = 1
            ctx = 0
        else:
            r.heading_level = min(6, ctx + 1)


_KEYWORDS = re.compile(r"^\s*(key\s*words?|index terms)\b", re.I)


def mark_abstract(raws: list[RawBlock]) -> None:
    """Text between an 'Abstract' heading and the next heading is the abstract."""
    inside = False
    page = 0
    for r in raws:
        if r.role == "heading":
            inside = heading_role(r.text) == "abstract_heading"
            page = r.page
            continue
        if inside and r.page > page + 1:  # an abstract does not run on for pages
            inside = False
        if inside and r.role is None and r.text and not _KEYWORDS.match(r.text):
            r.role = "abstract"


# --- reading the file ---------------------------------------------------------------------

def _load(paper_id: str, path: Path, data: bytes, warnings: list[str]):
    try:
        return load_json(paper_id, path, data, warnings)
    except IngestError as first:
        text = decode_text(paper_id, path, data, [])
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) > 1 and all(ln.lstrip().startswith("{") for ln in lines):
            try:
                return [json.loads(ln) for ln in lines]  # JSON Lines: one result line each
            except (json.JSONDecodeError, RecursionError):
                pass
        raise first from None


def _lines(paper_id: str, path: Path, obj, depth: int = 0) -> list[dict]:
    """The result lines (dicts holding `layoutParsingResults`) of any accepted envelope."""
    where = str(path)
    if depth > 3:
        raise IngestError(paper_id, where, "PaddleOCR-VL: `result` nested too deeply")
    if isinstance(obj, dict):
        if "layoutParsingResults" in obj:
            return [obj]
        if "parsing_res_list" in obj or "prunedResult" in obj:  # one page on its own
            return [{"layoutParsingResults": [obj]}]
        if "result" in obj and obj["result"] is not None:
            return _lines(paper_id, path, obj["result"], depth + 1)
        if obj.get("errorCode") not in (None, 0) or obj.get("errorMsg") not in (None, "", "Success"):
            raise IngestError(
                paper_id, where,
                f"PaddleOCR-VL: the service returned an error ({obj.get('errorCode')}: {obj.get('errorMsg')})",
            )
        keys = ", ".join(sorted(map(str, obj))[:8]) or "none"
        raise IngestError(
            paper_id, where,
            f"PaddleOCR-VL: expected `layoutParsingResults` in the result object, found keys: {keys}",
        )
    if isinstance(obj, list):
        if not obj:
            raise IngestError(paper_id, where, "PaddleOCR-VL: the result list is empty (no pages)")
        out: list[dict] = []
        for i, line in enumerate(obj):
            if isinstance(line, dict) and ("layoutParsingResults" in line or "result" in line):
                out.extend(_lines(paper_id, path, line, depth + 1))
            elif isinstance(line, dict) and ("parsing_res_list" in line or "prunedResult" in line):
                out.append({"layoutParsingResults": [line]})
            else:
                what = type(line).__name__ if not isinstance(line, dict) else "an object without `layoutParsingResults`"
                raise IngestError(
                    paper_id, where,
                    f"PaddleOCR-VL: result line {i} is {what}; expected an object with `layoutParsingResults`",
                )
        return out
    raise IngestError(
        paper_id, where,
        f"PaddleOCR-VL: expected a JSON list of result lines or an object, found {type(obj).__name__}",
    )


def _num(v) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _page_size(page: dict, line: dict, k: int) -> tuple[float | None, float | None]:
    w, h = _num(page.get("width")), _num(page.get("height"))
    if w and h:
        return w, h
    info = line.get("dataInfo")
    pages = info.get("pages") if isinstance(info, dict) else None
    if isinstance(pages, list) and 0 <= k < len(pages) and isinstance(pages[k], dict):
        w, h = _num(pages[k].get("width")), _num(pages[k].get("height"))
        if w and h:
            return w, h
    return None, None


def _bbox(raw, w: float | None, h: float | None) -> tuple[float, float, float, float] | None:
    if not isinstance(raw, (list, tuple)) or len(raw) != 4:
        return None
    vals = [_num(v) for v in raw]
    if any(v is None for v in vals) or not w or not h:
        return None
    x0, y0, x1, y1 = vals  # type: ignore[misc]
    return (min(x0, x1) / w, min(y0, y1) / h, max(x0, x1) / w, max(y0, y1) / h)


class _B:
    """One block of a page while the page is being put in order."""

    __slots__ = ("idx", "label", "text", "bbox", "order", "role", "cap")

    def __init__(self, idx, label, text, bbox, order, role):
        self.idx, self.label, self.text, self.bbox, self.order, self.role = idx, label, text, bbox, order, role
        self.cap: str | None = None  # a table's caption found in its first row


def _hoverlap(a, b) -> bool:
    if a is None or b is None:
        return False
    ov = min(a[2], b[2]) - max(a[0], b[0])
    return ov > 0.3 * max(1e-6, min(a[2] - a[0], b[2] - b[0]))


def _gap(a, b) -> float:
    """Distance between two boxes (0 when they touch or overlap)."""
    dx = max(0.0, a[0] - b[2], b[0] - a[2])
    dy = max(0.0, a[1] - b[3], b[1] - a[3])
    return dx + dy


def _anchor(b: _B, ordered: list[_B]) -> int:
    """Index of the ordered block this unordered block follows (-1: before them all)."""
    if b.bbox is None:  # keep its place in the file relative to the ordered blocks
        before = [i for i, o in enumerate(ordered) if o.idx < b.idx]
        return max(before) if before else -1
    tops = [o.bbox[1] for o in ordered if o.bbox is not None]
    if not tops or b.bbox[1] <= min(tops):  # above all the text of the page
        return -1
    col = [i for i, o in enumerate(ordered) if _hoverlap(b.bbox, o.bbox)]
    above = [i for i in col if ordered[i].bbox[1] <= b.bbox[1]]
    if above:
        return max(above)
    below = [i for i in col if ordered[i].bbox[1] > b.bbox[1]]
    if below:
        return min(below) - 1
    anyabove = [i for i, o in enumerate(ordered) if o.bbox is not None and o.bbox[1] <= b.bbox[1]]
    return max(anyabove) if anyabove else -1


def _reading_order(blocks: list[_B]) -> list[_B]:
    """block_order where present; the other blocks placed by position.

    Running headers/footers/page numbers/footnotes go to the top or bottom of the page;
    a figure or table follows the last ordered block above it in its column; captions and
    notes without an order travel with their nearest figure/table (in file order).
    """
    ordered = sorted((b for b in blocks if b.order is not None), key=lambda b: (b.order, b.idx))
    top: list[_B] = []
    bottom: list[_B] = []
    rest: list[_B] = []
    for b in blocks:
        if b.order is not None:
            continue
        if b.label in _EDGE_LABELS and b.bbox is not None and not (
            b.label == "footnote" and (b.bbox[1] + b.bbox[3]) / 2 < 0.5
        ):
            (top if (b.bbox[1] + b.bbox[3]) / 2 < 0.5 else bottom).append(b)
        else:
            rest.append(b)
    objects = [b for b in rest if b.role in _OBJECT_ROLES and b.bbox is not None]
    anchors: dict[int, int] = {id(o): _anchor(o, ordered) for o in objects}
    anchored: list[tuple[int, int, _B]] = []
    for b in rest:
        if id(b) in anchors:
            a = anchors[id(b)]
        elif objects and b.bbox is not None:
            near = min(objects, key=lambda o: (_gap(b.bbox, o.bbox), abs(o.idx - b.idx)))
            a = anchors[id(near)]
        else:
            a = _anchor(b, ordered)
        anchored.append((a, b.idx, b))
    anchored.sort(key=lambda t: (t[0], t[1]))
    key = lambda b: (b.bbox[1], b.bbox[0], b.idx)  # noqa: E731
    out = sorted(top, key=key)
    ai = 0
    while ai < len(anchored) and anchored[ai][0] < 0:
        out.append(anchored[ai][2])
        ai += 1
    for i, o in enumerate(ordered):
        out.append(o)
        while ai < len(anchored) and anchored[ai][0] == i:
            out.append(anchored[ai][2])
            ai += 1
    out.extend(t[2] for t in anchored[ai:])
    out.extend(sorted(bottom, key=key))
    return out


# Caption handling ---------------------------------------------------------------------------

_PANEL = re.compile(r"^\(?(?:[a-z]{1,2}|[ivx]{1,5}|\d{1,2})\)\s*\S?.{0,60}$|^[a-z]\)?$", re.I)
_CAPTION_TEXT_START = re.compile(CAPTION_RE.pattern + r"\s*[.:|]", re.I)


def _label_only(text: str) -> bool:
    """'Fig. 1', 'Fig. 2-A', 'TABLE II' with no caption text after the label."""
    m = CAPTION_RE.match(text)
    if not m:
        return False
    rest = text[m.end():].strip()
    return bool(re.fullmatch(r"[-–.:]?\s*[A-Za-z]?\s*[.:]?", rest))


def _caption_number(text: str) -> tuple[str, str] | None:
    m = CAPTION_RE.match(text)
    if not m:
        return None
    return (caption_kind(text) or "figure", m.group("num").upper())


def _fix_captions(page: list[_B]) -> list[_B]:
    """Merge split caption labels, drop panel letters, type captions labelled `text`."""
    has_object = any(b.role in _OBJECT_ROLES for b in page)
    kinds = {b.role for b in page if b.role in _OBJECT_ROLES}
    # captions with text, by (kind, number): a bare "Fig. 2-A" next to them is a panel label
    full = {
        _caption_number(b.text)
        for b in page
        if b.label in _CAPTION_LABELS and caption_kind(b.text) and not _label_only(b.text)
    }
    out: list[_B] = []
    skip: set[int] = set()
    for i, b in enumerate(page):
        if id(b) in skip:
            continue
        if b.label == "text" and has_object and _CAPTION_TEXT_START.match(b.text):
            b.role = f"{caption_kind(b.text)}_caption"
        elif b.label in _CAPTION_LABELS or (b.label == "vision_footnote" and _label_only(b.text)):
            kind = caption_kind(b.text)
            if kind and _label_only(b.text):
                nxt = page[i + 1] if i + 1 < len(page) else None
                if (nxt is not None and nxt.label in _CAPTION_LABELS and not caption_kind(nxt.text)
                        and not _PANEL.match(nxt.text)):
                    b.text = f"{b.text.strip()} {nxt.text.strip()}"
                    b.role = f"{kind}_caption"
                    skip.add(id(nxt))
                elif _caption_number(b.text) in full:
                    b.role = "noise"  # a panel label of a figure captioned elsewhere on the page
                else:
                    b.role = f"{kind}_caption"
            elif kind:
                b.role = f"{kind}_caption"
            elif b.label == "vision_footnote":
                pass  # a note under a table or figure: stays a footnote
            elif _PANEL.match(b.text) or len(b.text) <= 3:
                b.role = "noise"  # "(a)", "(ii) Circuit for expanded CPCY": text inside a figure
            else:
                b.role = "table_caption" if kinds == {"table"} else "figure_caption"
        if (b.label == "vision_footnote" and b.role == "footnote" and b.bbox is not None
                and len(b.text) < 80 and ". " not in b.text):
            figs = [o for o in page if o.role == "figure" and o.bbox is not None]
            if figs and min(_gap(b.bbox, o.bbox) for o in figs) < 0.02 and not any(
                o.role == "table" and o.bbox is not None and _gap(b.bbox, o.bbox) < 0.02 for o in page
            ):
                b.role = "noise"  # a label inside a figure ("PDA/CNT yarn")
        out.append(b)
    return out


# Furniture that the layout model labelled `text` --------------------------------------------

def _furniture_keys(pages: list[list[_B]]) -> list[str]:
    keys: set[str] = set()
    for page in pages:
        for b in page:
            if b.role in ("page_header", "page_footer", "page_number") and b.text:
                for part in [b.text, *b.text.split("\n")]:
                    k = norm_key(part)
                    if len(k.replace("#", "").strip()) >= 3:
                        keys.add(k)
    return sorted(keys, key=len, reverse=True)


def _is_furniture_text(text: str, keys: list[str]) -> bool:
    k = f" {norm_key(text)} "
    if not k.strip():
        return False
    for fk in keys:
        if f" {fk} " in k:
            k = k.replace(f" {fk} ", " ")
            k = f" {' '.join(k.split())} "
        if not k.strip():
            return True
    return not re.sub(r"[#\s]", "", k)


# --- parse -------------------------------------------------------------------------------

def parse(paper_id: str, path: Path, data: bytes, warnings: list[str]) -> tuple[list[RawBlock], str | None]:
    obj = _load(paper_id, path, data, warnings)
    lines = _lines(paper_id, path, obj)
    pages: list[list[_B]] = []
    unknown: set[str] = set()
    with_list = 0
    for li, line in enumerate(lines):
        results = line.get("layoutParsingResults")
        if not isinstance(results, list):
            raise IngestError(
                paper_id, str(path),
                f"PaddleOCR-VL: `layoutParsingResults` of result line {li} is "
                f"{type(results).__name__}, expected a list of pages",
            )
        for k, res in enumerate(results):
            pno = len(pages) + 1
            if pno > MAX_PAGES:
                raise IngestError(paper_id, str(path), f"PaddleOCR-VL: more than {MAX_PAGES} pages")
            if not isinstance(res, dict):
                raise IngestError(
                    paper_id, str(path),
                    f"PaddleOCR-VL: page {pno} is {type(res).__name__}, expected an object with `prunedResult`",
                )
            pr = res.get("prunedResult", res)
            blocks_raw = pr.get("parsing_res_list") if isinstance(pr, dict) else None
            if not isinstance(blocks_raw, list):
                warnings.append(f"page {pno}: no prunedResult.parsing_res_list; page left empty")
                pages.append([])
                continue
            with_list += 1
            w, h = _page_size(pr, line, k)
            page: list[_B] = []
            for idx, blk in enumerate(blocks_raw):
                if not isinstance(blk, dict):
                    warnings.append(f"page {pno}: block {idx} is not an object; skipped")
                    continue
                label = blk.get("block_label", blk.get("label"))
                label = str(label).strip().lower() if label is not None else "text"
                content = blk.get("block_content", blk.get("content", ""))
                if content is None:
                    content = ""
                elif not isinstance(content, str):
                    content = str(content) if isinstance(content, (int, float)) else ""
                if label not in LABEL_ROLES:
                    unknown.add(label)
                role = LABEL_ROLES.get(label)
                order = blk.get("block_order")
                order = order if isinstance(order, int) and not isinstance(order, bool) else None
                bbox = _bbox(blk.get("block_bbox", blk.get("bbox")), w, h)
                b = _B(idx, label, content, bbox, order, role)
                if role == "table":
                    rows = html_table_rows(content) if "<" in content else [[content]] if content.strip() else []
                    b.cap, rows = split_table_caption(rows)
                    b.text = rows_text(rows)
                elif role == "figure" and "<" in content:
                    b.text = strip_tags(content)
                elif role in ("title", "heading"):
                    b.text = " ".join(content.split())  # wrapped lines
                page.append(b)
            pages.append(_reading_order(page))
    if not pages:
        raise IngestError(paper_id, str(path), "PaddleOCR-VL: no pages in layoutParsingResults")
    if not with_list:
        raise IngestError(paper_id, str(path), "PaddleOCR-VL: no page has prunedResult.parsing_res_list")
    if unknown:
        warnings.append(f"unknown PaddleOCR-VL block labels (role from text): {', '.join(sorted(unknown))}")

    keys = _furniture_keys(pages)
    raws: list[RawBlock] = []
    for pno, page in enumerate(pages, start=1):
        page = _fix_captions([b for b in page if b.text.strip() or b.role in _OBJECT_ROLES])
        for b in page:
            role, text, reason = b.role, b.text, None
            if role is None and keys and b.bbox is not None and len(text) <= 400 and (
                b.bbox[1] < 0.12 or b.bbox[3] > 0.88
            ) and _is_furniture_text(text, keys):
                role = "page_footer" if b.bbox[1] > 0.5 else "page_header"
                reason = "text of the running headers/footers"
            if role == "table" and b.cap and not any(
                o.role == "table_caption" and caption_label(o.text) == caption_label(b.cap) for o in page
            ):
                raws.append(RawBlock(page=pno, label="table_caption_row", text=b.cap, bbox=b.bbox,
                                     role="table_caption", reason="first row of its table"))
            raws.append(RawBlock(page=pno, label=b.label, text=text, bbox=b.bbox, role=role, reason=reason))
    cover = mark_cover_page(raws)
    title_at = settle_title(raws, skip_page=cover)
    title = raws[title_at].text if title_at is not None else None
    if title_at is not None:
        mark_front_matter(raws, title_at, stop_labels=frozenset({"abstract", "paragraph_title"}))
    mark_abstract(raws)
    assign_unnumbered_levels(raws)
    return raws, title
