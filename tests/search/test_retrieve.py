"""The retrieval library (`sheaf.search.retriever`): search, retrieve (lexical / semantic / hybrid),
get, timeline, grep, coverage, and every error it raises.

Runs against the sample library indexed without Dagster (the `sample_index` fixture of
conftest.py: real transform, real SQLite + FTS5 + sqlite-vec, real MiniLM vectors) and
against small planted indexes built here for exact ground truth (grep variants, stub papers).
"""
from __future__ import annotations

import dataclasses
import json
import re
from functools import partial
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from sheaf.core.envelope import SheafError
from sheaf.core.models import BodyUnit, ObjectUnit
from sheaf.core.settings import get_settings
from sheaf.search import grep as gr
from sheaf.search import retriever as rv
from sheaf.search import snippets as sn
from sheaf.search.grep import term_pattern
from sheaf.search.retriever import HYBRID_RRF_K, Retriever, reading_order
from sheaf.search.snippets import make_snippet
from sheaf.store.fulltext import build_match_query
from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr
from tests.kits.papers import body_unit, object_unit

pytestmark = pytest.mark.slow

CODE_PAPER = "R4N8DWTE"  # uses QLN-482 / QLN482 / QLN 482


# --- helpers ---------------------------------------------------------------------------------

def open_r(index: Path, home: Path | None = None, *, query_encoder=None, **kw) -> Retriever:
    s = get_settings(index_file=index, home=home or index.parent / "home",
                     library=kw.pop("library", Path("/nonexistent-library")), **kw)
    return Retriever.open(s, query_encoder=query_encoder)


@pytest.fixture(params=["sqlite", "postgres"])
def r(sample_index, tmp_path, request):
    """A Retriever on the sample index: the SQLite file, or its copy on Postgres (the same
    assertions hold on both backends)."""
    if request.param == "postgres":
        s = get_settings(index_url=request.getfixturevalue("sample_pg"), home=tmp_path / "home",
                         library=sample_index.library)
        with Retriever.open(s, query_encoder=sample_index.query_encoder) as ret:
            yield ret
        return
    with open_r(sample_index.path, tmp_path / "home", library=sample_index.library,
                query_encoder=sample_index.query_encoder) as ret:
        yield ret


@pytest.fixture()
def sq_conn(sample_index):
    """The sample SQLite index read directly (ground truth for either backend)."""
    c = ix.open_index(sample_index.path, readonly=True)
    yield c
    c.close()


def code_of(excinfo) -> str:
    return excinfo.value.code


body = body_unit
obj = partial(object_unit, kind="table")


# --- grep: the planted variant set -------------------------------------------------------------

#: Every way SPG302 may be written; all must be found, each as its own verbatim span.
VARIANTS = ["SPG302", "SPG 302", "SPG-302", "SPG\u2011302", "SPG\u2010302", "SPG\u2013302", "spg302",
            "Spg-302", "SPG - 302", "SPG\u00a0302", "SPG-\n302", "SPG\u2212302", "SPG\u2012302",
            "SPG\u00ad302", "ＳＰＧ３０２"]
#: Contexts a variant may sit in (the variant replaces {}); the span is the variant alone.
CONTEXTS = ["{}", "({})", "{}'s", "anti-{}", "{}-treated", "{}.", "[{}]", "“{}”", "{},"]
#: Near misses that must NOT be found.
NEGATIVES = ["SPG3021", "XSPG302", "SPG 3020", "SPG30", "SP G302", "SPG_302", "5SPG302", "SPG302a",
             "SPG 30 2", "SPGG302"]


