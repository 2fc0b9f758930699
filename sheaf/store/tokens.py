"""FTS5's own tokens of a text, in process: the terms and positions the index's FTS5 tables hold
(`sheaf.store.fulltext.FTS_TOKENIZER`), made by an in-memory FTS5 table so that nothing here
re-implements a stemmer. Used by the bm25 of the warm server and of Postgres (`sheaf.store.bm25`)
and by the ranking's phrase and proximity evidence (`sheaf.search.evidence`); no numpy."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import pysqlite3.dbapi2 as sqlite3  # the SQLite (and FTS5 tokenizer) the index files are written with

__all__ = ["FtsTokenizer", "COL_SHIFT"]

COL_SHIFT = 28  # an instance's code: column << 28 | offset (`sheaf.store.bm25`'s layout)
_TOKEN_CACHE = 20_000


class FtsTokenizer:
    """The tokens FTS5 makes of text with a tokenizer (``porter unicode61 remove_diacritics 2``):
    an in-memory FTS5 table does the work, so nothing here re-implements a stemmer. Thread-safe."""

    def __init__(self, cache: int = _TOKEN_CACHE) -> None:
        self._tokens: OrderedDict[tuple[str, str], tuple[str, ...]] = OrderedDict()
        self._conns: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._cache = cache

    def _conn(self, tokenizer: str) -> Any:
        conn = self._conns.get(tokenizer)
        if conn is None:
            conn = sqlite3.connect(":memory:", check_same_thread=False)
            quoted = tokenizer.replace("'", "''")
            conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{quoted}')")
            conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
            self._conns[tokenizer] = conn
        return conn

    def tokens(self, tokenizer: str, text: str) -> tuple[str, ...]:
        """The tokens of `text`, in order."""
        key = (tokenizer, text)
        with self._lock:
            hit = self._tokens.get(key)
            if hit is not None:
                return hit
            conn = self._conn(tokenizer)
            conn.execute("INSERT INTO t(rowid, x) VALUES (1, ?)", (text,))
            toks = tuple(r[0] for r in conn.execute('SELECT term FROM v ORDER BY "offset"'))
            conn.execute("DELETE FROM t")
            self._tokens[key] = toks
            while len(self._tokens) > self._cache:
                self._tokens.popitem(last=False)
            return toks

    def instances(self, tokenizer: str, rows: Iterable[Sequence[str]]) -> list[tuple[dict[str, list[int]], int]]:
        """For each row (its column values), ``({term: [column << 28 | offset, ...]}, tokens in
        the row)``: what FTS5 indexes of the row, codes sorted."""
        rows = list(rows)
        if not rows:
            return []
        ncol = max(len(r) for r in rows)
        with self._lock:
            conn = sqlite3.connect(":memory:")
            try:
                quoted = tokenizer.replace("'", "''")
                cols = ", ".join(f"c{i}" for i in range(ncol))
                conn.execute(f"CREATE VIRTUAL TABLE t USING fts5({cols}, tokenize='{quoted}')")
                conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
                conn.executemany(f"INSERT INTO t(rowid, {cols}) VALUES (?, {', '.join('?' * ncol)})",
                                 [(i + 1, *(list(r) + [""] * (ncol - len(r)))) for i, r in enumerate(rows)])
                out: list[tuple[dict[str, list[int]], int]] = [({}, 0) for _ in rows]
                colno = {f"c{i}": i for i in range(ncol)}
                counts = [0] * len(rows)
                for term, doc, col, off in conn.execute('SELECT term, doc, col, "offset" FROM v ORDER BY doc, term, col, "offset"'):
                    out[doc - 1][0].setdefault(term, []).append(colno[col] << COL_SHIFT | off)
                    counts[doc - 1] += 1
            finally:
                conn.close()
        return [(terms, counts[i]) for i, (terms, _) in enumerate(out)]

    def close(self) -> None:
        with self._lock:
            for c in self._conns.values():
                c.close()
            self._conns.clear()
