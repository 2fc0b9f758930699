"""The warm server's in-memory bm25 (`sheaf.store.sqlite.memory_bm25`) answers exactly what FTS5 answers: the same
rows, in the same order, with the same float scores, for every expression Sheaf writes
(phrases, prefixes, OR groups, AND / OR, column weights, row filters), and declines what it
does not handle or a table state it has not loaded. No model."""
from __future__ import annotations

import random
from functools import partial
from pathlib import Path

import pytest

from sheaf.store.fulltext import FTS_TOKENIZER, build_match_query, fts_text
from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr
from sheaf.store.sqlite.db import connect
from sheaf.store.sqlite.memory_bm25 import Bm25Accelerator, RankedRows, parse_match
from tests.kits.fts import ref_best, ref_search
from tests.kits.papers import body_unit, object_unit

body = partial(body_unit, blocks=("p1:0",))
obj = object_unit

WORDS = ("zebra zebras stripe stripes striped lion lions manes dusk dawn savanna study studies studied "
         "regeneration regenerate cell cells cellular T IL 6 IL6 SPG302 SPG 302 302 3020 cross-linking "
         "crosslinking linking café cafe naïve naive 細胞 再生 한국어 the of and in a an not no NO AT "
         "p53 TNF-α α-synuclein COVID-19 x-ray 5-nucleotidase mg day 40mg/day").split()


def _doc(rng: random.Random) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 14))) for _ in range(3)]


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A contentless FTS5 table like the index's, with deletes and re-inserts (rowid gaps,
    changed lengths) and one row whose columns are all empty."""
    rng = random.Random(11)
    path = tmp_path_factory.mktemp("bm25") / "t.db"
    conn = connect(path)
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(heading, text, title, content='', tokenize='{FTS_TOKENIZER}')")
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
    conn.execute("INSERT INTO meta VALUES ('fts_epoch', 'e1')")  # as a Sheaf index has
    rows: dict[int, list[str]] = {}
    for rid in range(1, 400):
        rows[rid] = [fts_text(c) for c in _doc(rng)]
        conn.execute("INSERT INTO t(rowid, heading, text, title) VALUES (?,?,?,?)", (rid, *rows[rid]))
    conn.commit()
    for rid in rng.sample(sorted(rows), 80):  # delete (exact values, as Sheaf does), some come back
        conn.execute("INSERT INTO t(t, rowid, heading, text, title) VALUES ('delete', ?,?,?,?)", (rid, *rows.pop(rid)))
        if rng.random() < 0.5:
            rows[rid + 1000] = [fts_text(c) for c in _doc(rng)]
            conn.execute("INSERT INTO t(rowid, heading, text, title) VALUES (?,?,?,?)", (rid + 1000, *rows[rid + 1000]))
    conn.execute("INSERT INTO t(rowid, heading, text, title) VALUES (5000, '', '', '')")
    conn.commit()
    conn.close()
    acc = Bm25Accelerator(path)
    assert acc.table("t", wait=True) is not None
    yield path, acc
    acc.close()


def _sql(conn, match: str, weights: tuple[float, ...]) -> list[tuple[int, float]]:
    w = "".join(f", {x}" for x in weights)
    return [(r[0], r[1]) for r in conn.execute(
        f"SELECT rowid, bm25(t{w}) AS s FROM t WHERE t MATCH ? ORDER BY s, rowid", (match,))]


def _queries(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        q = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.15:
            a, b = rng.sample(WORDS, 2)
            q = f'"{a} {b}" {q}'  # a user's quoted phrase
        for kw in ({"mode": "and"}, {"mode": "or"}, {"mode": "or", "drop_stopwords": True},
                   {"mode": "and", "prefix_last": True}):
            m = build_match_query(q, **kw)
            if m:
                out.append(m)
    return out


def test_random_queries_rank_exactly_as_fts5(table):
    path, acc = table
    conn = connect(path, readonly=True)
    rng = random.Random(5)
    queries = _queries(rng, 250)
    assert sum(1 for m in queries if "*" in m) > 50 and sum(1 for m in queries if "(" in m) > 50
    checked = matched = 0
    for m in queries:
        weights = tuple(rng.choice((0.5, 1.0, 2.0, 3.0, 0.25, 8.0)) for _ in range(rng.randint(0, 3)))
        got = acc(conn, "t", weights, m)
        assert got is not None, m
        want = _sql(conn, m, weights)
        assert got.fetchall() == want, m  # same rows, same order, same float scores
        checked += 1
        matched += bool(want)
    assert checked == len(queries) and matched > len(queries) // 2
    assert acc.stats["declined"] == 0
    conn.close()


def test_row_filter_and_chunked_reads(table):
    path, acc = table
    conn = connect(path, readonly=True)
    rng = random.Random(9)
    all_rows = [r[0] for r in conn.execute("SELECT id FROM t_docsize")]
    for m in _queries(rng, 40):
        want = _sql(conn, m, (2.0, 1.0))
        keep = set(rng.sample(all_rows, 60))
        got = acc(conn, "t", (2.0, 1.0), m, sorted(keep) + [999_999, -3])
        assert got.fetchall() == [r for r in want if r[0] in keep], m
        cur = acc(conn, "t", (2.0, 1.0), m)
        chunks = []
        for n in (1, 2, 3, 5, 8, 13, 10_000):
            chunks += cur.fetchmany(n)
        assert chunks == want and cur.fetchmany(5) == []
    conn.close()


def test_ranked_rows_order_ties_by_rowid():
    import numpy as np

    r = RankedRows(np.array([9, 3, 7, 1, 5]), np.array([-1.0, -2.0, -1.0, -2.0, -1.0]))
    assert r.fetchmany(1) == [(1, -2.0)]
    assert r.fetchmany(2) == [(3, -2.0), (5, -1.0)]
    assert r.fetchall() == [(7, -1.0), (9, -1.0)]
    assert r.fetchmany(3) == []


def test_parse_match_takes_what_sheaf_writes_and_nothing_else():
    assert parse_match('"a" AND ("b c" OR "bc") AND "d"*') == (
        "AND", [[("a", False)], [("b c", False), ("bc", False)], [("d", True)]])
    assert parse_match('"x"') == ("AND", [[("x", False)]])
    assert parse_match('("SPG302"* OR "SPG 302"*) OR "arm"') == (
        "OR", [[("SPG302", True), ("SPG 302", True)], [("arm", False)]])
    assert parse_match('"say ""hi"""') == ("AND", [[('say "hi"', False)]])
    for bad in ('"a" AND "b" OR "c"', "a", '"a" NEAR "b"', 'NEAR("a" "b")', '"a" NOT "b"', '("a")x',
                '"a" AND', '(("a" OR "b"))', 'heading:"a"', '"a" + "b"', '"a"  AND "b"', ""):
        assert parse_match(bad) is None, bad


