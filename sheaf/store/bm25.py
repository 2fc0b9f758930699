"""FTS5's bm25, computed outside FTS5: the one implementation of its matching and scoring that the
warm server's in-memory copy (`sheaf.store.sqlite.memory_bm25.Bm25Accelerator`) and the Postgres backend
(`sheaf.store.postgres`, from term statistics kept in Postgres) both use, so either ranks
exactly as the SQLite FTS5 tables do:

- which rows match: the expressions `sheaf.store.fulltext.build_match_query` writes (quoted
  phrases, a ``*`` prefix on a phrase's last token, ``(... OR ...)`` groups, joined by one of
  AND / OR), parsed by `parse_match`;
- the tokens: FTS5's own tokenizer, run in process on an in-memory table (`sheaf.store.tokens`),
  for documents and queries alike;
- the score: `fts5Bm25Function` of SQLite's fts5_aux.c, operation by operation in double
  precision (k1 = 1.2, b = 0.75; idf = log((N - n + 0.5) / (n + 0.5)), 1e-6 when not positive;
  phrase frequency = sum of the column weights of its instances; the document length of the
  row and the average length of the table), phrases summed in query order. Column weights
  must be multiples of 1/64 (Sheaf's are), so that every frequency is exact whatever the
  order of the additions;
- the order: score, then rowid.

`Bm25Table` holds a table's instances (or only those of one query's terms: the Postgres
backend builds one per query) as sorted int64 codes ``rowid << 36 | column << 28 | offset``.
"""
from __future__ import annotations

import bisect
import functools
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from sheaf.store.tokens import FtsTokenizer  # noqa: F401 - part of this module's interface

__all__ = ["K1", "B", "ROW_SHIFT", "COL_SHIFT", "OFFSET_MASK", "parse_match", "column_weights", "Bm25Table",
           "RankedRows", "FtsTokenizer", "evaluate", "member"]

K1 = 1.2
B = 0.75
ROW_SHIFT = 36  # code = rowid << 36 | column << 28 | offset
COL_SHIFT = 28
OFFSET_MASK = (1 << COL_SHIFT) - 1
_PHRASE_CACHE = 4096


# --- the MATCH expressions Sheaf writes -------------------------------------------------------

_PHRASE_RE = re.compile(r'"((?:[^"]|"")*)"(\*?)')


def parse_match(match: str) -> tuple[str, list[list[tuple[str, bool]]]] | None:
    """``(operator, groups)`` of a MATCH expression made of quoted phrases, ``(p OR p ...)``
    groups and one operator (AND or OR) between groups; each group is a list of
    ``(phrase text, prefix)``. None for anything else (FTS5 then answers)."""
    i, n = 0, len(match)
    groups: list[list[tuple[str, bool]]] = []
    ops: set[str] = set()

    def phrase(at: int) -> tuple[tuple[str, bool], int] | None:
        m = _PHRASE_RE.match(match, at)
        if m is None:
            return None
        return (m.group(1).replace('""', '"'), m.group(2) == "*"), m.end()

    while True:
        if i < n and match[i] == "(":
            got = phrase(i + 1)
            if got is None:
                return None
            g, i = [got[0]], got[1]
            while match.startswith(" OR ", i):
                got = phrase(i + 4)
                if got is None:
                    return None
                g.append(got[0])
                i = got[1]
            if not match.startswith(")", i):
                return None
            i += 1
        else:
            got = phrase(i)
            if got is None:
                return None
            g, i = [got[0]], got[1]
        groups.append(g)
        if i == n:
            break
        for op in (" AND ", " OR "):
            if match.startswith(op, i):
                ops.add(op.strip())
                i += len(op)
                break
        else:
            return None
    if len(ops) > 1:
        return None
    return (ops.pop() if ops else "AND"), groups



# --- a table's instances ----------------------------------------------------------------------



