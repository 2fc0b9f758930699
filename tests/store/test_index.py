"""The SQLite index: schema/migrations, atomic per-paper replace and remove, FTS behaviour.

Real SQLite (pysqlite3 with FTS5) and real sqlite-vec; vectors come from the real model.
Failures are injected through the `hook` callback of the write functions, between statements.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sheaf.core.envelope import SheafError
from sheaf.core.models import BodyUnit, ObjectUnit, PaperMeta
from sheaf.store.fulltext import build_match_query, fts_text
from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr
from sheaf.store.sqlite.backend import SqliteEmbeddingCache
from sheaf.store.sqlite.db import connect
from sheaf.vectors.identity import EmbeddedPassages, ModelChangedError, ModelIdentity, QueryVector
from tests.kits.index import schema1_file
from tests.kits.papers import body_unit, object_unit

pytestmark = pytest.mark.slow


body = partial(body_unit, short_id_len=4, pages=(1, 2), blocks="p1:{node}")
obj = partial(object_unit, short_id_len=0, nearby="as shown in the figure")


LONG = ("Synaptic density increased after treatment with the compound in aged mice, and the effect "
        "persisted for several weeks. ") * 30


def paper_units(pid: str, variant: str = "a") -> tuple[list[BodyUnit], list[ObjectUnit]]:
    units = [
        body(pid, "s0", f"Abstract of {pid}: we study bone regeneration ({variant}).", ("Abstract",)),
        body(pid, "s1", f"Methods {variant}: cross-linking of collagen scaffolds at 37 °C. " + LONG, ("Methods",)),
        body(pid, "s2", f"Results {variant}: the café-style assay was positive.", ("Results", "Assay")),
    ]
    objects = [obj(pid, "p2:3", f"Figure 1. Dose response of the scaffold ({variant})."),
               obj(pid, "p3:1", "Table 1. Cohort.", "table", "age | n\n30 | 12")]
    return units, objects


def embedded(embedder, conn, units, objects, title="A Paper") -> EmbeddedPassages:
    return embedder.embed(embedder.build_passages(units, objects, title=title), SqliteEmbeddingCache(conn))


def snapshot(conn) -> dict:
    """Every row of every table the writer touches (FTS through MATCH/row counts, vectors as bytes)."""
    snap = {}
    for t in ("papers", "body_units", "object_units", "embedding_cache"):
        snap[t] = sorted(map(tuple, conn.execute(f"SELECT * FROM {t}").fetchall()), key=repr)
    for t in ("papers_fts", "body_units_fts", "object_units_fts"):
        snap[t] = sorted(r[0] for r in conn.execute(f"SELECT rowid FROM {t}"))
    for ident in ix.collections(conn).values():
        snap[ident.passages_table] = sorted(
            map(tuple, conn.execute(f"SELECT * FROM {ident.passages_table}").fetchall()), key=repr)
        snap[ident.vec_table] = sorted(
            (r[0], bytes(r[1]), r[2]) for r in conn.execute(
                f"SELECT passage_rowid, embedding, paper_id FROM {ident.vec_table}"))
    snap["fts_hits"] = [h.ref for h in rd.search_text(conn, "collagen", "body")]
    return snap


@pytest.fixture()
def conn(tmp_path):
    c = ix.open_index(tmp_path / "index" / "sheaf.db")
    yield c
    c.close()


def assert_consistent(conn, pid: str, units, objects, ep: EmbeddedPassages) -> None:
    c = rd.counts(conn, pid)
    assert c["body_units"] == c["body_units_fts"] == len(units)
    assert c["object_units"] == c["object_units_fts"] == len(objects)
    assert c[ep.identity.passages_table] == c[ep.identity.vec_table] == len(ep.passages)
    unit_ids = {u.unit_id for u in (*units, *objects)}
    pt, vt = ep.identity.passages_table, ep.identity.vec_table
    rows = conn.execute(f"SELECT passage_id, unit_id FROM {pt} WHERE paper_id = ?", (pid,)).fetchall()
    assert len({r[0] for r in rows}) == len(rows)  # no duplicate passages
    assert {r[1] for r in rows} <= unit_ids
    # every vector row has its passage row and vice versa
    orphans = conn.execute(f"SELECT COUNT(*) FROM {vt} v WHERE v.paper_id = ? AND NOT EXISTS "
                           f"(SELECT 1 FROM {pt} p WHERE p.passage_rowid = v.passage_rowid)", (pid,)).fetchone()[0]
    assert orphans == 0
    # every FTS row belongs to a unit row of this paper
    for t in ("body_units", "object_units"):
        fts_ids = {r[0] for r in conn.execute(f"SELECT rowid FROM {t}_fts")}
        base_ids = {r[0] for r in conn.execute(f"SELECT unit_rowid FROM {t}")}
        assert fts_ids == base_ids


# --- connection and schema -----------------------------------------------------------------

def test_connection_pragmas(tmp_path):
    c = connect(tmp_path / "x.db")
    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert c.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert c.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000
    assert c.execute("SELECT vec_version()").fetchone()[0].startswith("v")
    c.close()


def test_missing_index_is_index_not_found(tmp_path):
    with pytest.raises(SheafError) as ei:
        ix.open_index(tmp_path / "none.db", readonly=True)
    assert ei.value.code == "INDEX_NOT_FOUND"


def test_schema_created_and_reopened(tmp_path):
    p = tmp_path / "s.db"
    ix.open_index(p).close()
    c = ix.open_index(p)
    assert ix.schema_version(c) == ix.SCHEMA_VERSION
    c.close()
    ro = ix.open_index(p, readonly=True)
    assert rd.counts(ro)["papers"] == 0
    ro.close()


def test_newer_index_refused(tmp_path):
    p = tmp_path / "s.db"
    c = ix.open_index(p)
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(ix.SCHEMA_VERSION + 5),))
    c.close()
    with pytest.raises(ix.IndexSchemaError, match="newer Sheaf"):
        ix.open_index(p)
    with pytest.raises(ix.IndexSchemaError):
        ix.open_index(p, readonly=True)


def test_older_index_migrated_or_refused(tmp_path, monkeypatch):
    p = tmp_path / "s.db"
    ix.open_index(p).close()  # an index of the current version v
    v = ix.SCHEMA_VERSION
    monkeypatch.setattr(ix, "SCHEMA_VERSION", v + 1)
    with pytest.raises(ix.IndexSchemaError, match=f"no migration exists from {v}"):
        ix.open_index(p)  # no step v→v+1: refused, untouched

    ran = []

    def step(conn):
        conn.execute("ALTER TABLE papers ADD COLUMN note TEXT")
        ran.append(1)

    monkeypatch.setitem(ix.MIGRATIONS, v, step)
    with pytest.raises(ix.IndexSchemaError, match="read-write"):
        ix.open_index(p, readonly=True)
    c = ix.open_index(p)
    assert ran == [1] and ix.schema_version(c) == v + 1
    assert "note" in [r[1] for r in c.execute("PRAGMA table_info(papers)")]
    c.close()


def test_schema_1_migrated_to_porter_and_title(tmp_path):
    """A version-1 index (unicode61, no title column) is migrated in place: its FTS tables are
    rebuilt from the base rows with the porter stemmer and the paper's title on each unit."""
    p = tmp_path / "v1.db"
    c = schema1_file(p)
    c.execute("INSERT INTO papers(paper_rowid, paper_id, title, has_metadata) VALUES (1, 'P1', 'Osteoblast atlas', 1)")
    c.execute("INSERT INTO papers_fts(rowid, title, authors, abstract, journal, domain, year) "
              "VALUES (1, 'Osteoblast atlas', '', '', '', '', '')")
    u = body("P1", "s0", "The scaffolds regenerated bone.")
    c.execute("INSERT INTO body_units(unit_rowid, unit_id, short_id, paper_id, node_id, section_path, "
              "section_level, block_ids, text, token_count, unit_kind, part_ordinal) "
              "VALUES (1, ?, 'ab12', 'P1', 's0', '[\"Results\"]', 1, '[]', ?, 5, 'body', 0)", (u.unit_id, u.text))
    c.execute("INSERT INTO body_units_fts(rowid, heading, text) VALUES (1, 'Results', ?)", (u.text,))
    c.close()
    conn = ix.open_index(p)
    assert ix.schema_version(conn) == ix.SCHEMA_VERSION >= 2
    assert [h.ref for h in rd.search_text(conn, "regeneration scaffold")] == [u.unit_id]  # stemmed
    assert [h.ref for h in rd.search_text(conn, "osteoblast")] == [u.unit_id]  # the title column
    assert [h.ref for h in rd.search_text(conn, "atlas", "papers")] == ["P1"]
    c = rd.counts(conn)
    assert c["body_units_fts"] == c["body_units"] == 1 and c["papers_fts"] == 1
    # a later title change reaches the unit's FTS row
    wr.upsert_papers(conn, [PaperMeta("P1", None, "Chondrocyte map", (), None, None, None, None, None, None,
                                      (), None)])
    assert rd.search_text(conn, "osteoblast") == [] and len(rd.search_text(conn, "chondrocyte")) == 1
    conn.close()


