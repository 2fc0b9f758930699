"""The query path's fast paths give the answers of the plain ones: the relaxed OR form without
stopwords, `fts_search` / `fts_best_per_paper` (rank first, join the base rows after) against
the join-everything SQL they replaced, the papers-without-vectors check, the Retriever's
memo of index facts (refreshed by any commit), and the warm server's pool of open Retrievers.
Small planted indexes, no model."""
from __future__ import annotations

import hashlib
import os
import random
from functools import partial
from pathlib import Path

import pytest

from sheaf.core.envelope import SheafError
from sheaf.core.settings import get_settings
from sheaf.search.retriever import Retriever
from sheaf.store.fulltext import QUERY_STOPWORDS, build_match_query
from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr
from sheaf.store.sqlite.backend import SqliteIndex
from sheaf.vectors.identity import ModelIdentity
from sheaf.vectors.query_encoder import QueryEncoder
from tests.kits.fts import ref_best, ref_search
from tests.kits.papers import body_unit, object_unit

IDENT = ModelIdentity("test/paths", "e" * 64, 4, True, 128, "{text}")


body = partial(body_unit, blocks=("p1:0",))
obj = object_unit


def open_r(path: Path, tmp_path: Path) -> Retriever:
    return Retriever.open(get_settings(index_file=path, home=tmp_path / "home",
                                         library=Path("/nonexistent-library")))


def add_passages(conn, paper_ids: list[str]) -> None:
    """A passage (and vector) of IDENT for the first unit of each paper."""
    ix.ensure_collection(conn, IDENT)
    with ix.transaction(conn):
        for pid in paper_ids:
            uid = conn.execute("SELECT unit_id FROM body_units WHERE paper_id = ? UNION "
                               "SELECT unit_id FROM object_units WHERE paper_id = ? LIMIT 1", (pid, pid)).fetchone()[0]
            cur = conn.execute(f"INSERT INTO {IDENT.passages_table}(passage_id, unit_id, unit_type, paper_id, "
                               "ordinal, char_start, char_end, text_sha256) VALUES (?,?,?,?,0,0,1,'x')",
                               (f"{uid}#0", uid, "body", pid))
            conn.execute(f"INSERT INTO {IDENT.vec_table}(passage_rowid, embedding, paper_id) VALUES (?,?,?)",
                         (cur.lastrowid, bytes(16), pid))


# --- the relaxed OR form ---------------------------------------------------------------------------

def test_or_form_drops_stopwords_and_keeps_everything_else():
    q = "the effect of NO on AT cells in the SPG-302 arm"
    assert build_match_query(q, mode="or") == (
        '"the" OR "effect" OR "of" OR "NO" OR "on" OR "AT" OR "cells" OR "in" OR ("SPG302"* OR "SPG 302"*) '
        'OR "arm"')
    # function words go; abbreviations in capitals (nitric oxide, ataxia-telangiectasia) and codes stay
    assert build_match_query(q, mode="or", drop_stopwords=True) == (
        '"effect" OR "NO" OR "AT" OR "cells" OR ("SPG302"* OR "SPG 302"*) OR "arm"')
    assert build_match_query(q, mode="and", drop_stopwords=True).count(" AND ") == 5
    assert build_match_query(q, mode="and") == build_match_query(q, mode="and", drop_stopwords=False)
    assert build_match_query("The Of", mode="or", drop_stopwords=True) == '"The" OR "Of"'  # nothing else: kept
    assert build_match_query('"of the" cells', mode="or", drop_stopwords=True) == '"of the" OR "cells"'
    assert {"the", "of", "in", "and", "or", "not"} <= QUERY_STOPWORDS


