"""Retrieval units: body units per section (split past a token cap) and object units.

Body units take a section's own blocks: `body` kind from body/abstract/list/equation
blocks, `backmatter_body` kind from back-matter blocks and footnotes (and from every text
block of a back-matter section), and `annotation` / `note` kinds from a reader's Zotero
annotations and notes. Titles, author lines, headings, references, figures,
tables and captions never reach a body unit. Object units pair each figure/table with
its caption(s), its text, the first body paragraph citing it and its most specific section.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from sheaf.core.models import (
    BACKMATTER_ROLES,
    BODY_ROLES,
    READER_ROLES,
    Block,
    BodyUnit,
    ObjectUnit,
    SectionNode,
)
from sheaf.core.parsed import NO_PAGE
from sheaf.formats.common import caption_kind, caption_label

DEFAULT_TOKEN_CAP = 1000
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+(?=[\"'(\[]?[A-Z0-9\u0370-\u03ff\u4e00-\u9fff])")


def count_tokens(text: str) -> int:
    """Word-and-punctuation token count (a stable, model-free approximation)."""
    return len(_TOKEN.findall(text))


def short_id(unit_id: str, length: int = 8) -> str:
    """The first `length` hex digits of sha1(unit_id)."""
    return hashlib.sha1(unit_id.encode("utf-8")).hexdigest()[:length]


def _split_long(text: str, cap: int) -> list[str]:
    """Split one paragraph at sentence boundaries, then at word boundaries, under `cap`.

    Token counts are kept running (a token never spans the space that joins two pieces, so
    the count of a join is the sum of the counts): linear in the paragraph's length, where
    re-counting every candidate chunk made a 1 MB paragraph take minutes (found by fuzzing)."""
    pieces: list[tuple[str, int]] = []
    for sentence in _SENTENCE_END.split(text):
        n_sentence = count_tokens(sentence)
        if n_sentence <= cap:
            pieces.append((sentence, n_sentence))
            continue
        chunk: list[str] = []
        n_chunk = 0
        for w in sentence.split(" "):
            n_w = count_tokens(w)
            if chunk and n_chunk + n_w > cap:
                pieces.append((" ".join(chunk), n_chunk))
                chunk, n_chunk = [], 0
            chunk.append(w)
            n_chunk += n_w
        if chunk:
            pieces.append((" ".join(chunk), n_chunk))
    out: list[tuple[list[str], int]] = []
    for p, n in pieces:  # re-pack sentences up to the cap
        if out and out[-1][1] + n <= cap:
            out[-1][0].append(p)
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append(([p], n))
    return [" ".join(ps) for ps, _ in out]


def pack(blocks: list[Block], cap: int) -> list[tuple[list[str], str]]:
    """Group blocks into parts of at most `cap` tokens: (block_ids, text) per part."""
    parts: list[tuple[list[str], list[str], int]] = []  # ids, texts, tokens
    for b in blocks:
        n = count_tokens(b.text)
        if n > cap:
            for piece in _split_long(b.text, cap):
                parts.append(([b.block_id], [piece], count_tokens(piece)))
            continue
        if parts and parts[-1][2] + n <= cap:
            ids, texts, tok = parts[-1]
            parts[-1] = (ids + [b.block_id], texts + [b.text], tok + n)
        else:
            parts.append(([b.block_id], [b.text], n))
    return [(list(dict.fromkeys(ids)), "\n\n".join(texts)) for ids, texts, _ in parts]


def body_units(
    paper_id: str, tree: SectionNode, blocks: Iterable[Block], token_cap: int = DEFAULT_TOKEN_CAP
) -> list[BodyUnit]:
    """Body units of every section, in reading order of the tree."""
    by_id = {b.block_id: b for b in blocks}
    out: list[BodyUnit] = []
    for node in tree.walk():
        body: list[Block] = []
        back: list[Block] = []
        reader: dict[str, list[Block]] = {"annotation": [], "note": []}
        for bid in node.own_block_ids:
            b = by_id.get(bid)
            if b is None or not b.text.strip():
                continue
            if b.role in READER_ROLES:
                reader[b.role].append(b)
            elif node.kind == "backmatter" and (b.role in BODY_ROLES or b.role in BACKMATTER_ROLES):
                back.append(b)
            elif b.role in BODY_ROLES:
                body.append(b)
            elif b.role in BACKMATTER_ROLES:
                back.append(b)
        for kind, group, suffix in (("body", body, ""), ("backmatter_body", back, ":backmatter"),
                                    ("annotation", reader["annotation"], ":annotation"),
                                    ("note", reader["note"], ":note")):
            if not group:
                continue
            parts = pack(group, token_cap)
            base = f"{paper_id}:body:{node.node_id}{suffix}"
            for i, (ids, text) in enumerate(parts, start=1):
                uid = base if len(parts) == 1 else f"{base}:part_{i:03d}"
                pages = [by_id[x].page for x in ids if by_id[x].page != NO_PAGE]
                out.append(BodyUnit(
                    unit_id=uid, short_id=short_id(uid), paper_id=paper_id, node_id=node.node_id,
                    section_path=node.section_path, section_level=node.level,
                    page_span=(min(pages), max(pages)) if pages else None, block_ids=tuple(ids), text=text,
                    token_count=count_tokens(text), unit_kind=kind, part_ordinal=i,
                ))
    return out


def _cite_pattern(label: str) -> re.Pattern[str] | None:
    kind, _, num = label.partition(" ")
    if not num:
        return None
    stem = r"fig(?:ure)?s?\.?" if kind == "Figure" else r"tab(?:le)?s?\.?"
    return re.compile(rf"\b{stem}\s*{re.escape(num)}(?![0-9])", re.I)


def object_units(paper_id: str, tree: SectionNode, blocks: Iterable[Block]) -> list[ObjectUnit]:
    """One object unit per figure/table (and per caption whose object was not detected)."""
    blocks = list(blocks)
    by_id = {b.block_id: b for b in blocks}
    captions_of: dict[str, list[Block]] = {}
    for b in blocks:
        if b.attached_to:
            captions_of.setdefault(b.attached_to, []).append(b)
    body_blocks = [b for b in blocks if b.role in BODY_ROLES]
    out: list[ObjectUnit] = []
    for node in tree.walk():
        for bid in node.object_block_ids:
            b = by_id.get(bid)
            if b is None:
                continue
            if b.role in ("figure", "table"):
                caps = captions_of.get(bid, [])
                caption = "\n".join(c.text for c in caps)
                kind = b.role
                ids = (bid, *(c.block_id for c in caps))
                table_text = b.text
            elif b.attached_to and b.attached_to in by_id:
                continue  # emitted with its object
            else:  # a caption without a detected object
                caption = b.text
                kind = caption_kind(b.text) or b.role.removesuffix("_caption")
                ids = (bid,)
                table_text = ""
            if not caption and not table_text:
                continue  # an uncaptioned, textless image: nothing to retrieve
            label = caption_label(caption) if caption else None
            nearby = ""
            if label and (pat := _cite_pattern(label)):
                nearby = next((x.text for x in body_blocks if pat.search(x.text)), "")
            uid = f"{paper_id}:{kind}:{bid}"
            out.append(ObjectUnit(
                unit_id=uid, short_id=short_id(uid), paper_id=paper_id, object_kind=kind,
                label=label, caption=caption, table_text=table_text, nearby_text=nearby,
                node_id=node.node_id, section_path=node.section_path, page=b.page, block_ids=ids,
            ))
    return out