def test_foreign_sqlite_file_refused(tmp_path):
    p = tmp_path / "other.db"
    c = connect(p)
    c.execute("CREATE TABLE stuff (x)")
    c.close()
    with pytest.raises(ix.IndexSchemaError, match="not a Sheaf index"):
        ix.open_index(p)


def test_index_modules_do_not_import_torch():
    code = ("import sys, sheaf.store.sqlite.schema, sheaf.vectors.embedder, sheaf.store.fulltext, sheaf.library.metadata, sheaf.store.sqlite.db; "
            "bad = [m for m in ('torch', 'sentence_transformers', 'transformers', 'dagster') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# --- replace / remove --------------------------------------------------------------------------

def test_replace_twice_keeps_counts_and_consistency(conn, embedder):
    units, objects = paper_units("P1")
    ep = embedded(embedder, conn, units, objects)
    assert any(p.ordinal > 0 for p in ep.passages)  # the long unit has several passages
    wr.replace_paper(conn, "P1", units, objects, ep)
    first = rd.counts(conn)
    assert_consistent(conn, "P1", units, objects, ep)
    wr.replace_paper(conn, "P1", units, objects, ep)
    assert rd.counts(conn) == first
    assert_consistent(conn, "P1", units, objects, ep)
    # a replace with fewer units shrinks everything accordingly
    ep2 = embedded(embedder, conn, units[:1], [])
    wr.replace_paper(conn, "P1", units[:1], [], ep2)
    assert_consistent(conn, "P1", units[:1], [], ep2)
    # the stub paper row exists once
    assert rd.counts(conn)["papers"] == 1 and rd.counts(conn)["papers_fts"] == 1


def test_replace_without_passages_drops_stale_vectors(conn, embedder):
    units, objects = paper_units("P1")
    ep = embedded(embedder, conn, units, objects)
    wr.replace_paper(conn, "P1", units, objects, ep)
    wr.replace_paper(conn, "P1", units, objects)  # FTS only, same units: their vectors stay valid
    assert_consistent(conn, "P1", units, objects, ep)
    changed = [replace(units[0], text=units[0].text + " Changed."), *units[1:]]
    wr.replace_paper(conn, "P1", changed, objects)  # FTS only: the changed unit's vectors are stale
    c = rd.counts(conn, "P1")
    stale = sum(1 for p in ep.passages if p.unit_id == units[0].unit_id)
    assert stale and c[ep.identity.vec_table] == c[ep.identity.passages_table] == len(ep.passages) - stale
    left = {r[0] for r in conn.execute(f"SELECT unit_id FROM {ep.identity.passages_table}")}
    assert units[0].unit_id not in left
    wr.replace_paper(conn, "P1", units, objects)
    assert wr.replace_paper_vectors(conn, "P1", ep) == len(ep.passages)
    assert_consistent(conn, "P1", units, objects, ep)


STEPS = ["after_delete", "after_body_units", "after_body_units_fts", "after_object_units",
         "after_object_units_fts", "after_passages", "after_vectors", "before_commit"]


@pytest.mark.parametrize("fail_at", STEPS)
def test_failure_mid_replace_keeps_previous_rows(conn, embedder, fail_at):
    old_u, old_o = paper_units("P1", "old")
    wr.replace_paper(conn, "P1", old_u, old_o, embedded(embedder, conn, old_u, old_o))
    other_u, other_o = paper_units("P2")
    wr.replace_paper(conn, "P2", other_u, other_o, embedded(embedder, conn, other_u, other_o))
    new_u, new_o = paper_units("P1", "new")
    new_u.append(body("P1", "s9", "An added section."))
    ep = embedded(embedder, conn, new_u, new_o)
    before = snapshot(conn)  # (embedding wrote new cache rows; the replace must not change anything)
    seen = []

    def hook(step):
        seen.append(step)
        if step == fail_at:
            raise RuntimeError(f"injected at {step}")

    with pytest.raises(RuntimeError, match="injected"):
        wr.replace_paper(conn, "P1", new_u, new_o, ep, hook=hook)
    assert seen[-1] == fail_at
    assert not conn.in_transaction
    assert snapshot(conn) == before
    # and the index still works: the same replace without the failure succeeds
    wr.replace_paper(conn, "P1", new_u, new_o, ep)
    assert_consistent(conn, "P1", new_u, new_o, ep)


def test_real_sqlite_failure_mid_replace_rolls_back(conn, embedder):
    u1, o1 = paper_units("P1")
    wr.replace_paper(conn, "P1", u1, o1, embedded(embedder, conn, u1, o1))
    u2, o2 = paper_units("P2")
    wr.replace_paper(conn, "P2", u2, o2)
    before = snapshot(conn)
    # P1's new object reuses a unit_id P2 holds: the UNIQUE constraint fails after P1's delete
    clash = dataclasses.replace(o2[0], paper_id="P1")
    with pytest.raises(Exception, match="UNIQUE"):
        wr.replace_paper(conn, "P1", u1, [clash])
    assert snapshot(conn) == before


def test_remove_paper_leaves_nothing(conn, embedder):
    u1, o1 = paper_units("P1")
    u2, o2 = paper_units("P2")
    ep1 = embedded(embedder, conn, u1, o1)
    wr.replace_paper(conn, "P1", u1, o1, ep1)
    wr.replace_paper(conn, "P2", u2, o2, embedded(embedder, conn, u2, o2))
    wr.upsert_papers(conn, [PaperMeta("P1", None, "Bone paper", ("Ann Müller",), "Ann Müller", 2020,
                                      "J Bone", None, None, None, (), "bone")])
    p2_before = rd.counts(conn, "P2")
    assert wr.remove_paper(conn, "P1")
    c = rd.counts(conn, "P1")
    assert all(v == 0 for v in c.values()), c
    assert conn.execute("SELECT COUNT(*) FROM papers_fts WHERE papers_fts MATCH 'muller'").fetchone()[0] == 0
    assert rd.counts(conn, "P2") == p2_before
    # the P1-only cached vectors are gone; P2's (and texts shared by both) are kept
    p1_shas = {p.text_sha256 for p in ep1.passages}
    p2_shas = {r[0] for r in conn.execute(f"SELECT text_sha256 FROM {ep1.identity.passages_table}")}
    cached = {r[0] for r in conn.execute("SELECT text_sha256 FROM embedding_cache")}
    assert not (p1_shas - p2_shas) & cached
    assert p2_shas <= cached
    assert not wr.remove_paper(conn, "P1")  # nothing left to remove


@pytest.mark.parametrize("fail_at", ["after_vectors", "after_units", "after_paper", "before_commit"])
def test_failure_mid_remove_keeps_rows(conn, embedder, fail_at):
    u1, o1 = paper_units("P1")
    wr.replace_paper(conn, "P1", u1, o1, embedded(embedder, conn, u1, o1))
    before = snapshot(conn)

    def hook(step):
        if step == fail_at:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        wr.remove_paper(conn, "P1", hook=hook)
    assert snapshot(conn) == before


def test_replace_validates_before_writing(conn):
    u, o = paper_units("P1")
    with pytest.raises(ValueError, match="belongs to paper"):
        wr.replace_paper(conn, "P2", u, o)
    with pytest.raises(ValueError, match="invalid paper id"):
        wr.replace_paper(conn, "../etc", [], [])
    assert rd.counts(conn)["papers"] == 0


def test_short_ids_lengthened_on_collision(conn):
    a = dataclasses.replace(body("PA", "s0", "alpha"), short_id="abcd")
    b = dataclasses.replace(body("PB", "s0", "beta"), short_id="abcd")
    wr.replace_paper(conn, "PA", [a], [])
    st_b = wr.replace_paper(conn, "PB", [b], [])
    assert st_b.short_ids_lengthened == 1
    sa, sb = (rd.get_unit(conn, u.unit_id).short_id for u in (a, b))
    assert sa == "abcd" and sb != sa and len(sb) > 4
    assert rd.get_unit(conn, sb).unit_id == b.unit_id
    # replacing PA again keeps its id (its own old row does not count as a clash)
    wr.replace_paper(conn, "PA", [a], [])
    assert rd.get_unit(conn, a.unit_id).short_id == "abcd"


def test_units_round_trip(conn):
    u, o = paper_units("P1")
    wr.replace_paper(conn, "P1", u, o)
    got = rd.get_units(conn, [x.unit_id for x in (*u, *o)] + ["nope"])
    assert set(got) == {x.unit_id for x in (*u, *o)}
    for x in (*u, *o):
        y = got[x.unit_id]
        assert dataclasses.replace(y, short_id=x.short_id) == x
    b, ob = rd.paper_units(conn, "P1")
    assert [x.unit_id for x in b] == [x.unit_id for x in u] and len(ob) == 2
    # the dict (Parquet row) form is accepted too
    wr.replace_paper(conn, "P1", [x.to_dict() for x in u], [x.to_dict() for x in o])
    assert rd.paper_units(conn, "P1") == (b, ob)


# --- metadata in the index ------------------------------------------------------------------------

def test_upsert_papers_and_metadata_fts(conn):
    m = PaperMeta("K1", "muller2020", "Endochondral ossification in bone regeneration",
                  ("Anna Müller", "Bo Li"), "Anna Müller", 2020, "Tissue Eng", "10.1/x", "123",
                  "We review SPG-302.", ("Bone/Reviews",), "bone", "journalArticle")
    assert wr.upsert_papers(conn, [m]) == {"inserted": 1, "updated": 0, "unchanged": 0}
    assert wr.upsert_papers(conn, [m]) == {"inserted": 0, "updated": 0, "unchanged": 1}
    assert rd.get_paper(conn, "K1") == m
    for q in ("muller", "Müller", "ossification", "SPG302", "2020", "tissue"):
        assert [h.ref for h in rd.search_text(conn, q, "papers")] == ["K1"], q
    assert rd.fts_search(conn, "papers", 'year : "2020"')[0].ref == "K1"
    assert rd.fts_search(conn, "papers", 'domain : "bone"')[0].ref == "K1"
    m2 = dataclasses.replace(m, title="Something else entirely")
    assert wr.upsert_papers(conn, [m2])["updated"] == 1
    assert rd.search_text(conn, "ossification", "papers") == []
    assert rd.counts(conn)["papers_fts"] == 1
    # a stub from replace_paper is filled in by upsert, not duplicated
    wr.replace_paper(conn, "K2", [body("K2", "s0", "text")], [])
    assert rd.get_paper(conn, "K2") is None
    wr.upsert_papers(conn, [dataclasses.replace(m, key="K2", title="Second")])
    assert rd.get_paper(conn, "K2").title == "Second"
    assert rd.counts(conn)["papers"] == rd.counts(conn)["papers_fts"] == 2
    wr.upsert_papers(conn, [dataclasses.replace(m, key="K3", year=1999, domain="neuro",
                                                collections=("Neuro",))])
    assert rd.paper_ids_where(conn, year_min=2000) == ["K1", "K2"]
    assert rd.paper_ids_where(conn, year_max=2000, domains=["neuro"]) == ["K3"]
    assert rd.paper_ids_where(conn, collection="Bone") == ["K1", "K2"]
    assert rd.paper_ids_where(conn, collection="Bon") == []
    hits = rd.search_text(conn, "review", "papers", paper_ids=rd.paper_ids_where(conn, domains=["neuro"]))
    assert [h.ref for h in hits] == ["K3"]


# --- FTS behaviour -----------------------------------------------------------------------------

def test_code_variants_found_in_every_form(conn):
    units = [body("C1", "s0", "Treatment with SPG302 restored synapses."),
             body("C2", "s0", "Treatment with SPG-302 restored synapses."),
             body("C3", "s0", "Treatment with SPG 302 restored synapses."),
             body("C4", "s0", "Treatment with SPG3 only.")]
    for u in units:
        wr.replace_paper(conn, u.paper_id, [u], [])
    want = {"C1:body:s0", "C2:body:s0", "C3:body:s0"}
    for q in ("SPG302", "SPG-302", "SPG 302", "spg302", "spg-302 synapses"):
        assert {h.ref for h in rd.search_text(conn, q)} == want, q
    # the literal expression from the design also works directly
    assert {h.ref for h in rd.fts_search(conn, "body", '"SPG302"* OR "SPG 302"*')} == want


def test_diacritics_hyphens_cjk(conn):
    units = [body("D1", "s0", "Le café de Müller: naïve Ångström résumé."),
             body("D2", "s0", "Cross-linking of type-I collagen; the ﬁbrin network."),
             body("D3", "s0", "本研究では骨再生の新しい方法を示す。"),
             body("D4", "s0", "骨 재생 연구는 중요하다"),
             body("D5", "s0", "crosslinking without hyphen")]
    for u in units:
        wr.replace_paper(conn, u.paper_id, [u], [])

    def refs(q):
        return {h.ref.split(":")[0] for h in rd.search_text(conn, q)}

    assert refs("cafe muller") == {"D1"}
    assert refs("café Müller") == {"D1"}
    assert refs("angstrom") == {"D1"} and refs("naive") == {"D1"}
    assert refs("cross-linking") == {"D2", "D5"}
    assert refs("crosslinking") == {"D2", "D5"}  # the joined form is indexed too
    assert refs("cross linking") == {"D2"}
    assert refs("type-I collagen") == {"D2"}
    assert refs("fibrin") == {"D2"}  # the PDF ligature is normalized
    assert refs("骨再生") == {"D3"}
    assert refs("再生") == {"D3"}
    assert refs("新しい方法") == {"D3"}
    assert refs("骨再生研究") == set()  # not a substring of D3
    assert refs("연구") == {"D4"}  # Hangul: prefix match past the particle


TORTURE = ['"', '""', '"""', "'", "*", "**", "(", ")", "()", "((a", "a)", "AND", "OR", "NOT", "NEAR",
           "NEAR(a b, 3)", "a AND", "OR b", "NOT a", "a NOT b", "-a", "a -b", "+a", "^a", "a^",
           "title:foo", ":", "col:", "{a b}:c", "a:b:c", "*a", "a*", '"a"*', "\\", "%", "_", "a OR OR",
           "\x00", "\n\t", "🙂", "e\u0301", "ｓｐｇ３０２", "\u200b", "​", "a" * 5000,
           " ".join(["x"] * 500), "NEAR/3", "a NEAR/2 b", "a + b", "[a]", "{}", "''", '"a', "a\"b",
           "COVID-19", "IL-6", "5-HT", "H2O2", "p53", "1-2", "3.5", "Ca2+", "α-synuclein", "β2",
           "c++", "x = y", "sel;ect * from x", "drop table papers; --"]


def test_torture_queries_never_raise(conn):
    wr.replace_paper(conn, "T1", [body("T1", "s0", "COVID-19 and IL-6 and α-synuclein, p53, H2O2")], [])
    for q in TORTURE:
        for mode in ("and", "or"):
            rd.search_text(conn, q, "body", mode=mode)
            rd.search_text(conn, q, "object", mode=mode)
            rd.search_text(conn, q, "papers", mode=mode)
            m = build_match_query(q, mode=mode, prefix_last=True)
            if m is not None:
                rd.fts_search(conn, "body", m)
    assert {h.ref for h in rd.search_text(conn, "COVID-19")} == {"T1:body:s0"}
    assert {h.ref for h in rd.search_text(conn, "α-synuclein")} == {"T1:body:s0"}
    assert {h.ref for h in rd.search_text(conn, "IL6")} == {"T1:body:s0"}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=80))