def test_lexical_leg_relaxes_to_content_words(tmp_path):
    path = tmp_path / "i.db"
    conn = ix.open_index(path)
    wr.replace_paper(conn, "STOPAA01", [body("STOPAA01", "n0", "The cat sat in the hat of the house.")], [])
    wr.replace_paper(conn, "STOPBB02", [body("STOPBB02", "n0", "A zebra grazes.")], [])
    conn.close()
    with open_r(path, tmp_path) as r:
        res = r.retrieve("zebra in the wild", mode="lexical", per_paper=0)
        assert [m["zotero_key"] for m in res.matches] == ["STOPBB02"]  # "in the" alone is no match
        assert any("contain some of them" in w for w in res.warnings)
        res = r.search("zebra in the wild")
        assert [m["zotero_key"] for m in res.matches] == ["STOPBB02"]
        # every word in one unit: the AND form, stopwords included, still ranks it
        assert [m["zotero_key"] for m in r.retrieve("the cat in the hat", mode="lexical").matches] == ["STOPAA01"]
        assert [m["zotero_key"] for m in r.retrieve("the of", mode="lexical").matches] == ["STOPAA01"]


# --- fts_search and fts_best_per_paper against the plain SQL ---------------------------------------


@pytest.fixture(scope="module")
def tied_index(tmp_path_factory):
    """40 papers whose units repeat a few texts word for word (exact bm25 ties within and across
    papers, papers inserted out of key order) and some figures."""
    rng = random.Random(7)
    texts = ["zebra stripes and lion manes", "zebra crossing", "lion pride at dusk", "stripes of a tiger",
             "the zebra and the lion and the tiger", "manes", "dusk and dawn over the savanna"]
    path = tmp_path_factory.mktemp("tied") / "i.db"
    conn = ix.open_index(path)
    keys = [f"TIE{i:05d}" for i in range(40)]
    rng.shuffle(keys)
    for k in keys:
        units = [body(k, f"n{j}", rng.choice(texts)) for j in range(rng.randint(1, 6))]
        objects = [obj(k, "p2:1", rng.choice(texts))] if rng.random() < 0.5 else []
        wr.replace_paper(conn, k, units, objects)
    conn.close()
    return path


QUERIES = ["zebra", "lion", "zebra OR lion", "stripes OR manes OR dusk", "tiger", "nothing-here", "savanna OR zebra"]


@pytest.mark.parametrize("scope,weights", [("body", (2.0, 1.0, 2.0)), ("object", None), ("papers", None)])
def test_fts_reads_equal_the_plain_sql(tied_index, scope, weights):
    conn = ix.open_index(tied_index, readonly=True)
    papers = sorted(r[0] for r in conn.execute("SELECT paper_id FROM papers"))
    rng = random.Random(3)
    for q in QUERIES:
        match = build_match_query(q, mode="or") if " OR " in q else build_match_query(q)
        for limit in (-1, 0, 1, 2, 3, 7, 25, 500):
            for flt in (None, [], papers[::3], rng.sample(papers, 5), ["NOPAPER"]):
                kw = {"limit": limit, "paper_ids": flt, "weights": weights}
                assert rd.fts_search(conn, scope, match, **kw) == ref_search(conn, scope, match, **kw), (q, kw)
                assert rd.fts_best_per_paper(conn, scope, match, **kw) == ref_best(conn, scope, match, **kw), (q, kw)
    conn.close()


def test_fts_search_skips_fts_rows_without_base_row(tmp_path):
    """An FTS row whose base row is gone (written outside Sheaf) is never a hit, and never
    takes a place in the limit."""
    path = tmp_path / "i.db"
    conn = ix.open_index(path)
    for i in range(3):
        wr.replace_paper(conn, f"ORPH{i:04d}", [body(f"ORPH{i:04d}", "n0", "zebra " * (i + 1))], [])
    with ix.transaction(conn):  # an orphan that outranks every real row
        conn.execute("INSERT INTO body_units_fts(rowid, heading, text, title) VALUES (9999, '', ?, '')",
                     ("zebra " * 50,))
    for limit in (1, 2, 3, -1):
        got = rd.fts_search(conn, "body", '"zebra"', limit=limit)
        assert got == ref_search(conn, "body", '"zebra"', limit=limit)
        assert len(got) == (3 if limit < 0 else limit)
        assert rd.fts_best_per_paper(conn, "body", '"zebra"', limit=limit) == \
            ref_best(conn, "body", '"zebra"', limit=limit)
    conn.close()


