"""Lexical scores after any history of writes equal those of a clean build (schema 3).

FTS5's ``contentless_delete=1`` tables (schema 2) never took deleted rows out of bm25's
statistics (row count, column token totals), so every replace / retitle / remove inflated them
and ranking drifted from a fresh build's. Schema 3 deletes each contentless row with the
``'delete'`` command and exactly the values it indexed. These tests compare an index after
many writes with one built from scratch from the same final content: bm25 of every matching
row (fts_search, several queries, every scope), the index's terms per row (fts5vocab), row
counts, and FTS5's own integrity-check. No embedding model: FTS only.
"""
from __future__ import annotations

import dataclasses
import hashlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sheaf.core.models import BodyUnit, ObjectUnit, PaperMeta
from sheaf.store.fulltext import build_match_query
from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr
from sheaf.store.sqlite.db import connect, transaction
from sheaf.store.sqlite.integrity import global_orphans, paper_index_stats, remove_global_orphans

WORDS = ("bone", "regeneration", "scaffold", "collagen", "osteoblast", "marrow", "stem", "cell",
         "synaptic", "density", "mouse", "treatment", "dose", "response", "cohort", "fracture",
         "healing", "cartilage", "chondrocyte", "matrix", "signalling", "Wnt", "BMP-2",
         "cross-linking", "hydrogel", "porosity", "implant", "titanium", "SPG-302", "café", "vascular")
TITLES = ("Bone regeneration with collagen scaffolds", "Synaptic density in aged mice",
          "Cartilage repair by chondrocyte implants", "A hydrogel for fracture healing",
          "Marrow stem cells and Wnt signalling", None)
QUERIES = ("bone", "collagen scaffold", "regeneration", "chondrocyte", "mice", "SPG302", "cross-linking",
           "healing", "stem cell", "cafe", "Müller", "2021", "hydrogel porosity")
WEIGHTS = {"body": (2.0, 1.0, 2.0), "object": (1.0, 1.0, 1.0, 0.5, 1.0), "papers": None}
PAPERS = ("PA", "PB", "PC", "PD")


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def content(pid: str, variant: int) -> tuple[list[BodyUnit], list[ObjectUnit]]:
    """A paper's units: how many, their lengths and words depend on (pid, variant)."""
    rng = random.Random(f"{pid}/{variant}")
    units = []
    for i in range(rng.randint(1, 5)):
        uid = f"{pid}:body:s{i}"
        path = ("Results", rng.choice(WORDS)) if i % 2 else ("Methods",)
        text = _text(rng, rng.randint(3, 60))
        units.append(BodyUnit(uid, hashlib.sha1(uid.encode()).hexdigest()[:4], pid, f"s{i}", path, len(path),
                              (1, 2), (f"p1:{i}",), text, len(text.split()), "body", 0))
    objects = []
    for i in range(rng.randint(0, 2)):
        kind = "table" if i else "figure"
        objects.append(ObjectUnit(f"{pid}:{kind}:p2:{i}", "", pid, kind, rng.choice((f"{kind.title()} {i + 1}", None)),
                                  _text(rng, rng.randint(2, 12)), _text(rng, rng.randint(0, 8)) if i else "",
                                  _text(rng, rng.randint(0, 10)), f"s{i}", ("Results",), 2, (f"p2:{i}",)))
    return units, objects


def meta(pid: str, title: str | None, n: int = 0) -> PaperMeta:
    rng = random.Random(f"{pid}/meta/{n}")
    return PaperMeta(pid, pid.lower() + "2021", title, (rng.choice(("Anna Müller", "Bo Li", "C. Osei")), "Dan Roe"),
                     None, rng.choice((2019, 2021, None)), rng.choice(("J Bone", "Neuron", None)), None, None,
                     _text(rng, rng.randint(0, 30)) or None, (), rng.choice(("bone", "neuro", None)))


