"""Shared post-processing for every input adapter.

An adapter produces `RawBlock`s in reading order (page, label, text, bbox and, where the
format knows it, a role and a heading level). `finalize` turns them into canonical
`Block`s: ids `p{page}:{n}`, furniture detection (repeated per-page text), heading levels
from numbering, reference and back-matter sections, captions paired with their objects.
"""
from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from sheaf.core.models import READER_ROLES, Block, IngestError
from sheaf.core.parsed import NO_PAGE

MAX_PAGES = 5000
MAX_TEXT_CHARS = 2_000_000  # per block; longer text is cut with a warning
MAX_HEADING_LEVEL = 32  # deeper (or absurd) levels from an input are ignored with a warning
BBOX_SLACK = 0.02  # a box may overshoot the page by this much (rounding) before it is warned about


@dataclass(slots=True)
class RawBlock:
    """What an adapter knows about one block before finalization."""

    page: int  # 1-based
    label: str  # the format's own label
    text: str
    bbox: tuple[float, float, float, float] | None = None  # 0-1 of the page
    role: str | None = None  # None: decided by finalize from the text
    heading_level: int | None = None
    attach_to: int | None = None  # captions: index in the adapter's list of their figure/table
    reason: str | None = None  # the evidence for `role` when it is not the format's label alone
    source: str | None = None  # where the text came from when not the format itself ("ocr": read from a page image)


# --- reading files --------------------------------------------------------------------

def read_bytes(paper_id: str, path: Path) -> bytes:
    """Read a file or raise a named IngestError (missing, unreadable, empty)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise IngestError(paper_id, str(path), "file not found") from None
    except IsADirectoryError:
        raise IngestError(paper_id, str(path), "is a directory, expected a file") from None
    except OSError as e:
        raise IngestError(paper_id, str(path), f"cannot read file: {e.strerror or e}") from None
    if not data.strip():
        raise IngestError(paper_id, str(path), "file is empty")
    return data


def file_head(path: Path, size: int = 4096) -> bytes:
    """The first `size` bytes of a file, or b"" when it cannot be read (format sniffing)."""
    try:
        with path.open("rb") as f:
            return f.read(size)
    except OSError:
        return b""


def decode_text(paper_id: str, path: Path, data: bytes, warnings: list[str]) -> str:
    """Decode UTF-8 (with or without BOM); invalid bytes are replaced and warned about."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        warnings.append(
            f"{path.name}: invalid UTF-8 at byte {e.start}; undecodable bytes replaced with U+FFFD"
        )
        return data.decode("utf-8-sig", errors="replace")


def load_json(paper_id: str, path: Path, data: bytes, warnings: list[str]):
    """Parse JSON or raise IngestError naming the position of the problem."""
    import json

    text = decode_text(paper_id, path, data, warnings)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise IngestError(
            paper_id, str(path), f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except RecursionError:
        raise IngestError(paper_id, str(path), "malformed JSON: nesting too deep") from None


def content_hash(data: bytes, adapter: str) -> str:
    """ocr_result_hash: sha256 over the raw output bytes plus the adapter's name/version."""
    h = hashlib.sha256()
    h.update(adapter.encode())
    h.update(b"\0")
    h.update(data)
    return h.hexdigest()


# --- text helpers ---------------------------------------------------------------------

_WS = re.compile(r"[ \t\u00a0\u2000-\u200b\u3000]+")
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clean_text(text: str) -> str:
    """NFC, control characters removed, runs of spaces folded, blank lines trimmed."""
    text = unicodedata.normalize("NFC", _CTRL.sub("", text.replace("\r\n", "\n").replace("\r", "\n")))
    lines = [_WS.sub(" ", ln).strip() for ln in text.split("\n")]
    out: list[str] = []
    for ln in lines:
        if ln or (out and out[-1]):
            out.append(ln)
    return "\n".join(out).strip()


def norm_key(text: str) -> str:
    """A comparison key for repeated text: lower case, digits folded, punctuation dropped."""
    t = unicodedata.normalize("NFKC", text).lower()
    t = re.sub(r"\d+", "#", t)
    return re.sub(r"[^\w#]+", " ", t).strip()


_ROMAN = r"(?:X{0,3})(?:IX|IV|V?I{0,3})"
_NUM_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^(?:appendix\s+)?([A-Z])((?:\.\d+)+)\.?\s+\S", re.I), "alpha"),  # A.1 / A.1.2
    (re.compile(r"^(\d+(?:\.\d+)*)\.?\s+\S"), "arabic"),  # 4 / 4.4 / 4.4.1
    (re.compile(rf"^({_ROMAN})\.\s+\S"), "roman"),  # IV. Results
    (re.compile(rf"^({_ROMAN})\s+[A-Z]"), "roman"),  # IV RESULTS
    (re.compile(r"^appendix\s+([A-Z])\b", re.I), "appendix"),
    (re.compile(r"^([A-Z])\.?\s+[A-Z][a-z]"), "letter"),  # A Response Time Analysis
]


