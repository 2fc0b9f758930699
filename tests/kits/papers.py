"""Build small canonical papers and units for tests without any adapter."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from sheaf.core.models import Block, BodyUnit, EmittedBlock, HeadingEvent, ObjectUnit, ParsedPaper, RenderMap
from sheaf.formats.common import clean_text


def blk(role: str, text: str = "", level: int | None = None, page: int = 1,
        attached_to: str | None = None, bid: str | None = None) -> dict:
    return {"role": role, "text": text, "level": level, "page": page, "attached_to": attached_to, "bid": bid}


def make_paper(specs: list[dict], paper_id: str = "TEST1", title: str = "A Test Paper") -> ParsedPaper:
    """A ParsedPaper whose blocks follow `specs` in reading order; ids p{page}:{n}."""
    per_page: dict[int, int] = {}
    blocks = []
    for order, s in enumerate(specs):
        n = per_page.get(s["page"], 0)
        per_page[s["page"]] = n + 1
        bid = s["bid"] or f"p{s['page']}:{n}"
        blocks.append(Block(paper_id, bid, s["page"], order, None, s["role"], s["text"], s["role"],
                            s["level"], "test", s["attached_to"]))
    return ParsedPaper(paper_id, "test", "memory", "test/1", "0" * 64, tuple(blocks), (), title)


def make_render_map(items: list[tuple[str, str, str, int | None]]) -> RenderMap:
    """A render-map from (block_id, role, title_or_text, heading_level) in emitted order."""
    headings, emitted = [], []
    for i, (bid, role, text, level) in enumerate(items):
        line = i * 2 + 1
        if level is not None:
            headings.append(HeadingEvent(line, level + 1, text, 1, bid, i))
            emitted.append(EmittedBlock(i, line, line, 1, bid, role, "heading"))
        else:
            emitted.append(EmittedBlock(i, line, line, 1, bid, role, "paragraph"))
    return RenderMap(tuple(headings), tuple(emitted))


# --- units: the records the store, search and vectors tests write and read ----------------------

def body_unit(paper: str, node: str, text: str, path: tuple[str, ...] = ("Results",), *, short_id_len: int = 8,
              pages: tuple[int, int] = (1, 1), blocks: tuple[str, ...] | str | None = None, kind: str = "body",
              part: int = 0) -> BodyUnit:
    """A BodyUnit ``{paper}:body:{node}[:part_NNN]``. Its short id is the first `short_id_len` hex
    digits of the unit id's sha1 (0: empty); `blocks` is a tuple, a template formatted with
    `node` (``"p1:{node}"``), or by default one block id a paragraph on the first page."""
    uid = f"{paper}:body:{node}" + (f":part_{part:03d}" if part else "")
    if blocks is None:
        blocks = tuple(f"p{pages[0]}:{i}" for i in range(len(text.split("\n\n"))))
    elif isinstance(blocks, str):
        blocks = (blocks.format(node=node),)
    return BodyUnit(uid, hashlib.sha1(uid.encode()).hexdigest()[:short_id_len], paper, node, tuple(path), len(path),
                    pages, tuple(blocks), text, len(text.split()), kind, part)


def object_unit(paper: str, block: str, caption: str, kind: str = "figure", table_text: str = "", *,
                short_id_len: int = 8, page: int = 2, node: str = "s1", nearby: str = "") -> ObjectUnit:
    """An ObjectUnit ``{paper}:{kind}:{block}`` labelled "<Kind> 1" under Results; short id as
    `body_unit`'s."""
    uid = f"{paper}:{kind}:{block}"
    return ObjectUnit(uid, hashlib.sha1(uid.encode()).hexdigest()[:short_id_len], paper, kind, f"{kind.title()} 1",
                      caption, table_text, nearby, node, ("Results",), page, (block,))


# --- text keys: how a test compares a text with the expected one --------------------------------

def squashed(text: str) -> str:
    """`text` with every run of whitespace as one space."""
    return " ".join(text.split())


def cleaned(text: str) -> str:
    """`squashed`, then the adapters' `clean_text`."""
    return clean_text(squashed(text))


def heading_key(text: str) -> str:
    """`cleaned` without HTML tags, lower-cased: a heading label compared with a heading block."""
    return clean_text(squashed(re.sub(r"<[^>]+>", "", text))).lower()


def alnum_key(text: str) -> str:
    """Lower-case letters and digits only, tags and $math$ dropped: text from two extractors compared."""
    text = re.sub(r"<[^>]+>|\$[^$]*\$", "", text)
    return re.sub(r"[^0-9a-z]+", "", text.lower())


# --- JSON envelopes on stdout ----------------------------------------------------------------------

def one_envelope(stdout: str, context: str = "") -> dict[str, Any]:
    """The one JSON object a `--json` command printed on stdout (exactly one non-blank line);
    `context` (e.g. stderr) is added to the failure message."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one JSON line on stdout, got {len(lines)}: {stdout[-2000:]!r}{context[-2000:]}"
    return json.loads(lines[0])


def shared_pdfs(shared_data: Path) -> dict[str, Path]:
    """Three real PDFs of ../shared/data: MapReduce and FLP (a Zotero storage), zoo (an R vignette)."""
    storage = shared_data / "zotero_dirs" / "San7o__research-papers-collection" / "storage"
    return {"mapreduce": next(storage.rglob("Dean and Ghemawat*.pdf")),
            "flp": next(storage.rglob("Fischer*.pdf")),
            "zoo": shared_data / "pdfs" / "zoo.pdf"}


def without_engines(env: dict) -> dict:
    """`env` without ``data.engines`` (the one field a server's answer and a local one differ
    in: the server answers from memory, ``bm25-memory`` / ``matrix``, with the same results)."""
    if not env.get("ok"):
        return env
    return {**env, "data": {k: v for k, v in env["data"].items() if k != "engines"}}
