"""Ranking by evidence (`sheaf.search.evidence`, `RankFusion._weigh`): a unit holding the query as a
phrase, or every rare term close together, is never ranked below a unit missing a rare term; the
"strong" label follows the same evidence; back matter ranks below body units that match as well;
a quoted phrase asks for itself in every mode. On a generated library where the phrase's unit is
buried among partial matches of the same topic (real MiniLM vectors), on SQLite and Postgres."""
from __future__ import annotations

from pathlib import Path

import pytest

from sheaf.core.settings import get_settings
from sheaf.search.evidence import (
    QueryWords,
    Stems,
    evidence,
    is_back_matter,
    quoted_phrases,
)
from sheaf.search.retriever import Retriever
from sheaf.store.fulltext import FTS_TOKENIZER
from sheaf.store.tokens import FtsTokenizer
from sheaf.vectors.query_encoder import QueryEncoder
from tests.kits.papers import body_unit

# --- the pure functions --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stems() -> Stems:
    tok = FtsTokenizer()
    return Stems(lambda text: tok.tokens(FTS_TOKENIZER, text))


def words(query: str, stems: Stems, df: dict[str, int] | None = None, n: int = 1000) -> QueryWords:
    return QueryWords.of(query, stems, lambda terms: (n, {t: (df or {}).get(t, 1) for t in terms}))


def test_a_phrase_is_found_through_stemming_case_and_diacritics(stems):
    q = words("do not satisfy the Brockett necessary condition", stems)
    assert q.rare == {"satisfi", "brockett", "necessari", "condit"}
    ev = evidence(q, "Such systems Do NOT satisfy the Bröckett necessary conditions, so no smooth law exists.", stems)
    assert ev.phrase and ev.exact and ev.rare and ev.label == "phrase"


def test_near_allows_a_dropped_or_inserted_word_but_not_scattered_terms(stems):
    q = words("pulses were removed during preprocessing", stems)
    near = evidence(q, "In all, 20% of the pulses were then removed during the preprocessing step.", stems)
    assert near.near and not near.phrase and near.label == "near"
    apart = evidence(q, "Pulses were counted. " + "Filler words of no interest here. " * 6
                     + "Artefacts were removed during the preprocessing.", stems)
    assert apart.rare and not apart.exact and apart.label == "rare_terms"
    missing = evidence(q, "The pulses were kept during preprocessing.", stems)
    assert not missing.rare and missing.label == "partial"


def test_common_terms_are_not_rare_unless_nothing_is(stems):
    q = words("the condition of Brockett", stems, df={"condit": 400, "brockett": 2})
    assert q.rare == {"brockett"} and q.content == {"condit", "brockett"}
    every = words("condition stability", stems, df={"condit": 400, "stabil": 300})
    assert every.rare == every.content == {"condit", "stabil"}
    assert not words("Brockett", stems).weighs and words("Brockett condition", stems).weighs


REFERENCES = """94. Chimento-Díaz, S.; Sánchez-García, P.; Franco-Antonio, C. Factors Associated with the Acceptance of New \
Technologies for Ageing in Place. Int. J. Environ. Res. Public Health 2022, 19, 2947.

95. Davis, F.D. Perceived Usefulness, Perceived Ease of Use, and User Acceptance of Information Technology. \
MIS Q. 1989, 13, 319-340.

96. Venkatesh, V.; Morris, M.G.; Davis, G.B.; Davis, F.D. User Acceptance of Information Technology: Toward a \
Unified View. MIS Q. 2003, 27, 425-478."""


def test_back_matter_is_told_by_kind_heading_or_text():
    assert is_back_matter(body_unit("P", "r", REFERENCES, ("Discussion",)))  # a reference list left as body
    assert is_back_matter(body_unit("P", "a", "We thank the staff.", ("Acknowledgments",)))
    assert is_back_matter(body_unit("P", "b", "Funded by X.", ("Results",), kind="backmatter_body"))
    assert is_back_matter(body_unit("P", "c", "Text.", ("7. References",)))
    citing = ("Technology acceptance was first modelled by Davis (1989) and extended by Venkatesh et al. (2003); "
              "later work (Chimento-Díaz et al., 2022) applied it to ageing in place, as did others in 2019 and 2020.")
    assert not is_back_matter(body_unit("P", "d", citing, ("Related work",)))
    assert not is_back_matter(body_unit("P", "e", "Our contributions are three.", ("1.1 Contributions",)))


