"""`sheaf eval`: metric functions against hand-computed numbers, the BEIR runner on a tiny
dataset whose right answers are known, and known-item evaluation of the sample library."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sheaf.eval import beir, library, metrics
from sheaf.eval.metrics import evaluate_run, mrr_at_k, ndcg_at_k, recall_at_k

L2_3 = math.log2(3)  # the discount of rank 2
L2_4 = 2.0  # rank 3


# --- metrics, by hand ----------------------------------------------------------------------------

def test_ndcg_by_hand():
    # relevant at ranks 1 and 3 of two relevant: DCG = 1 + 1/2; IDCG = 1 + 1/log2(3)
    assert ndcg_at_k(["a", "x", "b"], {"a": 1, "b": 1}, 10) == pytest.approx(1.5 / (1 + 1 / L2_3))
    assert ndcg_at_k(["a", "x", "b"], {"a": 1, "b": 1}, 10) == pytest.approx(0.919721, abs=1e-6)
    # graded: gain is the grade (trec_eval / BEIR), not 2**rel - 1
    assert ndcg_at_k(["b", "a"], {"a": 2, "b": 1}, 10) == pytest.approx((1 + 2 / L2_3) / (2 + 1 / L2_3))
    # cut at k: the relevant doc at rank 3 is outside @2
    assert ndcg_at_k(["x", "y", "a"], {"a": 1}, 2) == 0.0
    # duplicates count once (their first place); a judged 0 is not relevant
    assert ndcg_at_k(["x", "x", "a"], {"a": 1, "x": 0}, 10) == pytest.approx(1 / L2_3)
    assert ndcg_at_k([], {"a": 1}, 10) == 0.0
    assert ndcg_at_k(["a"], {"a": 0}, 10) == 0.0


def test_recall_and_mrr_by_hand():
    assert recall_at_k(["a", "x", "b"], {"a": 1, "b": 1, "c": 1}, 10) == pytest.approx(2 / 3)
    assert recall_at_k(["a", "x", "b"], {"a": 1, "b": 1, "c": 1}, 2) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "y", "a", "b"], {"a": 1, "b": 1}, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "y", "a"], {"a": 1}, 2) == 0.0
    # queries without a relevant document are left out of the mean; missing runs score 0
    run = {"q1": ["a"], "q2": ["z"], "q3": ["a"]}
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"a": 0}, "q4": {"c": 1}}
    got = evaluate_run(run, qrels, ("ndcg@10", "recall@10", "mrr@10"))
    assert got == {"ndcg@10": pytest.approx(1 / 3), "recall@10": pytest.approx(1 / 3),
                   "mrr@10": pytest.approx(1 / 3)}


# --- a tiny BEIR dataset with known answers -------------------------------------------------------

# Titles use words no query uses, so the lexical answer is fixed by the abstracts alone.
DOCS = [
    ("d1", "Heron mornings", "Falcon telemetry shows the glacier retreat over a decade of winters."),
    ("d2", "Willow notes", "Unrelated prose about teapots, porcelain glaze and kiln temperatures."),
    ("d3", "Copper lanterns", "Zebrafish heart regeneration needs cardiomyocyte proliferation after injury."),
    ("d4", "Quartz rivers", "Zebrafish fins regrow; scientists measured fin ray length weekly."),
    ("d5", "Marble stairs", "Bakers proof sourdough overnight in cool rooms for flavour."),
    ("d6", "Cedar boats", "Mitochondrial fission proteins and oxidative stress in neurons."),
]
QUERIES = {
    "q1": "falcon telemetry glacier",  # d1 has every word; d2 (grade 1) has none of them
    "q2": "zebrafish cardiomyocyte",  # d3 has both (AND first), d4 only 'zebrafish': relevant d4 is 2nd
    "q3": "sourdough",  # d5 alone
    "q4": "teapots",  # judged, but no relevant document: left out of the means
}
QRELS = [("q1", "d1", 2), ("q1", "d2", 1), ("q2", "d4", 1), ("q2", "d3", 0), ("q3", "d5", 1),
         ("q4", "d2", 0)]


def _write_beir(folder: Path) -> tuple[Path, Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    corpus, queries, qrels = folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels.tsv"
    corpus.write_text("".join(json.dumps({"_id": d, "title": t, "text": x}) + "\n" for d, t, x in DOCS))
    queries.write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items()))
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in QRELS))
    return corpus, queries, qrels


# Hand computation for lexical mode (a paper ranks as its best unit):
#   q1: ranking [d1] (nothing else holds a query word). Gains: d1=2 at rank 1 → DCG = 2.
#       IDCG = 2 + 1/log2(3). recall = 1 of 2. MRR = 1.
#   q2: ranking [d3, d4] (d3 holds both words, d4 one; d3 is judged 0). DCG = 1/log2(3), IDCG = 1.
#       recall = 1. MRR = 1/2.
#   q3: ranking [d5]. nDCG = recall = MRR = 1.
Q1_NDCG = 2 / (2 + 1 / L2_3)  # 0.760186
Q2_NDCG = 1 / L2_3  # 0.630930
EXPECTED_LEXICAL = {
    "ndcg@10": (Q1_NDCG + Q2_NDCG + 1) / 3,  # 0.797039
    "recall@10": (0.5 + 1 + 1) / 3,  # 0.833333
    "recall@100": (0.5 + 1 + 1) / 3,
    "mrr@10": (1 + 0.5 + 1) / 3,  # 0.833333
}


def test_expected_numbers_are_what_we_think():
    assert EXPECTED_LEXICAL["ndcg@10"] == pytest.approx(0.797039, abs=1e-6)
    assert EXPECTED_LEXICAL["mrr@10"] == pytest.approx(0.833333, abs=1e-6)


def test_eval_beir_lexical_exact(tmp_path, capsys):
    """The CLI end to end (lexical needs no model): exact metrics, the envelope's shape,
    --out, and a rerun that reuses the cached index."""
    from sheaf.cli.app import main

    c, q, r = _write_beir(tmp_path / "ds")
    argv = ["eval", "beir", "--corpus", str(c), "--queries", str(q), "--qrels", str(r), "--modes", "lexical",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "res.json"), "--per-query", "--json"]
    assert main(argv) == 0
    out = capsys.readouterr()
    env = json.loads(out.out.strip().splitlines()[-1])
    assert env["ok"] and env["command"] == "eval" and env["data"]["suite"] == "beir"
    assert env["count"] == 3  # q4 has no relevant document
    got = env["data"]["metrics"]["lexical"]
    for m, v in EXPECTED_LEXICAL.items():
        assert got[m] == pytest.approx(v, abs=1e-4), m
    per = env["data"]["per_query"]["lexical"]
    assert per["q1"]["ranking"] == ["d1"] and per["q2"]["ranking"] == ["d3", "d4"]
    assert per["q3"]["ranking"] == ["d5"]
    assert env["data"]["latency_ms"]["lexical"]["n"] == 3
    assert env["data"]["index"]["reused"] is False and env["data"]["index"]["papers"] == 6
    assert "lexical queries" in out.err  # progress on stderr
    assert json.loads((tmp_path / "res.json").read_text()) == env
    assert main(argv) == 0
    env2 = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert env2["data"]["index"]["reused"] is True
    assert env2["data"]["metrics"] == env["data"]["metrics"]


def test_eval_beir_bad_input(tmp_path, capsys):
    from sheaf.cli.app import main

    c, q, r = _write_beir(tmp_path / "ds")
    assert main(["eval", "beir", "--corpus", str(tmp_path / "nope.jsonl"), "--queries", str(q),
                 "--qrels", str(r), "--json"]) == 2
    env = json.loads(capsys.readouterr().out)
    assert env["ok"] is False and env["error"]["code"] == "NOT_FOUND"
    assert main(["eval", "beir", "--corpus", str(c), "--queries", str(q), "--qrels", str(r),
                 "--modes", "fuzzy", "--cache-dir", str(tmp_path / "cache"), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "BAD_QUERY"


def test_eval_beir_all_modes(tmp_path, embedder):
    """Semantic and hybrid through the real model: the unambiguous answers are found, every
    metric is reported per mode, and a rerun encodes nothing."""
    ds = beir.load_beir(*_write_beir(tmp_path / "ds"))
    res = beir.run_beir(ds, cache_dir=tmp_path / "cache", embedder=embedder, per_query=True)
    data = res["data"]
    assert set(data["metrics"]) == {"lexical", "semantic", "hybrid"}
    for mode, m in data["metrics"].items():
        assert set(m) == set(metrics.METRICS)
        assert all(0.0 <= v <= 1.0 for v in m.values())
        assert m["recall@100"] == pytest.approx(5 / 6 if mode == "lexical" else 1.0, abs=1e-4)  # 6 papers: all ranked
        assert data["per_query"][mode]["q3"]["ranking"][0] == "d5"
    assert data["metrics"]["lexical"]["ndcg@10"] == pytest.approx(EXPECTED_LEXICAL["ndcg@10"], abs=1e-4)
    assert data["index"]["passages"] == 6 and data["query_encode_ms"]["n"] == 3
    again = beir.run_beir(ds, cache_dir=tmp_path / "cache", embedder=embedder, rebuild=True)
    assert again["data"]["index"]["encoded"] == 0  # the embedding cache survived the rebuild
    assert again["data"]["metrics"] == data["metrics"]


def test_beir_document_goes_through_the_paper_chain():
    from sheaf.transform.chain import units_from_paper

    out = units_from_paper(beir.beir_paper("4983", "A title", "First sentence. Second one."))
    assert out.paper.title == "A title"
    [u] = out.body_units
    assert u.paper_id == "4983" and u.section_path == ("Abstract",) and u.text == "First sentence. Second one."
    assert beir.beir_paper("a/b", "T", "x").paper_id.startswith("d")  # unsafe ids are mapped


# --- the user's library ------------------------------------------------------------------------------

def test_eval_library_titles_found(sample_index, embedder):
    from sheaf.core.settings import get_settings

    s = get_settings(index_file=sample_index.path, home=sample_index.path.parent)
    res = library.run_library(s, sample=0, embedder=embedder, per_query=True)
    data = res["data"]
    assert data["queries"]["title"] >= 8 and data["queries"]["sentence"] >= 8
    for mode in ("lexical", "semantic", "hybrid"):
        assert data["metrics"][mode]["title"]["recall@10"] == 1.0, (mode, data["metrics"][mode])
        # a sentence quoted verbatim is found lexically, at the top
        assert data["metrics"]["lexical"]["sentence"]["recall@1"] == 1.0
    if data["queries"]["code"]:
        assert data["metrics"]["lexical"]["code"]["recall@10"] == 1.0
    for item in data["per_query"]["lexical"]:
        if item["type"] == "code":
            assert item["query"] and item["target"].startswith(item["paper_id"] + ":")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_library_queries_are_known_items(sample_index, backend, request):
    from sheaf.store.select import open_url

    url = str(sample_index.path) if backend == "sqlite" else request.getfixturevalue("sample_pg")
    with open_url(url, readonly=True) as index:
        items, stats = library.library_queries(index, sample=4, seed=1)
        again, _ = library.library_queries(index, sample=4, seed=1)
        texts = {u: t for u, _, t, _ in library._unit_texts(index)}
    assert items == again and stats["papers_sampled"] == 4  # seeded
    for it in items:
        if it.qtype == "sentence":
            assert it.query in " ".join(texts[it.target].split())
        if it.qtype == "code":
            holders = [u for u, t in texts.items()
                       if library._code_key(it.query) in {library._code_key(m)
                                                           for m in library._CODE_TOKEN_RE.findall(t)}]
            assert holders == [it.target]
