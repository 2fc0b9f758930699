"""FTS5's bm25 ranking computed from an in-memory copy of the full-text index: the lexical
accelerator of a warm `sheaf serve` (what `MatrixAccelerator` is to vector search).

At 100k units, a claim-length OR query makes FTS5 score every unit holding any of its words
(~50k rows): 55 ms p50 / 107 ms p95 here. The same ranking over arrays held in memory takes
a few milliseconds. The answer must not change, so this module reproduces FTS5 exactly:

- which rows match: the expressions `sheaf.store.sqlite.fts.build_match_query` writes (quoted phrases,
  a ``*`` prefix on a phrase's last token, ``(... OR ...)`` groups, joined by one of AND / OR);
  anything else is declined (``None``) and FTS5 answers;
- the score: `fts5Bm25Function` of SQLite's fts5_aux.c, operation by operation in double
  precision (k1 = 1.2, b = 0.75; idf = log((N - n + 0.5) / (n + 0.5)), 1e-6 when not positive;
  phrase frequency = sum of the column weights of its instances; the document length of the
  row and the average length from the table's own records), phrases summed in query order.
  Column weights must be multiples of 1/64 (Sheaf's are), so that every frequency is exact
  whatever the order of the additions;
- the order: score, then rowid.

The copy is read through fts5vocab (every instance: term, row, column, offset) in one read
transaction, in a background thread (about 10 s at 100k units, with every single word's score
terms precomputed for the weights the server ranks with), and checked against FTS5 on a few
rankings. It is valid for one state of the table: FTS5's structure and averages records, which
every write changes, and the index's ``fts_epoch``, which every rebuild replaces. A query
against any other state is declined (FTS5 answers) until the table has settled and the copy is
reloaded. Tests compare this with FTS5 on about a thousand random queries (tests/test_bm25.py).
"""
from __future__ import annotations

import bisect
import functools
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sheaf.store.sqlite.db import connected_to
from sheaf.store.sqlite.db import connect
from sheaf.store.sqlite.db import sqlite3

__all__ = ["Bm25Accelerator", "parse_match", "RankedRows"]

K1 = 1.2
B = 0.75
_ROW_SHIFT = 36  # code = rowid << 36 | column << 28 | offset
_COL_SHIFT = 28
_OFFSET_MASK = (1 << _COL_SHIFT) - 1
_PHRASE_CACHE = 4096
_TOKEN_CACHE = 20_000


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


# --- one table in memory ----------------------------------------------------------------------

def _varints(blob: bytes) -> list[int]:
    """SQLite/FTS5 varints (big-endian 7-bit groups; a 9th byte holds 8 bits)."""
    out: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        v = 0
        for j in range(9):
            c = blob[i]
            i += 1
            if j == 8:
                v = (v << 8) | c
                break
            v = (v << 7) | (c & 0x7F)
            if c < 0x80:
                break
        out.append(v)
    return out


def _fts5_args(sql: str) -> list[str] | None:
    """The comma-separated arguments of ``CREATE VIRTUAL TABLE ... USING fts5(...)``, quotes
    respected; None when the statement is not one."""
    m = re.search(r"\busing\s+fts5\s*\(", sql, re.IGNORECASE)
    if m is None:
        return None
    args, cur, quote, depth = [], [], "", 0
    for ch in sql[m.end():]:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"`[":
            quote = "]" if ch == "[" else ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                args.append("".join(cur).strip())
                return args
            depth -= 1
        elif ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    return None


def _unquote(v: str) -> str:
    if len(v) >= 2 and v[0] in "'\"`" and v[-1] == v[0]:
        return v[1:-1].replace(v[0] * 2, v[0])
    return v


