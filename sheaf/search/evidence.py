"""How strongly a unit holds the words of a query: the evidence `retrieve` ranks by besides the
legs' ranks (docs/retrieval.md, "Ranking"). Plain functions over text; the same answer whatever
index backend found the unit.

- **The query's words** (`QueryWords`): its FTS5 tokens in order (stemmed as the index stems them,
  `sheaf.store.tokens.FtsTokenizer`), its content terms (without English function words) and its
  rare terms: the content terms held by at most `RARE_SHARE` of the units (those with the highest
  idf; when none is that rare, every content term).
- **A unit's evidence** (`Evidence`): whether it holds the query's tokens as one phrase, whether
  it holds every rare term, and whether they stand close together (within the query's length plus
  `NEAR_SLACK` tokens). A unit holding the phrase, or every rare term close together, is *exact*:
  the ranking never puts a unit missing a rare term above it.
- **Back matter** (`is_back_matter`): acknowledgements, funding, author notes (units of kind
  `backmatter_body`) and reference lists (a section so named, or text that reads as one: names
  with initials and years, entry after entry). They rank below body units that match as well.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sheaf.core.models import BodyUnit, ObjectUnit
from sheaf.store.fulltext import CJK_RE, QUERY_STOPWORDS, WORD_RE

__all__ = ["RARE_SHARE", "NEAR_SLACK", "BACK_MATTER_WEIGHT", "EVIDENCE_DEPTH", "QueryWords", "Evidence",
           "Stems", "evidence", "is_back_matter", "quoted_phrases"]

#: A content term held by at most this share of the units is rare (idf above ~2.3).
RARE_SHARE = 0.1
#: Rare terms stand close together when one window of the query's token count plus this many
#: tokens holds them all (a dropped or an inserted word or two).
NEAR_SLACK = 4
#: A back-matter unit ranks as if its fused score were this share of what it is.
BACK_MATTER_WEIGHT = 0.5
#: How many of the fused candidates, best first, have their evidence read.
EVIDENCE_DEPTH = 30

_STEM_CACHE = 50_000
_REFERENCE_SAMPLE = 3000  # characters of a unit read to tell a reference list (entries repeat)
_YEAR_RE = re.compile(r"(?<!\d)(?:19|20)\d{2}[a-z]?(?!\d)")
#: "Chimento-Díaz, S." / "Smith, J.-P." / "A. Smith" / "J. K. Rowling": a name with initials.
_NAME_RE = re.compile(r"\b[^\W\d_][\w'’\-]+,\s(?:[^\W\d_]\.[\s\-]?){1,3}|\b(?:[^\W\d_]\.\s?){1,3}[^\W\d_][\w'’\-]+")
_BACK_HEADING_RE = re.compile(
    r"^\s*(?:[\dIVXivx]+[.)]?\s*)?(?:references?|bibliography|literature cited|works cited|cited literature|"
    r"acknowledge?ments?|funding|financial support|author contributions?|conflicts? of interests?|"
    r"competing interests?|declaration of competing interests?|declarations?|data availability|"
    r"availability of data|ethics statement|notes on contributors|about the authors?|author biograph(?:y|ies))"
    r"\b", re.IGNORECASE)


def _holds_all(text: str, parts: Sequence[str]) -> bool:
    """Whether `text`, folded as the FTS5 tokenizer folds (case, diacritics), holds every part.
    The ASCII parts are looked for in the text's ASCII skeleton (NFKD, non-ASCII dropped: Díaz
    holds "diaz"), the others in its case-folded form."""
    if not parts:
        return True
    low = text.casefold()
    if low.isascii():
        return all(p in low for p in parts)
    skeleton = unicodedata.normalize("NFKD", low).encode("ascii", "ignore").decode()
    return all(p in (skeleton if p.isascii() else low) for p in parts)


def _words(text: str) -> list[str]:
    t = unicodedata.normalize("NFKC", text)
    if CJK_RE.search(t):  # the index holds each ideograph as a token of its own
        t = CJK_RE.sub(lambda m: f" {m.group(0)} ", t)
    return WORD_RE.findall(t)


class Stems:
    """Words to FTS5 tokens, remembered (a warm server's Retriever keeps them across queries).
    `tokenize(text)` gives FTS5's tokens of a text (`FtsTokenizer.tokens` with the index's
    tokenizer)."""

    def __init__(self, tokenize: Callable[[str], Sequence[str]]) -> None:
        self._tokenize = tokenize
        self._of: dict[str, str] = {}
        self._stop: frozenset[str] | None = None

    def words(self, words: Sequence[str]) -> list[str]:
        """The token of each word (a word the tokenizer drops: '')."""
        of = self._of
        new = list(dict.fromkeys(w for w in words if w not in of))
        if new:
            if len(of) + len(new) > _STEM_CACHE:
                of.clear()
            toks = list(self._tokenize(" ".join(new)))
            if len(toks) == len(new):
                of.update(zip(new, toks))
            else:  # a word the tokenizer splits or drops: one at a time
                for w in new:
                    t = self._tokenize(w)
                    of[w] = t[0] if len(t) == 1 else ""
        return [of[w] for w in words]

    def text(self, text: str) -> list[str]:
        return [t for t in self.words(_words(text)) if t]

    def stopwords(self) -> frozenset[str]:
        if self._stop is None:
            self._stop = frozenset(self.words(sorted(QUERY_STOPWORDS)))
        return self._stop


@dataclass(frozen=True)
class QueryWords:
    """A query's FTS5 tokens in order, its content terms and its rare terms."""

    tokens: tuple[str, ...]
    content: frozenset[str]
    rare: frozenset[str]

    @classmethod
    def of(cls, query: str, stems: Stems, rows: Callable[[Sequence[str]], tuple[int, dict[str, int]]]
           ) -> "QueryWords":
        """`rows(terms)`: (units in the index, {term: units holding it})."""
        tokens = tuple(stems.text(query.replace('"', " ")))
        stop = stems.stopwords()
        content = frozenset(t for t in tokens if t not in stop)
        rare = content
        if len(content) > 1:
            n, df = rows(sorted(content))
            if n:
                held = {t for t in content if df.get(t, 0) <= RARE_SHARE * n}
                rare = frozenset(held) if held else content
        return cls(tokens, content, rare)

    @property
    def weighs(self) -> bool:
        """Whether evidence orders the ranking: a query of two content terms or more (one word's
        units all hold it or not; the legs' order stands)."""
        return len(self.content) >= 2

    def prefixes(self) -> list[str]:
        """A substring each rare term's words hold (a stem less its last letter: porter's stems
        are prefixes of their words but for that letter), to skip units that cannot hold them."""
        return [t[:-1] if len(t) > 2 else t for t in self.rare]