def numbering_depth(title: str, allow_letter: bool = False) -> int | None:
    """Heading depth from its numbering: '4'→1, '4.4'→2, '4.4.1'→3, 'IV.'→1, 'A.1'→2.

    A bare letter ('A Response Time Analysis') counts only with `allow_letter` (after the
    references, where appendices live), since 'A Case Study' is no section number.
    """
    t = title.strip()
    for pat, kind in _NUM_PATTERNS:
        m = pat.match(t)
        if not m or (kind == "letter" and not allow_letter):
            continue
        if kind == "alpha":
            return 1 + m.group(2).count(".")
        if kind == "arabic":
            parts = m.group(1).split(".")
            if len(parts) == 1 and int(parts[0]) > 50:  # "2024 was..." is not a section number
                return None
            return len(parts)
        if kind == "roman":
            return 1 if m.group(1) else None
        return 1
    return None


_REF_HEAD = re.compile(r"^(?:\d+\.?\s*)?(references?|bibliography|literature cited|works cited|references and notes)\s*:?$", re.I)
_ABSTRACT_HEAD = re.compile(r"^(abstract|summary)\s*[:.]?$", re.I)
_BACK_HEAD = re.compile(
    r"^(?:\d+\.?\s*)?(acknowledge?ments?|funding(?: information| sources?)?|conflicts? of interest|"
    r"competing interests?|declaration of competing interest|author contributions?|"
    r"credit authorship contribution statement|data availability(?: statement)?|"
    r"availability of data and materials|ethic(?:s|al)(?: statement| approval.*| considerations?)?|"
    r"consent for publication|abbreviations|supplementary (?:material|information|data)|"
    r"supporting information|limitations|disclosure(?: statement)?|contributors|data sharing(?: statement)?|"
    r"role of the funding source|"
    r"declarations?|notes|author information|orcid)\b.*$",
    re.I,
)


def heading_role(title: str) -> str:
    """The role a heading's own text implies: abstract, reference or back-matter heading."""
    t = title.strip().rstrip(".")
    if _REF_HEAD.match(t):
        return "reference_heading"
    if _ABSTRACT_HEAD.match(t):
        return "abstract_heading"
    if len(t) < 80 and _BACK_HEAD.match(t):
        return "backmatter_heading"
    return "heading"


CAPTION_RE = re.compile(
    r"^\s*(?P<kind>fig(?:ure)?s?\.?|table|tab\.|scheme|chart|plate|supplementary (?:figure|table))"
    r"\s*(?P<num>S?\d+[A-Za-z]?|[IVX]+)\b",
    re.I,
)


def caption_kind(text: str) -> str | None:
    """'figure' or 'table' when `text` starts like a caption ("Fig. 3", "Table 2")."""
    m = CAPTION_RE.match(text)
    if not m:
        return None
    return "table" if m.group("kind").lower().startswith(("tab", "supplementary t")) else "figure"


def caption_label(text: str) -> str | None:
    """Normalized label of a caption: 'Figure 3', 'Table S1'."""
    m = CAPTION_RE.match(text)
    if not m:
        return None
    kind = "Table" if caption_kind(text) == "table" else "Figure"
    return f"{kind} {m.group('num')}"


# --- finalize -------------------------------------------------------------------------

def _in_margin(r: RawBlock) -> bool:
    return r.bbox is not None and (r.bbox[1] < 0.12 or r.bbox[3] > 0.88)