def planted_index(tmp_path: Path) -> tuple[Path, list[tuple[str, str, int, int, int | None]]]:
    """An index of two papers with every variant planted in body text (across two pages),
    figure captions and table text; returns the path and the truth: (unit_id, field, start,
    end, page) of every planted occurrence."""
    truth: list[tuple[str, str, int, int, int | None]] = []
    units, objects = {"PLANTA01": [], "PLANTB02": []}, {"PLANTA01": [], "PLANTB02": []}
    filler = "The compound was tested in vitro and in vivo with placebo controls. "
    k = 0
    for pid in units:
        for n, ctx in enumerate(CONTEXTS):
            paras, spans = [], []
            for p_i, page in enumerate((3, 4)):
                text = filler
                for v in VARIANTS[(n + p_i) % 3::3]:
                    piece = ctx.format(v)
                    start = len(text) + piece.index(v)
                    spans.append((p_i, start, start + len(v), page))
                    text += piece + " " + filler + " ".join(NEGATIVES[k % len(NEGATIVES):][:2]) + ". "
                    k += 1
                paras.append(text)
            full = "\n\n".join(paras)
            u = body(pid, f"s{n}", full, pages=(3, 4), blocks=("p3:1", "p4:1"))
            units[pid].append(u)
            off = len(paras[0]) + 2
            for p_i, s, e, page in spans:
                truth.append((u.unit_id, "text", s + (off if p_i else 0), e + (off if p_i else 0), page))
        cap = "Table 1. Dose of SPG-302 and SPG3021 (control) and spg 302 in plasma."
        tab = "Group | SPG\u2011302 | XSPG302\nA | 1 | 2"
        o = obj(pid, "p5:1", cap, table_text=tab, page=5, nearby="as shown, SPG302 works")
        objects[pid].append(o)
        for m in re.finditer(r"SPG-302|spg 302", cap):
            truth.append((o.unit_id, "caption", m.start(), m.end(), 5))
        s = tab.index("SPG\u2011302")
        truth.append((o.unit_id, "table_text", s, s + 7, 5))
    path = tmp_path / "planted.db"
    conn = ix.open_index(path)
    for pid in units:
        wr.replace_paper(conn, pid, units[pid], objects[pid])
    conn.close()
    return path, truth


def test_term_pattern_finds_every_variant_and_no_near_miss():
    for typed in ("SPG302", "SPG 302", "SPG-302", "spg\u2011302", "Spg\u2013302"):
        pat = term_pattern(typed)
        for v in VARIANTS:
            for ctx in CONTEXTS:
                text = "x " + ctx.format(v) + " y"
                spans = gr.find_spans(pat, text)
                assert [text[a:b] for a, b in spans] == [v], (typed, v, ctx, spans)
        for neg in NEGATIVES:
            assert gr.find_spans(pat, f"a {neg} b") == [], (typed, neg)


def test_term_pattern_words_and_hyphens():
    pat = term_pattern("cross-linking")
    for t in ("cross-linking", "crosslinking", "cross linking", "Cross\u2010Linking"):
        assert gr.find_spans(pat, f"the {t} step") != [], t
    assert gr.find_spans(pat, "a crosslinkings b") == []
    pat = term_pattern("bone regeneration")
    assert [m for m in gr.find_spans(pat, "bone  regeneration, bone-regeneration")] == [(0, 18), (20, 37)]
    assert gr.find_spans(pat, "boneregeneration") == []
    with pytest.raises(SheafError) as e:
        term_pattern("   ")
    assert code_of(e) == "BAD_QUERY"


def test_grep_finds_100_percent_of_the_planted_variants(tmp_path):
    path, truth = planted_index(tmp_path)
    with open_r(path) as ret:
        for typed in ("SPG302", "SPG-302", "SPG 302", "SPG\u2011302"):
            res = ret.grep(typed)
            got = {(m["unit_id"], m["field"], m["char_start"], m["char_end"], m["page"]) for m in res.matches}
            assert got == set(truth), (typed, set(truth) - got, got - set(truth))
            assert len(res.matches) == len(truth)  # no duplicates
            units = {u.unit_id: u for pid in ("PLANTA01", "PLANTB02") for u in (*rd.paper_units(ret.conn, pid)[0],
                                                                                  *rd.paper_units(ret.conn, pid)[1])}
            for m in res.matches:  # the span is verbatim text of that field at those offsets
                u = units[m["unit_id"]]
                field_text = u.text if m["field"] == "text" else getattr(u, m["field"])
                assert field_text[m["char_start"]:m["char_end"]] == m["span"]
                assert m["span"] in set(VARIANTS) | {"spg 302"}
            assert not res.warnings  # the full-text index found every unit the scan found
        one = ret.grep("SPG-302", papers=["PLANTB02"])
        assert {m["zotero_key"] for m in one.matches} == {"PLANTB02"}
        assert len(one.matches) == len(truth) // 2