def test_quoted_phrases():
    assert quoted_phrases('the "Brockett condition" and "small gain"') == ["Brockett condition", "small gain"]
    assert quoted_phrases('an odd " quote') == [] and quoted_phrases('"" words') == []


# --- a generated library: the exact passage buried among partial matches ------------------------

#: The phrase's unit is long and mostly about other things (its bm25 and its best passage's
#: cosine are diluted); its neighbours are short and dense with the phrase's other words.
BROCKETT = ("The platform carries a lidar, two cameras and an inertial unit whose readings are fused by an "
            "extended Kalman filter running at 100 Hz; the map is built offline from a survey of the site. "
            "Path planning uses a lattice of motion primitives with a cost on curvature and clearance. "
            "Nonholonomic vehicles such as this one do not satisfy the Brockett necessary condition, "
            "so we track the planned path instead of a point. Localization drift stayed below 0.3 m over "
            "a 2 km loop, and the battery lasted four hours with the sensors on.")
PULSES = ("The recordings were filtered and segmented. In total 20% of the pulses were removed during the "
          "preprocessing step because of motion artefacts, and the rest were averaged per subject.")
#: Units about the same topics that lack the rare word ("Brockett") or hold the words apart.
NEIGHBOURS = {
    "NEARA001": ["Systems that do not satisfy the necessary condition for stabilization cannot be stabilized "
                 "by smooth feedback: the necessary condition is not satisfied.",
                 "When the necessary condition does not hold, we satisfy a weaker necessary condition."],
    "NEARB002": ["Continuous feedback laws cannot satisfy the necessary condition of asymptotic stability, "
                 "so the controllers do not satisfy the condition.",
                 "Pulses that were removed from the recordings during preprocessing, and the preprocessing of "
                 "pulse waves in general, are discussed: removed pulses bias the averaged pulse wave."],
    "NEARC003": ["The preprocessing step removed noisy pulses; pulses were removed when their amplitude "
                 "dropped, and 20 pulses were kept per subject after the preprocessing step.",
                 "Pulse wave preprocessing: the pulses were removed and the remaining pulses were "
                 "averaged during the preprocessing step."],
    "NEARD004": ["A necessary condition which the system does not satisfy: the necessary condition fails, "
                 "so no controller satisfies the stabilization condition."],
}
TAM_BODY = ("Technology acceptance among older adults depends on perceived usefulness and ease of use; in our "
            "survey technology acceptance grew with prior experience of smart home devices.")


def _library(tmp_path: Path, embedder) -> Path:
    from sheaf.store.sqlite.backend import SqliteEmbeddingCache
    from sheaf.store.sqlite.schema import open_index
    from sheaf.store.sqlite.writer import replace_paper, replace_paper_vectors

    papers = {"EXACT001": [body_unit("EXACT001", "s1", BROCKETT, ("3 Control design",)),
                           body_unit("EXACT001", "s2", PULSES, ("2 Methods",))],
              "TAMPAPER": [body_unit("TAMPAPER", "s1", TAM_BODY, ("4 Discussion",)),
                           body_unit("TAMPAPER", "refs", REFERENCES, ("References",)),
                           body_unit("TAMPAPER", "ack:backmatter", "We thank the participants for their technology "
                                     "acceptance interviews.", ("Acknowledgments",), kind="backmatter_body")]}
    for pid, texts in NEIGHBOURS.items():
        papers[pid] = [body_unit(pid, f"s{i}", t, ("Results",)) for i, t in enumerate(texts)]
    path = tmp_path / "evidence.db"
    conn = open_index(path)
    for pid, units in papers.items():
        replace_paper(conn, pid, units, [])
        replace_paper_vectors(conn, pid, embedder.embed(embedder.build_passages(units, [], pid),
                                                        SqliteEmbeddingCache(conn)))
    conn.close()
    return path


@pytest.fixture(scope="module")
def library(tmp_path_factory, embedder) -> Path:
    return _library(tmp_path_factory.mktemp("evidence"), embedder)