def test_declines_what_it_cannot_answer_exactly(table, tmp_path):
    path, acc = table
    conn = connect(path, readonly=True)
    assert acc(conn, "t", (1.3,), '"zebra"') is None  # frequency sums would depend on their order
    assert acc(conn, "t", None, '"zebra" NEAR "lion"') is None
    assert acc(conn, "t", None, '"zebra"') is not None
    other = connect(tmp_path / "other.db")
    other.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, content='', tokenize='{FTS_TOKENIZER}')")
    assert acc(other, "t", None, '"zebra"') is None  # another file
    other.close()
    conn.close()
    # a file without an fts_epoch (not a Sheaf index, or one from before the epochs): a rebuild
    # could bring back an earlier state's FTS5 records, so its states cannot be told apart
    bare = tmp_path / "bare.db"
    c = connect(bare)
    c.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, content='', tokenize='{FTS_TOKENIZER}')")
    c.execute("INSERT INTO t(rowid, x) VALUES (1, 'zebra')")
    c.commit()
    acc2 = Bm25Accelerator(bare)
    try:
        assert acc2.table("t", wait=True) is not None
        assert acc2(c, "t", None, '"zebra"') is None
    finally:
        acc2.close()
        c.close()


# --- through sheaf.store.sqlite.schema, on a Sheaf index ---------------------------------------------------------

@pytest.fixture()
def sheaf_index(tmp_path):
    rng = random.Random(4)
    path = tmp_path / "i.db"
    conn = ix.open_index(path)
    texts = ["zebra stripes and lion manes", "zebra crossing at SPG-302", "lion pride at dusk",
             "regeneration of cells", "the zebra and the lion and the tiger", "manes", "cell regenerates"]
    for i in range(30):
        k = f"BMP{i:05d}"
        units = [body(k, f"n{j}", rng.choice(texts)) for j in range(rng.randint(1, 5))]
        objects = [obj(k, "p2:1", rng.choice(texts))] if rng.random() < 0.5 else []
        wr.replace_paper(conn, k, units, objects)
    conn.close()
    acc = Bm25Accelerator(path, settle_seconds=0)
    for fts in ix.FTS_TABLES:
        acc.table(fts, wait=True)
    try:
        yield path, acc
    finally:
        acc.close()