def test_grep_sample_paper_code_in_all_spellings(r, sq_conn, sample_index):
    res = r.grep("QLN-482")
    assert res.matches and {m["zotero_key"] for m in res.matches} == {CODE_PAPER}
    assert {"QLN-482", "QLN482", "QLN 482"} <= set(res.data["variants"])
    # independent brute force over every unit field of every paper
    simple = re.compile(r"(?<![A-Za-z0-9])QLN[\s\-\u2010\u2011\u2013]?482(?![A-Za-z0-9])", re.I)
    expected = set()
    for pid in rd.paper_ids(sq_conn):
        b, o = rd.paper_units(sq_conn, pid)
        for u in b:
            expected |= {(u.unit_id, "text", m.start()) for m in simple.finditer(u.text)}
        for x in o:
            for f in ("caption", "table_text"):
                expected |= {(x.unit_id, f, m.start()) for m in simple.finditer(getattr(x, f))}
    assert {(m["unit_id"], m["field"], m["char_start"]) for m in res.matches} == expected
    for m in res.matches:
        lo, hi = m["page_span"]
        assert m["page"] is not None and lo <= m["page"] <= hi
        assert m["span"] in m["text"]  # the context line holds the span
    for spelling in ("QLN482", "qln 482", "QLN\u2011482"):
        assert len(r.grep(spelling).matches) == len(res.matches)


def test_grep_pages_follow_paragraphs(tmp_path):
    u = body("PAGEX001", "s1", "first page text QLN-482 here\n\nsecond page QLN482 again", pages=(7, 8),
             blocks=("p7:3", "p8:1"))
    path = tmp_path / "p.db"
    conn = ix.open_index(path)
    wr.replace_paper(conn, "PAGEX001", [u], [])
    conn.close()
    with open_r(path) as ret:
        assert [m["page"] for m in ret.grep("QLN 482").matches] == [7, 8]


# --- search (paper level) -------------------------------------------------------------------------

def test_search_one_match_per_paper_with_snippet(r):
    res = r.search("results", limit=20)
    keys = [m["zotero_key"] for m in res.matches]
    assert len(keys) == len(set(keys)) >= 5
    for m in res.matches:
        where = (m["text"] + " " + " ".join(m["section_path"])).lower()  # body text or its heading
        assert "result" in where or m["source"] == "metadata"
        assert len(m["text"]) <= sn.SNIPPET_CHARS + 2
        assert set(m["legs"]) == {"metadata", "body", "object"}
    scores = [m["score"] for m in res.matches]
    assert scores == sorted(scores, reverse=True)
    assert len(r.search("results", limit=3).matches) == 3


def test_search_code_finds_the_paper_first(r):
    for q in ("QLN-482", "QLN482", "qln 482", "QLN\u2011482"):
        res = r.search(q)
        assert res.matches[0]["zotero_key"] == CODE_PAPER, q
        assert res.matches[0]["title"].startswith("Efficacy and safety of QLN-482")
        assert res.matches[0]["first_author"] == "Siobhan O'Rourke" and res.matches[0]["year"] == 2023


def test_search_metadata_only_fields(r):
    m = r.search("Respiratory Therapeutics").matches[0]
    assert (m["zotero_key"], m["source"], m["heading"], m["unit_id"]) == (CODE_PAPER, "metadata", "Journal", None)
    m = r.search("Siobhan").matches[0]
    assert m["source"] == "metadata" and m["heading"] == "Authors" and "Siobhan" in m["text"]


def test_search_relaxes_to_any_word_with_a_warning(r):
    res = r.search("cough lichenometry")  # no paper has both words
    assert {m["zotero_key"] for m in res.matches} >= {CODE_PAPER, "L2YSNC8V"}
    assert any("some of them" in w for w in res.warnings)