@pytest.fixture(scope="module")
def library_pg(pg_server, library) -> str:
    """The generated library copied into a Postgres database: its URL."""
    from sheaf.store.copy import copy_index
    from sheaf.store.select import open_url

    url = pg_server.database("evidence_library")
    with open_url(str(library), readonly=True) as src, open_url(url) as dst:
        copy_index(src, dst)
    return url


@pytest.fixture(params=["sqlite", "postgres"])
def r(library, embedder, tmp_path, request):
    """A Retriever on the generated library: the SQLite file, or its copy on Postgres."""
    if request.param == "postgres":
        s = get_settings(index_url=request.getfixturevalue("library_pg"), home=tmp_path / "home",
                         library=Path("/nonexistent-library"))
    else:
        s = get_settings(index_file=library, home=tmp_path / "home", library=Path("/nonexistent-library"))
    with Retriever.open(s, query_encoder=QueryEncoder(get_settings(), embedder=embedder)) as ret:
        yield ret


def test_the_phrase_with_its_rare_word_comes_first_and_alone_is_strong(r):
    res = r.retrieve("do not satisfy the Brockett necessary condition")
    first = res.matches[0]
    assert first["unit_id"] == "EXACT001:body:s1" and first["evidence"] == "phrase" and first["strong"]
    for m in res.matches[1:]:  # every other unit lacks "Brockett": none is strong, however near in meaning
        assert m["evidence"] in ("partial", "rare_terms") and not m["strong"]


def test_a_verbatim_sentence_beats_units_holding_its_words_apart(r):
    res = r.retrieve("20% of the pulses were removed during the preprocessing step")
    assert res.matches[0]["unit_id"] == "EXACT001:body:s2" and res.matches[0]["evidence"] == "phrase"
    dropped = r.retrieve("20% of the pulses were removed during preprocessing step")  # one word dropped
    assert dropped.matches[0]["unit_id"] == "EXACT001:body:s2" and dropped.matches[0]["evidence"] == "near"


def test_back_matter_ranks_below_the_body_that_matches_as_well(r):
    res = r.retrieve("technology acceptance", per_paper=0)
    order = [m["unit_id"] for m in res.matches]
    assert order[0] == "TAMPAPER:body:s1"
    assert {"TAMPAPER:body:refs", "TAMPAPER:body:ack:backmatter"} <= set(order)
    flags = {m["unit_id"]: m["back_matter"] for m in res.matches}
    assert flags["TAMPAPER:body:refs"] and flags["TAMPAPER:body:ack:backmatter"] and not flags[order[0]]
    only = r.retrieve("Chimento-Díaz Sánchez-García")  # only the reference list holds it: still found first
    assert only.matches[0]["unit_id"] == "TAMPAPER:body:refs"


@pytest.mark.parametrize("mode", ["lexical", "semantic", "hybrid"])
def test_a_quoted_phrase_asks_for_itself_in_every_mode(r, mode):
    res = r.retrieve('"necessary condition of asymptotic stability" controllers', mode=mode, per_paper=0)
    assert [m["unit_id"] for m in res.matches] == ["NEARB002:body:s0"]
    none = r.retrieve('"necessary condition of Brockett"', mode=mode)
    assert none.matches == [] and any("no unit holds" in w for w in none.warnings)


def test_kind_backmatter_asks_for_the_back_matter_alone(r):
    res = r.retrieve("technology acceptance interviews", kind="backmatter", per_paper=0)
    assert [m["unit_id"] for m in res.matches] == ["TAMPAPER:body:ack:backmatter"]
    body = r.retrieve("technology acceptance interviews", kind="body", per_paper=0)
    assert "TAMPAPER:body:ack:backmatter" in [m["unit_id"] for m in body.matches]  # body still holds it, lower


def test_in_kinds_reads_the_kind_from_the_id():
    from sheaf.core.defaults import in_kinds

    assert in_kinds("P:body:sec_1:backmatter", ("backmatter",)) and in_kinds("P:body:sec_1:backmatter:part_002",
                                                                           ("backmatter",))
    assert in_kinds("P:body:sec_1:backmatter", ("body",)) and not in_kinds("P:body:sec_1", ("backmatter",))
    assert not in_kinds("P:body:sec_1:note", ("backmatter",)) and not in_kinds("P:figure:p1:2", ("backmatter",))