class Model:
    """What the index should hold: per paper its units (or None) and its metadata (or None)."""

    def __init__(self) -> None:
        self.units: dict[str, tuple[list[BodyUnit], list[ObjectUnit]] | None] = {}
        self.metas: dict[str, PaperMeta | None] = {}

    def replace(self, conn, pid: str, variant: int) -> None:
        u, o = content(pid, variant)
        wr.replace_paper(conn, pid, u, o)
        self.units[pid] = (u, o)

    def upsert(self, conn, pid: str, title: str | None, n: int = 0) -> None:
        m = meta(pid, title, n)
        wr.upsert_papers(conn, [m])
        self.metas[pid] = m

    def drop_from_export(self, conn, pid: str) -> None:
        """The export no longer lists `pid`: its metadata goes (a stub stays while it has units)."""
        self.metas[pid] = None
        wr.prune_metadata(conn, [p for p, m in self.metas.items() if m is not None])

    def remove(self, conn, pid: str, keep_metadata: bool = False) -> None:
        wr.remove_paper(conn, pid, keep_metadata=keep_metadata)
        self.units[pid] = None
        if not keep_metadata:
            self.metas[pid] = None

    def fresh(self):
        """A new index holding the final content only."""
        conn = ix.open_index(":memory:")
        metas = [m for m in self.metas.values() if m is not None]
        if metas:
            wr.upsert_papers(conn, metas)
        for pid, uo in sorted(self.units.items()):
            if uo is not None:
                wr.replace_paper(conn, pid, *uo)
        return conn