# --- papers without vectors, and the memo of index facts ------------------------------------------

def test_embedding_gaps_and_indexed_papers(tmp_path):
    path = tmp_path / "i.db"
    conn = ix.open_index(path)
    wr.replace_paper(conn, "GAPAA001", [body("GAPAA001", "n0", "alpha")], [])
    wr.replace_paper(conn, "GAPBB002", [body("GAPBB002", "n0", "beta")], [obj("GAPBB002", "p2:1", "beta")])
    wr.replace_paper(conn, "GAPCC003", [], [obj("GAPCC003", "p2:1", "gamma")])  # figures only
    wr.replace_paper(conn, "GAPDD004", [body("GAPDD004", "n0", "delta")], [])
    with ix.transaction(conn):
        conn.execute("INSERT INTO papers(paper_id) VALUES ('GAPEE005')")  # metadata only: not indexed
    add_passages(conn, ["GAPAA001", "GAPCC003"])
    r = Retriever(SqliteIndex(conn), get_settings(index_file=path, home=tmp_path / "home"))
    assert r._indexed_papers() == ["GAPAA001", "GAPBB002", "GAPCC003", "GAPDD004"]
    assert r._embedding_gaps(IDENT, None) == [
        "2 of 4 indexed papers have no vectors yet: semantic results miss them (run `sheaf build`)"]
    assert r._embedding_gaps(IDENT, ["GAPAA001", "GAPCC003"]) == []
    assert r._embedding_gaps(IDENT, ["GAPBB002", "GAPCC003", "GAPEE005"])[0].startswith("1 of 2 indexed")
    # a change through the Retriever's own connection is seen (total_changes) ...
    add_passages(conn, ["GAPBB002"])
    assert r._embedding_gaps(IDENT, None)[0].startswith("1 of 4 indexed")
    # ... and so is a commit through another connection (PRAGMA data_version)
    other = ix.open_index(path)
    add_passages(other, ["GAPDD004"])
    other.close()
    assert r._embedding_gaps(IDENT, None) == []
    conn.close()


def test_memo_is_dropped_by_any_commit(tmp_path):
    path = tmp_path / "i.db"
    conn = ix.open_index(path)
    wr.replace_paper(conn, "MEMOAA01", [body("MEMOAA01", "n0", "alpha")], [])
    conn.close()
    calls = []
    with open_r(path, tmp_path) as r:
        def fact():
            calls.append(1)
            return r.conn.execute("SELECT count(*) FROM papers").fetchone()[0]
        assert r._memoized("n", fact) == 1 and r._memoized("n", fact) == 1 and len(calls) == 1
        w = ix.open_index(path)
        with ix.transaction(w):
            w.execute("INSERT INTO papers(paper_id) VALUES ('MEMOBB02')")
        w.close()
        assert r._memoized("n", fact) == 2 and len(calls) == 2


# --- the warm server's pool of Retrievers ------------------------------------------------------------