def test_search_year_filters(r):
    all_years = {m["year"] for m in r.search("results", limit=50).matches}
    assert min(all_years) < 2022 <= max(all_years)
    res = r.search("results", limit=50, year_from=2022)
    assert res.matches and all(m["year"] >= 2022 for m in res.matches)
    res = r.search("results", limit=50, year_to=2020)
    assert res.matches and all(m["year"] <= 2020 for m in res.matches)
    res = r.search("results", year_from=2030)
    assert res.matches == [] and res.data["coverage"]["indexed"] == 10
    assert any("filters" in a for a in res.next_actions)


def test_search_domain_filter(sample_index, tmp_path):
    path = sample_index.copy(tmp_path / "d.db")
    conn = ix.open_index(path)
    metas = []
    for pid in rd.paper_ids(conn):
        m = rd.get_paper(conn, pid)
        metas.append(dataclasses.replace(m, domain="Clinical" if pid in (CODE_PAPER, "T5GM2QWN") else "Other"))
    wr.upsert_papers(conn, metas)
    conn.close()
    with open_r(path) as ret:
        res = ret.search("results", limit=20, domains=["Clinical"])
        assert {m["zotero_key"] for m in res.matches} <= {CODE_PAPER, "T5GM2QWN"} and res.matches
        assert all(m["domain"] == "Clinical" for m in res.matches)
        res = ret.search("results", domains=["Nope"])
        assert res.matches == [] and any("no paper has domain 'Nope'" in w for w in res.warnings)


def test_stub_paper_falls_back_to_the_parsed_title(tmp_path):
    path = tmp_path / "stub.db"
    conn = ix.open_index(path)
    wr.replace_paper(conn, "STUBAA01", [body("STUBAA01", "s1", "Zirconia toughening in dental ceramics.")])
    wr.replace_paper(conn, "STUBBB02", [body("STUBBB02", "s1", "Zirconia phases at high temperature.")])
    conn.close()
    home = tmp_path / "home"
    (home / "artifacts" / "structure_tree").mkdir(parents=True)
    (home / "artifacts" / "structure_tree" / "STUBAA01.json").write_text(
        json.dumps({"title": "Toughening of zirconia", "children": []}), encoding="utf-8")
    with open_r(path, home) as ret:
        got = {m["zotero_key"]: m for m in ret.search("zirconia").matches}
        assert got["STUBAA01"]["title"] == "Toughening of zirconia"
        assert got["STUBBB02"]["title"] is None and got["STUBBB02"]["first_author"] is None
        assert ret.retrieve("zirconia", mode="lexical").matches[0]["title"] in ("Toughening of zirconia", None)


# --- retrieve ------------------------------------------------------------------------------------

def or_truth(conn, query: str, kinds=("body", "object")) -> dict[str, int]:
    """Units per paper matching any word of the query (the lexical candidate set)."""
    per: dict[str, int] = {}
    match = build_match_query(query, mode="or")
    for scope in kinds:
        for h in rd.fts_search(conn, scope, match, limit=-1):
            per[h.paper_id] = per.get(h.paper_id, 0) + 1
    return per


@pytest.mark.parametrize("query", ["cough frequency", "results temperature", "model"])
def test_per_paper_cap_and_limit_guarantee(r, sq_conn, query):
    per = or_truth(sq_conn, query)
    for per_paper in (0, 1, 2, 3):
        for limit in (1, 2, 5, 8, 13, 40, 200):
            res = r.retrieve(query, mode="lexical", limit=limit, per_paper=per_paper)
            counts: dict[str, int] = {}
            for m in res.matches:
                counts[m["zotero_key"]] = counts.get(m["zotero_key"], 0) + 1
            assert not per_paper or max(counts.values(), default=0) <= per_paper
            reachable = sum(n if per_paper == 0 else min(per_paper, n) for n in per.values())
            assert len(res.matches) == min(limit, reachable), (query, limit, per_paper)
            assert len({m["unit_id"] for m in res.matches}) == len(res.matches)
            # over-fetching from a tiny first fetch gives the very same answer
            small = r.retrieve(query, mode="lexical", limit=limit, per_paper=per_paper, fetch=1)
            assert [m["unit_id"] for m in small.matches] == [m["unit_id"] for m in res.matches]