QUERIES = ["zebra", "lion manes", "regenerating cell", "SPG 302", "tiger OR dusk", "nothing-here", '"lion pride"']


@pytest.mark.parametrize("scope,weights", [("body", (2.0, 1.0, 2.0)), ("object", (3.0, 2.0, 1.0, 0.5, 2.0)),
                                           ("papers", (8.0, 4.0, 2.0, 1.0, 1.0, 1.0))])
def test_index_reads_with_the_accelerator_equal_the_plain_sql(sheaf_index, scope, weights):
    path, acc = sheaf_index
    conn = ix.open_index(path, readonly=True)
    papers = sorted(r[0] for r in conn.execute("SELECT paper_id FROM papers"))
    for q in QUERIES:
        for mode in ("and", "or"):
            match = build_match_query(q, mode=mode)
            for limit in (-1, 0, 1, 3, 25):
                for flt in (None, [], papers[::3], ["NOPAPER"]):
                    kw = {"limit": limit, "paper_ids": flt, "weights": weights}
                    assert rd.fts_search(conn, scope, match, **kw, engine=acc) == ref_search(conn, scope, match, **kw), (q, kw)
                    assert rd.fts_best_per_paper(conn, scope, match, **kw, engine=acc) == ref_best(conn, scope, match, **kw)
    assert acc.stats["answered"] > 0 and (scope == "papers" or acc.stats["declined"] == 0)
    conn.close()


def test_a_commit_makes_it_decline_until_reloaded(sheaf_index):
    path, acc = sheaf_index
    conn = ix.open_index(path, readonly=True)
    match = build_match_query("zebra lion", mode="or")
    before = acc.stats["answered"]
    assert rd.fts_search(conn, "body", match, limit=50, engine=acc) == ref_search(conn, "body", match, limit=50)
    assert acc.stats["answered"] == before + 1
    w = ix.open_index(path)
    wr.replace_paper(w, "BMP00003", [body("BMP00003", "n0", "zebra zebra zebra lion")], [])
    w.close()
    declined = acc.stats["declined"]
    assert rd.fts_search(conn, "body", match, limit=50, engine=acc) == ref_search(conn, "body", match, limit=50)
    assert acc.stats["declined"] == declined + 1  # the copy is of the old state: FTS5 answered
    assert acc.wait_idle(60)
    before = acc.stats["answered"]
    got = rd.fts_search(conn, "body", match, limit=50, engine=acc)
    assert got == ref_search(conn, "body", match, limit=50) and got[0].ref == "BMP00003:body:n0"
    assert acc.stats["answered"] == before + 1  # reloaded: answered from memory again
    conn.close()


def test_empty_table_loads_and_answers_nothing(tmp_path):
    path = tmp_path / "e.db"
    ix.open_index(path).close()
    acc = Bm25Accelerator(path)
    try:
        assert acc.table("body_units_fts", wait=True) is not None
        conn = ix.open_index(path, readonly=True)
        got = acc(conn, "body_units_fts", None, '"zebra"')
        assert got is not None and got.fetchall() == []
        conn.close()
    finally:
        acc.close()


def test_tokens_follow_the_table_tokenizer(table):
    _, acc = table
    assert acc.tokens(FTS_TOKENIZER, "Regeneration") == ("regener",)
    assert acc.tokens(FTS_TOKENIZER, "café naïve") == ("cafe", "naiv")
    assert acc.tokens("unicode61", "Studies") == ("studies",)
    assert acc.tokens(FTS_TOKENIZER, "") == ()