def _vocab(conn, fts: str, base: str, key: str, ref: str) -> list[tuple]:
    """Every (term, base row's id, column, offset) the FTS table holds (rowids differ between
    histories; the base row's id does not)."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.v_{fts} USING fts5vocab(main, {fts}, instance)")
    return sorted(conn.execute(f"SELECT v.term, b.{ref}, v.col, v.offset FROM temp.v_{fts} v "
                               f"LEFT JOIN {base} b ON b.{key} = v.doc").fetchall(), key=repr)


def fingerprint(conn) -> dict:
    out: dict = {"counts": {k: v for k, v in rd.counts(conn).items() if k != "embedding_cache"}}
    for scope, (fts, base, key, ref) in rd._SCOPES.items():
        out[f"vocab_{fts}"] = _vocab(conn, fts, base, key, ref)
        for q in QUERIES:
            for mode in ("and", "or"):
                match = build_match_query(q, mode=mode)
                hits = rd.fts_search(conn, scope, match, limit=-1, weights=WEIGHTS[scope])
                out[f"{scope}:{mode}:{q}"] = {h.ref: h.score for h in hits}
    return out


def integrity_ok(conn) -> None:
    with transaction(conn):
        for t in ix.FTS_TABLES:
            conn.execute(f"INSERT INTO {t}({t}) VALUES ('integrity-check')")


def assert_same_as_fresh(conn, model: Model) -> None:
    integrity_ok(conn)
    fresh = model.fresh()
    try:
        want, got = fingerprint(fresh), fingerprint(conn)
    finally:
        fresh.close()
    assert got.keys() == want.keys()
    scored = 0
    for k in want:
        if k.startswith(("counts", "vocab_")):
            assert got[k] == want[k], k
        else:
            assert got[k].keys() == want[k].keys(), k
            assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12), k
            scored += len(want[k])
    if any(v is not None for v in (*model.units.values(), *model.metas.values())):
        assert scored  # the queries do match something


def test_scores_after_many_rewrites_equal_a_fresh_build(conn):
    """Many replace / retitle / remove cycles: bm25 as a fresh build (failed on schema 2, where
    the statistics grew with every deleted row)."""
    m = Model()
    for i, pid in enumerate(PAPERS):
        m.upsert(conn, pid, TITLES[i])
        m.replace(conn, pid, 0)
    assert_same_as_fresh(conn, m)
    for cycle in range(1, 13):
        for i, pid in enumerate(PAPERS):
            m.replace(conn, pid, cycle % 3)
            m.upsert(conn, pid, TITLES[(i + cycle) % len(TITLES)], cycle)
        m.remove(conn, PAPERS[cycle % 4], keep_metadata=bool(cycle % 2))
        if cycle % 3 == 0:
            m.replace(conn, PAPERS[(cycle + 1) % 4], cycle)
    for pid in PAPERS[:3]:
        m.replace(conn, pid, 7)
    assert_same_as_fresh(conn, m)


OPS = st.lists(st.one_of(
    st.tuples(st.just("replace"), st.sampled_from(PAPERS), st.integers(0, 4)),
    st.tuples(st.just("upsert"), st.sampled_from(PAPERS), st.integers(0, len(TITLES) - 1)),
    st.tuples(st.just("remove"), st.sampled_from(PAPERS), st.booleans()),
    st.tuples(st.just("drop_from_export"), st.sampled_from(PAPERS), st.just(0)),
), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_random_write_sequences_score_as_a_fresh_build(ops):
    conn = ix.open_index(":memory:")
    try:
        m = Model()
        for n, (op, pid, arg) in enumerate(ops):
            if op == "replace":
                m.replace(conn, pid, arg)
            elif op == "upsert":
                m.upsert(conn, pid, TITLES[arg], n % 3)
            elif op == "drop_from_export":
                m.drop_from_export(conn, pid)
            else:
                m.remove(conn, pid, keep_metadata=arg)
        assert_same_as_fresh(conn, m)
    finally:
        conn.close()


def test_failed_writes_leave_scores_as_they_were(conn):
    """A write that fails between statements rolls back: FTS rows and statistics included."""
    m = Model()
    for i, pid in enumerate(PAPERS):
        m.upsert(conn, pid, TITLES[i])
        m.replace(conn, pid, 0)
    before = fingerprint(conn)

    def boom(step):
        raise RuntimeError(step)

    for step in ("after_delete", "after_body_units_fts", "after_object_units_fts", "before_commit"):
        with pytest.raises(RuntimeError):
            wr.replace_paper(conn, "PA", *content("PA", 3), hook=lambda s, step=step: boom(s) if s == step else None)
    with pytest.raises(RuntimeError):
        wr.upsert_papers(conn, [meta("PB", "Another title entirely", 5)], hook=boom)
    with pytest.raises(RuntimeError):
        wr.remove_paper(conn, "PC", hook=lambda s: boom(s) if s == "before_commit" else None)
    assert fingerprint(conn) == before
    assert_same_as_fresh(conn, m)


def test_remove_paper_keep_metadata(conn):
    """Content goes, library metadata stays (and is still found); a stub row goes."""
    m = Model()
    m.upsert(conn, "PA", TITLES[0])
    m.replace(conn, "PA", 0)
    m.replace(conn, "PB", 0)  # a stub papers row: no metadata
    assert wr.remove_paper(conn, "PA", keep_metadata=True)
    m.units["PA"] = None
    c = rd.counts(conn, "PA")
    assert c["body_units"] == c["object_units"] == c["body_units_fts"] == c["object_units_fts"] == 0
    assert c["papers"] == c["papers_fts"] == 1
    assert [h.ref for h in rd.search_text(conn, "collagen scaffolds", "papers")] == ["PA"]
    assert rd.get_paper(conn, "PA").title == TITLES[0]
    assert not wr.remove_paper(conn, "PA", keep_metadata=True)  # only the kept metadata is left
    assert wr.remove_paper(conn, "PB", keep_metadata=True)
    m.units["PB"] = None
    assert rd.counts(conn, "PB")["papers"] == 0  # a stub is not metadata
    assert_same_as_fresh(conn, m)
    assert wr.remove_paper(conn, "PA")
    m.metas["PA"] = None
    assert rd.counts(conn)["papers"] == rd.counts(conn)["papers_fts"] == 0
    assert_same_as_fresh(conn, m)


def test_missing_and_orphan_fts_rows_repaired_exactly(conn):
    """FTS rows deleted, or base rows deleted, outside Sheaf: a replace skips the rows the FTS
    table lacks (a 'delete' of an absent row would corrupt the statistics), new rows never land
    on an orphan's rowid, and `remove_global_orphans` rebuilds a table with orphans."""
    m = Model()
    for i, pid in enumerate(PAPERS):
        m.upsert(conn, pid, TITLES[i])
        m.replace(conn, pid, 1)
    with transaction(conn):  # PA's FTS rows gone, its units stay
        ix.fts_delete(conn, "body_units_fts", ix.fts_rows(conn, "body_units_fts", "b.paper_id = 'PA'"))
    assert paper_index_stats(conn)["PA"]["body_fts"] == 0
    m.replace(conn, "PA", 2)
    assert_same_as_fresh(conn, m)
    top = conn.execute("SELECT MAX(unit_rowid) FROM body_units").fetchone()[0]
    owner = conn.execute("SELECT paper_id FROM body_units WHERE unit_rowid = ?", (top,)).fetchone()[0]
    with transaction(conn):  # the table's last unit row gone, its FTS row stays: an orphan
        conn.execute("DELETE FROM body_units WHERE unit_rowid = ?", (top,))
    assert global_orphans(conn)["body_fts_without_unit"] == 1
    other = next(p for p in PAPERS if p != owner)
    m.replace(conn, other, 3)  # its new units start above the orphan's rowid
    assert conn.execute("SELECT MIN(unit_rowid) FROM body_units WHERE paper_id = ?", (other,)).fetchone()[0] > top
    removed = remove_global_orphans(conn)
    assert removed["body_units_fts_removed"] == 1 and not any(global_orphans(conn).values())
    m.units[owner] = rd.paper_units(conn, owner)  # what is left of it
    assert_same_as_fresh(conn, m)