@dataclass(frozen=True)
class Evidence:
    """What a unit holds of the query: the whole query as a phrase, every rare term, every rare
    term within a window (`near`)."""

    phrase: bool = False
    rare: bool = False
    near: bool = False

    @property
    def exact(self) -> bool:
        return self.phrase or self.near

    @property
    def label(self) -> str:
        """`phrase`, `near`, `rare_terms` (every rare term, apart) or `partial`."""
        return "phrase" if self.phrase else "near" if self.near else "rare_terms" if self.rare else "partial"


NONE = Evidence()


def _window(positions: Iterable[list[int]]) -> int:
    """The fewest consecutive tokens that hold one position of every list (lists not empty)."""
    lists = [p for p in positions]
    events = sorted((i, k) for k, p in enumerate(lists) for i in p)
    need = len(lists)
    have: dict[int, int] = {}
    best = 1 << 30
    lo = 0
    for i, k in events:
        have[k] = have.get(k, 0) + 1
        while len(have) == need:
            j, m = events[lo]
            best = min(best, i - j + 1)
            have[m] -= 1
            if not have[m]:
                del have[m]
            lo += 1
    return best


def evidence(q: QueryWords, text: str, stems: Stems) -> Evidence:
    """What `text` (a unit's searchable text) holds of the query."""
    if not _holds_all(text, q.prefixes()):
        return NONE
    toks = stems.text(text)
    where: dict[str, list[int]] = {t: [] for t in q.rare}
    at: dict[str, list[int]] = {}
    for j, t in enumerate(q.tokens):
        at.setdefault(t, []).append(j)
    best = 0
    prev: dict[int, int] = {}
    for i, t in enumerate(toks):
        js = at.get(t)
        if js is None:
            prev = {}
            continue
        cur = {j: prev.get(j - 1, 0) + 1 for j in js}
        best = max(best, *cur.values())
        prev = cur
        if t in where:
            where[t].append(i)
    rare = all(where.values())
    near = rare and _window(where.values()) <= len(q.tokens) + NEAR_SLACK
    return Evidence(phrase=bool(q.tokens) and best >= len(q.tokens), rare=rare, near=near)


def searchable(u: BodyUnit | ObjectUnit) -> str:
    """The text of a unit whose words count as its evidence: a body unit's heading and text; an
    object's label, caption and table text (not the citing paragraph it copies)."""
    if isinstance(u, BodyUnit):
        return f"{u.section_path[-1] if u.section_path else ''}\n{u.text}"
    return f"{u.label or ''}\n{u.caption or ''}\n{u.table_text or ''}"


def _reads_as_references(text: str) -> bool:
    """Text made of bibliography entries: at least 3 years and 4 names with initials, and per 100
    words at least 2 years and 4 such names (a paragraph citing "Smith et al., 2019" has years but
    not the names)."""
    text = text[:_REFERENCE_SAMPLE]
    if text.count("19") + text.count("20") < 3:  # a superset of the years, ten times faster
        return False
    years = len(_YEAR_RE.findall(text))
    if years < 3:
        return False
    names = len(_NAME_RE.findall(text))
    words = max(len(text.split()), 1)
    return names >= 4 and years * 100 >= 2 * words and names * 100 >= 4 * words


def is_back_matter(u: BodyUnit | ObjectUnit) -> bool:
    """A unit of back matter: acknowledgements, funding, declarations, author notes, a reference
    list (see the module docstring)."""
    if isinstance(u, ObjectUnit):
        return False
    if u.unit_kind == "backmatter_body":
        return True
    if u.unit_kind in ("note", "annotation"):
        return False
    if any(_BACK_HEADING_RE.match(h) for h in u.section_path[-2:]):
        return True
    return _reads_as_references(u.text)


def quoted_phrases(query: str) -> list[str]:
    """The phrases a query quotes (balanced double quotes; an odd count is plain text), each
    with a word in it."""
    if query.count('"') < 2 or query.count('"') % 2:
        return []
    return [p.strip() for p in query.split('"')[1::2] if WORD_RE.search(p)]