def test_random_queries_never_raise(conn, q):
    for mode in ("and", "or"):
        m = build_match_query(q, mode=mode, prefix_last=True)
        if m is not None:
            rd.fts_search(conn, "body", m)


def test_fts_text_is_stable():
    assert fts_text("SPG-302 cross-linking") == "SPG-302 cross-linking\nSPG302 crosslinking"
    assert fts_text("") == "" and fts_text(None) == ""
    assert "骨 " in fts_text("骨再生")


# --- vectors -----------------------------------------------------------------------------------

def test_vector_search_and_model_refusal(conn, embedder):
    u, o = paper_units("P1")
    ep = embedded(embedder, conn, u, o)
    q = embedder.embed_query("bone regeneration")
    with pytest.raises(SheafError) as ei:
        rd.vector_search(conn, q)
    assert ei.value.code == "VECTOR_NOT_BUILT"
    wr.replace_paper(conn, "P1", u, o, ep)
    hits = rd.vector_search(conn, q, k=3)
    assert hits and hits[0].unit_id == "P1:body:s0"
    assert hits == sorted(hits, key=lambda h: h.distance)
    assert rd.vector_search(conn, q, k=3, paper_ids=["P2"]) == []
    other = dataclasses.replace(q.identity, name="someone/else", weights_sha256="0" * 64)
    with pytest.raises(ModelChangedError) as ei:
        rd.vector_search(conn, QueryVector(other, q.vector, q.text))
    assert ei.value.code == "MODEL_CHANGED"
    assert "someone/else" in ei.value.message and q.identity.name in ei.value.message
    bad = QueryVector(q.identity, np.zeros(5, np.float32), "x")
    with pytest.raises(SheafError) as ei:
        rd.vector_search(conn, bad)
    assert ei.value.code == "BAD_QUERY"