def test_rebuild_fts_equals_fresh(conn):
    m = Model()
    for i, pid in enumerate(PAPERS):
        m.upsert(conn, pid, TITLES[i])
        m.replace(conn, pid, i)
    ix.rebuild_fts(conn)
    assert_same_as_fresh(conn, m)


# --- migrations ------------------------------------------------------------------------------

V2_FTS = {
    "papers_fts": "title, authors, abstract, journal, domain, year",
    "body_units_fts": "heading, text, title",
    "object_units_fts": "caption, label, table_text, nearby_text, title",
}
V2_OPTS = "content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2'"


def _to_v2(path, model: Model, rewrites: int = 5) -> None:
    """Turn the index at `path` into a schema-2 one (its FTS tables as schema 2 created them),
    then rewrite its rows the way schema 2 did (DELETE by rowid, insert): drifted statistics."""
    c = connect(path)
    with transaction(c):
        for t, cols in V2_FTS.items():
            c.execute(f"DROP TABLE {t}")
            c.execute(f"CREATE VIRTUAL TABLE {t} USING fts5({cols}, {V2_OPTS})")
            ix.fill_fts(c, t)
        c.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with transaction(c):
        for _ in range(rewrites):
            for t in V2_FTS:
                rows = ix.fts_rows(c, t)
                c.executemany(f"DELETE FROM {t} WHERE rowid = ?", [(r[0],) for r in rows])
                ix._fts_insert(c, t, rows)
    c.close()


def test_schema_2_migrated_to_exact_deletes(tmp_path):
    """A schema-2 index (contentless_delete=1, drifted statistics) is migrated to 3: its FTS
    tables recreated and refilled, scores as a fresh build's, and later writes stay exact."""
    p = tmp_path / "v2.db"
    c = ix.open_index(p)
    m = Model()
    for i, pid in enumerate(PAPERS):
        m.upsert(c, pid, TITLES[i])
        m.replace(c, pid, i)
    c.close()
    _to_v2(p, m)
    c = connect(p)
    fresh = m.fresh()
    try:  # the v2 file has drifted: its scores are not a fresh build's
        q = build_match_query("bone", mode="or")
        drifted = {h.ref: h.score for h in rd.fts_search(c, "body", q, limit=-1)}
        want = {h.ref: h.score for h in rd.fts_search(fresh, "body", q, limit=-1)}
        assert drifted.keys() == want.keys() and drifted != pytest.approx(want)
    finally:
        fresh.close()
        c.close()
    with pytest.raises(ix.IndexSchemaError, match="schema 2"):
        ix.open_index(p, readonly=True)
    conn = ix.open_index(p)
    try:
        assert ix.schema_version(conn) == ix.SCHEMA_VERSION
        for t in ix.FTS_TABLES:
            sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (t,)).fetchone()[0]
            assert "contentless_delete" not in sql and "content=''" in sql and "porter" in sql, sql
        assert_same_as_fresh(conn, m)
        m.replace(conn, "PA", 4)
        m.upsert(conn, "PB", "A new title for B", 2)
        m.remove(conn, "PC")
        assert_same_as_fresh(conn, m)
    finally:
        conn.close()


