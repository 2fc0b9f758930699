"""How strongly a unit holds the words of a query: the evidence `retrieve` ranks by besides the
legs' ranks (docs/retrieval.md, "Ranking"). Plain functions over text; the same answer whatever
index backend found the unit.

- **The query's words** (`QueryWords`): its FTS5 tokens in order (stemmed as the index stems them,
  `sheaf.store.tokens.FtsTokenizer`), its content terms (without English function words) and its
  rare terms: the content terms held by at most `RARE_SHARE` of the units (those with the highest
  idf; when none is that rare, every content term).
- **A unit's evidence** (`Evidence`): whether it holds the query's tokens as one phrase, whether
  it holds every rare term, and whether they stand close together: two rare terms or more within
  the query's length plus `NEAR_SLACK` tokens, or every content term within it (a single rare term
  says nothing of closeness). A unit holding the phrase, or its terms close together, is *exact*:
  the ranking never puts a unit missing a rare term above it, and puts the phrase first.
- **Back matter** (`is_back_matter`): acknowledgements, funding, author notes (units of kind
  `backmatter_body`) and reference lists (a section so named, or text that reads as one: names
  with initials and years, entry after entry). They rank below body units that match as well.
"""
from __future__ import annotations

import functools
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
#: A content term of fewer than this share of the units (or of one unit alone) is specific (a gene,
#: a drug, a name): a unit without it does not nearly hold the query, whatever else it holds.
SPECIFIC_SHARE = 0.01
#: Rare terms stand close together when one window of the query's token count plus this many
#: tokens holds them all (a dropped or an inserted word or two).
NEAR_SLACK = 2
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


def _prefix(term: str) -> str:
    """A substring of every word stemmed to `term`: porter's stems are prefixes of their words
    but for their last letter."""
    return term[:-1] if len(term) > 2 else term


def _lacking(text: str, prefixes: dict[str, str]) -> list[str]:
    """The terms (of {term: its `_prefix`}) whose words `text` cannot hold, folded as the FTS5
    tokenizer folds (case, diacritics): a term not in the case-folded text is looked for in its
    ASCII skeleton (NFKD, non-ASCII dropped: Díaz holds "diaz"), made only then."""
    low = text.casefold()
    lacks = [t for t, p in prefixes.items() if p not in low]
    if not lacks or low.isascii():
        return lacks
    skeleton = unicodedata.normalize("NFKD", low).encode("ascii", "ignore").decode()
    return [t for t in lacks if not t.isascii() or prefixes[t] not in skeleton]


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
    specific: frozenset[str] = frozenset()  # content terms of fewer than SPECIFIC_SHARE of the units

    @classmethod
    def of(cls, query: str, stems: Stems, rows: Callable[[Sequence[str]], tuple[int, dict[str, int]]]
           ) -> "QueryWords":
        """`rows(terms)`: (units in the index, {term: units holding it})."""
        tokens = tuple(stems.text(query.replace('"', " ")))
        stop = stems.stopwords()
        content = frozenset(t for t in tokens if t not in stop)
        rare, specific = content, content
        if len(content) > 1:
            n, df = rows(sorted(content))
            if n:
                held = {t for t in content if df.get(t, 0) <= RARE_SHARE * n}
                rare = frozenset(held) if held else content
                specific = frozenset(t for t in content if df.get(t, 0) < max(SPECIFIC_SHARE * n, 2))
        return cls(tokens, content, rare, specific)

    @functools.cached_property
    def prefixes(self) -> dict[str, str]:
        """Each content term's `_prefix`."""
        return {t: _prefix(t) for t in self.content}

    @property
    def weighs(self) -> bool:
        """Whether evidence orders the ranking: a query of two content terms or more (one word's
        units all hold it or not; the legs' order stands)."""
        return len(self.content) >= 2


@dataclass(frozen=True)
class Evidence:
    """What a unit holds of the query: the whole query as a phrase, every rare term, every rare
    term within a window (`near`)."""

    phrase: bool = False
    rare: bool = False
    near: bool = False
    nearly: bool = False

    @property
    def exact(self) -> bool:
        return self.phrase or self.near

    @property
    def level(self) -> int:
        """3: the phrase; 2: close together; 1: all but one content term close together; 0: none
        of these (the ranking's first key)."""
        return 3 if self.phrase else 2 if self.near else 1 if self.nearly else 0

    @property
    def label(self) -> str:
        """`phrase`, `near`, `nearly`, `rare_terms` (every rare term, apart) or `partial`."""
        return "phrase" if self.phrase else "near" if self.near else "nearly" if self.nearly else \
            "rare_terms" if self.rare else "partial"


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
    lacks = _lacking(text, q.prefixes)
    if any(t in q.rare for t in lacks) and (len(lacks) > 1 or len(q.content) < 3):
        return NONE  # neither every rare term nor all content terms but one: nothing to weigh
    toks = stems.text(text)
    where: dict[str, list[int]] = {t: [] for t in q.content}
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
    rare = all(where[t] for t in q.rare)
    span = len(q.tokens) + NEAR_SLACK
    # Close together: two rare terms or more within the window, or (one rare term is no evidence
    # of closeness) every content term within it.
    near = rare and ((len(q.rare) > 1 and _window(where[t] for t in q.rare) <= span)
                     or (all(where.values()) and _window(where.values()) <= span))
    # Nearly: all but one of three content terms or more within the window, the one missing not a
    # specific term (a word remembered wrong: a synonym, another form; not a unit on the same
    # topic without the gene, the drug or the name asked about).
    held = [p for p in where.values() if p]
    nearly = (not near and len(q.content) > 2 and len(held) >= len(q.content) - 1
              and all(where[t] for t in q.specific) and _window(held) <= span)
    return Evidence(phrase=bool(q.tokens) and best >= len(q.tokens), rare=rare, near=near, nearly=nearly)


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