def column_weights(n: int, weights: Sequence[float] | None) -> tuple[float, ...] | None:
    """bm25's weights of `n` columns as FTS5 reads them (missing ones are 1.0), or None when they
    are not multiples of 1/64: frequencies would then depend on the order of the additions."""
    w = tuple(float(x) for x in (weights or ()))[:n]
    w = w + (1.0,) * (n - len(w))
    return None if any(x * 64 != round(x * 64) or abs(x) > 1024 for x in w) else w


class Bm25Table:
    """An FTS5 table's instances and row lengths (or only those of some terms), for one state of the table."""

    def __init__(self, fts: str, columns: list[str], tokenizer: str, sig: tuple[Any, ...] | None,
                 n_row: int, n_token: int, doclen: np.ndarray, terms: list[str], starts: np.ndarray,
                 codes: np.ndarray, n_hits: dict[str, int] | None = None) -> None:
        self.fts = fts
        self.columns = columns
        self.tokenizer = tokenizer
        self.signature = sig
        self.n_row = n_row
        self.avgdl = float(n_token) / float(n_row) if n_row else 0.0
        self.doclen = doclen  # float64, indexed by rowid (0 where no row)
        self.terms = terms  # sorted as FTS5 sorts them (bytes of UTF-8 = code points)
        self.index = {t: i for i, t in enumerate(terms)}
        self.starts = starts  # int64 (len(terms) + 1,): term i's codes are codes[starts[i]:starts[i+1]]
        self.codes = codes  # int64, sorted within each term
        # The rows of the whole table holding each term, when the table holds only some of its rows
        # (the Postgres backend reads only the rows that can match): a single term's idf must still
        # count them all. A phrase of several terms or a prefix counts the rows of this table that
        # hold it: the reader includes every row holding it (`PostgresIndex._ranked`).
        self.n_hits = n_hits
        self._cache: OrderedDict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._singles: dict[tuple[float, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        with self._lock:
            singles = sum(a.nbytes for v in self._singles.values() for a in v)
        return int(self.codes.nbytes + self.doclen.nbytes + self.starts.nbytes + singles)

    # -- phrases ----------------------------------------------------------------------------------

    def weights(self, weights: Sequence[float] | None) -> tuple[float, ...] | None:
        return column_weights(len(self.columns), weights)

    def _term_range(self, token: str, prefix: bool) -> tuple[int, int]:
        """The codes of the term (`prefix`: of every term starting with it) are
        ``codes[a:b]``: the terms are sorted, so those of a prefix are one run."""
        if not prefix:
            i = self.index.get(token)
            return (0, 0) if i is None else (int(self.starts[i]), int(self.starts[i + 1]))
        lo = bisect.bisect_left(self.terms, token)
        hi = bisect.bisect_left(self.terms, token + "\U0010ffff", lo)
        return int(self.starts[lo]), int(self.starts[hi])

    def _instances(self, tokens: tuple[str, ...], prefix: bool) -> np.ndarray:
        """Codes of the phrase's instances (the position of its first token), sorted. `prefix`:
        the last token is a prefix. The rarest token anchors the phrase; each other token is
        then looked up where it must be (same row and column, so many tokens away)."""
        n = len(tokens)
        ranges = [self._term_range(tok, prefix and j == n - 1) for j, tok in enumerate(tokens)]
        k = min(range(n), key=lambda j: ranges[j][1] - ranges[j][0])
        a, b = ranges[k]
        cand = self.codes[a:b]
        if prefix and k == n - 1:
            cand = np.sort(cand)  # one sorted run per term of the prefix
        if k:
            cand = cand[(cand & OFFSET_MASK) >= k] - k  # where the phrase would start
        for j in range(n):
            if j == k or not len(cand):
                continue
            want = cand + j
            nxt = self.codes[ranges[j][0]:ranges[j][1]]
            if prefix and j == n - 1:  # several sorted runs: look each code up in `want`
                pos = np.minimum(np.searchsorted(want, nxt), len(want) - 1)
                nxt = np.sort(nxt[want[pos] == nxt])
            cand = cand[member(want, nxt)]
        return cand

    def _idf(self, n_hit: int) -> float:
        """fts5Bm25GetData's idf, with the C library's log as SQLite calls it (numpy's vector
        log may differ in the last bit)."""
        ratio = (self.n_row - n_hit + 0.5) / (n_hit + 0.5)
        # log(ratio) <= 0 exactly when ratio <= 1; a count above the rows (statistics out of step
        # with the rows, which doctor finds) would have no log at all.
        return 1e-6 if ratio <= 1.0 else math.log(ratio)

    def _score(self, rowids: np.ndarray, f: np.ndarray, idf: np.ndarray | float) -> np.ndarray:
        """fts5Bm25Function's term for each row: ``idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * D
        / avgdl))``, operation by operation as SQLite computes it."""
        D = self.doclen[rowids]
        terms: np.ndarray = idf * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * D / self.avgdl)))
        return terms

    def _rows_of(self, inst: np.ndarray, weights: tuple[float, ...],
                 bounds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row starts, rowids, frequencies) of sorted instance codes; a new row also starts at
        each of `bounds` (the first instance of each term)."""
        rowcol = inst >> COL_SHIFT
        w = np.asarray(weights, dtype=np.float64)[(rowcol & 0xFF).astype(np.intp)]
        rows = rowcol >> (ROW_SHIFT - COL_SHIFT)
        if not len(rows):
            return np.zeros(0, np.int64), rows, w
        new = np.empty(len(rows), dtype=bool)
        new[0] = True
        np.not_equal(rows[1:], rows[:-1], out=new[1:])
        if bounds is not None:
            new[bounds] = True
        first = np.flatnonzero(new)
        return first, rows[first], np.add.reduceat(w, first)  # exact: weights are multiples of 1/64

    def _single_terms(self, weights: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For every term at once: (start of each term's rows, rowids, score terms), for `weights`.
        About 1 s per 10M instances, once per weights (the server warms its three)."""
        with self._lock:
            hit = self._singles.get(weights)
        if hit is not None:
            return hit
        first, rowids, f = self._rows_of(self.codes, weights, self.starts[:-1][np.diff(self.starts) > 0])
        ustart = np.searchsorted(first, self.starts)
        n_hit = np.diff(ustart)
        known = self.n_hits or {}
        idf = np.repeat(np.array([self._idf(int(known.get(t, n))) for t, n in zip(self.terms, n_hit)],
                                 dtype=np.float64), n_hit)
        out = (ustart, rowids.astype(np.int32) if len(self.doclen) < 2**31 else rowids,
               self._score(rowids, f, idf))
        with self._lock:
            while len(self._singles) >= 3:  # one per weights in use (the server ranks with three)
                self._singles.pop(next(iter(self._singles)))
            self._singles[weights] = out
        return out

    def phrase(self, tokens: tuple[str, ...], prefix: bool, weights: tuple[float, ...]
               ) -> tuple[np.ndarray, np.ndarray]:
        """(rowids, score terms) of one phrase: the rows holding it, and for each the phrase's
        term of bm25 (`_score`)."""
        if len(tokens) == 1 and not prefix:
            i = self.index.get(tokens[0])
            if i is None:
                return self.codes[:0], np.zeros(0)
            ustart, rowids, contrib = self._single_terms(weights)
            return rowids[ustart[i]:ustart[i + 1]], contrib[ustart[i]:ustart[i + 1]]
        key = (tokens, prefix, weights)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        _, rowids, f = self._rows_of(self._instances(tokens, prefix), weights)
        out = (rowids, self._score(rowids, f, self._idf(len(rowids))))
        with self._lock:
            self._cache[key] = out
            while len(self._cache) > _PHRASE_CACHE:
                self._cache.popitem(last=False)
        return out


