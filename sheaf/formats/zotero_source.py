"""A Zotero paper as a source: its manifest, and its blocks read from what the manifest names.

A paper's manifest (`<KEY>.zotero.json`, written by `sheaf.library.zotero_mirror`) lists what its
text is made of: each attachment's chosen input (an OCR/layout output kept in the attachment's
folder, else the PDF itself) with its size and SHA-256, Zotero's own extracted text
(`.zotero-ft-cache`) as the fallback, the annotations and the child notes. Its bytes are the
paper's source, so its hash (the `ocr_result_hash`) moves exactly when any of those change.

Reading it (this module is the `zotero` input format): each attachment is parsed by its own
format's adapter; one that cannot be read (missing, scanned, damaged, a garbled text layer)
falls back to Zotero's extracted text, marked in the blocks' reasons and the paper's warnings.
With several attachments, each opens a section named after it, so every unit says which
attachment it came from. Annotations and notes follow under "Zotero annotations" and "Zotero
notes", as blocks of their own roles (`annotation`, `note`): an annotation on the page Zotero
gives it, a note (and an annotation without one) on no page (`NO_PAGE`).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from sheaf.core.models import IngestError
from sheaf.core.parsed import NO_PAGE, Block
from sheaf.formats import parse_paper
from sheaf.formats import pdf as pdf_adapter
from sheaf.formats.common import RawBlock, finalize
from sheaf.formats.pdf.ocr import PageOcr

VERSION = "2"  # 2: notes, and annotations Zotero gave no page, have no page (were page 1)
SUFFIX = ".zotero.json"
MANIFEST_FORMAT = "sheaf-zotero-source"
FT_CACHE = ".zotero-ft-cache"
ANNOTATIONS_HEADING = "Zotero annotations"
NOTES_HEADING = "Zotero notes"
#: Headings of a paper with several attachments sit one level below the attachment's own.
_MAX_LEVEL = 32


def matches(path: Path) -> bool:
    return path.name.endswith(SUFFIX)


def parse(paper_id: str, path: Path, data: bytes, warnings: list[str]) -> tuple[list[RawBlock], str | None]:
    raise IngestError(paper_id, str(path), "a Zotero manifest is read by parse_blocks")  # never used


def load_manifest(paper_id: str, path: Path, data: bytes) -> dict[str, Any]:
    try:
        m = json.loads(data)
    except ValueError as e:
        raise IngestError(paper_id, str(path), f"damaged Zotero manifest ({e}): run sheaf build again") from None
    if not isinstance(m, dict) or m.get("format") != MANIFEST_FORMAT:
        raise IngestError(paper_id, str(path), "not a Sheaf Zotero manifest")
    return m


def parse_blocks(paper_id: str, path: Path, data: bytes, warnings: list[str], ocr: PageOcr | None = None):
    """(the paper's canonical blocks, its title or None) from its manifest; `ocr` reads the pages
    of its PDFs that have no usable text layer."""
    m = load_manifest(paper_id, path, data)
    groups: list[tuple[str | None, list]] = []  # (section heading or None, finalized blocks)
    title = None
    failures: list[str] = []
    sources = m.get("sources", [])
    for src in sources:
        name = src.get("title") or src.get("attachment")
        blocks, problem = None, None
        if src.get("path"):
            try:
                parsed = parse_paper(Path(src["path"]), paper_id, src.get("format", "auto"), ocr=ocr)
                # a text layer beyond use (garbled glyphs) parses, but Zotero's extracted text is better;
                # pages OCR read are better than both
                read = any(b.source_format == "ocr" for b in parsed.blocks)
                problem = pdf_adapter.text_layer_problem(Path(src["path"])) \
                    if parsed.source_format == "pdf" and not read else None
                if problem is None:
                    blocks = list(parsed.blocks)
                    title = title or parsed.title
                    warnings += [f"{name}: {w}" if len(sources) > 1 else w for w in parsed.warnings]
            except IngestError as e:
                problem = e.message
        else:
            problem = src.get("problem") or "no file"
        if blocks is None and src.get("ft_cache"):
            blocks = _ft_cache_blocks(paper_id, src["ft_cache"]["path"], problem, warnings)
            if blocks:
                warnings.append(f"{name}: {problem}; read Zotero's extracted text ({FT_CACHE}) instead")
        if blocks:
            groups.append((name if len(sources) > 1 else None, blocks))
        else:
            failures.append(f"{name}: {problem}" + ("" if not src.get("ft_cache") else f"; {FT_CACHE} has no text"))
    notes = _note_blocks(paper_id, m, warnings)
    groups += notes
    if not groups:
        raise IngestError(paper_id, str(path), "no text: " + "; ".join(failures or ["no attachment with text"]))
    if failures:
        warnings += [f"attachment skipped: {f}" for f in failures]
    return _merge(paper_id, groups), title


def _ft_cache_blocks(paper_id: str, file: str, problem: str | None, warnings: list[str]) -> list:
    """Zotero's extracted text as blocks: pages split at form feeds, paragraphs at blank lines."""
    try:
        text = Path(file).read_bytes().decode("utf-8", "replace")
    except OSError:
        return []
    raws: list[RawBlock] = []
    reason = f"{FT_CACHE}: {problem}" if problem else FT_CACHE
    for page_no, page in enumerate(text.split("\f"), start=1):
        for para in _paragraphs(page):
            raws.append(RawBlock(page=min(page_no, 9999), label="text", text=para, reason=reason))
    if not raws:
        return []
    return finalize(paper_id, "zotero-ft-cache", raws, warnings)


def _paragraphs(page: str) -> list[str]:
    out, cur = [], []
    for line in page.splitlines():
        line = " ".join(line.split())
        if line:
            cur.append(line)
        elif cur:
            out.append(" ".join(cur))
            cur = []
    if cur:
        out.append(" ".join(cur))
    return out


def _note_blocks(paper_id: str, m: dict[str, Any], warnings: list[str]) -> list[tuple[str | None, list]]:
    out = []
    anns = m.get("annotations", [])
    if anns:
        raws = [RawBlock(page=NO_PAGE, label="heading", text=ANNOTATIONS_HEADING, role="heading", heading_level=1)]
        for a in anns:
            text = a["text"]
            if a.get("comment"):
                # one paragraph (no blank line): `grep` maps each paragraph of a unit to its block's page
                text = f"{text}\nComment: {a['comment']}" if text else a["comment"]
            raws.append(RawBlock(page=a.get("page") or NO_PAGE, label=f"annotation:{a.get('type', '')}", text=text,
                                 role="annotation", reason=f"Zotero {a.get('type', 'annotation')}"))
        out.append((None, finalize(paper_id, "zotero", raws, warnings)))
    notes = m.get("notes", [])
    if notes:
        raws = [RawBlock(page=NO_PAGE, label="heading", text=NOTES_HEADING, role="heading", heading_level=1)]
        raws += [RawBlock(page=NO_PAGE, label="note", text=n["text"], role="note", reason="Zotero note") for n in notes]
        out.append((None, finalize(paper_id, "zotero", raws, warnings)))
    return out


def _merge(paper_id: str, groups: list[tuple[str | None, list]]) -> list:
    """One reading order from several finalized groups: block ids made unique per group
    (`a2.p3:5`), and a group with a heading opens a section of that name with its own
    headings one level below."""
    out = []
    for gi, (heading, blocks) in enumerate(groups):
        prefix = "" if gi == 0 else f"a{gi + 1}."
        if heading is not None:
            first_page = blocks[0].page if blocks else 1
            out.append(Block(paper_id=paper_id, block_id=f"{prefix}att", page=first_page, order=0, bbox=None,
                             role="heading", text=heading, raw_label="attachment", heading_level=1,
                             source_format="zotero", role_reason="the attachment's name"))
        for b in blocks:
            level = b.heading_level
            if heading is not None and level is not None:
                level = min(level + 1, _MAX_LEVEL)
            out.append(replace(b, block_id=prefix + b.block_id, heading_level=level,
                               attached_to=(prefix + b.attached_to) if b.attached_to else None))
    return [replace(b, order=i) for i, b in enumerate(out)]