def _table_sql(conn: Any, fts: str) -> tuple[list[str], str] | None:
    """(columns, tokenizer arguments) of an FTS5 table made as Sheaf makes them (plain columns;
    ``content=''``, ``tokenize=...`` and ``prefix=...`` options only), or None: any other
    option (detail, columnsize, contentless_delete, tokendata, locale, an external content
    table, UNINDEXED columns ...) may change what matches or how it is scored."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (fts,)).fetchone()
    args = _fts5_args(row[0] or "") if row is not None else None
    if not args:
        return None
    cols: list[str] = []
    tokenizer = "unicode61"
    contentless = False
    for a in args:
        if "=" in a:
            name, _, value = a.partition("=")
            name, value = name.strip().lower(), _unquote(value.strip())
            if name == "tokenize":
                tokenizer = value
            elif name == "content" and value == "":
                contentless = True
            elif name != "prefix":
                return None
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", a):
            cols.append(a)
        else:
            return None
    if not contentless or cols != [r[1] for r in conn.execute(f"PRAGMA table_info({fts})")]:
        return None
    return cols, tokenizer


def signature(conn: Any, fts: str) -> tuple[Any, ...]:
    """The state of an FTS table: FTS5's averages (rowid 1) and structure (rowid 10) records,
    which every write changes, and the index's ``fts_epoch`` (`sheaf.store.sqlite.index.FTS_EPOCH`), which a
    rebuild replaces (a rebuild restarts FTS5's records, so a state could look like an earlier
    one), read in one statement (one snapshot)."""
    try:
        row = conn.execute(f"SELECT (SELECT block FROM {fts}_data WHERE id = 1), "
                           f"(SELECT block FROM {fts}_data WHERE id = 10), "
                           "(SELECT value FROM meta WHERE key = 'fts_epoch')").fetchone()
    except Exception as e:  # noqa: BLE001 - a file without Sheaf's meta table (tests, tools)
        if "no such table: meta" not in str(e):
            raise
        row = (*conn.execute(f"SELECT (SELECT block FROM {fts}_data WHERE id = 1), "
                             f"(SELECT block FROM {fts}_data WHERE id = 10)").fetchone(), None)
    return bytes(row[0] or b""), bytes(row[1] or b""), row[2]


def _vocab_table(conn: Any, fts: str) -> str:
    """An fts5vocab ``instance`` table over `fts` in the connection's temp schema."""
    name = f"sheaf_vocab_{fts}"
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name} USING fts5vocab(main, {fts}, instance)")
    return name