def test_module_needs_no_dagster_or_torch():
    import subprocess
    import sys

    code = ("import sys, sheaf.store.sqlite.memory_bm25; bad = [m for m in ('dagster', 'torch') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2]).returncode == 0


def test_a_rebuild_is_a_new_state(sheaf_index):
    """`rebuild_fts` restarts FTS5's own records (a refill could reproduce an earlier state's):
    the index's fts_epoch changes with it, so a copy of the earlier state is never used."""
    from sheaf.store.sqlite.memory_bm25 import signature

    path, acc = sheaf_index
    conn = ix.open_index(path, readonly=True)
    match = build_match_query("zebra OR okapi", mode="or")
    loaded = acc.table("body_units_fts")
    assert loaded is not None and loaded.signature == signature(conn, "body_units_fts")
    w = ix.open_index(path)
    wr.replace_paper(w, "BMP00001", [body("BMP00001", "n0", "okapi crossing at dusk")], [])
    ix.rebuild_fts(w)
    w.close()
    sig = signature(conn, "body_units_fts")
    assert sig[2] != loaded.signature[2]
    got = rd.fts_search(conn, "body", match, limit=50, engine=acc)
    assert got == ref_search(conn, "body", match, limit=50) and "BMP00001:body:n0" in {h.ref for h in got}
    conn.close()


def test_reload_waits_for_the_table_to_settle(sheaf_index):
    """During a build (a commit per paper) the copy is not reloaded per commit: only once the
    table has stayed in one state for `settle_seconds`; FTS5 answers meanwhile."""
    import time

    path, acc = sheaf_index
    acc.settle_seconds = 0.4
    conn = ix.open_index(path, readonly=True)
    match = build_match_query("lion", mode="or")
    loads = acc.stats["loads"]
    for i in range(3):  # commits in a row
        w = ix.open_index(path)
        wr.replace_paper(w, f"BMP0000{i}", [body(f"BMP0000{i}", "n0", f"lion number {i}")], [])
        w.close()
        assert rd.fts_search(conn, "body", match, limit=50, engine=acc) == ref_search(conn, "body", match, limit=50)
    assert acc.wait_idle(60) and acc.stats["loads"] == loads  # nothing reloaded yet
    time.sleep(0.45)
    answered = acc.stats["answered"]
    assert rd.fts_search(conn, "body", match, limit=50, engine=acc) == ref_search(conn, "body", match, limit=50)
    assert acc.wait_idle(60) and acc.stats["loads"] == loads + 1  # settled: one reload
    assert rd.fts_search(conn, "body", match, limit=50, engine=acc) == ref_search(conn, "body", match, limit=50)
    assert acc.stats["answered"] == answered + 1
    conn.close()


def test_a_failed_load_is_not_retried_for_the_same_state(sheaf_index, monkeypatch):
    from sheaf.store.sqlite import memory_bm25 as bm25

    path, acc = sheaf_index
    calls = []

    def boom(conn, fts):
        calls.append(fts)
        raise MemoryError("no room")
    monkeypatch.setattr(bm25._Table, "load", staticmethod(boom))
    w = ix.open_index(path)
    wr.replace_paper(w, "BMP00002", [body("BMP00002", "n0", "a zebra again")], [])
    w.close()
    conn = ix.open_index(path, readonly=True)
    match = build_match_query("zebra", mode="or")
    for _ in range(4):
        assert rd.fts_search(conn, "body", match, limit=9, engine=acc) == ref_search(conn, "body", match, limit=9)
        acc.wait_idle(60)
    assert calls == ["body_units_fts"] and "MemoryError" in acc.disabled["body_units_fts"]
    conn.close()


def test_a_copy_that_disagrees_with_fts5_is_not_used(sheaf_index, monkeypatch):
    from sheaf.store.sqlite.memory_bm25 import Bm25Accelerator as Acc
    from sheaf.store.sqlite.memory_bm25 import RankedRows

    path, _ = sheaf_index
    import numpy as np

    monkeypatch.setattr(Acc, "_evaluate", lambda self, t, parsed, w, rowids: RankedRows(np.zeros(0, np.int64),
                                                                                        np.zeros(0)))
    acc = Acc(path)
    try:
        assert acc.table("body_units_fts", wait=True) is None
        assert "disagreed with FTS5" in acc.disabled["body_units_fts"]
    finally:
        acc.close()


def test_table_options_outside_sheafs_own_are_declined(tmp_path):
    from sheaf.store.sqlite.memory_bm25 import _table_sql

    c = connect(tmp_path / "o.db")
    cases = {
        "a": ("fts5(x, y, content='', tokenize=\"porter unicode61\")", (["x", "y"], "porter unicode61")),
        "b": ("fts5(x, content='', tokenize=porter)", (["x"], "porter")),
        "c": ("fts5(x, content='', tokenize='unicode61 remove_diacritics 2', prefix='2 3')",
              (["x"], "unicode61 remove_diacritics 2")),
        "d": ("fts5(x, content='', detail=column)", None),
        "e": ("fts5(x, y UNINDEXED, content='')", None),
        "f": ("fts5(x)", None),  # stores its content: not how Sheaf's tables are made
        "g": ("fts5(x, content='', contentless_delete=1)", None),
        "h": ("fts5(x, content='', columnsize=0)", None),
    }
    for name, (spec, want) in cases.items():
        c.execute(f"CREATE VIRTUAL TABLE {name} USING {spec}")
        assert _table_sql(c, name) == want, spec
    c.close()