def test_schema_1_migrated_through_2_to_3(tmp_path):
    """The chain 1 → 2 → 3: a schema-1 file ends with schema-3 FTS tables holding its rows."""
    from tests.kits.index import schema1_file

    p = tmp_path / "v1.db"
    c = schema1_file(p)
    c.execute("INSERT INTO papers(paper_rowid, paper_id, title, has_metadata) VALUES (1, 'PA', 'Osteoblast atlas', 1)")
    u = content("PA", 0)[0][0]
    c.execute("INSERT INTO body_units(unit_rowid, unit_id, short_id, paper_id, node_id, section_path, "
              "section_level, block_ids, text, token_count, unit_kind, part_ordinal) "
              "VALUES (1, ?, 'ab12', 'PA', 's0', ?, 1, '[]', ?, 5, 'body', 0)",
              (u.unit_id, '["Methods"]', u.text))
    c.close()
    conn = ix.open_index(p)
    try:
        assert ix.schema_version(conn) == ix.SCHEMA_VERSION
        assert "contentless_delete" not in conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'body_units_fts'").fetchone()[0]
        assert [h.ref for h in rd.search_text(conn, "osteoblast")] == [u.unit_id]
        assert rd.counts(conn)["body_units_fts"] == 1 and rd.counts(conn)["papers_fts"] == 1
        wr.remove_paper(conn, "PA")  # deleted with the values the migration indexed
        assert rd.counts(conn)["body_units_fts"] == rd.counts(conn)["papers_fts"] == 0
        integrity_ok(conn)
    finally:
        conn.close()


def test_fts_tables_refuse_plain_deletes(conn):
    """A DELETE on an FTS table (what schema 2 did) is refused, never silently inexact."""
    Model().replace(conn, "PA", 0)
    for t in ix.FTS_TABLES:
        with pytest.raises(Exception, match="contentless"):
            conn.execute(f"DELETE FROM {t} WHERE rowid = 1")


def test_unit_objects_keep_indexed_values_when_none(conn):
    """Object fields stored as '' for None (caption, table_text, nearby_text) index the same
    either way: the delete values computed from the base row match what was inserted."""
    u, o = content("PA", 0)
    o = [dataclasses.replace(x, caption=None, label=None, table_text=None, nearby_text=None) for x in
         (o or [ObjectUnit("PA:figure:p9", "", "PA", "figure", None, None, None, None, "s9", ("R",), 1, ("p9",))])]
    m = Model()
    wr.replace_paper(conn, "PA", u, o)
    m.units["PA"] = rd.paper_units(conn, "PA")
    m.replace(conn, "PA", 1)
    assert_same_as_fresh(conn, m)


def test_papers_dropped_from_the_export_lose_their_metadata(conn):
    """Metadata of papers the export no longer lists goes: an indexed paper keeps a stub (found by
    its text, no longer by its old title or authors), another one's row goes; the index then
    equals a fresh build of what is left."""
    m = Model()
    for i, pid in enumerate(PAPERS[:3]):
        m.upsert(conn, pid, TITLES[i])
    m.replace(conn, PAPERS[0], 0)
    before = rd.fts_search(conn, "papers", build_match_query(TITLES[1]), limit=-1)
    assert PAPERS[1] in {h.ref for h in before}
    m.metas[PAPERS[0]] = m.metas[PAPERS[1]] = None
    assert wr.prune_metadata(conn, [PAPERS[2]]) == {"stubbed": 1, "removed": 1}
    rows = dict(conn.execute("SELECT paper_id, has_metadata FROM papers").fetchall())
    assert rows == {PAPERS[0]: 0, PAPERS[2]: 1}
    for q in (TITLES[0], TITLES[1]):
        assert not {h.ref for h in rd.fts_search(conn, "papers", build_match_query(q), limit=-1)} & set(PAPERS[:2])
    assert_same_as_fresh(conn, m)
    assert wr.prune_metadata(conn, [PAPERS[2]]) == {"stubbed": 0, "removed": 0}  # nothing left to do
