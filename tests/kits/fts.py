"""Reference answers of FTS5 for the lexical engines' tests: the ranking written as plain SQL over
the index's FTS5 tables (bm25, then the base table's key)."""
from __future__ import annotations

from sheaf.store.sqlite import reader as rd


def ref_parts(scope, match, paper_ids, weights, joiner):
    """The scope's tables, the bm25 weights argument, the paper filter (after `joiner`) and args."""
    fts, base, key, ref = rd._SCOPES[scope]
    w = "" if not weights else ", " + ", ".join(str(float(x)) for x in weights)
    args, flt = [match], ""
    if paper_ids is not None:
        flt = f" {joiner} b.paper_id IN ({','.join('?' * len(paper_ids))})"
        args += list(paper_ids)
    return fts, base, key, ref, w, flt, args


def ref_search(conn, scope, match, limit=20, paper_ids=None, weights=None):
    fts, base, key, ref, w, flt, args = ref_parts(scope, match, paper_ids, weights, "AND")
    q = (f"SELECT b.{ref}, b.paper_id, bm25({fts}{w}) AS s FROM {fts} JOIN {base} b ON b.{key} = {fts}.rowid "
         f"WHERE {fts} MATCH ?{flt} ORDER BY s, b.{key} LIMIT ?")
    return [rd.FtsHit(r[0], r[1], -float(r[2])) for r in conn.execute(q, [*args, int(limit)])]


def ref_best(conn, scope, match, limit=20, paper_ids=None, weights=None):
    fts, base, key, ref, w, flt, args = ref_parts(scope, match, paper_ids, weights, "WHERE")
    q = (f"SELECT ref, paper_id, s FROM (SELECT b.{ref} AS ref, b.paper_id AS paper_id, f.s AS s, "
         f"ROW_NUMBER() OVER (PARTITION BY b.paper_id ORDER BY f.s, b.{key}) AS rn "
         f"FROM (SELECT rowid, bm25({fts}{w}) AS s FROM {fts} WHERE {fts} MATCH ?) f "
         f"JOIN {base} b ON b.{key} = f.rowid{flt}) WHERE rn = 1 ORDER BY s, paper_id LIMIT ?")
    return [rd.FtsHit(r[0], r[1], -float(r[2])) for r in conn.execute(q, [*args, int(limit)])]