class _Table:
    """An FTS5 table's instances and row lengths, for one state of the table."""

    def __init__(self, fts: str, columns: list[str], tokenizer: str, sig: tuple[bytes, ...],
                 n_row: int, n_token: int, doclen: np.ndarray, terms: list[str], starts: np.ndarray,
                 codes: np.ndarray) -> None:
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
        self._cache: OrderedDict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._singles: dict[tuple[float, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        with self._lock:
            singles = sum(a.nbytes for v in self._singles.values() for a in v)
        return int(self.codes.nbytes + self.doclen.nbytes + self.starts.nbytes + singles)

    @classmethod
    def load(cls, conn: Any, fts: str) -> "tuple[_Table | None, tuple[Any, ...] | None]":
        """(the table, its state) read in one read transaction (`conn`: a connection of its
        own); the table is None when its shape or contents are not handled here."""
        conn.execute("BEGIN")
        try:
            sig = signature(conn, fts)
            shape = _table_sql(conn, fts)
            if shape is None:
                return None, sig
            columns, tokenizer = shape
            avg = _varints(sig[0]) or [0]  # an empty table has no averages record yet
            n_row, n_token = avg[0], sum(avg[1:1 + len(columns)])
            ids, sizes = [], []
            for rid, blob in conn.execute(f"SELECT id, sz FROM {fts}_docsize"):
                ids.append(rid)
                sizes.append(sum(_varints(blob)))
            # Score arrays are dense over rowids: refuse ids far sparser than the rows.
            if len(ids) != n_row or (ids and (min(ids) < 0 or max(ids) > min(max(4 * n_row, 1_000_000), 2**26))):
                return None, sig
            present = np.zeros((max(ids) + 1) if ids else 1, dtype=bool)
            present[ids] = True
            doclen = np.zeros(len(present), dtype=np.float64)
            doclen[np.asarray(ids, dtype=np.int64)] = np.asarray(sizes, dtype=np.float64)
            case = " ".join(f"WHEN '{c}' THEN {i}" for i, c in enumerate(columns))
            terms: list[str] = []
            blobs: list[bytes] = []
            for term, blob in conn.execute(
                    f"SELECT term, unhex(group_concat(printf('%016x', doc * {1 << _ROW_SHIFT} + "
                    f"(CASE col {case} END) * {1 << _COL_SHIFT} + \"offset\"), '')) "
                    f"FROM temp.{_vocab_table(conn, fts)} GROUP BY term"):
                terms.append(term)
                blobs.append(blob)
        finally:
            conn.execute("COMMIT")
        if any(a >= b for a, b in zip(terms, terms[1:])):
            return None, sig  # prefixes are looked up by bisection: the terms must be sorted
        lens = np.fromiter((len(b) // 8 for b in blobs), dtype=np.int64, count=len(blobs))
        starts = np.zeros(len(blobs) + 1, dtype=np.int64)
        np.cumsum(lens, out=starts[1:])
        codes = np.frombuffer(b"".join(blobs), dtype=">i8").astype(np.int64)
        del blobs
        # fts5vocab lists a term's instances by row, column, offset: check rather than trust
        if len(codes) > 1:
            step = np.diff(codes) > 0
            step[starts[1:-1] - 1] = True
            if not step.all():
                return None, sig
        if (codes & _OFFSET_MASK).max(initial=0) > _OFFSET_MASK - 1024:
            return None, sig
        rows = codes >> _ROW_SHIFT
        if len(rows) and (rows.max() >= len(present) or not present[rows].all()):
            return None, sig  # an indexed row without its length (FTS5 itself would fail on it)
        return cls(fts, columns, tokenizer, sig, n_row, n_token, doclen, terms, starts, codes), sig

    # -- phrases ----------------------------------------------------------------------------------

    def weights(self, weights: Sequence[float] | None) -> tuple[float, ...] | None:
        """bm25's column weights as FTS5 reads them (missing ones are 1.0), or None when they are
        not multiples of 1/64: frequencies would then depend on the order of the additions."""
        w = tuple(float(x) for x in (weights or ()))[:len(self.columns)]
        w = w + (1.0,) * (len(self.columns) - len(w))
        return None if any(x * 64 != round(x * 64) or abs(x) > 1024 for x in w) else w

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
            cand = cand[(cand & _OFFSET_MASK) >= k] - k  # where the phrase would start
        for j in range(n):
            if j == k or not len(cand):
                continue
            want = cand + j
            nxt = self.codes[ranges[j][0]:ranges[j][1]]
            if prefix and j == n - 1:  # several sorted runs: look each code up in `want`
                pos = np.minimum(np.searchsorted(want, nxt), len(want) - 1)
                nxt = np.sort(nxt[want[pos] == nxt])
            cand = cand[_member(want, nxt)]
        return cand

    def _idf(self, n_hit: int) -> float:
        """fts5Bm25GetData's idf, with the C library's log as SQLite calls it (numpy's vector
        log may differ in the last bit)."""
        idf = math.log((self.n_row - n_hit + 0.5) / (n_hit + 0.5))
        return 1e-6 if idf <= 0.0 else idf

    def _score(self, rowids: np.ndarray, f: np.ndarray, idf: np.ndarray | float) -> np.ndarray:
        """fts5Bm25Function's term for each row: ``idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * D
        / avgdl))``, operation by operation as SQLite computes it."""
        D = self.doclen[rowids]
        return idf * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * D / self.avgdl)))

    def _rows_of(self, inst: np.ndarray, weights: tuple[float, ...],
                 bounds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row starts, rowids, frequencies) of sorted instance codes; a new row also starts at
        each of `bounds` (the first instance of each term)."""
        rowcol = inst >> _COL_SHIFT
        w = np.asarray(weights, dtype=np.float64)[(rowcol & 0xFF).astype(np.intp)]
        rows = rowcol >> (_ROW_SHIFT - _COL_SHIFT)
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
        idf = np.repeat(np.array([self._idf(int(n)) for n in n_hit], dtype=np.float64), n_hit)
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


def wait_for_loads(lock: threading.Lock, loading: dict[str, threading.Thread], timeout: float) -> bool:
    """Wait (at most `timeout` s) until `loading` (loader threads, guarded by `lock`, each
    removing itself when done) is empty; True when it is. Shared by the server's accelerators."""
    deadline = time.monotonic() + timeout
    while True:
        with lock:
            threads = list(loading.values())
        if not threads:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        threads[0].join(left)


# --- the accelerator ----------------------------------------------------------------------------

class Bm25Accelerator:
    """A lexical engine (`sheaf.store.sqlite.reader.LexicalEngine`) for one index file: pass it
    to the index (`SqliteIndex(..., lexical_engine=...)` or `Retriever.open(...)`). Thread-safe.
    Answers None (→ FTS5) for another file, an expression or weights it does not handle, and
    while a table's copy is (re)loaded in the background after a change."""

    name = "bm25-memory"

    def __init__(self, index_path: str | Path, *, busy_timeout_ms: int = 10_000,
                 warm_weights: dict[str, Sequence[float]] | None = None, settle_seconds: float = 2.0) -> None:
        self.path = Path(index_path).resolve()
        self.settle_seconds = settle_seconds
        self._seen: dict[str, tuple[Any, float]] = {}  # table → (a state not loaded yet, first seen)
        self.warm_weights = dict(warm_weights or {})  # table → weights ready at load
        self.busy_timeout_ms = busy_timeout_ms
        self._lock = threading.Lock()
        self._tables: dict[str, _Table] = {}
        self._loading: dict[str, threading.Thread] = {}
        self._tokens: OrderedDict[tuple[str, str], tuple[str, ...]] = OrderedDict()
        self._tok_conns: dict[str, Any] = {}
        self._tok_lock = threading.Lock()
        self._refused: dict[str, tuple[bytes, ...] | None] = {}  # table → the state it refused
        self.disabled: dict[str, str] = {}
        self.stats = {"answered": 0, "declined": 0, "loads": 0, "load_seconds": 0.0}

    # -- loading ----------------------------------------------------------------------------------

    def _connect(self) -> Any:

        return connect(self.path, readonly=True, busy_timeout_ms=self.busy_timeout_ms)

    def _install(self, fts: str) -> None:
        conn = None
        t0 = time.perf_counter()
        sig: tuple[Any, ...] | None = None
        try:
            conn = self._connect()
            sig = signature(conn, fts)  # known even if the load fails: that state is not retried
            t, sig = _Table.load(conn, fts)
            why = "table shape not handled in memory" if t is None else None
            if t is not None:
                w = t.weights(self.warm_weights.get(fts)) if fts in self.warm_weights else None
                if w is not None:
                    t._single_terms(w)
                why = self._verify(t, conn)
            with self._lock:
                self.stats["loads"] += 1
                self.stats["load_seconds"] = round(self.stats["load_seconds"] + time.perf_counter() - t0, 3)
                if why == "changed":
                    pass  # written meanwhile: the next query's state is loaded instead
                elif why:
                    self._refused[fts] = sig
                    self.disabled[fts] = why
                else:
                    self._tables[fts] = t
                    self._refused.pop(fts, None)
                    self.disabled.pop(fts, None)
        except Exception as e:  # noqa: BLE001 - FTS5 keeps answering
            with self._lock:
                self._refused[fts] = sig
                self.disabled[fts] = f"loading failed: {type(e).__name__}: {e}"
        finally:
            if conn is not None:
                conn.close()
            with self._lock:
                self._loading.pop(fts, None)

    def _verify(self, t: _Table, conn: Any) -> str | None:
        """A few rankings from the copy against FTS5's own, in one snapshot of the state the
        copy was read from: None when all agree (rows, order, scores), "changed" when the table
        was written meanwhile, else why not."""
        if not t.terms:
            return None
        big = max(range(len(t.terms)), key=lambda i: t.starts[i + 1] - t.starts[i])
        a, b = t.terms[big], t.terms[len(t.terms) // 2]
        checks = [f'"{a}" OR "{b}"', f'"{a}" AND "{b}"', f'"{b[:2]}"*',
                  f'("{a} {b}" OR "{b}") OR "{a}"']
        weights = tuple(self.warm_weights.get(t.fts) or ())
        w_sql = "".join(f", {float(x)}" for x in weights)
        conn.execute("BEGIN")
        try:
            if signature(conn, t.fts) != t.signature:
                return "changed"
            for match in checks:
                parsed = parse_match(match)
                w = t.weights(weights)
                got = self._evaluate(t, parsed, w, None) if parsed and w else None
                want = conn.execute(f"SELECT rowid, bm25({t.fts}{w_sql}) AS s FROM {t.fts} WHERE {t.fts} "
                                    "MATCH ? ORDER BY s, rowid LIMIT 50", (match,)).fetchall()
                if got is None or got.fetchmany(50) != [(r, s) for r, s in want]:
                    return f"the in-memory copy disagreed with FTS5 on {match!r}"
        finally:
            conn.execute("COMMIT")
        return None

    def table(self, fts: str, sig: tuple[Any, ...] | None = None, *, wait: bool = False) -> _Table | None:
        """The in-memory copy of `fts` if it is of state `sig` (None: whatever is loaded); else
        None, and a (re)load starts in the background (`wait=True`: now, and waits for it). A
        state whose load was refused is not tried again; a reload waits until the table has
        stayed in one state for `settle_seconds` (a build commits paper after paper: FTS5
        answers meanwhile, instead of a reload per commit)."""
        with self._lock:
            t = self._tables.get(fts)
            if t is not None and (sig is None or t.signature == sig):
                return t
            if sig is not None and self._refused.get(fts) == sig:
                return None
            if t is not None and sig is not None and not wait:
                now = time.monotonic()
                seen = self._seen.get(fts)
                if seen is None or seen[0] != sig:
                    self._seen[fts] = seen = (sig, now)
                if now - seen[1] < self.settle_seconds:
                    return None
            th = self._loading.get(fts)
            if th is None:
                th = threading.Thread(target=self._install, args=(fts,), daemon=True, name=f"sheaf-bm25-{fts}")
                self._loading[fts] = th
                th.start()
        if wait:
            th.join()
            with self._lock:
                t = self._tables.get(fts)
                return t if t is not None and (sig is None or t.signature == sig) else None
        return None

    def wait_idle(self, timeout: float = 120.0) -> bool:
        """Wait (bounded) for background loads to finish; True when none is left."""
        return wait_for_loads(self._lock, self._loading, timeout)

    def loaded(self) -> dict[str, int]:
        """Table → bytes held."""
        with self._lock:
            return {k: t.nbytes for k, t in self._tables.items()}

    def close(self) -> None:
        self.wait_idle()
        with self._lock:
            self._tables.clear()
        with self._tok_lock:
            for c in self._tok_conns.values():
                c.close()
            self._tok_conns.clear()

    # -- query tokens -----------------------------------------------------------------------------

    def tokens(self, tokenizer: str, text: str) -> tuple[str, ...]:
        """The tokens FTS5 makes of `text` with `tokenizer` (an in-memory table does the work)."""
        key = (tokenizer, text)
        with self._tok_lock:
            hit = self._tokens.get(key)
            if hit is not None:
                return hit
            conn = self._tok_conns.get(tokenizer)
            if conn is None:

                conn = sqlite3.connect(":memory:", check_same_thread=False)
                quoted = tokenizer.replace("'", "''")
                conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{quoted}')")
                conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
                self._tok_conns[tokenizer] = conn
            conn.execute("INSERT INTO t(rowid, x) VALUES (1, ?)", (text,))
            toks = tuple(r[0] for r in conn.execute('SELECT term FROM v ORDER BY "offset"'))
            conn.execute("DELETE FROM t")
            self._tokens[key] = toks
            while len(self._tokens) > _TOKEN_CACHE:
                self._tokens.popitem(last=False)
            return toks

    # -- the hook ---------------------------------------------------------------------------------

    def __call__(self, conn: Any, fts: str, weights: Sequence[float] | None, match: str,
                 rowids: Sequence[int] | None = None) -> RankedRows | None:
        """The rows of `fts` matching `match`, ranked as ``ORDER BY bm25(fts, *weights), rowid``
        (only `rowids` when given), or None: FTS5 must answer."""
        got = None
        try:
            got = self._rank(conn, fts, weights, match, rowids)
        except Exception:  # noqa: BLE001 - never worse than no accelerator
            got = None
        with self._lock:
            self.stats["answered" if got is not None else "declined"] += 1
        return got

    def _rank(self, conn: Any, fts: str, weights: Sequence[float] | None, match: str,
              rowids: Sequence[int] | None) -> RankedRows | None:
        parsed = parse_match(match)
        if parsed is None or not connected_to(conn, self.path):
            return None
        sig = signature(conn, fts)
        if sig[2] is None:
            return None  # no fts_epoch (not a Sheaf index, or one from before): states can't be told apart
        t = self.table(fts, sig)
        if t is None:
            return None
        w = t.weights(weights)
        if w is None:
            return None
        return self._evaluate(t, parsed, w, rowids)

    def _evaluate(self, t: _Table, parsed: tuple[str, list[list[tuple[str, bool]]]], w: tuple[float, ...],
                  rowids: Sequence[int] | None) -> RankedRows | None:
        """The ranked rows of a parsed expression in table copy `t` (None: not answerable)."""
        op, groups = parsed
        scored: list[list[tuple[np.ndarray, np.ndarray]]] = []  # per group, per phrase: (rows, terms)
        for g in groups:
            scored.append([])
            for text, prefix in g:
                toks = self.tokens(t.tokenizer, text)
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
                cand = gr if cand is None else cand[_member(cand, gr)]
                if not len(cand):
                    break
            cand = np.asarray(cand, dtype=np.int64)
            if allow is not None:
                cand = cand[allow[cand]]
            acc = np.zeros(len(cand), dtype=np.float64)
            for ph in scored:
                for r, contrib in ph:  # phrases in query order, as fts5Bm25Function sums them
                    pos = np.searchsorted(r, cand)
                    m = _member(cand, r, pos)
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


def _member(a: np.ndarray, sorted_b: np.ndarray, pos: np.ndarray | None = None) -> np.ndarray:
    """Which items of `a` are in `sorted_b` (`pos`: ``np.searchsorted(sorted_b, a)`` if known)."""
    if not len(sorted_b):
        return np.zeros(len(a), dtype=bool)
    if pos is None:
        pos = np.searchsorted(sorted_b, a)
    return sorted_b[np.minimum(pos, len(sorted_b) - 1)] == a