def test_retriever_pool_reuses_only_an_unchanged_index(tmp_path):
    from sheaf.serve.server import RetrieverPool

    path = tmp_path / "index" / "sheaf.db"
    path.parent.mkdir()
    conn = ix.open_index(path)
    wr.replace_paper(conn, "POOLAA01", [body("POOLAA01", "n0", "zebra crossing")], [])
    conn.close()
    s = get_settings(index_file=path, home=tmp_path / "home", library=Path("/nonexistent-library"))
    pool = RetrieverPool(s)
    with pool.lease() as r1:
        assert r1.search("zebra").matches[0]["zotero_key"] == "POOLAA01"
        r1._papers["POOLAA01"]["title"] = "stale"  # per-query state must not outlive the query
    with pool.lease() as r2:
        assert r2 is r1 and r2._papers == {}
        with pool.lease() as r3:  # a concurrent request: its own Retriever and connection
            assert r3 is not r2 and r3.conn is not r2.conn
    assert pool.stats == {"opened": 2, "reused": 1}
    w = ix.open_index(path)  # a commit: the next lease opens afresh and sees it
    wr.replace_paper(w, "POOLBB02", [body("POOLBB02", "n0", "zebra zebra")], [])
    w.close()
    with pool.lease() as r4:
        assert r4 is not r1 and r4 is not r3
        assert {m["zotero_key"] for m in r4.search("zebra").matches} == {"POOLAA01", "POOLBB02"}
    with pytest.raises(SheafError):  # a refused query keeps the Retriever
        with pool.lease() as r5:
            r5.search("")
    with pool.lease() as r6:
        assert r6 is r5
    with pytest.raises(ZeroDivisionError):  # anything else closes it
        with pool.lease() as r7:
            1 / 0
    with pool.lease() as r8:
        assert r8 is not r7
    # the file replaced (a new inode): reopened; removed: INDEX_NOT_FOUND as a fresh open says
    tmp = path.with_name("new.db")
    c = ix.open_index(tmp)
    wr.replace_paper(c, "POOLCC03", [body("POOLCC03", "n0", "zebra")], [])
    c.close()
    for suffix in ("-wal", "-shm"):  # a WAL file left behind would be replayed over the new file
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.replace(tmp, path)
    with pool.lease() as r9:
        assert [m["zotero_key"] for m in r9.search("zebra").matches] == ["POOLCC03"]
    path.unlink()
    with pytest.raises(SheafError) as ei:
        with pool.lease():
            pass
    assert ei.value.code == "INDEX_NOT_FOUND"
    pool.close()


def test_the_query_service_with_a_pool_answers_as_without(tmp_path, monkeypatch):
    from sheaf.serve.server import RetrieverPool
    from sheaf.service.queries import run_query
    from sheaf.service.requests import request_from_dict

    home = tmp_path / "home"
    path = home / "index" / "sheaf.db"
    path.parent.mkdir(parents=True)
    conn = ix.open_index(path)
    wr.replace_paper(conn, "RUNAA001", [body("RUNAA001", "n0", "zebra crossing at dusk"),
                                        body("RUNAA001", "n1", "lion pride")], [obj("RUNAA001", "p2:1", "zebra")])
    conn.close()
    monkeypatch.setenv("SHEAF_HOME", str(home))
    monkeypatch.setenv("SHEAF_LIBRARY", str(tmp_path / "no-library"))
    for k in [k for k in os.environ if k.startswith("SHEAF_") and k not in ("SHEAF_HOME", "SHEAF_LIBRARY")]:
        monkeypatch.delenv(k)
    pool = RetrieverPool(get_settings())
    cases = [("search", {"query": "zebra"}), ("retrieve", {"query": "zebra dusk", "mode": "lexical"}),
             ("retrieve", {"query": "?", "mode": "lexical"}), ("grep", {"term": "zebra"}),
             ("retrieve", {"query": "zebra", "mode": "semantic"}), ("get", {"ids": ["nope"]})]
    for _ in range(2):
        for command, args in cases:
            req = request_from_dict(command, args)
            assert run_query(req, pool.lease) == run_query(req, Retriever.open)
    assert pool.stats["reused"] > 0
    pool.close()


# --- hybrid: the lexical leg on a thread gives the sequential answer ---------------------------------

class FakeEmbedder:
    """A query encoder for IDENT: a deterministic vector per text (no model)."""

    model_name = IDENT.name

    def embed_query(self, text: str):
        import numpy as np

        from sheaf.vectors.identity import QueryVector

        rng = np.random.default_rng(int(hashlib.sha1(text.encode()).hexdigest()[:8], 16))
        v = rng.standard_normal(IDENT.dimension).astype(np.float32)
        return QueryVector(IDENT, v / np.linalg.norm(v), text)


