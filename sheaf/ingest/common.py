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

from sheaf.core.models import Block, IngestError

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

def _mark_repeated_furniture(raws: list[RawBlock]) -> None:
    """Text repeated on several pages near the top or bottom is a running header/footer."""
    pages = {r.page for r in raws}
    if len(pages) < 3:
        return
    seen: dict[str, set[int]] = defaultdict(set)
    for r in raws:
        if r.role is None and r.text and len(r.text) < 200:
            seen[norm_key(r.text)].add(r.page)
    threshold = max(3, len(pages) // 3)
    repeated = {k for k, ps in seen.items() if len(ps) >= threshold and k}
    for r in raws:
        if r.role is None and norm_key(r.text) in repeated:
            y = r.bbox[1] if r.bbox else None
            r.role = "page_footer" if (y is not None and y > 0.5) else "page_header"


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
        if r.page < 1 or r.page > MAX_PAGES:
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
    per_page: Counter[int] = Counter()
    out: list[Block] = []
    ids: list[str] = []
    for r in raws:
        ids.append(f"p{r.page}:{per_page[r.page]}")
        per_page[r.page] += 1
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
                source_format=source_format,
                attached_to=attached,
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
