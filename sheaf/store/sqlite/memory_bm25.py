"""FTS5's bm25 ranking computed from an in-memory copy of the full-text index: the lexical
accelerator of a warm `sheaf serve` (what `MatrixAccelerator` is to vector search).

At 100k units, a claim-length OR query makes FTS5 score every unit holding any of its words
(~50k rows): 55 ms p50 / 107 ms p95 here. The same ranking over arrays held in memory takes
a few milliseconds. The answer must not change, so this module reproduces FTS5 exactly:

The matching and the score are `sheaf.store.bm25`'s (shared with the Postgres backend):

- which rows match: the expressions `sheaf.store.fulltext.build_match_query` writes (quoted phrases,
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
reloaded. Tests compare this with FTS5 on about a thousand random queries (tests/search/test_bm25.py).
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sheaf.store.bm25 import COL_SHIFT as _COL_SHIFT
from sheaf.store.bm25 import OFFSET_MASK as _OFFSET_MASK
from sheaf.store.bm25 import ROW_SHIFT as _ROW_SHIFT
from sheaf.store.bm25 import Bm25Table, RankedRows, evaluate, parse_match
from sheaf.store.sqlite.db import connect, connected_to, varints
from sheaf.store.tokens import FtsTokenizer

__all__ = ["Bm25Accelerator", "parse_match", "RankedRows"]


# --- one table in memory ----------------------------------------------------------------------

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
    which every write changes, and the index's ``fts_epoch`` (`sheaf.store.sqlite.schema.FTS_EPOCH`), which a
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
class _Table(Bm25Table):
    """An FTS5 table's instances and row lengths, read from the SQLite file, for one state of the table."""

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
            avg = varints(sig[0]) or [0]  # an empty table has no averages record yet
            n_row, n_token = avg[0], sum(avg[1:1 + len(columns)])
            ids, sizes = [], []
            for rid, blob in conn.execute(f"SELECT id, sz FROM {fts}_docsize"):
                ids.append(rid)
                sizes.append(sum(varints(blob)))
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
    """A lexical engine (`sheaf.store.backend.LexicalEngine`) for one index file: pass it
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
        self.tokenizer = FtsTokenizer()
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
                elif t is not None:  # (always: a table not loaded has its why)
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
        self.tokenizer.close()

    def tokens(self, tokenizer: str, text: str) -> tuple[str, ...]:
        """The tokens FTS5 makes of `text` with `tokenizer` (`sheaf.store.tokens.FtsTokenizer`)."""
        return self.tokenizer.tokens(tokenizer, text)

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
        return evaluate(t, parsed, w, rowids, self.tokenizer.tokens)