def test_lexical_prefers_units_with_every_word(r):
    res = r.retrieve("cough frequency", mode="lexical", per_paper=0, limit=5)
    both = [m for m in res.matches if "cough" in m["text"].lower() and "frequenc" in m["text"].lower()]
    assert res.matches[0] in both and res.matches[0]["legs"]["lexical"]["rank"] == 1
    assert set(res.matches[0]["legs"]) == {"lexical"}


def test_kind_and_paper_filters(r):
    res = r.retrieve("cough", mode="lexical", kind="object", per_paper=0, limit=50)
    assert res.matches and {m["source"] for m in res.matches} <= {"figure", "table"}
    res = r.retrieve("cough", mode="lexical", kind="body", per_paper=0, limit=50)
    assert res.matches and {m["source"] for m in res.matches} <= {"body", "backmatter"}
    res = r.retrieve("results", mode="lexical", papers=["T5GM2QWN"], per_paper=0, limit=50)
    assert res.matches and {m["zotero_key"] for m in res.matches} == {"T5GM2QWN"}
    with pytest.raises(SheafError) as e:
        r.retrieve("results", papers=["NOSUCH99"])
    assert code_of(e) == "NOT_FOUND"


def test_full_text_and_snippets(r, sq_conn):
    compact = r.retrieve("awake cough frequency", mode="lexical", limit=3)
    full = r.retrieve("awake cough frequency", mode="lexical", limit=3, full=True)
    assert [m["unit_id"] for m in compact.matches] == [m["unit_id"] for m in full.matches]
    units = rd.get_units(sq_conn, [m["unit_id"] for m in full.matches])
    for c, f in zip(compact.matches, full.matches):
        assert f["text"] == rv.unit_text(units[f["unit_id"]]) and f["text_is_full"]
        assert len(c["text"]) <= sn.SNIPPET_CHARS + 2 and not c["text_is_full"]
        assert "\n" not in c["text"] and "\n" not in c["summary"] and len(c["summary"]) <= sn.SUMMARY_CHARS + 2
        assert any(w in c["text"].lower() for w in ("cough", "awake", "frequenc"))


def test_semantic_finds_by_meaning(r):
    res = r.retrieve("how often patients coughed while awake on the antagonist", mode="semantic", limit=5)
    assert res.matches[0]["zotero_key"] == CODE_PAPER
    sims = [m["score"] for m in res.matches]
    assert sims == sorted(sims, reverse=True) and all(-1 <= s <= 1 for s in sims)
    assert all(set(m["legs"]) == {"semantic"} for m in res.matches)
    assert res.data["model"] == r.settings.embedding_model or "MiniLM" in res.data["model"]
    res = r.retrieve("pollinator visits along elevation", mode="semantic", kind="object", limit=3, per_paper=0)
    assert res.matches and {m["source"] for m in res.matches} <= {"figure", "table"}
    assert res.matches[0]["zotero_key"] == "W6TB4YRS"


