"""Full-text helpers shared by the index writer and the query side (no SQLite, no torch).

The FTS5 tables use ``porter unicode61 remove_diacritics 2``: unicode61 (café = cafe, hyphens and
other punctuation separate tokens) with English suffixes stemmed (regeneration = regenerate,
studies = study; codes, CJK and Hangul are left as they are). Two things the tokenizer cannot do are done here, on both
sides, by one function each:

- `fts_text(text)` is what the writer puts into an FTS column: NFKC-normalized (PDF
  ligatures such as "ﬁ" become "fi"), each CJK ideograph/kana standing alone (Chinese and
  Japanese have no spaces, so a run of them would be one token and no word inside it could be
  found), and a tail with the joined form of hyphenated terms (``cross-linking`` also indexes
  ``crosslinking``, ``SPG-302`` also ``SPG302``).
- `build_match_query(user_query)` turns anything a user types into a safe FTS5 MATCH
  expression: every token is double-quoted (so ``AND``/``OR``/``NEAR``/``NOT``, ``*``,
  ``(``, ``:``, ``^``, ``-`` and stray quotes are plain text and never an SQLite error);
  a code such as ``SPG302`` / ``SPG-302`` / ``SPG 302`` becomes
  ``("SPG302"* OR "SPG 302"*)``, which finds all three spellings with no extra index;
  a hyphenated term becomes ``("cross linking" OR "crosslinking")``; CJK text becomes a
  phrase of single characters; Hangul words are prefix-matched (particles attach to them).
  With ``drop_stopwords=True`` (the relaxed OR form of the query path) plain English function
  words (`QUERY_STOPWORDS`: "the", "of", "in" ...) are left out: in an OR they match nearly
  every row, which bm25 then has to score (at 100k units: 3x the time of the content words
  alone) for next to no weight in the ranking.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any

from sheaf.core.envelope import SheafError

__all__ = ["FTS_TOKENIZER", "FTS_TEXT_VERSION", "QUERY_STOPWORDS", "fts_text", "build_match_query",
           "query_terms"]

#: The tokenizer of every FTS5 table of the index.
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"  # schema 2 (unicode61 alone in schema 1)
#: Bumped whenever `fts_text` changes what gets indexed (a schema migration then rebuilds FTS).
FTS_TEXT_VERSION = 1

# Ideographs (CJK unified + extensions + compatibility), kana; not Hangul (Korean uses spaces).
_CJK = (
    "\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)


class _NonAsciiClass:
    """A regex of one class of non-ASCII characters, compiled on first use (these two take
    ~5 ms to compile, a fifth of a cold `sheaf search`'s imports) and never run on ASCII text,
    which cannot hold them (most queries): the same answers as the compiled pattern."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._re: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._re is None:
            self._re = re.compile(self.pattern)
        return self._re

    def search(self, text: str) -> re.Match[str] | None:
        return None if text.isascii() else self.compiled.search(text)

    def match(self, text: str) -> re.Match[str] | None:
        return None if text.isascii() else self.compiled.match(text)

    def sub(self, repl: Any, text: str) -> str:
        return text if text.isascii() else self.compiled.sub(repl, text)


CJK_RE = _NonAsciiClass(f"[{_CJK}]")
_HANGUL_RE = _NonAsciiClass("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_WORD = r"[^\W_]+"
WORD_RE = re.compile(_WORD)
_DASHES = "-\u2010\u2011\u2012\u2013\u2212"
_DASH_RE = re.compile(f"[{_DASHES}]")
_HYPHENATED_RE = re.compile(rf"{_WORD}(?:[{_DASHES}]{_WORD})+")
LETTERS_RE = re.compile(r"[^\W\d_]+")
DIGITS_RE = re.compile(r"\d+[^\W\d_]?")
CODE_RE = re.compile(r"([^\W\d_]{1,12})(\d{1,10}[^\W\d_]{0,2})")
_MAX_GROUPS = 64
_MAX_TAIL_TERM = 48

#: English function words: left out of the relaxed OR form of a query (`build_match_query`'s
#: `drop_stopwords`) and of snippet highlighting (`sheaf.search.retriever`). Lower case.
QUERY_STOPWORDS = frozenset("""a an and are as at be by for from has have in into is it its of on or that the
their this to was were which with what how why when where who do does did not no than then these
those we our""".split())


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def _space_cjk(text: str) -> str:
    return CJK_RE.sub(lambda m: f" {m.group(0)} ", text)


def fts_text(text: str | None) -> str:
    """The string written into an FTS5 column for `text` (see the module docstring)."""
    if not text:
        return ""
    t = _nfkc(text)
    tail: dict[str, None] = {}
    end = -1
    # Look only around dashes: running the compound regex over all the text costs ~0.15 ms
    # per unit, this ~10 us.
    for d in _DASH_RE.finditer(t):
        if d.start() < end:
            continue
        start = max(t.rfind(" ", 0, d.start()), t.rfind("\n", 0, d.start())) + 1
        end = min((x for x in (t.find(" ", d.end()), t.find("\n", d.end())) if x >= 0), default=len(t))
        for m in _HYPHENATED_RE.finditer(t, start, end):
            parts = WORD_RE.findall(m.group(0))
            joined = "".join(parts)
            if len(joined) <= _MAX_TAIL_TERM and any(not p.isdigit() for p in parts):
                tail.setdefault(joined, None)
    if CJK_RE.search(t):
        t = _space_cjk(t)
    if tail:
        t = f"{t}\n{' '.join(tail)}"
    return t


def _quote(s: str) -> str:
    # Only word characters and spaces ever reach here; the replace is belt and braces.
    return '"' + s.replace('"', '""') + '"'


def _phrase(parts: list[str]) -> str:
    """Quoted phrase of word parts; CJK characters spaced so they form a phrase of unigrams."""
    return _quote(" ".join(_space_cjk(p).strip() for p in parts))


def is_code(letters: str, digits: str) -> bool:
    return bool(LETTERS_RE.fullmatch(letters)) and bool(DIGITS_RE.fullmatch(digits)) \
        and len(letters) <= 12 and not CJK_RE.search(letters)


def _code_group(letters: str, digits: str) -> str:
    return f"({_quote(letters + digits)}* OR {_quote(letters + ' ' + digits)}*)"


def _word_group(word: str) -> str | None:
    """One whitespace-separated word of the query as an FTS5 group, or None if it has no token."""
    parts = WORD_RE.findall(word)
    if not parts:
        return None
    if len(parts) == 1:
        p = parts[0]
        m = CODE_RE.fullmatch(p)
        if m and is_code(m.group(1), m.group(2)):
            return _code_group(m.group(1), m.group(2))
        if CJK_RE.search(p):
            return _phrase([p])
        if _HANGUL_RE.search(p):
            return _quote(p) + "*"
        return _quote(p)
    if len(parts) == 2 and is_code(parts[0], parts[1]):
        return _code_group(parts[0], parts[1])
    joined = "".join(parts)
    if CJK_RE.search(joined):
        return _phrase(parts)
    return f"({_phrase(parts)} OR {_quote(joined)})"


def query_terms(user_query: str) -> list[str]:
    """The FTS5 groups of a user query (each one safe on its own), in order, deduplicated."""
    q = _nfkc(user_query or "")
    groups: list[str] = []
    # Balanced double quotes mark phrases; an odd quote count means the quotes are just text.
    if q.count('"') >= 2 and q.count('"') % 2 == 0:
        pieces = q.split('"')
        segments = [(i % 2 == 1, s) for i, s in enumerate(pieces)]
    else:
        segments = [(False, q.replace('"', " "))]
    for is_phrase, seg in segments:
        if is_phrase:
            parts = WORD_RE.findall(seg)
            if parts:
                groups.append(_phrase(parts))
            continue
        words = seg.split()
        i = 0
        while i < len(words):
            w = words[i]
            # "SPG 302": a short all-letter word followed by a number is also a code.
            if (i + 1 < len(words) and LETTERS_RE.fullmatch(w) and len(w) <= 12
                    and not CJK_RE.search(w) and DIGITS_RE.fullmatch(words[i + 1])):
                groups.append(_code_group(w, words[i + 1]))
                i += 2
                continue
            g = _word_group(w)
            if g:
                groups.append(g)
            i += 1
    seen: dict[str, None] = {}
    for g in groups:
        seen.setdefault(g, None)
    return list(seen)[:_MAX_GROUPS]


def _is_stopword_group(group: str) -> bool:
    """A group that is one plain word of `QUERY_STOPWORDS` ("the", "The"; not a phrase, a code,
    or an all-capitals abbreviation such as "NO" for nitric oxide or "AT")."""
    if len(group) < 3 or group[0] != '"' or group[-1] != '"':
        return False
    word = group[1:-1]
    if not word.isalpha() or (len(word) > 1 and word.isupper()):
        return False
    return word.lower() in QUERY_STOPWORDS


def build_match_query(user_query: str, *, mode: str = "and", prefix_last: bool = False,
                      drop_stopwords: bool = False) -> str | None:
    """A safe FTS5 MATCH expression for `user_query`, or None when it holds no searchable token.

    `mode` is ``"and"`` (every term must occur) or ``"or"`` (any term; bm25 ranks those with
    more terms first). `prefix_last` adds ``*`` to the last term (search-as-you-type).
    `drop_stopwords` leaves out the plain words of `QUERY_STOPWORDS` (see `_is_stopword_group`)
    unless the query holds nothing else. The result never makes SQLite raise, whatever the input.
    """
    if mode not in ("and", "or"):
        raise ValueError(f"mode must be 'and' or 'or', not {mode!r}")
    groups = query_terms(user_query)
    if drop_stopwords:
        groups = [g for g in groups if not _is_stopword_group(g)] or groups
    if not groups:
        return None
    if prefix_last and groups[-1].endswith('"'):
        groups[-1] += "*"
    return f" {mode.upper()} ".join(groups)


def match_queries(query: str) -> tuple[str, str]:
    """(every word, some words without function words) as MATCH expressions, what every index
    backend's `match_queries` gives; BAD_QUERY when the query holds no word."""
    and_q = build_match_query(query, mode="and")
    if and_q is None:
        raise SheafError("BAD_QUERY", "the query holds no word to search for", {"query": query},
                         hint="use letters or digits; FTS operators (AND, OR, NEAR, *, quotes, "
                              "brackets) are treated as plain text")
    # The relaxed form without function words: in an OR they match nearly every unit (all
    # of which bm25 must then score) and weigh next to nothing in the ranking.
    return and_q, build_match_query(query, mode="or", drop_stopwords=True) or and_q