@pytest.fixture()
def hybrid_index(tmp_path, monkeypatch):
    import numpy as np


    rng = random.Random(11)
    words = "zebra lion tiger stripes manes dusk dawn savanna herd grass river".split()
    path = tmp_path / "h.db"
    conn = ix.open_index(path)
    keys = [f"HYB{i:05d}" for i in range(12)]
    for k in keys:
        units = [body(k, f"n{j}", " ".join(rng.choice(words) for _ in range(8))) for j in range(5)]
        wr.replace_paper(conn, k, units, [obj(k, "p2:1", " ".join(rng.sample(words, 3)))])
    ix.ensure_collection(conn, IDENT)
    vrng = np.random.default_rng(5)
    with ix.transaction(conn):
        for uid, pid, t in conn.execute("SELECT unit_id, paper_id, 'body' FROM body_units WHERE paper_id != ?1 "
                                        "UNION ALL SELECT unit_id, paper_id, 'figure' FROM object_units "
                                        "WHERE paper_id != ?1", (keys[-1],)).fetchall():  # the last: no vectors
            v = vrng.standard_normal(IDENT.dimension).astype(np.float32)
            cur = conn.execute(f"INSERT INTO {IDENT.passages_table}(passage_id, unit_id, unit_type, paper_id, "
                               "ordinal, char_start, char_end, text_sha256) VALUES (?,?,?,?,0,0,1,'x')",
                               (f"{uid}#0", uid, "body" if t == "body" else "object", pid))
            conn.execute(f"INSERT INTO {IDENT.vec_table}(passage_rowid, embedding, paper_id) VALUES (?,?,?)",
                         (cur.lastrowid, (v / np.linalg.norm(v)).tobytes(), pid))
    conn.close()
    s = get_settings(index_file=path, home=tmp_path / "home", library=Path("/nonexistent-library"),
                     embedding_model=IDENT.name)
    return path, s, keys, QueryEncoder(s, embedder=FakeEmbedder())


def test_hybrid_with_the_lexical_leg_on_a_thread_answers_as_in_line(hybrid_index):
    path, s, keys, enc = hybrid_index
    with Retriever.open(s, query_encoder=enc) as threaded, \
            Retriever(SqliteIndex(ix.open_index(path, readonly=True)), s, query_encoder=enc) as inline:
        for q in ("zebra", "lion stripes", "the herd at dusk", "grass river savanna zebra", "nothing"):
            for kw in ({}, {"limit": 3, "per_paper": 1}, {"limit": 40, "per_paper": 0}, {"kind": "object"},
                       {"papers": keys[:3]}, {"papers": keys[-2:]}, {"fetch": 2, "limit": 7}):
                a = threaded.retrieve(q, mode="hybrid", **kw)
                b = inline.retrieve(q, mode="hybrid", **kw)
                assert (a.data, a.warnings, a.next_actions) == (b.data, b.warnings, b.next_actions), (q, kw)
        assert threaded._aux is not None and inline._aux is None  # the thread ran
        assert any("have no vectors yet" in w for w in threaded.retrieve("zebra", mode="hybrid").warnings)


def test_hybrid_errors_come_in_the_sequential_order(hybrid_index, monkeypatch):
    _, s, _, enc = hybrid_index

    def fail(code):
        def f(*a, **kw):
            raise SheafError(code, code)
        return f

    with Retriever.open(s, query_encoder=enc) as r:
        monkeypatch.setattr(Retriever, "_semantic_units", fail("VECTOR_CORRUPTED"))
        with pytest.raises(SheafError) as ei:
            r.retrieve("zebra", mode="hybrid")
        assert ei.value.code == "VECTOR_CORRUPTED"
        assert r.retrieve("zebra", mode="lexical").matches  # the lexical leg alone still answers
        monkeypatch.setattr(Retriever, "_lexical_units", fail("BAD_QUERY"))  # both fail: the lexical first
        with pytest.raises(SheafError) as ei:
            r.retrieve("zebra", mode="hybrid")
        assert ei.value.code == "BAD_QUERY"
        monkeypatch.setattr(Retriever, "query_vector", fail("BACKEND_UNAVAILABLE"))  # the encoder before both
        with pytest.raises(SheafError) as ei:
            r.retrieve("zebra", mode="hybrid")
        assert ei.value.code == "BACKEND_UNAVAILABLE"