def test_hybrid_is_rrf_of_both_legs(r):
    q = "awake cough frequency with the P2X3 antagonist"
    res = r.retrieve(q, mode="hybrid", limit=10, per_paper=0)
    k = res.data["fusion"]["k"]
    assert res.data["fusion"] == {"method": "rrf", "k": k} and k == HYBRID_RRF_K
    # each leg's own order (a single-leg mode shows it weighed by evidence: back matter lower)
    lex = {m["legs"]["lexical"]["rank"]: m["unit_id"] for m in r.retrieve(q, mode="lexical", limit=200, per_paper=0).matches}
    sem = {m["legs"]["semantic"]["rank"]: m["unit_id"] for m in r.retrieve(q, mode="semantic", limit=200, per_paper=0).matches}
    both = 0
    for m in res.matches:
        legs = m["legs"]
        assert set(legs) == {"lexical", "semantic"}
        expect = sum(1 / (k + leg["rank"]) for leg in legs.values() if leg)
        assert m["score"] == pytest.approx(expect, abs=1e-6)
        if legs["lexical"]:
            assert lex[legs["lexical"]["rank"]] == m["unit_id"]
        if legs["semantic"]:
            assert sem[legs["semantic"]["rank"]] == m["unit_id"]
        both += bool(legs["lexical"] and legs["semantic"])
    assert both >= 1 and res.matches[0]["zotero_key"] == CODE_PAPER
    # best first: the exact (phrase, or rare terms close together), then by score, back matter's halved
    key = [(m["evidence"] not in ("phrase", "near"), -m["score"] * (0.5 if m["back_matter"] else 1))
           for m in res.matches]
    assert key == sorted(key)
    capped = r.retrieve(q, mode="hybrid", limit=6, per_paper=1)
    assert len(capped.matches) == 6 and len({m["zotero_key"] for m in capped.matches}) == 6


# --- get / timeline: the three layers --------------------------------------------------------------

def test_three_layer_round_trip(r, sq_conn):
    res = r.retrieve("awake cough frequency", mode="lexical", limit=4)
    ids = [m["short_id"] for m in res.matches]
    got = r.get(ids + ["ffffffffff"])
    assert [m["short_id"] for m in got.matches] == ids and got.data["missing"] == ["ffffffffff"]
    assert got.warnings == ["no unit with id ffffffffff"]
    units = rd.get_units(sq_conn, [m["unit_id"] for m in got.matches])
    for m in got.matches:
        assert m["text"] == rv.unit_text(units[m["unit_id"]]) and m["score"] is None
    anchor = ids[0]
    tl = r.timeline(anchor, window=2)
    offs = [m["offset"] for m in tl.matches]
    assert 0 in offs and offs == list(range(offs[0], offs[-1] + 1)) and -2 <= offs[0] and offs[-1] <= 2
    pid = tl.data["paper"]["zotero_key"]
    order = reading_order(*rd.paper_units(sq_conn, pid))
    pos = tl.data["anchor"]["position"]
    assert order[pos].short_id == anchor
    assert [m["unit_id"] for m in tl.matches] == [u.unit_id for u in order[max(0, pos - 2):pos + 3]]
    assert {m["zotero_key"] for m in tl.matches} == {pid}
    assert len(r.timeline(anchor, window=0).matches) == 1
    first = r.timeline(order[0].short_id, window=3)
    assert [m["offset"] for m in first.matches] == [0, 1, 2, 3]
    assert r.get([order[0].unit_id]).matches[0]["short_id"] == order[0].short_id  # unit ids work too
    for bad in (lambda: r.get(["nope"]), lambda: r.timeline("nope")):
        with pytest.raises(SheafError) as e:
            bad()
        assert code_of(e) == "NOT_FOUND"
    with pytest.raises(SheafError) as e:
        r.timeline(anchor, window=-1)
    assert code_of(e) == "BAD_QUERY"


def test_reading_order_places_objects_after_their_section(r, sq_conn):
    for pid in rd.paper_ids(sq_conn):
        b, o = rd.paper_units(sq_conn, pid)
        order = reading_order(b, o)
        assert sorted(u.unit_id for u in order) == sorted(u.unit_id for u in (*b, *o))
        assert [u for u in order if isinstance(u, BodyUnit)] == b
        for i, u in enumerate(order):
            if isinstance(u, ObjectUnit) and any(x.node_id == u.node_id for x in b):
                last = max(j for j, x in enumerate(order) if isinstance(x, BodyUnit) and x.node_id == u.node_id)
                assert i > last


# --- nothing found, coverage --------------------------------------------------------------------