def test_two_models_two_collections(conn, embedder):
    u, o = paper_units("P1")
    ep = embedded(embedder, conn, u, o)
    fake = dataclasses.replace(ep.identity, name="fake/model", dimension=8)
    ep_fake = EmbeddedPassages(fake, ep.passages, np.random.default_rng(0).random(
        (len(ep.passages), 8)).astype(np.float32))
    wr.replace_paper(conn, "P1", u, o, [ep, ep_fake])
    cols = ix.collections(conn)
    assert set(cols) == {ep.identity.key, fake.key} and fake.key != ep.identity.key
    assert len({i.vec_table for i in cols.values()}) == 2
    c = rd.counts(conn, "P1")
    assert c[fake.vec_table] == c[ep.identity.vec_table] == len(ep.passages)
    wr.remove_paper(conn, "P1")
    c = rd.counts(conn, "P1")
    assert all(v == 0 for v in c.values())
    assert json.loads(conn.execute("SELECT value FROM meta WHERE key = ?",
                                   (f"collection:{fake.key}",)).fetchone()[0])["name"] == "fake/model"
    assert ModelIdentity.from_json(fake.to_json()) == fake


def test_per_paper_vector_count_does_not_scan_the_collection(conn, embedder):
    """`counts(conn, paper)` (run per paper by the build's FTS step and checks) counts the
    paper's vectors by point lookups: its cost does not grow with the other papers' vectors.
    It used vec0's metadata filter, a scan of every vector (~0.3 s a paper at 190k vectors)."""
    rng = np.random.default_rng(3)

    def add(pid: str) -> int:
        units, objects = paper_units(pid)
        wr.replace_paper(conn, pid, units, objects)
        ps = tuple(embedder.build_passages(units, objects, title="A Paper"))
        m = rng.normal(size=(len(ps), embedder.identity.dimension)).astype(np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        return wr.replace_paper_vectors(conn, pid, EmbeddedPassages(embedder.identity, ps, m, encoded=len(ps)))

    n = add("P0")
    vt = embedder.identity.vec_table

    def cost() -> int:
        steps = [0]

        def tick() -> int:
            steps[0] += 1
            return 0

        conn.set_progress_handler(tick, 1)
        try:
            c = rd.counts(conn, "P0")
        finally:
            conn.set_progress_handler(None, 1)
        assert c[vt] == c[embedder.identity.passages_table] == n
        return steps[0]

    small = cost()
    for i in range(1, 60):
        add(f"P{i}")
    assert cost() < small * 1.5  # 60x the vectors, about the same work


def test_schema_3_gains_tags_and_links_keeping_its_rows(tmp_path):
    """3 → 4: the papers table gains `tags` (empty for the rows it held) and `link`."""
    p = tmp_path / "s.db"
    c = ix.open_index(p)
    c.execute("INSERT INTO papers(paper_id, title) VALUES ('PA', 'Kept')")
    c.execute("ALTER TABLE papers DROP COLUMN tags")
    c.execute("ALTER TABLE papers DROP COLUMN link")
    c.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    c.commit()
    c.close()
    with pytest.raises(ix.IndexSchemaError):
        ix.open_index(p, readonly=True)
    c = ix.open_index(p)
    assert ix.schema_version(c) == ix.SCHEMA_VERSION
    assert c.execute("SELECT title, tags, link FROM papers").fetchall() == [("Kept", "[]", None)]
    c.close()
