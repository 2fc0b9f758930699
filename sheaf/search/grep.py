"""Grounding: a term's spelling variants (SPG302 = SPG 302 = SPG-302, dashes of every kind, NFKC)
as one regular expression, and its exact spans in a unit's text."""
from __future__ import annotations

import re
import unicodedata

from sheaf.core.envelope import SheafError
from sheaf.core.models import BodyUnit
from sheaf.store.fulltext import (  # the query builder's own rules, so grep and search agree on codes
    CJK_RE,
    CODE_RE,
    DIGITS_RE,
    LETTERS_RE,
    WORD_RE,
    is_code,
)

#: Dashes a code may be written with: hyphen-minus, soft hyphen, hyphen, non-breaking hyphen,
#: figure dash, en dash, em dash, horizontal bar, minus, small/full-width hyphen-minus.
_DASHES = "\\-\u00ad\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"


_JOIN = rf"(?:\s*[{_DASHES}]\s*|\s+)?"  # optional: SPG302 = SPG 302 = SPG-302 = SPG‑302


_GAP = rf"(?:\s*[{_DASHES}]\s*|\s+)"  # required: between the words of a phrase


_PIECE_RE = re.compile(r"[^\W_]+|[\W_]+")


def _word_regex(word: str) -> str:
    out: list[str] = []
    for m in _PIECE_RE.finditer(word):
        s = m.group(0)
        if WORD_RE.fullmatch(s):
            cm = CODE_RE.fullmatch(s)
            if cm and is_code(cm.group(1), cm.group(2)):
                out.append(re.escape(cm.group(1)) + _JOIN + re.escape(cm.group(2)))
            else:
                out.append(re.escape(s))
        elif all(c in _DASHES.replace("\\", "") for c in s):
            out.append(_JOIN)
        else:
            out.append(re.escape(s))
    return "".join(out)


def term_pattern(term: str) -> re.Pattern[str]:
    """The case-insensitive regex `grep` runs for `term` (on NFKC-normalized text).

    A code (letters then digits, as the FTS query builder defines it) matches with nothing,
    spaces or any dash between its parts, whichever spelling was typed; hyphenated words
    likewise (cross-linking = cross linking = crosslinking); words separated by spaces need
    some space or dash between them. Alphanumeric ends must not touch another letter or
    digit (SPG302 is not found in XSPG302 or SPG3021). Raises BAD_QUERY for a blank term.
    """
    t = unicodedata.normalize("NFKC", term or "").strip()
    words = t.split()
    if not words:
        raise SheafError("BAD_QUERY", "the term is empty", {"term": term},
                         hint="give a word, a phrase or a code, e.g. sheaf grep QLN-482")
    parts: list[str] = []
    for i, w in enumerate(words):
        if i:
            prev = words[i - 1]
            code_pair = (LETTERS_RE.fullmatch(prev) and len(prev) <= 12 and not CJK_RE.search(prev)
                         and DIGITS_RE.fullmatch(w))
            parts.append(_JOIN if code_pair else _GAP)
        parts.append(_word_regex(w))
    lead = r"(?<![^\W_])" if WORD_RE.match(t[0]) and not CJK_RE.match(t[0]) else ""
    tail = r"(?![^\W_])" if WORD_RE.match(t[-1]) and not CJK_RE.match(t[-1]) else ""
    return re.compile(lead + "".join(parts) + tail, re.IGNORECASE)


def _nfkc_with_map(text: str) -> tuple[str, list[int] | None]:
    """NFKC text (char by char) and, when it differs, the original offset of each of its chars."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text, None
    out: list[str] = []
    idx: list[int] = []
    for i, ch in enumerate(text):
        n = ch if ord(ch) < 128 else unicodedata.normalize("NFKC", ch)
        out.append(n)
        idx.extend([i] * len(n))
    return "".join(out), idx


def find_spans(pat: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    """(start, end) offsets in `text` of every match of `pat` on its NFKC form."""
    if not text:
        return []
    norm, idx = _nfkc_with_map(text)
    spans = []
    for m in pat.finditer(norm):
        if m.end() == m.start():
            continue
        if idx is None:
            spans.append((m.start(), m.end()))
        else:
            spans.append((idx[m.start()], idx[m.end() - 1] + 1))
    return spans


#: `sheaf.core.parsed.NO_PAGE` (not imported: the query path does not load the parse side's records).
_NO_PAGE = 0
_BLOCK_PAGE_RE = re.compile(r"^(?:a\d+\.)?p(\d+):")  # a Zotero paper's later groups: a2.p3:5


def page_at(unit: BodyUnit, offset: int) -> int | None:
    """The page of a character offset in a body unit: its paragraphs ("\\n\\n"-joined blocks)
    map one to one onto `block_ids` (``p{page}:{n}``; ``p0:``, `NO_PAGE`: none); else the unit's
    page if it has one and no block of it is without a page."""
    paras = unit.text.split("\n\n")
    if len(paras) == len(unit.block_ids):
        pos = 0
        for para, bid in zip(paras, unit.block_ids):
            if offset < pos + len(para) + 2:
                m = _BLOCK_PAGE_RE.match(bid)
                if m:
                    return int(m.group(1)) or None  # p0: a block with no page (a Zotero note)
                break
            pos += len(para) + 2
    if unit.page_span and unit.page_span[0] == unit.page_span[1] and \
            not any((m := _BLOCK_PAGE_RE.match(b)) and int(m.group(1)) == _NO_PAGE for b in unit.block_ids):
        return unit.page_span[0]
    return None