def test_nothing_found_reports_coverage_and_next_actions(tmp_path, sample_index):
    path, _ = planted_index(tmp_path)  # two papers indexed, no vectors
    home = tmp_path / "home"
    (home / "artifacts" / "body_units").mkdir(parents=True)
    for k in ("A", "B", "C"):
        (home / "artifacts" / "body_units" / f"{k}.parquet").write_bytes(b"")
    with open_r(path, home, library=sample_index.library) as ret:
        for res in (ret.search("zebra"), ret.retrieve("zebra", mode="lexical"), ret.grep("zebra")):
            assert res.matches == []
            cov = res.data["coverage"]
            assert cov == {"library": 10, "parsed": 3, "metadata": 0, "indexed": 2, "embedded": 0}
            acts = " | ".join(res.next_actions)
            assert "7 papers of the library are not parsed yet" in acts
            assert "1 papers are not indexed yet" in acts
            assert "2 papers are not embedded yet: run `sheaf build`" in acts


def test_partial_embedding_warns(sample_index, tmp_path):
    path = sample_index.copy(tmp_path / "partial.db")
    conn = ix.open_index(path)
    wr.replace_paper(conn, "NOVEC001", [body("NOVEC001", "s1", "Cough frequency in a new unembedded paper.")])
    conn.close()
    with open_r(path) as ret:
        res = ret.retrieve("cough frequency", mode="hybrid", limit=3)
        assert any("1 of 11 indexed papers have no vectors yet" in w for w in res.warnings)


# --- errors -------------------------------------------------------------------------------------

def test_index_not_found_missing_and_empty(tmp_path):
    for path in (tmp_path / "none.db", tmp_path / "empty.db"):
        if path.name == "empty.db":
            path.write_bytes(b"")
        with pytest.raises(SheafError) as e:
            open_r(path)
        assert code_of(e) == "INDEX_NOT_FOUND" and "sheaf build" in e.value.details["hint"]


def test_not_a_database_is_backend_unavailable(tmp_path):
    path = tmp_path / "junk.db"
    path.write_text("this is not sqlite " * 100)
    with pytest.raises(SheafError) as e:
        open_r(path)
    assert code_of(e) == "BACKEND_UNAVAILABLE"


def test_vector_not_built(tmp_path):
    path, _ = planted_index(tmp_path)
    with open_r(path) as ret:
        for mode in ("semantic", "hybrid"):
            with pytest.raises(SheafError) as e:
                ret.retrieve("SPG302", mode=mode)
            assert code_of(e) == "VECTOR_NOT_BUILT" and "--mode lexical" in e.value.details["hint"]
        assert ret.retrieve("SPG302", mode="lexical").matches
    conn = ix.open_index(path)  # a collection without a single vector: still not built
    from sheaf.vectors.identity import DEFAULT_MODEL, ModelIdentity
    ix.ensure_collection(conn, ModelIdentity(DEFAULT_MODEL, "0" * 64, 4, True, 256, "t"))
    conn.close()
    with open_r(path) as ret, pytest.raises(SheafError) as e:
        ret.retrieve("SPG302", mode="semantic")
    assert code_of(e) == "VECTOR_NOT_BUILT"


def test_model_changed(sample_index, r, monkeypatch):
    with open_r(sample_index.path, embedding_model="intfloat/e5-small-v2") as other:
        with pytest.raises(SheafError) as e:
            other.retrieve("cough", mode="hybrid")
        assert code_of(e) == "MODEL_CHANGED"
        assert e.value.details["index_models"][0]["name"] == sample_index.identity.name
        assert other.retrieve("cough", mode="lexical").matches  # lexical still works
    # same model name, other weights: the query vector is refused by the collection
    real = r.query_encoder.encode

    def other_weights(text, identity=None):
        qv, w = real(text, identity)
        return dataclasses.replace(qv, identity=dataclasses.replace(qv.identity, weights_sha256="1" * 64)), w

    monkeypatch.setattr(r.query_encoder, "encode", other_weights)
    with pytest.raises(SheafError) as e:
        r.retrieve("cough", mode="semantic")
    assert code_of(e) == "MODEL_CHANGED"


@pytest.mark.parametrize("damage", ["DROP TABLE {vt}_vector_chunks00", "UPDATE {vt}_vector_chunks00 SET vectors = x'00'",
                                    "DELETE FROM {vt}_chunks", "DROP TABLE {vt}"])