def _mark_repeated_furniture(raws: list[RawBlock]) -> None:
    """Text repeated on several pages near the top or bottom is a running header/footer.

    A line the layout model called a heading is furniture too when the same words stand on
    three or more pages and mostly in the page margin or as a labelled header/footer ("Journal
    Pre-proof" on every few pages): repetition across pages wins over the label.
    """
    pages = {r.page for r in raws}
    if len(pages) < 3:
        return
    seen: dict[str, set[int]] = defaultdict(set)
    for r in raws:
        if r.role is None and r.text and len(r.text) < 200:
            seen[norm_key(r.text)].add(r.page)
    threshold = max(3, len(pages) // 3)
    repeated = {k: len(ps) for k, ps in seen.items() if len(ps) >= threshold and k}
    for r in raws:
        if r.role is None and norm_key(r.text) in repeated:
            y = r.bbox[1] if r.bbox else None
            r.role = "page_footer" if (y is not None and y > 0.5) else "page_header"
            r.reason = f"repeated on {repeated[norm_key(r.text)]} pages"
    _mark_repeated_headings(raws)


def _mark_repeated_headings(raws: list[RawBlock]) -> None:
    furniture = ("page_header", "page_footer", "page_number")
    where: dict[str, list[RawBlock]] = defaultdict(list)
    for r in raws:
        if r.text and len(r.text) < 120 and (r.role in furniture or r.role == "heading" or r.role is None):
            where[" ".join(r.text.lower().split())].append(r)
    for occ in where.values():
        heads = [r for r in occ if r.role == "heading"]
        n_pages = len({r.page for r in occ})
        if not heads or n_pages < 3:
            continue
        edge = sum(1 for r in occ if r.role in furniture or _in_margin(r))
        if 2 * edge < len(occ):
            continue  # a heading that recurs mid-page ("Participants" in each study) stays
        for r in occ:
            if r.role in ("heading", None):
                y = r.bbox[1] if r.bbox else None
                r.role = "page_footer" if (y is not None and y > 0.5) else "page_header"
                r.reason = f"repeated on {n_pages} pages"


# --- the edges of a paper: cover pages, front-matter notes, figure text, biographies ----

_COVER_CUES: list[tuple[str, re.Pattern[str]]] = [
    ("pre-proof", re.compile(r"\b(journal pre-?proof|accepted manuscript|uncorrected proof|in press|"
                             r"version of record|published in its final form)\b", re.I)),
    ("to appear", re.compile(r"\bto appear in\b", re.I)),
    ("cite as", re.compile(r"\bplease cite this article\b", re.I)),
    ("doi", re.compile(r"\b(doi\s*:|doi\.org/|pii\s*:)", re.I)),
    ("dates", re.compile(r"\b(received|revised|accepted)(\s+date)?\s*:", re.I)),
    ("reference", re.compile(r"^\s*reference\s*:", re.I | re.M)),
]
_TEXT_ROLES = (None, "body", "heading", "list", "title", "authors", "affiliation", "footnote")


def _cover_cues(text: str) -> set[str]:
    return {name for name, pat in _COVER_CUES if pat.search(text)}


def mark_cover_page(raws: list[RawBlock]) -> int | None:
    """An accepted manuscript's cover page (page 1 holding only "Journal Pre-proof", the DOI,
    "To appear in", "Please cite this article as", the dates) is front matter: its text
    blocks become `affiliation` (metadata, out of the body units). Returns its page or None.

    Evidence: three kinds of cover cue on the first page, a later page, no abstract or section
    heading on it, and no paragraph of its own (every long block holds a cue).
    """
    pages = sorted({r.page for r in raws})
    if len(pages) < 2:
        return None
    first = [r for r in raws if r.page == pages[0]]
    text_blocks = [r for r in first if r.role in _TEXT_ROLES and r.text]
    cues = set().union(*(_cover_cues(r.text) for r in first if r.text)) if first else set()
    if len(cues) < 3 or ("pre-proof" not in cues and "cite as" not in cues):
        return None
    if any(r.role in ("abstract", "abstract_heading") for r in first):
        return None
    if any(r.role == "heading" and heading_role(r.text) == "heading" and numbering_depth(r.text) for r in first):
        return None
    if any(len(r.text) > 400 and not _cover_cues(r.text) for r in text_blocks):
        return None
    for r in text_blocks:
        if r.role != "title" or any(o.role == "title" for o in raws if o.page != pages[0]):
            r.role, r.reason = "affiliation", "cover page"
    return pages[0]


_DATES = re.compile(
    r"^\s*[*\u2020]?\s*(?:received|accepted|revised|published(?: online)?|available online|"
    r"first published(?: online)?|online publication date|date of (?:publication|receipt|acceptance))"
    r"(?:\s+date)?\s*:?\s*(?:on\s+)?"
    r"(?:\d{1,2}(?:st|nd|rd|th)?\s+)?"  # "1 May 2020", "July 14, 2014", "2020-05-01", "01/05/2020"
    r"(?:(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d|\d{4}[./-]\d|\d{1,2}[./-]\d{1,2}[./-]\d)",
    re.I,
)
_KEYWORDS_LINE = re.compile(r"^\s*(key\s*-?words?|index terms)\s*[:\u2014\u2013.\-]", re.I)
_NOTE_HEAD = re.compile(r"^\s*(key\s*-?words?|index terms|highlights|research highlights|article info)\s*:?\s*$", re.I)
_EQUAL = re.compile(r"\b(contributed equally|equal(?:ly)? contribut\w+|co-first authors?|joint first authors?)\b", re.I)
_CORRESP = re.compile(
    r"^\s*[*\u2020\u2709]?\s*(?:address(?:es)?\s+(?:for\s+)?correspondence|correspond\w*(?:\s+authors?)?\s*[:(]|"
    r"corresponding authors?\b|e-?mail(?:\s+address(?:es)?)?\s*:|\*\s*e-?mail\b)",
    re.I,
)
_STRONG_AFFIL = re.compile(
    r"(\buniversit\w*|\binstitut\w*|\bdepartment\b|\bdept\b\.?|\bcollege\b|\bschool of\b|\bfaculty\b|"
    r"\bhospital\b|\blaborator\w*|\bcent(?:er|re)\b|\bclinic\b|@|\be-?mail\b)",
    re.I,
)
_AFFIL_STEMS = ("univers", "institut", "depart", "dept", "college", "school", "faculty", "hospital",
                "laborat", "center", "centre", "clinic", "@", "mail")
_FUNCTION_WORDS = frozenset({"of", "and", "for", "the", "in", "at", "de", "du", "la", "und", "to", "on", "&"})


_CITATION_LIKE = re.compile(r"\(\d{4}[a-z]?\)|\b(?:19|20)\d{2}[a-z]?\s*[.,;)]|[“”\"]|\bet al\b|\bpp?\.\s*\d|\bvol\.", re.I)


def _is_address_block(text: str) -> bool:
    """An affiliation/address block: an institution with a place (or an e-mail), short, mostly
    capitalised words, no run of lower-case prose, nothing that reads like a citation."""
    if len(text) > 3000 or (len(text) > 800 and max(map(len, text.split("\n"))) > 100):
        return False  # longer than an address, unless printed line by line
    low = text.lower()
    if not any(k in low for k in _AFFIL_STEMS):  # cheap test before the regular expressions
        return False
    if not _STRONG_AFFIL.search(text) or _CITATION_LIKE.search(text) or text.rstrip().endswith("?"):
        return False
    signals = len(_STRONG_AFFIL.findall(text))
    if not ("@" in text or signals >= 2 or (signals and (text.count(",") >= 2 or text.count("\n") >= 2))):
        return False
    words = re.findall(r"[^\W\d_][\w'’\-]*", re.sub(r"\S+@\S+|https?://\S+|www\.\S+", " ", text))
    content = [w for w in words if w.lower() not in _FUNCTION_WORDS]
    if len(content) < 2:
        return False
    run = longest = 0
    for w in words:
        run = run + 1 if (w[0].islower() and w.lower() not in _FUNCTION_WORDS) else 0
        longest = max(longest, run)
    if longest >= 3:
        return False
    caps = sum(1 for w in content if w[0].isupper())
    return caps / len(content) >= 0.7


def _is_name_line(text: str) -> bool:
    """One or a few person names ("Keisuke Matsuki, MD"), nothing else."""

    if len(text) >= 160 or "\n" in text.strip():
        return False
    parts, _ = name_parts(text)
    return 1 <= len(parts) <= 4 and all(is_name(p) and len(p.split()) >= 2 for p in parts)


def _front_note(r: RawBlock) -> str | None:
    """Why a body-like block is a front-matter note (dates, keywords, ...), or None."""
    t = r.text
    if len(t) < 400 and _DATES.match(t):
        return "publication dates"
    if len(t) < 1000 and _KEYWORDS_LINE.match(t):
        return "keywords"
    if len(t) < 150 and _EQUAL.search(t):
        return "author note"
    if len(t) < 800 and _CORRESP.match(t):
        return "correspondence"
    if r.role != "list" and _is_address_block(t):
        return "affiliation or address"
    return None


def mark_front_notes(raws: list[RawBlock]) -> None:
    """Front-matter notes wherever the layout put them: received/accepted dates, keyword and
    highlight lists (and their "Keywords"/"Highlights" headings), "These authors contributed
    equally", correspondence lines and address blocks (with the name lines beside them).
    They become `affiliation` (metadata): out of the body units, not references."""
    candidates = (None, "body", "footnote", "list")
    for i, r in enumerate(raws):
        if not r.text:
            continue
        if r.role == "heading" and _NOTE_HEAD.match(r.text):
            what = r.text.strip().rstrip(":").lower()
            r.role, r.reason = "affiliation", f"{what} heading"
            for nxt in raws[i + 1: i + 9]:
                if nxt.role not in candidates or not nxt.text:
                    if nxt.role in ("heading", "reference_heading", "abstract_heading", "backmatter_heading"):
                        break
                    continue
                if len(nxt.text) > 400 or nxt.page > r.page + 1:
                    break  # a paragraph: the list is over
                nxt.role, nxt.reason = "affiliation", f"{what} list"
                if "keyword" in what or "index" in what:
                    break  # one list of keywords
            continue
        if r.role in candidates:
            why = _front_note(r)
            if why:
                r.role, r.reason = "affiliation", why
    for i, r in enumerate(raws):  # names printed beside an address block belong to it
        if r.reason != "affiliation or address" and r.reason != "correspondence":
            continue
        for step in (-1, 1):
            j = i + step
            while 0 <= j < len(raws) and raws[j].page == r.page and raws[j].role in candidates \
                    and raws[j].text and _is_name_line(raws[j].text):
                raws[j].role, raws[j].reason = "affiliation", "names beside an address block"
                j += step


_BIO_START = re.compile(
    r"^(?:(?:dr|prof|professor|mr|ms|mrs)\.?\s+)?"
    r"(?:[A-Z][\w'’\-]*\.?\s+){1,3}[A-Z][\w'’\-]+(?:,\s*[A-Z][A-Za-z.]{1,6}(?:,?\s*[A-Z][A-Za-z.]{1,6}){0,2},?)?\s+"
    r"(?:received|is|was|has|holds|joined|obtained|earned|graduated|completed|serves|served|works|worked|"
    r"studied|currently|began|leads|directs)\b"
)


def is_biography(text: str) -> bool:
    """A person's name, then prose about them ("Jane Doe received her Ph.D. ... She is ...")."""
    t = text.strip()
    return len(t) > 120 and bool(_BIO_START.match(t)) and t.count(". ") >= 1


def mark_biographies(raws: list[RawBlock]) -> None:
    """Biographies after the references (the OCR calls them references) are back matter."""
    seen_ref = False
    for r in raws:
        if r.role == "reference" and not is_biography(r.text):
            seen_ref = True
            continue
        if seen_ref and r.role == "reference" and is_biography(r.text):
            r.role, r.reason = "backmatter_body", "biography after the references"


def _overlap_share(inner: tuple[float, float, float, float], outer: tuple[float, float, float, float]) -> float:
    """The share of `inner`'s area that lies inside `outer`."""
    w = min(inner[2], outer[2]) - max(inner[0], outer[0])
    h = min(inner[3], outer[3]) - max(inner[1], outer[1])
    area = max(1e-9, (inner[2] - inner[0]) * (inner[3] - inner[1]))
    return max(0.0, w) * max(0.0, h) / area


def _area(box) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def _box_gap(a, b) -> float:
    return max(0.0, a[0] - b[2], b[0] - a[2]) + max(0.0, a[1] - b[3], b[1] - a[3])


FIGURE_SLACK = 0.01  # a figure's area is its box grown by this much (rounding of the boxes)
SIDE_CAPTION_SLACK = 0.02  # ... or by this much once joined with a caption printed beside it


def _inside(inner, outer, share: float = 0.8) -> bool:
    return _overlap_share(inner, outer) >= share


def figure_areas(page_blocks: list[RawBlock]) -> list[tuple[RawBlock, tuple[float, float, float, float]]]:
    """Each figure's area on one page: its box, joined with a caption that sits beside it
    (side by side, overlapping it vertically: the labels of a diagram may stand above the
    image box, within the caption's height), grown by a little slack.

    A figure box that holds a caption (with a box of its own) is no tight figure box (a PDF's
    drawing spanning the page, captions and paragraphs included): it gets no area."""
    out = []
    caps = [c for c in page_blocks if c.role in ("figure_caption", "table_caption") and c.bbox is not None]
    for f in page_blocks:
        if f.role != "figure" or f.bbox is None:
            continue
        if any(_inside(c.bbox, f.bbox) and c.bbox != f.bbox for c in caps):
            continue  # (a caption given its object's box by the adapter says nothing)
        box, s = f.bbox, FIGURE_SLACK
        for c in caps:
            cb = c.bbox
            v_overlap = min(cb[3], box[3]) - max(cb[1], box[1])
            beside = v_overlap > 0.5 * (cb[3] - cb[1]) and (cb[2] <= box[0] + 0.01 or cb[0] >= box[2] - 0.01)
            if c.role == "figure_caption" and beside and _box_gap(cb, box) < 0.05:
                box = (min(box[0], cb[0]), min(box[1], cb[1]), max(box[2], cb[2]), max(box[3], cb[3]))
                s = SIDE_CAPTION_SLACK
        out.append((f, (box[0] - s, box[1] - s, box[2] + s, box[3] + s)))
    return out


def mark_figure_text(raws: list[RawBlock]) -> None:
    """Text inside a figure's area (diagram labels the layout called headings or text) belongs
    to the figure: it becomes `noise` (out of the tree and the units) and, when the figure has
    no text of its own, the figure's text, so that its object unit keeps it."""
    by_page: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(raws):
        by_page[r.page].append(i)
    ids = _block_ids(raws)
    index = {id(r): i for i, r in enumerate(raws)}
    for page, idxs in by_page.items():
        blocks = [raws[i] for i in idxs]
        areas = figure_areas(blocks)
        if not areas:
            continue
        inside: dict[int, list[RawBlock]] = defaultdict(list)
        for r in blocks:
            if r.role not in (None, "body", "heading", "list") or r.bbox is None or not r.text:
                continue
            hit = next((f for f, area in areas if _inside(r.bbox, area) and _area(r.bbox) < 0.8 * _area(f.bbox)
                        and (len(r.text) <= 400 or r.bbox[2] - r.bbox[0] <= 0.5 * (area[2] - area[0]))), None)
            if hit is not None:
                fi = index[id(hit)]
                r.role, r.reason = "noise", f"inside figure {ids[fi]}"
                inside[fi].append(r)
        for fi, texts in inside.items():
            if not raws[fi].text.strip():
                raws[fi].text = "\n".join(t.text for t in texts)


def _block_ids(raws: list[RawBlock]) -> list[str]:
    per_page: Counter[int] = Counter()
    ids: list[str] = []
    for r in raws:
        ids.append(f"p{r.page}:{per_page[r.page]}")
        per_page[r.page] += 1
    return ids


_PAGE_NUM = re.compile(r"^(?:page\s*)?\d{1,4}(?:\s*(?:of|/)\s*\d{1,4})?$", re.I)


def _default_role(r: RawBlock) -> str:
    t = r.text.strip()
    if not t:
        return "noise"
    if _PAGE_NUM.match(t) and len(t) <= 12:
        return "page_number"
    return "body"


def finalize(
    paper_id: str, source_format: str, raws: list[RawBlock], warnings: list[str]
) -> list[Block]:
    """Canonical blocks from an adapter's raw blocks, in reading order."""
    bad_boxes = 0
    for r in raws:
        if len(r.text) > MAX_TEXT_CHARS:
            warnings.append(f"page {r.page}: a block of {len(r.text)} characters was cut")
            r.text = r.text[:MAX_TEXT_CHARS]
        r.text = clean_text(r.text)
        if r.page == NO_PAGE and source_format == "zotero" and (r.role in READER_ROLES or r.role == "heading"):
            pass  # a Zotero note or an annotation without a page (and their heading): no page
        elif r.page < 1 or r.page > MAX_PAGES:
            raise IngestError(paper_id, None, f"page number {r.page} out of range 1..{MAX_PAGES}")
        if r.bbox is not None:
            try:
                raw_box = [float(v) for v in r.bbox]
                if len(raw_box) != 4 or not all(math.isfinite(v) for v in raw_box):
                    raise ValueError("not four finite numbers")
                if (any(v < -BBOX_SLACK or v > 1 + BBOX_SLACK for v in raw_box)
                        or raw_box[0] > raw_box[2] + BBOX_SLACK or raw_box[1] > raw_box[3] + BBOX_SLACK):
                    bad_boxes += 1  # outside the page or inverted: clamped and ordered below
                x0, y0, x1, y1 = (min(1.0, max(0.0, v)) for v in raw_box)
                x0, x1 = min(x0, x1), max(x0, x1)
                y0, y1 = min(y0, y1), max(y0, y1)
                r.bbox = (round(x0, 4), round(y0, 4), round(x1, 4), round(y1, 4))
            except (TypeError, ValueError, OverflowError):
                r.bbox = None
                bad_boxes += 1
        if r.heading_level is not None and not (
                isinstance(r.heading_level, int) and 1 <= r.heading_level <= MAX_HEADING_LEVEL):
            warnings.append(f"page {r.page}: heading level {r.heading_level!r} out of range "
                            f"1..{MAX_HEADING_LEVEL}; ignored")
            r.heading_level = None
    if bad_boxes:
        warnings.append(f"{bad_boxes} bounding box(es) outside the page, inverted or not numbers: "
                        "clamped to the page or dropped")
    _mark_repeated_furniture(raws)
    mark_cover_page(raws)
    mark_figure_text(raws)
    mark_front_notes(raws)
    after_refs = False
    for r in raws:
        if r.role is None:
            r.role = _default_role(r)
        if r.role == "heading":
            r.role = heading_role(r.text)
        if r.role in ("heading", "reference_heading", "backmatter_heading", "abstract_heading"):
            if not r.text:
                r.role = "noise"
                continue
            depth = numbering_depth(r.text, allow_letter=after_refs)
            after_refs = after_refs or r.role == "reference_heading"
            if depth is not None:
                r.heading_level = min(depth, MAX_HEADING_LEVEL)
            elif r.heading_level is None:
                r.heading_level = 1
        if r.role in ("figure_caption", "table_caption", "body") and r.text:
            kind = caption_kind(r.text)
            if r.role != "body" and kind:
                r.role = f"{kind}_caption"
    _assign_section_roles(raws)
    mark_biographies(raws)
    blocks = _with_ids(paper_id, source_format, raws)
    return _pair_captions(blocks)


def _assign_section_roles(raws: list[RawBlock]) -> None:
    """Body text under a references heading is a reference; under back matter, backmatter_body."""
    mode = None
    mode_level = 99
    for r in raws:
        if r.role in ("heading", "reference_heading", "backmatter_heading", "abstract_heading"):
            lvl = r.heading_level or 1
            if r.role == "reference_heading":
                mode, mode_level = "reference", lvl
            elif r.role == "backmatter_heading":
                mode, mode_level = "backmatter_body", lvl
            elif mode is not None and lvl <= mode_level:
                mode, mode_level = None, 99
            continue
        if mode and r.role == "body":
            r.role = mode
        elif mode == "reference" and r.role == "list":
            r.role = "reference"


def _with_ids(paper_id: str, source_format: str, raws: list[RawBlock]) -> list[Block]:
    out: list[Block] = []
    ids = _block_ids(raws)
    for order, r in enumerate(raws):
        target = r.attach_to
        attached = (
            ids[target]
            if target is not None and 0 <= target < len(raws) and target != order
            and r.role in ("figure_caption", "table_caption") and raws[target].role in ("figure", "table")
            else None
        )
        out.append(
            Block(
                paper_id=paper_id,
                block_id=ids[order],
                page=r.page,
                order=order,
                bbox=r.bbox,
                role=r.role or "body",
                text=r.text,
                raw_label=r.label,
                heading_level=r.heading_level if r.role in (
                    "heading", "reference_heading", "backmatter_heading", "abstract_heading") else None,
                source_format=r.source or source_format,
                attached_to=attached,
                role_reason=r.reason,
            )
        )
    return out


def _pair_captions(blocks: list[Block]) -> list[Block]:
    """Attach each caption to the nearest unpaired figure/table of its kind on its page."""
    by_page: dict[int, list[int]] = defaultdict(list)
    for i, b in enumerate(blocks):
        if b.role in ("figure", "table"):
            by_page[b.page].append(i)
    index = {b.block_id: i for i, b in enumerate(blocks)}
    used: set[int] = {index[b.attached_to] for b in blocks if b.attached_to in index}  # adapter-paired
    out = list(blocks)
    for i, b in enumerate(blocks):
        if b.role not in ("figure_caption", "table_caption") or b.attached_to:
            continue
        want = b.role.removesuffix("_caption")
        cands = [j for j in by_page.get(b.page, []) if j not in used and blocks[j].role == want]
        if not cands:
            cands = [j for j in by_page.get(b.page, []) if j not in used]
        if not cands:
            continue
        j = min(cands, key=lambda j: (abs(j - i), j))
        used.add(j)
        out[i] = replace(b, attached_to=blocks[j].block_id)
    return out


SUP = re.compile(r"<sup>(.*?)</sup>", re.I | re.S)


MATH_MARK = re.compile(r"\$\s*[\^_]?\s*\{[^$]{0,40}\}\s*\$|\$\s*\^\{?[^$]{0,20}\}?\s*\$|\$\s*\{\}\^\{[^$]{0,20}\}\s*\$")


SYMBOLS = re.compile(r"[*†‡§¶∗#✉⋆★♯♡♠♣♢♦♥\\\u00b9\u00b2\u00b3\u2070-\u209f]")


_DEGREES = {
    "md", "phd", "bs", "ba", "ms", "msc", "ma", "mph", "dds", "dmd", "rn", "mba", "dr", "prof",
    "jr", "sr", "ii", "iii", "iv", "bsc", "meng", "beng", "do", "facs", "frcs", "frcsc", "mbbs",
    "pharmd", "dvm", "pe", "mpt", "pt", "otr", "atc",
}


_PARTICLES = {"van", "von", "der", "den", "de", "del", "della", "di", "da", "du", "le", "la", "dos", "das", "y", "bin", "al", "ter"}


_NAME_WORD = re.compile(r"^(?:[A-Z]\.?(?:-[A-Z]\.?)*|[^\W\d_][\w'’.\-]*)$")


def name_parts(text: str) -> tuple[list[str], bool]:
    """The comma/'and'/marker-separated parts of a name line, and whether it had markers.

    Affiliation markers ("Smith<sup>1</sup>", "Smith $ ^{1,2} $", "Smith†", "Smith1") both
    go and separate names: "Lukas Edman<sup>1,3</sup> Helmut Schmid<sup>1</sup>".
    """
    t = SUP.sub(" , ", text)
    t = MATH_MARK.sub(" , ", t)
    t = SYMBOLS.sub(" , ", t)
    t = re.sub(r"(?<=[^\W\d_])\d+(?:[,\-–]\d+)*\b", " , ", t)  # "Smith1,2"
    marked = t != text
    t = re.sub(r"^\s*by\s+", "", t.strip(), flags=re.I)
    parts = [p.strip(" .,:;") for p in re.split(r"\s*(?:,|;|\band\b|&|\n)\s*", t)]
    parts = [" ".join(p.split()) for p in parts if p.strip(" .,:;")]
    parts = [p for p in parts if p.lower().replace(".", "").replace(" ", "") not in _DEGREES]
    return parts, marked


def is_name(p: str) -> bool:
    words = p.split()
    if not 1 <= len(words) <= 5:
        return False
    return all(w.lower() in _PARTICLES or (_NAME_WORD.match(w) and w[0].isupper()) for w in words)