class RankedRows:
    """(rowid, bm25) rows best first (bm25 ascending, then rowid), read like a cursor."""

    def __init__(self, rowids: np.ndarray, bm25: np.ndarray) -> None:
        self._r = rowids
        self._s = bm25

    def fetchmany(self, n: int) -> list[tuple[int, float]]:
        r, s = self._r, self._s
        if n <= 0 or not len(r):
            return []
        if len(r) <= n:  # all of them
            order = np.lexsort((r, s))
            self._r, self._s = r[:0], s[:0]
            return list(zip(r[order].tolist(), s[order].tolist()))
        near = s <= np.partition(s, n - 1)[n - 1]  # the n best and every row tied with the n-th
        cr, cs = r[near], s[near]
        take = np.lexsort((cr, cs))[:n]
        left = np.ones(len(cr), dtype=bool)
        left[take] = False
        self._r = np.concatenate((cr[left], r[~near]))
        self._s = np.concatenate((cs[left], s[~near]))
        return list(zip(cr[take].tolist(), cs[take].tolist()))

    def fetchall(self) -> list[tuple[int, float]]:
        return self.fetchmany(len(self._r))

    def close(self) -> None:
        self._r, self._s = self._r[:0], self._s[:0]




def evaluate(t: Bm25Table, parsed: tuple[str, list[list[tuple[str, bool]]]], w: tuple[float, ...],
             rowids: Sequence[int] | None, tokens: Any) -> RankedRows | None:
    """The ranked rows of a parsed expression in table `t` (None: not answerable); `tokens(tokenizer,
    text)` gives a phrase's tokens (`FtsTokenizer.tokens`)."""
    op, groups = parsed
    scored: list[list[tuple[np.ndarray, np.ndarray]]] = []  # per group, per phrase: (rows, terms)
    for g in groups:
        scored.append([])
        for text, prefix in g:
            toks = tokens(t.tokenizer, text)
            if not toks or len(toks) > 256:
                return None
            scored[-1].append(t.phrase(toks, prefix, w))
    size = len(t.doclen)
    allow = None
    if rowids is not None:
        allow = np.zeros(size, dtype=bool)
        allow[np.asarray([r for r in rowids if 0 <= r < size], dtype=np.int64)] = True
    if op == "AND":  # the rows holding every group: intersect, smallest first
        rows_of = [ph[0][0] if len(ph) == 1 else functools.reduce(np.union1d, [r for r, _ in ph])
                   for ph in scored]
        cand = None
        for gr in sorted(rows_of, key=len):
            cand = gr if cand is None else cand[member(cand, gr)]
            if not len(cand):
                break
        cand = np.asarray(cand, dtype=np.int64)
        if allow is not None:
            cand = cand[allow[cand]]
        acc = np.zeros(len(cand), dtype=np.float64)
        for ph in scored:
            for r, contrib in ph:  # phrases in query order, as fts5Bm25Function sums them
                pos = np.searchsorted(r, cand)
                m = member(cand, r, pos)
                acc[m] += contrib[pos[m]]
        return RankedRows(cand, -1.0 * acc)
    acc = np.zeros(size, dtype=np.float64)
    seen = np.zeros(size, dtype=bool)
    for ph in scored:
        for r, contrib in ph:
            acc[r] += contrib  # phrases in query order, as fts5Bm25Function sums them
            seen[r] = True
    if allow is not None:
        seen &= allow
    idx = np.flatnonzero(seen)
    return RankedRows(idx, -1.0 * acc[idx])


def member(a: np.ndarray, sorted_b: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
    """Which items of `a` are in `sorted_b` (`pos`: ``np.searchsorted(sorted_b, a)`` if known)."""
    if not len(sorted_b):
        return np.zeros(len(a), dtype=bool)
    if pos is None:
        pos = np.searchsorted(sorted_b, a)
    found: np.ndarray = sorted_b[np.minimum(pos, len(sorted_b) - 1)] == a
    return found