def test_vector_corrupted(sample_index, tmp_path, damage):
    path = sample_index.copy(tmp_path / "bad.db")
    conn = ix.open_index(path)
    conn.execute(damage.format(vt=sample_index.identity.vec_table))
    conn.close()
    with open_r(path) as ret:
        for mode in ("semantic", "hybrid"):
            with pytest.raises(SheafError) as e:
                ret.retrieve("cough frequency", mode=mode)
            assert code_of(e) == "VECTOR_CORRUPTED", (damage, mode, e.value.message)
        assert ret.retrieve("cough frequency", mode="lexical").matches


def test_bad_arguments(r):
    for call in (lambda: r.retrieve("x", mode="fuzzy"), lambda: r.retrieve("x", kind="pdf"),
                 lambda: r.retrieve("x", limit=0), lambda: r.retrieve("x", per_paper=-1),
                 lambda: r.retrieve("   "), lambda: r.search(""), lambda: r.search("x", limit=0),
                 lambda: r.get([]), lambda: r.grep(" "), lambda: r.retrieve("*** ?", mode="semantic")):
        with pytest.raises(SheafError) as e:
            call()
        assert code_of(e) == "BAD_QUERY"


# --- FTS syntax never reaches SQLite as syntax ---------------------------------------------------

TORTURE = ['"', '""', '"unbalanced quote', 'a"b"c"', "'", "AND", "OR", "NOT", "NEAR", "NEAR(", "NEAR(cough frequency, 2)",
           "cough AND", "AND cough", "cough OR OR frequency", "cough NOT frequency", "*", "cough*", "*cough", "(", ")",
           "((cough)", "cough)", "-cough", "cough -frequency", "cough-", "--", "^cough", "title:cough", "text:",
           "col:", "{cough}", "[cough]", "cough + frequency", "a:b:c", "\\", "cough\\", "'; DROP TABLE papers; --",
           "%", "_", "NULL", "\x00", "cough\x00frequency", "\u2011", "QLN\u2011482", "😀 cough", "骨再生", "연구",
           "e\u0301", "x" * 3000, " ".join(["cough"] * 200), "cough:*", "\"cough\" NEAR/3 \"frequency\"",
           "cough^2", "+cough", "cough | frequency", "~cough", "cough;", "\ncough\tfrequency\r"]


def _tokenless(q: str) -> bool:
    return build_match_query(q) is None


@pytest.mark.parametrize("query", TORTURE)
def test_fts_torture_queries_never_raise_sqlite_errors(r, query):
    for call in (lambda: r.search(query), lambda: r.retrieve(query, mode="lexical"),
                 lambda: r.grep(query, papers=[CODE_PAPER])):
        try:
            res = call()
            assert isinstance(res.matches, list)
        except SheafError as e:
            assert e.code == "BAD_QUERY" and e.details.get("hint"), (query, e.code, e.message)
            assert _tokenless(query) or not query.strip()


@hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list('"\'()*:^-+NEARODTnearodt {}[]~|\\0123456789QLN482\u2011\u00a0骨')),
               min_size=1, max_size=40))
def test_fts_fuzz(r, query):
    for call in (lambda: r.search(query), lambda: r.retrieve(query, mode="lexical", limit=3)):
        try:
            call()
        except SheafError as e:
            assert e.code == "BAD_QUERY" and _tokenless(query), (query, e.code, e.message)


# --- small pieces -------------------------------------------------------------------------------

def test_make_snippet():
    text = ("Intro words. " * 40) + "The awake cough frequency fell sharply. " + ("Tail words. " * 40)
    s = make_snippet(text, "cough frequency", width=120)
    assert "cough frequency" in s and s.startswith("…") and s.endswith("…") and len(s) <= 122
    assert make_snippet("short text", "absent") == "short text"
    assert make_snippet(text, "", width=50).startswith("Intro words.")
    assert make_snippet(text, "zzz", width=50, start_hint=len(text) - 30).startswith("…")

