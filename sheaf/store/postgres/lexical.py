"""FTS5's bm25 on Postgres: the lexical candidates of `PostgresIndex`, ranked per query from the
postings of the query's terms (`lex_terms`) and the term statistics each paper's replace keeps
current (`lex_stats`), read in one snapshot: the same scores and order as the SQLite backend's
FTS5 tables (`sheaf.store.bm25` scores, `sheaf.store.fulltext` builds the expressions)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence, Set
from typing import Any

import numpy as np

from sheaf.core.envelope import SheafError
from sheaf.store.bm25 import K1, ROW_SHIFT, B, Bm25Table, column_weights, evaluate, parse_match
from sheaf.store.fulltext import FTS_TOKENIZER
from sheaf.store.postgres import writer
from sheaf.store.postgres.db import Where, one, psycopg, snapshot
from sheaf.store.postgres.schema import SCOPE_COLUMNS, SCOPES

_REF_TABLE = {"body": "body_units", "object": "object_units"}
#: The rows of a phrase of several terms (a hyphenated word, a code's variants): those holding its
#: rarest term when it has at most the first number of rows; else those holding every one of its
#: terms that has at most the second number times the rarest's rows (an index-only scan each,
#: intersected), since every such row is then read with its terms' positions.
PHRASE_NARROWING = (200, 20)
#: Some words with phrases whose rarest terms hold more rows than this in all: two reads (the rows
#: holding a phrase, then the query's other terms in those rows alone), else one.
TWO_PASSES_FROM = 3000
#: MaxScore's first try: the rows holding the rarest term of some words and the next rarest ones
#: while their postings stay within this share of all (`_ranked_in_sql`).
MAXSCORE_SHARE = 0.4
#: Looking a term up in one row costs about as much as reading this many of its postings in a run.
ROW_LOOKUP_COST = 8


def _as_codes(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Postings read with their count per column instead of their positions given codes that say
    as much: ``column << 28 | k`` for k below the count (the weighted frequency of a single term is
    all bm25 takes from them; no phrase is ever matched against these)."""
    out = []
    for r in rows:
        if r[0] is not None and r[4] is None:
            codes = [(c << 28) | k for c, n in enumerate(r[5]) for k in range(n)]
            r = (r[0], r[1], r[2], r[3], np.asarray(codes, dtype="<i4").tobytes(), r[5], r[6])
        out.append(r)
    return out


def _score_bounds(terms: Sequence[str], w: Sequence[float], n_rows: int, df: dict[str, int]) -> dict[str, float] | None:
    """Per distinct term of the query (in no row: left out), more than the most bm25 can give a row
    for it: its idf as the ranking takes it (1e-6 when not positive) times k1 + 1 (a term's
    frequency f gives f(k1 + 1) / (f + k1(1 - b + b dl/avgdl)) < k1 + 1), times its count in the
    query, with a margin for rounding. None when a weight is negative (no such bound)."""
    if any(x < 0 for x in w):
        return None
    out: dict[str, float] = {}
    for x in terms:
        k = df.get(x, 0)
        if not k:
            continue
        ratio = (n_rows - k + 0.5) / (k + 0.5)
        idf = math.log(ratio) if ratio > 1 else 0.0
        out[x] = out.get(x, 0.0) + (idf if idf > 0 else 1e-6) * (K1 + 1.0) * (1 + 1e-9)
    return out


