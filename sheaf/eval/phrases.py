"""Known-item phrases of an index: what a researcher remembers of a passage, as a query whose answer
is known. Phrases of 5-10 plain words, 4 of them content words or more (what identifies a passage),
are read from the body text of the units (not titles, abstracts, captions or back matter), each
held by exactly one unit, in three forms: `exact`, `dropped` (one
content word left out) and `synonym` (one word replaced by a synonym from `SYNONYMS`). The answer is
the unit holding the phrase (`bench/search/known_items.py` measures `retrieve` on them)."""
from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sheaf.core.defaults import unit_kind_of
from sheaf.search.evidence import is_back_matter
from sheaf.store.fulltext import QUERY_STOPWORDS

__all__ = ["FORMS", "SYNONYMS", "Phrase", "phrase_queries"]

FORMS = ("exact", "dropped", "synonym")
#: Plain substitutions of general academic English (both ways where they read well).
SYNONYMS = {
    "method": "approach", "methods": "approaches", "approach": "method", "result": "outcome",
    "results": "outcomes", "show": "demonstrate", "shows": "demonstrates", "showed": "demonstrated",
    "shown": "demonstrated", "use": "employ", "used": "employed", "using": "employing", "large": "big",
    "small": "little", "important": "significant", "increase": "rise", "increased": "raised",
    "decrease": "reduction", "study": "investigation", "studies": "investigations", "different": "distinct",
    "number": "count", "model": "framework", "models": "frameworks", "problem": "issue", "problems": "issues",
    "first": "initial", "new": "novel", "high": "elevated", "low": "reduced", "obtained": "acquired",
    "provide": "offer", "provides": "offers", "provided": "offered", "aim": "goal", "found": "observed",
    "paper": "article", "work": "research", "analysis": "examination", "several": "multiple",
    "various": "diverse", "significant": "notable", "significantly": "notably", "because": "since",
    "often": "frequently", "therefore": "thus", "thus": "therefore", "however": "nevertheless",
    "proposed": "suggested", "propose": "suggest", "performance": "efficiency", "task": "job",
    "tasks": "jobs", "example": "instance", "same": "identical", "between": "among",
}
_MIN_WORDS, _MAX_WORDS = 5, 10
_SENT_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
_FRONT = re.compile(r"\b(abstract|front matter|keywords?|zusammenfassung|résumé|highlights)\b", re.IGNORECASE)
_WORD_OK = re.compile(r"^[^\W\d_][\w'’\-]*[^\W_]$|^[^\W\d_]$")


@dataclass(frozen=True, slots=True)
class Phrase:
    """A known-item query: `query` in `form`, read from `phrase` of unit `target` of `paper_id`."""

    form: str
    query: str
    phrase: str
    target: str
    paper_id: str

    def to_dict(self) -> dict[str, str]:
        return {"form": self.form, "query": self.query, "phrase": self.phrase, "target": self.target,
                "paper_id": self.paper_id}


_PLAIN_RE = re.compile(r"[^\W_]+")


def _plain(text: str) -> str:
    """Words alone, case-folded, one space apart: how a phrase is compared with unit text."""
    return " " + " ".join(_PLAIN_RE.findall(text.casefold())) + " "


def _body_units(index: Any) -> Iterator[tuple[Any, bool]]:
    """(unit, whether its text may give phrases) of every unit of the index, in write order."""
    for pid in index.papers_in_write_order():
        body, objects = index.paper_units(pid)
        for u in body:
            ok = (unit_kind_of(u.unit_id) == "body" and not is_back_matter(u)
                  and not any(_FRONT.search(h) for h in u.section_path))
            yield u, ok
        for o in objects:
            yield o, False


def _candidates(text: str, rng: random.Random) -> Iterator[str]:
    """Phrases of 5-10 plain words from the sentences of `text`, in a random order."""
    sents = [s for para in text.split("\n\n") for s in _SENT_RE.split(" ".join(para.split()))]
    rng.shuffle(sents)
    for s in sents:
        words = s.split()
        if len(words) < _MIN_WORDS + 2:
            continue
        n = rng.randint(_MIN_WORDS, min(_MAX_WORDS, len(words) - 1))
        start = rng.randint(0, len(words) - n)
        picked = [w.strip(",;:()[]\"'.") for w in words[start:start + n]]
        if not all(_WORD_OK.match(w) for w in picked):
            continue  # numbers, symbols, split words (hyphens at a line end): not what one remembers
        content = [w for w in picked if w.casefold() not in QUERY_STOPWORDS]
        if len(content) >= 4 and sum(len(w) for w in content) >= 20:
            yield " ".join(picked)


def _variants(phrase: str, rng: random.Random) -> dict[str, str]:
    words = phrase.split()
    out = {"exact": phrase}
    inner = [i for i, w in enumerate(words) if w.casefold() not in QUERY_STOPWORDS and 0 < i < len(words) - 1]
    if inner:
        i = rng.choice(inner)
        out["dropped"] = " ".join(words[:i] + words[i + 1:])
    swaps = [i for i, w in enumerate(words) if w.casefold() in SYNONYMS]
    if swaps:
        i = rng.choice(swaps)
        out["synonym"] = " ".join(words[:i] + [SYNONYMS[words[i].casefold()]] + words[i + 1:])
    return out


def phrase_queries(index: Any, *, per_paper: int = 3, seed: int = 0) -> list[Phrase]:
    """Up to `per_paper` phrases of each paper of the index (an `IndexBackend`), each held by one
    unit alone (body text, captions and table text of every unit compared, case and spacing
    folded, punctuation aside), in each form it has."""
    rng = random.Random(seed)
    units = list(_body_units(index))
    texts = [_plain(u.text) if hasattr(u, "text") else _plain(f"{u.caption}\n{u.table_text}") for u, _ in units]
    by_paper: dict[str, list[int]] = {}
    for i, (u, ok) in enumerate(units):
        if ok:
            by_paper.setdefault(u.paper_id, []).append(i)
    out: list[Phrase] = []
    for pid, idx in by_paper.items():
        rng.shuffle(idx)
        got = 0
        for i in idx:
            if got >= per_paper:
                break
            u = units[i][0]
            for phrase in _candidates(u.text, rng):
                key = _plain(phrase)
                if sum(key in t for t in texts) != 1 or key not in texts[i]:
                    continue
                out += [Phrase(form, q, phrase, u.unit_id, pid) for form, q in _variants(phrase, rng).items()]
                got += 1
                break
    return out
