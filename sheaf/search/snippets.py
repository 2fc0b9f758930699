"""Snippets and one-line summaries: the window of a unit's text that best shows a query's words."""
from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence

from sheaf.store.fulltext import (  # the query builder's own rules, so grep and search agree on codes
    CJK_RE,
    QUERY_STOPWORDS,
    WORD_RE,
)

SNIPPET_CHARS = 240


SUMMARY_CHARS = 110


_WS_RE = re.compile(r"\s+")


def one_line(s: str) -> str:
    return _WS_RE.sub(" ", s).strip()


def clip(s: str, n: int) -> str:
    s = one_line(s)
    return s if len(s) <= n else s[: n - 1].rstrip() + "…"


def _query_words(query: str) -> list[str]:
    words = [w.lower() for w in WORD_RE.findall(unicodedata.normalize("NFKC", query or ""))]
    words = [w for w in dict.fromkeys(words) if w not in QUERY_STOPWORDS and (len(w) > 1 or w.isdigit())]
    return words


#: English suffixes cut for highlighting, longest first: the index stems (porter), so "results"
#: also finds "resulting"; the snippet should show that word too. A display heuristic only.
_SUFFIXES = ("ational", "ization", "ations", "ation", "ments", "ment", "ness", "ings", "ions", "ing",
             "ion", "ies", "ied", "ers", "ive", "ity", "ed", "es", "er", "al", "ly", "s")


def _stem_prefix(word: str) -> str | None:
    """A crude stem of a plain English word (>= 4 letters kept), or None to match it as is."""
    if len(word) < 5 or not word.isascii() or not word.isalpha():
        return None
    for suf in _SUFFIXES:
        if word.endswith(suf) and len(word) - len(suf) >= 4:
            return word[: -len(suf)]
    return None


@functools.lru_cache(maxsize=256)
def highlight_re(query: str) -> re.Pattern[str] | None:
    """The snippet highlighter of a query (cached: every match of a query uses it twice)."""
    words = _query_words(query)
    if not words:
        return None
    # A word starts at a word boundary; CJK has none (its characters run together). One
    # lookbehind in front of all the other words (not one per alternative): the same matches,
    # several times faster on long queries. CJK words go first: a CJK word and a plain one can
    # only both match at one position when the CJK one is the longer. A plain word also matches
    # its variants (its crude stem + any ending), as the porter-stemmed index does.
    longest = sorted(words, key=len, reverse=True)
    cjk = [re.escape(w) for w in longest if CJK_RE.search(w)]
    plain = [re.escape(w) + (rf"|{re.escape(st)}[^\W_]*" if (st := _stem_prefix(w)) else "")
             for w in longest if not CJK_RE.search(w)]
    alts = cjk + ([rf"(?<![^\W_])(?:{'|'.join(plain)})"] if plain else [])
    return re.compile("|".join(alts), re.IGNORECASE)


@functools.lru_cache(maxsize=64)
def _query_hits(text: str, query: str) -> tuple[tuple[int, str], ...]:
    """(offset, word) of each query word in `text` (cached: a match's snippet and its summary
    are cut from the same text)."""
    pat = highlight_re(query)
    return tuple((m.start(), m.group(0).lower()) for m in pat.finditer(text)) if pat else ()


def _best_window(hits: Sequence[tuple[int, str]], span: int) -> int:
    """The index of the hit that opens the window (of `span` characters) holding the most (and
    longest) distinct words: the first such. The window slides over the hits, counting the
    words it takes in and lets go (long units have hundreds of hits)."""
    if span <= 0:
        return 0  # every window is empty: the first
    best, best_len = 0, -1
    j = 0
    inside: dict[str, int] = {}
    total = 0
    for i, (s0, t0) in enumerate(hits):
        while j < len(hits) and hits[j][0] < s0 + span:
            t = hits[j][1]
            if not inside.get(t):
                total += len(t)
            inside[t] = inside.get(t, 0) + 1
            j += 1
        if total > best_len:
            best, best_len = i, total
        inside[t0] -= 1
        if not inside[t0]:
            total -= len(t0)
    return best


def make_snippet(text: str, query: str = "", width: int = SNIPPET_CHARS, start_hint: int = 0) -> str:
    """A one-line window of about `width` characters of `text`: the window holding the most
    (and the longest) distinct query words, else the text from `start_hint`. Cut ends are
    marked with "…"."""
    if not text:
        return ""
    hits = _query_hits(text, query) if query else ()
    if hits:
        best = _best_window(hits, width - width // 6)
        lead = width // 6
        start = max(0, hits[best][0] - lead)
        if start > 0:  # begin at a sentence start if one is near, else at a word start
            dot = text.rfind(". ", max(0, start - lead), hits[best][0])
            sp = text.rfind(" ", max(0, start - 20), start + 1)
            start = dot + 2 if dot >= 0 else (sp + 1 if sp >= 0 else start)
    else:
        start = max(0, min(start_hint, len(text) - 1))
        if start > 0:
            sp = text.rfind(" ", max(0, start - 20), start + 1)
            start = sp + 1 if sp >= 0 else start
    end = min(len(text), start + width)
    if end < len(text):
        sp = text.rfind(" ", start + width // 2, end)
        end = sp if sp > 0 else end
    out = one_line(text[start:end])
    return ("…" if start > 0 else "") + out + ("…" if end < len(text) else "")
