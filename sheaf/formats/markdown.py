"""Markdown fulltext (`#` headings), for libraries that keep a fulltext `.md`."""
from __future__ import annotations

import re
from pathlib import Path

from sheaf.formats.common import RawBlock, caption_kind, decode_text

VERSION = "1"
_HEAD = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_PAGE = re.compile(r"^<!--\s*page\s+(\d+)\s*-->$", re.I)


def matches(path: Path) -> bool:
    """A `.md` / `.markdown` file."""
    return path.suffix.lower() in {".md", ".markdown"}


def parse(paper_id: str, path: Path, data: bytes, warnings: list[str]) -> tuple[list[RawBlock], str | None]:
    """Paragraphs split on blank lines; `#` lines are headings (the first `# ` is the title)."""
    text = decode_text(paper_id, path, data, warnings)
    raws: list[RawBlock] = []
    page = 1
    title: str | None = None
    para: list[str] = []
    in_fence = False

    def flush() -> None:
        if para:
            body = "\n".join(para).strip()
            para.clear()
            if not body:
                return
            role = None
            if body.startswith("|") or body.lower().startswith("<table"):
                role = "table"
            elif body.startswith(("$$", "\\[")):
                role = "equation"
            elif body.startswith("!["):
                role = "figure"
            elif re.match(r"^([-*+]|\d+[.)])\s", body):
                role = "list"
            elif (kind := caption_kind(body)) and len(body) < 1500:
                role = f"{kind}_caption"
            raws.append(RawBlock(page=page, label=role or "paragraph", text=body, role=role))

    for line in text.split("\n"):
        s = line.rstrip()
        if s.strip().startswith("```"):
            in_fence = not in_fence
            para.append(s)
            continue
        if in_fence:
            para.append(s)
            continue
        if m := _PAGE.match(s.strip()):
            flush()
            page = max(1, int(m.group(1)))
            continue
        if m := _HEAD.match(s):
            flush()
            level, head = len(m.group(1)), m.group(2).strip()
            if level == 1 and title is None and not raws:
                title = head
                raws.append(RawBlock(page=page, label="h1", text=head, role="title"))
            else:
                raws.append(RawBlock(page=page, label=f"h{level}", text=head, role="heading",
                                     heading_level=max(1, level - 1)))
            continue
        if not s.strip():
            flush()
        else:
            para.append(s)
    flush()
    _mark_front_matter(raws)
    return raws, title


_AFFIL = re.compile(r"universit|institut|department|faculty|school of|hospital|laborator|centre|center|@", re.I)


def _mark_front_matter(raws: list[RawBlock]) -> None:
    """Short paragraphs between the title and the first heading: author and affiliation lines."""
    if not raws or raws[0].role != "title":
        return
    for r in raws[1:4]:
        if r.role is not None:
            break
        t = r.text.strip("*_ ")
        if len(t) > 300 or t.endswith(".") and not _AFFIL.search(t):
            break
        if _AFFIL.search(t):
            r.role, r.label = "affiliation", "affiliation"
            r.text = t
        elif re.search(r",| and |&", t) and sum(w[:1].isupper() for w in t.split()) >= len(t.split()) / 2:
            r.role, r.label = "authors", "authors"
        else:
            break