# --- the CLI's parser without shutil ----------------------------------------------------------------

@pytest.mark.parametrize("columns", [None, "", "abc", "0", "-3", "40", "120", "300"])
def test_cli_help_is_argparse_own(monkeypatch, columns):
    """`_Parser` formats help without importing shutil: the same width, so the same text."""
    import argparse
    import shutil

    from sheaf.cli import app as cli

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert cli._terminal_columns(80) == shutil.get_terminal_size((80, 24)).columns
    assert cli._terminal_columns(110) == shutil.get_terminal_size((110, 24)).columns

    def helps() -> list[str]:
        ap = cli.build_parser()
        subs = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
        return [ap.format_help()] + [p.format_help() + p.format_usage() for p in subs.choices.values()]

    ours = helps()
    monkeypatch.setattr(cli.Parser, "_get_formatter", argparse.ArgumentParser._get_formatter)
    assert ours == helps()


# --- snippets: the sliding window picks the window the plain count picks ----------------------------

def _plain_best_window(hits: list[tuple[int, str]], span: int) -> int:
    """What `make_snippet` computed before it slid its window: every window counted afresh."""
    best, best_key, j = 0, (-1, -1), 0
    for i, (s0, _) in enumerate(hits):
        while j < len(hits) and hits[j][0] < s0 + span:
            j += 1
        key = (sum(len(t) for t in {t for _, t in hits[i:j]}), -i)
        if key > best_key:
            best, best_key = i, key
    return best


def test_snippet_window_equals_the_plain_count():
    from sheaf.search.snippets import _best_window, highlight_re

    rng = random.Random(2)
    words = "cell cells regeneration regenerating bone density alumina creep rate of the soil moisture".split()
    for _ in range(1500):
        text = " ".join(rng.choice([*words, "x" * rng.randint(1, 9)]) for _ in range(rng.randint(1, 250)))
        pat = highlight_re(" ".join(rng.sample(words[:-4], rng.randint(1, 5))))  # not "of the" alone
        hits = [(m.start(), m.group(0).lower()) for m in pat.finditer(text)]
        span = rng.choice([0, 50, 92, 200])
        assert _best_window(hits, span) == (_plain_best_window(hits, span) if hits else 0)


def test_vector_search_leaves_out_zero_vectors(tmp_path):
    """A stored all-zero vector (sqlite-vec: NULL distance) is near nothing: it is left out,
    and never costs a place in k (it used to crash the sort)."""
    import numpy as np

    from sheaf.vectors.identity import QueryVector

    path = tmp_path / "i.db"
    conn = ix.open_index(path)
    keys = [f"ZERO{i:04d}" for i in range(6)]
    for k in keys:
        wr.replace_paper(conn, k, [body(k, "n0", f"text of {k}")], [])
    add_passages(conn, keys)
    rng = np.random.default_rng(1)
    vecs = {k: (np.zeros(4, np.float32) if i % 2 == 0 else rng.standard_normal(4).astype(np.float32))
            for i, k in enumerate(keys)}
    with ix.transaction(conn):
        for k, v in vecs.items():
            conn.execute(f"UPDATE {IDENT.vec_table} SET embedding = ? WHERE paper_id = ?", (v.tobytes(), k))
    q = QueryVector(IDENT, np.array([1, 0, 0, 0], np.float32), "q")
    for kk in (1, 2, 3, 10):
        hits = rd.vector_search(conn, q, kk)
        assert [h.paper_id for h in hits] == sorted((k for k in keys[1::2]), key=lambda k: -vecs[k][0]
                                                    / np.linalg.norm(vecs[k]))[:kk]
        assert all(h.distance == h.distance for h in hits)  # no NaN, no None
    conn.close()