class PostgresBm25:
    """The lexical ranking of `PostgresIndex` (a mixin: it reads `self.conn` and `self.where`)."""

    conn: psycopg.Connection[Any]
    where: Where


    def _ranked(self, scope: str, match: str, weights: Sequence[float] | None,
                paper_ids: Sequence[str] | None, limit: int = -1, per_paper: bool = False
                ) -> list[tuple[str, float, str]]:
        """(ref, bm25, paper_id) of the rows of `scope` matching `match`, best first (ties: seq), read
        in one snapshot. What is read follows the query, and the answer is FTS5's bm25 either way:

        - some words (or one group), `limit` given: the database ranks the single terms and sends
          the best `limit` rows (`_ranked_in_sql`, first from the rows holding the rarer terms
          alone when that is provably enough); the rows holding a phrase of several terms or a
          prefix are scored here, from their postings, and merged in;
        - every word: only the rows that can match are read, those holding each of the rarer groups
          (an intersection of their rows from the term index; none: nothing more is read), with
          each single term's row count over the scope for its idf;
        - and the rows holding each phrase of several terms or a prefix (found through its
          narrowing terms, `PHRASE_NARROWING`), so that its count of rows, and so its idf, is complete;
        - every row (no `limit`: `grep`, the code variants): the rows holding each phrase's
          narrowing terms (or prefix), not every posting of every term and prefix of the query.
        """
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {sorted(SCOPES)}")
        parsed = parse_match(match)
        if parsed is None:
            raise SheafError("BAD_QUERY", "the query could not be run", {"match": match},
                             hint="search for plain words; quotes, operators and brackets are treated as text")
        sid = SCOPES[scope]
        tok = writer.TOKENIZER.tokens
        groups: list[list[tuple[tuple[str, ...], bool]]] = []
        for group in parsed[1]:
            groups.append([])
            for text, prefix in group:
                toks = tok(FTS_TOKENIZER, text)
                if not toks:
                    return []
                groups[-1].append((toks, prefix))
        phrases = [ph for g in groups for ph in g]
        simple = [len(t) == 1 and not p for t, p in phrases]
        exact = {x for t, p in phrases for x in (t[:-1] if p else t)}
        prefixes = {t[-1] for t, p in phrases if p}
        w = column_weights(len(SCOPE_COLUMNS[scope]), weights)
        some = limit >= 0 and w is not None and (parsed[0] == "OR" or len(groups) == 1)
        if some and w is not None and all(simple):
            return self._ranked_in_sql(sid, [t[0] for t, _ in phrases], w, paper_ids, limit, per_paper)
        every = parsed[0] == "AND" and len(groups) > 1
        if not (some or every) and all(simple):
            return self._evaluate(scope, parsed, weights, paper_ids, self._postings(sid, exact, prefixes))
        with snapshot(self.conn, self.where):
            n_hits, in_range = self._row_counts(sid, exact, prefixes)

            def by_rows(ph: tuple[tuple[str, ...], bool]) -> list[tuple[int, str, bool]]:
                """The phrase's terms (and its prefix), rarest first: (postings, term, is a prefix)."""
                toks, prefix = ph
                opts = {(n_hits.get(x, 0), x, False) for x in (toks[:-1] if prefix else toks)}
                if prefix:
                    opts.add((in_range.get(toks[-1], 0), toks[-1], True))
                return sorted(opts)

            def size(ph: tuple[tuple[str, ...], bool]) -> tuple[int, str, bool]:
                """The phrase's rarest term (or its prefix): (postings, term, is a prefix)."""
                return by_rows(ph)[0]

            def narrowed(ph: tuple[tuple[str, ...], bool]) -> list[tuple[str, bool]]:
                """The terms whose rows hold the phrase's: its rarest, and those of its other terms
                not much commoner (`PHRASE_NARROWING`); the rows holding all of them are read."""
                opts = by_rows(ph)
                least = opts[0][0]
                if least == 0:  # a term in no row: the phrase is in none
                    return []
                if least <= PHRASE_NARROWING[0]:
                    return [opts[0][1:]]
                return [(x, pre) for n, x, pre in opts if n <= PHRASE_NARROWING[1] * least]

            # a term or prefix in no row of the scope has no posting to read (a code's variants
            # spelled together, "between1"*, of a number after a word): not looked up row by row
            exact = {x for x in exact if n_hits.get(x)}
            prefixes = {x for x in prefixes if in_range.get(x)}
            complex_anchors = [narrowed(ph) for ph, ok in zip(phrases, simple) if not ok]

            def at_most(anchors: Sequence[list[tuple[str, bool]]]) -> int:
                """At most how many rows hold one of `anchors` (each: rows holding all its terms)."""
                return sum(min((in_range if pre else n_hits).get(x, 0) for x, pre in a) for a in anchors if a)

            positions = {x for (t, _), ok in zip(phrases, simple) if not ok for x in t}
            if not (some or every):  # every row (grep): each phrase's rows are among its candidate rows
                anchors = [narrowed(ph) for ph in phrases]
                rows = self._postings(sid, exact, prefixes, some_rows=True, also=anchors, positions=positions,
                                      n_rows=at_most(anchors), n_hits=n_hits, in_range=in_range)
                return self._evaluate(scope, parsed, weights, paper_ids, rows, n_hits)
            if every:
                sizes = [sum(size(ph)[0] for ph in g) for g in groups]
                if min(sizes) == 0:
                    return []
                # Every match holds every group: the candidate rows are those holding each of the
                # groups not much commoner than the rarest (`PHRASE_NARROWING`: a phrase, the rows
                # holding its narrowing terms), intersected from index-only scans. A long claim's
                # every-word query mostly matches nothing (93 of the 100 parity claims' body calls at
                # 100k passages): then no posting is read at all.
                least = min(sizes)
                cheap = [g for g, n in sorted(zip(groups, sizes), key=lambda gn: gn[1])
                         if n <= PHRASE_NARROWING[1] * least]
                held = self._held_by_all(sid, [[narrowed(ph) for ph in g] for g in cheap], paper_ids)
                if not held:
                    return []
                if complex_anchors:
                    # The candidates holding no match: the phrases' own rows (read for their idf,
                    # every row holding them) are not read.
                    rows = self._postings(sid, exact, prefixes, some_rows=True, seqs=held, positions=positions,
                                          n_rows=len(held), n_hits=n_hits, in_range=in_range)
                    if not self._evaluate(scope, parsed, weights, paper_ids, rows, n_hits):
                        return []
                rows = self._postings(sid, exact, prefixes, some_rows=True, seqs=held, also=complex_anchors,
                                      positions=positions, n_rows=len(held), n_hits=n_hits, in_range=in_range)
                return self._evaluate(scope, parsed, weights, paper_ids, rows, n_hits)
            # Some words with phrases of several terms or prefixes: the rows holding those phrases
            # scored here; the best of the others by the database (their score is the single terms').
            only = [ph for ph, ok in zip(phrases, simple) if not ok]
            if sum(size(ph)[0] for ph in only) > TWO_PASSES_FROM:
                # Many candidate rows (those holding a phrase's terms, mostly many more than its own):
                # first the rows holding a phrase, from its terms' positions alone; then, in those
                # rows only, every term of the query.
                held = self._holding(scope, self._postings(
                    sid, exact & positions, prefixes, some_rows=True, also=complex_anchors, positions=positions,
                    n_rows=at_most(complex_anchors), n_hits=n_hits, in_range=in_range), only)
                some_rows = self._postings(sid, exact, prefixes, some_rows=True, seqs=held, positions=positions,
                                           n_rows=len(held), n_hits=n_hits, in_range=in_range) if held else None
            else:
                some_rows = self._postings(sid, exact, prefixes, some_rows=True, also=complex_anchors,
                                           positions=positions, n_rows=at_most(complex_anchors), n_hits=n_hits,
                                           in_range=in_range)
            mine = self._evaluate(scope, parsed, weights, paper_ids, some_rows, n_hits, with_seq=True, only=only) \
                if some_rows is not None else []
            singles = [t[0] for (t, _), ok in zip(phrases, simple) if ok]
            theirs = self._ranked_in_sql(sid, singles, w, paper_ids, limit, per_paper, n_hits=n_hits,
                                         exclude=[q for _, _, _, q in mine], with_seq=True) \
                if singles and w is not None else []  # (w is set: this is `some`)
        merged = sorted([*mine, *theirs], key=lambda r: (r[1], r[3]))
        return [(ref, s, pid) for ref, s, pid, _ in merged]

    def _term_rows(self, scope: str, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        """(rows of the scope, {term: rows holding it}), read in one snapshot: the same figures
        as the SQLite backend's fts5vocab and averages record."""
        sid = SCOPES[scope]
        with snapshot(self.conn, self.where):
            n = one(self.conn.execute("SELECT coalesce(sum(n_rows), 0)::bigint FROM lex_stats WHERE scope = %s",
                                  [sid]))[0]
            got = self._row_counts(sid, set(terms), set())[0] if terms else {}
        return int(n), got

    def _row_counts(self, sid: int, exact: set[str], prefixes: set[str]) -> tuple[dict[str, int], dict[str, int]]:
        """Postings of each term over the scope (= its rows), and of each prefix's terms: sums of
        the papers' counts (``lex_terms``)."""
        n_hits = {t: int(n) for t, n in self.conn.execute(
            "SELECT term, sum(n_rows) FROM lex_terms WHERE scope = %s AND term = ANY(%s) GROUP BY term",
            [sid, sorted(exact)]).fetchall()}
        in_range = {p: int(one(self.conn.execute(
            "SELECT coalesce(sum(n_rows), 0) FROM lex_terms WHERE scope = %s AND term >= %s AND term < %s",
            [sid, p, p + "\U0010ffff"]))[0]) for p in sorted(prefixes)}
        return n_hits, in_range

    @staticmethod
    def _terms_sql(exact: Iterable[str], prefixes: Iterable[str], col: str = "term") -> tuple[str, list[Any]]:
        cond = [f"{col} = ANY(%s)"]
        args: list[Any] = [sorted(exact)]
        for p in sorted(prefixes):
            cond.append(f"({col} >= %s AND {col} < %s)")
            args += [p, p + "\U0010ffff"]
        return "(" + " OR ".join(cond) + ")", args

    def _postings(self, sid: int, exact: set[str], prefixes: set[str], *,
                  some_rows: bool = False, seqs: Sequence[int] | None = None,
                  also: Sequence[list[tuple[str, bool]]] = (), positions: Set[str] = frozenset(),
                  n_rows: int | None = None, n_hits: dict[str, int] | None = None,
                  in_range: dict[str, int] | None = None) -> list[tuple[Any, ...]]:
        """The postings of the query's terms (`exact`, and every term of each prefix) sorted by term
        (the "C" collation: code points, as FTS5 sorts them) then by row, so each term's codes come
        out sorted as `Bm25Table` wants them; and last (its term is NULL) the scope's row and token
        counts. Binary: the codes arrive as packed int32.

        `some_rows`: only in the rows `seqs` (the anchors: where a match can be) and those holding
        one of the phrases `also` (their terms, `_rows_holding`'s); then only the terms of
        `positions` (and the prefixes) bring their positions, read from the table; the others bring
        their count per column from the term index alone, which is all a single term's bm25 needs
        (`_as_codes` makes them codes), and only in the anchors' rows when there are anchors.
        `n_rows`: about how many rows the terms are wanted in (an estimate: only how they are read
        depends on it), with `n_hits` and `in_range` (each term's and prefix's rows over the scope).
        One statement: one snapshot, unless inside one already."""
        stats = ("SELECT NULL, coalesce(sum(n_rows), 0)::bigint, NULL, coalesce(sum(n_tokens), 0)::bigint, NULL, "
                 "NULL, NULL FROM lex_stats WHERE scope = %s ORDER BY 1 NULLS LAST, 2")
        if not some_rows:
            terms, targs = self._terms_sql(exact, prefixes, "p.term")
            with self.conn.cursor(binary=True) as cur:
                return cur.execute(f"SELECT p.term, p.seq, p.paper_id, p.doclen, p.codes, NULL::integer[], p.ref "
                                   f"FROM lex_postings p WHERE p.scope = %s AND {terms} UNION ALL {stats}",
                                   [sid, *targs, sid]).fetchall()
        # Prefix ranges that no other covers, and the exact terms outside them: each posting read once.
        ranges = sorted(x for x in prefixes if not any(x != y and x.startswith(y) for y in prefixes))
        a_sql, a_args = ("SELECT seq, paper_id, ref FROM lex_rows WHERE scope = %s AND seq = ANY(%s)",
                         [sid, list(seqs)]) if seqs is not None else ("", [])
        o_sql, o_args = self._rows_holding(sid, also)
        # The single terms' counts are needed only where a match can be: the anchors' rows, when
        # there are anchors (every word: the rows holding each of the rarer groups); the rows
        # of `also` are there for the phrases' and prefixes' own rows (their idf), so they bring the
        # positions of those terms alone.
        if a_sql and o_sql:
            ctes, cargs, counted_in = (f"a AS ({a_sql}), c AS (SELECT * FROM a UNION SELECT * FROM ({o_sql}) o)",
                                       [*a_args, *o_args], "a")
        else:
            none = "SELECT NULL::bigint AS seq, NULL::text AS paper_id, NULL::text AS ref WHERE false"
            ctes, cargs, counted_in = f"c AS ({a_sql or o_sql or none})", [*a_args, *o_args], "c"
        counted = sorted(t for t in exact - set(positions) if not any(t.startswith(x) for x in prefixes))
        placed = sorted(t for t in exact - set(counted) if not any(t.startswith(x) for x in ranges))
        # Each row's positions looked up by its key (paper, scope, row, term), row by row: a join the
        # planner may turn into a scan of every posting of those terms (a number's prefix: 120,000 at
        # 100k passages) for a few thousand rows. `OFFSET 0` keeps the lateral lookup as it is.
        # A term or prefix with no more postings than there are candidate rows has them all read from
        # the term index instead, those of the candidate rows kept (a hashed look-up): a code's
        # prefix of 30 postings was scanned again for each of 5,754 rows.
        own = "SELECT p.term, p.seq, p.paper_id, p.doclen, p.codes, NULL, p.ref FROM c CROSS JOIN LATERAL (" \
              "SELECT p.term, p.seq, p.paper_id, p.doclen, p.codes, p.ref FROM lex_postings p " \
              "WHERE p.paper_id = c.paper_id AND p.scope = %s AND p.ref = c.ref AND {} OFFSET 0) p"
        whole = "SELECT p.term, p.seq, p.paper_id, p.doclen, p.codes, NULL, p.ref FROM lex_postings p " \
                "WHERE p.scope = %s AND {} AND (p.seq IN (SELECT seq FROM c)) IS TRUE"

        def few(n: int | None) -> bool:
            return n_rows is not None and n is not None and n <= n_rows

        branches: list[str] = []
        bargs: list[Any] = []
        for form, group in ((whole, [t for t in placed if few((n_hits or {}).get(t))]),
                            (own, [t for t in placed if not few((n_hits or {}).get(t))])):
            if group:
                branches.append(form.format("p.term = ANY(%s)"))
                bargs += [sid, group]
        for x in ranges:
            branches.append((whole if few((in_range or {}).get(x)) else own).format("p.term >= %s AND p.term < %s"))
            bargs += [sid, x, x + "\U0010ffff"]
        # The counted terms in the candidate rows: looked up row by row (a descent of the term index
        # per row and term) when the rows are few against those terms' postings; else every posting
        # of them read once and joined (the planner's hash join read 245,000 postings of "in", "is",
        # "of"... for 849 rows: 130 ms).
        if n_rows is not None and counted and n_rows * len(counted) * ROW_LOOKUP_COST <= sum(
                (n_hits or {}).get(t, 0) for t in counted):
            counts = (f"SELECT p.term, p.seq, p.paper_id, p.doclen, NULL::bytea, p.freqs, p.ref FROM {counted_in} x "
                      "CROSS JOIN LATERAL (SELECT p.term, p.seq, p.paper_id, p.doclen, p.freqs, p.ref "
                      "FROM lex_postings p WHERE p.scope = %s AND p.term = ANY(%s) AND p.seq = x.seq OFFSET 0) p")
        else:
            counts = (f"SELECT p.term, p.seq, p.paper_id, p.doclen, NULL::bytea, p.freqs, p.ref FROM {counted_in} x "
                      "JOIN lex_postings p ON p.scope = %s AND p.term = ANY(%s) AND p.seq = x.seq")
        with self.conn.cursor(binary=True) as cur:
            rows = cur.execute(f"WITH {ctes} " + " UNION ALL ".join([counts, *branches, stats]),
                               [*cargs, sid, counted, *bargs, sid]).fetchall()
        return _as_codes(rows)

    @staticmethod
    def _rows_holding(sid: int, phrases: Sequence[list[tuple[str, bool]]], papers: Sequence[str] | None = None
                      ) -> tuple[str, list[Any]]:
        """SQL of the rows (seq, paper_id, ref) holding every term of one of `phrases` (each a list of
        terms, or prefixes when flagged), of `papers` if given: per phrase an intersection of
        index-only scans, one a term or prefix range (an OR of them would visit the table), the
        phrases' rows united; ("", []) for none."""
        flt, fargs = ("", []) if papers is None else (" AND paper_id = ANY(%s)", [list(papers)])
        parts, args = [], []
        for terms in phrases:
            branch = []
            for t, pre in sorted(set(terms)):
                if pre:
                    branch.append(f"SELECT seq, paper_id, ref FROM lex_postings WHERE scope = %s AND term >= %s "
                                  f"AND term < %s{flt}")
                    args += [sid, t, t + "\U0010ffff", *fargs]
                else:
                    branch.append(f"SELECT seq, paper_id, ref FROM lex_postings WHERE scope = %s AND term = %s{flt}")
                    args += [sid, t, *fargs]
            if len(branch) == 1:  # a prefix's range holds a row once per term of it: once only
                branch[0] = branch[0].replace("SELECT seq", "SELECT DISTINCT seq", 1)
            if branch:
                parts.append("(" + " INTERSECT ".join(branch) + ")")
        return " UNION ".join(parts), args

    def _held_by_all(self, sid: int, groups: Sequence[Sequence[list[tuple[str, bool]]]],
                     papers: Sequence[str] | None) -> list[int]:
        """The rows (seq) holding one of each group's phrases (`_rows_holding`'s), of `papers` if
        given: the groups' rows intersected."""
        parts = [self._rows_holding(sid, g, papers) for g in groups]
        sql = " INTERSECT ".join(f"({q})" for q, _ in parts)
        return [r[0] for r in self.conn.execute(f"SELECT seq FROM ({sql}) x ORDER BY seq",
                                                [a for _, args in parts for a in args]).fetchall()]

    @staticmethod
    def _table(scope: str, rows: list[tuple[Any, ...]], n_hits: dict[str, int] | None, weights: Sequence[float] | None
               ) -> tuple[Bm25Table, tuple[float, ...], np.ndarray, list[str], list[str]] | None:
        """The postings read (`_postings`, its last row the scope's counts) as a `Bm25Table`, with the
        weights it takes, and per local row its seq, paper and ref; None when no posting was read."""
        stats = rows.pop()
        n_row, n_token = int(stats[1]), int(stats[3])
        if not rows:
            return None
        seqs, local = np.unique(np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows)),
                                return_inverse=True)
        doclen = np.zeros(len(seqs), dtype=np.float64)
        doclen[local] = np.fromiter((r[3] for r in rows), dtype=np.float64, count=len(rows))
        paper = [""] * len(seqs)
        refs = [""] * len(seqs)
        for i, r in zip(local.tolist(), rows):
            paper[i] = r[2]
            refs[i] = r[6]
        lens = np.fromiter((len(r[4]) for r in rows), dtype=np.int64, count=len(rows)) // 4
        flat = np.frombuffer(b"".join(bytes(r[4]) for r in rows), dtype="<i4").astype(np.int64)
        codes = (np.repeat(local.astype(np.int64), lens) << ROW_SHIFT) | flat
        terms: list[str] = []
        bounds: list[int] = []
        for j, r in enumerate(rows):
            if not terms or r[0] != terms[-1]:
                terms.append(r[0])
                bounds.append(j)
        ends = np.concatenate(([0], np.cumsum(lens)))
        starts = ends[np.asarray(bounds + [len(rows)], dtype=np.int64)]
        cols = list(SCOPE_COLUMNS[scope])
        table = Bm25Table(scope, cols, FTS_TOKENIZER, None, int(n_row), int(n_token), doclen, terms, starts, codes,
                          n_hits)
        w = table.weights(weights)
        if w is None:  # not multiples of 1/64: still bm25, additions in query order
            w = tuple(float(x) for x in (weights or ()))[:len(cols)]
            w = w + (1.0,) * (len(cols) - len(w))
        return table, w, seqs, paper, refs

    def _holding(self, scope: str, rows: list[tuple[Any, ...]], phrases: list[tuple[tuple[str, ...], bool]]) -> list[int]:
        """The rows (seq) holding one of `phrases`, among those whose postings were read."""
        made = self._table(scope, rows, None, None)
        if made is None:
            return []
        table, w, seqs, _, _ = made
        keep = np.unique(np.concatenate([table.phrase(toks, prefix, w)[0] for toks, prefix in phrases]))
        held: list[int] = seqs[keep.astype(np.int64)].tolist()
        return held

    def _evaluate(self, scope: str, parsed: Any, weights: Sequence[float] | None, paper_ids: Sequence[str] | None,
                  rows: list[tuple[Any, ...]], n_hits: dict[str, int] | None = None, *, with_seq: bool = False,
                  only: list[tuple[tuple[str, ...], bool]] | None = None) -> list[tuple[Any, ...]]:
        """bm25 over the postings read (`_postings`): (ref, bm25, paper_id[, seq]) best first.
        `only`: keep just the rows holding one of these phrases."""
        made = self._table(scope, rows, n_hits, weights)
        if made is None:
            return []
        table, w, seqs, paper, refs = made
        allow = None
        if paper_ids is not None:
            want = set(paper_ids)
            allow = [i for i, p in enumerate(paper) if p in want]
        ranked = evaluate(table, parsed, w, allow, writer.TOKENIZER.tokens)
        if ranked is None:
            return []
        out = ranked.fetchall()
        if only is not None:
            keep = set()
            for toks, prefix in only:
                keep.update(table.phrase(toks, prefix, w)[0].tolist())
            out = [(i, s) for i, s in out if i in keep]
        if with_seq:
            return [(refs[i], s, paper[i], int(seqs[i])) for i, s in out]
        return [(refs[i], s, paper[i]) for i, s in out]

    def _ranked_in_sql(self, sid: int, terms: list[str], w: tuple[float, ...], paper_ids: Sequence[str] | None,
                       limit: int, per_paper: bool = False, *, exclude: Sequence[int] = (),
                       with_seq: bool = False, n_hits: dict[str, int] | None = None) -> list[tuple[Any, ...]]:
        """Some words (or one word and its variants), each a single term: ranked by the database,
        which sends only the best `limit` rows (`per_paper`: each paper's best row, papers in the
        order of those, ties by paper id). The same bm25 as `sheaf.store.bm25`, operation by
        operation in double precision (each term's count of rows over the whole scope for its idf;
        the frequency from the posting's count per column; terms summed in query order), so the
        same scores and order (ties: seq). `exclude`: rows (seq) left out. `n_hits`: the terms'
        row counts when the caller has read them (`_row_counts`) in the same snapshot."""
        if limit == 0:
            return []
        with snapshot(self.conn, self.where):  # the counts and the rows: one state of the index
            n, t = one(self.conn.execute("SELECT coalesce(sum(n_rows), 0)::bigint, coalesce(sum(n_tokens), 0)::bigint "
                                         "FROM lex_stats WHERE scope = %s", [sid]))
            counts = n_hits if n_hits is not None else self._row_counts(sid, set(terms), set())[0]
            df = {x: counts[x] for x in set(terms) if counts.get(x)}

            def ranked(within: list[str] | None) -> list[tuple[Any, ...]]:
                return self._ranked_rows(sid, terms, w, paper_ids, limit, per_paper, exclude, int(n), int(t), df,
                                         within)

            # Only the best `limit` rows are wanted, and a row holding none of the rarer terms scores
            # at most the sum of the other terms' bounds (`_score_bounds`). So the rows holding one of
            # the rarer terms (up to `MAXSCORE_SHARE` of the postings) are ranked first; when their
            # `limit`-th score is above that sum, no other row can be among the best (MaxScore), and
            # the commoner terms' postings were scored only in those rows. Else once more with the
            # rows holding any term but the commonest, whose bounds together stay below that score:
            # exact by then.
            bound = _score_bounds(terms, w, int(n), df) if limit > 0 else None
            if bound is None or len(bound) < 2:
                return self._as_ranked(ranked(None), with_seq)
            rare = sorted(bound, key=lambda x: (df[x], x))
            within: list[str] = []
            held = 0
            for x in rare:
                if within and held + df[x] > sum(df[y] for y in rare) * MAXSCORE_SHARE:
                    break
                within.append(x)
                held += df[x]
            rows = ranked(within)  # never every term: the last one takes the postings past the share
            if len(rows) >= limit and sum(bound[x] for x in rare if x not in within) < float(rows[-1][2]):
                return self._as_ranked(rows, with_seq)
            floor = float(rows[-1][2]) if len(rows) >= limit else 0.0  # more rows can only raise it
            left, acc = set(), 0.0
            for x in sorted(rare, key=lambda x: (bound[x], x)):
                if acc + bound[x] >= floor:
                    break
                acc += bound[x]
                left.add(x)
            within = [x for x in rare if x in within or x not in left]
            return self._as_ranked(ranked(within if len(within) < len(rare) else None), with_seq)

    @staticmethod
    def _as_ranked(rows: list[tuple[Any, ...]], with_seq: bool) -> list[tuple[Any, ...]]:
        """(ref, paper_id, score, seq) rows as `_ranked_in_sql` answers them: scores negated (best
        first = lowest, as FTS5's bm25), with or without the seq."""
        if with_seq:
            return [(ref, -float(score), pid, int(seq)) for ref, pid, score, seq in rows]
        return [(ref, -float(score), pid) for ref, pid, score, _ in rows]

    def _ranked_rows(self, sid: int, terms: list[str], w: tuple[float, ...], paper_ids: Sequence[str] | None,
                     limit: int, per_paper: bool, exclude: Sequence[int], n: int, t: int, df: dict[str, int],
                     within: list[str] | None) -> list[tuple[Any, ...]]:
        """`_ranked_in_sql`'s statement: (ref, paper_id, score, seq) best first; the scope's row and
        token counts `n`, `t` and each term's rows `df` as read before; `within`: only the rows
        holding one of these terms."""
        freq = " + ".join(f"%s * p.freqs[{i + 1}]" for i in range(len(w)))
        pargs: list[Any]
        pf, pargs = ("", []) if paper_ids is None else (" AND p.paper_id = ANY(%s)", [list(paper_ids)])
        if exclude:  # a hashed anti-join: `<> ALL(array)` compared every posting with every excluded row
            pf, pargs = pf + " AND p.seq NOT IN (SELECT unnest(%s::bigint[]))", [*pargs, list(exclude)]
        if within is not None:
            # `IS TRUE` keeps it a hashed look-up: as a semi-join the planner, expecting a few
            # postings, probed the term index once for each of 79,000 of them (1.8 s)
            pf += " AND (p.seq IN (SELECT seq FROM lex_postings WHERE scope = %s AND term = ANY(%s))) IS TRUE"
            pargs = [*pargs, sid, within]
        uniq = sorted(df)
        return self.conn.execute(
            "WITH q(pos, term) AS (SELECT * FROM unnest(%s::integer[], %s::text[])), "
            "st AS (SELECT %s::float8 AS n, %s::float8 AS t), "
            "df AS (SELECT * FROM unnest(%s::text[], %s::float8[]) AS d(term, n)), "
            "idf AS (SELECT q.pos, q.term, CASE WHEN (st.n - df.n + 0.5) / (df.n + 0.5) <= 1 THEN 0 "
            "ELSE ln((st.n - df.n + 0.5) / (df.n + 0.5)) END AS x FROM q JOIN df ON df.term = q.term CROSS JOIN st), "
            "scored AS (SELECT any_value(p.ref) AS ref, any_value(p.paper_id) AS paper_id, p.seq, "
            "sum((CASE WHEN idf.x <= 0 THEN 1e-6::float8 ELSE idf.x END) * "
            "((f.v * %s) / (f.v + %s * (%s - %s + %s * p.doclen / (st.t / nullif(st.n, 0))))) ORDER BY idf.pos) AS s "
            "FROM lex_postings p JOIN idf ON idf.term = p.term CROSS JOIN st CROSS JOIN LATERAL "
            f"(SELECT ({freq})::float8 AS v) f WHERE p.scope = %s AND p.term = ANY(%s){pf} "
            "GROUP BY p.seq) "
            + ("SELECT ref, paper_id, s, seq FROM (SELECT DISTINCT ON (paper_id) ref, paper_id, s, seq FROM scored "
               "ORDER BY paper_id, s DESC, seq) b ORDER BY s DESC, paper_id COLLATE \"C\" LIMIT %s" if per_paper else
               "SELECT ref, paper_id, s, seq FROM scored ORDER BY s DESC, seq LIMIT %s"),
            [list(range(len(terms))), terms, float(n), float(t), uniq, [float(df[x]) for x in uniq],
             K1 + 1.0, K1, 1.0, B, B, *w, sid, uniq, *pargs, limit if limit >= 0 else None]).fetchall()

