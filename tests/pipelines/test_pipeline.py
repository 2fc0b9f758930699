"""The Dagster asset graph per paper, end to end on a real instance (temp DAGSTER_HOME), the
real index and the real embedding model: build, incremental rebuilds, removal, code-version
bumps, bad papers, and the Dagster CLI on the same home.

One base home (4 small papers) is built once per process; each test that changes something
works on its own copy of it. Builds run in process (the model loads once); only the Dagster
CLI tests use subprocesses.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kits.pipeline import (
    BASE_PAPERS,
    CHAIN,
    ROOT,
    Home,
    artifacts_of,
    built_base,
    check_results,
    clone,
    definitions,
    edit_markdown,
    env_for_subprocess,
    index_counts,
    instance,
    materialization_counts,
    new_runs,
    run_cli,
    run_ids,
    run_partitions,
    search,
    vector_search,
)

pytestmark = pytest.mark.slow

DAGSTER = str(Path(sys.executable).with_name("dagster"))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return built_base(tmp_path_factory)


@pytest.fixture
def home(base, tmp_path, monkeypatch) -> Home:
    """A private copy of the built base home, with SHEAF_HOME/SHEAF_LIBRARY/DAGSTER_HOME set."""
    return clone(base[0], tmp_path / "h").apply(monkeypatch)


@pytest.fixture
def base_env(base, monkeypatch) -> Home:
    """The base home itself, for read-only tests."""
    return base[0].apply(monkeypatch)


def _paper(env: dict, key: str) -> dict:
    return next(p for p in env["data"]["papers"] if p["paper_id"] == key)


def _content_rows(home: Home, key: str) -> dict[str, int]:
    """The paper's rows in the index other than its library metadata (papers, papers_fts)."""
    return {k: v for k, v in index_counts(home, key).items() if k not in ("papers", "papers_fts")}


def _latest(inst, asset: str, key: str):
    from pipelines.planning.events import latest_events

    return latest_events(inst, asset, partitions=[key]).get(key)


# --- a full build ---------------------------------------------------------------------------

def test_build_materializes_every_partition_with_checks_and_metadata(base, base_env):
    h, env = base
    assert env["ok"] and env["data"]["states"] == {"built": len(BASE_PAPERS)}
    assert sorted(env["data"]["sync"]["added"]) == sorted(BASE_PAPERS)
    # one in-process run for the 4 papers (≤ 100 partitions per run)
    assert [sorted(r["papers"]) for r in env["data"]["runs"]] == [sorted(BASE_PAPERS)]
    passages = sum(p["passages"] for p in env["data"]["papers"])
    assert env["data"]["embeddings_computed"] == passages > 0

    inst = instance()
    assert sorted(inst.get_dynamic_partitions("papers")) == sorted(BASE_PAPERS)
    counts = materialization_counts(inst)
    for asset in CHAIN:
        assert counts[asset] == {k: 1 for k in BASE_PAPERS}, asset

    from pipelines.planning.events import latest_observed_versions
    from sheaf.vectors.identity import resolve_model_path

    observed = latest_observed_versions(inst)
    for key in BASE_PAPERS:
        # every per-partition check recorded a passing evaluation for this partition
        assert set(check_results(inst, key).values()) == {"SUCCEEDED"}, (key, check_results(inst, key))
        md = {a: _latest(inst, a, key).metadata for a in CHAIN}
        for a in ("ocr_blocks", "fulltext_markdown", "render_map", "structure_tree", "body_units", "object_units"):
            assert md[a]["ocr_result_hash"] == observed[key], a
            assert md[a]["output_hash"], a
            assert "error" not in md[a]
        assert md["ocr_blocks"]["blocks"] > 0 and md["ocr_blocks"]["source_format"]
        assert md["body_units"]["body_units"] >= 1 and md["body_units"]["tokens"] > 0
        # L2YSNC8V is the sample paper without headings: its text still gets one section
        assert (md["render_map"]["headings"] == 0) == (key == "L2YSNC8V"), (key, md["render_map"])
        assert md["structure_tree"]["sections"] >= 1, (key, md["structure_tree"])
        assert md["fts_tables"]["rows_unchanged"] is False  # a first build writes every paper's rows
        vec = md["vector_collections"]
        assert vec["model"] == resolve_model_path("all-MiniLM-L6-v2")[0]
        assert vec["model_identity"] and vec["passages"] > 0
        assert vec["embeddings_computed"] + vec["embeddings_reused"] == vec["passages"]
        c = index_counts(h, key)
        assert c["body_units"] == md["body_units"]["body_units"]
        assert c[next(k for k in c if k.startswith("vec_"))] == vec["passages"]


def test_second_build_launches_nothing_and_embeds_nothing(home):
    inst = instance()
    before = run_ids(inst)
    code, env = run_cli(["build", "--json"])
    assert code == 0
    assert env["data"]["runs"] == [] and env["data"]["planned"] == {}
    assert env["data"]["embeddings_computed"] == 0
    assert env["data"]["sync"]["changed"] == [] and env["data"]["sync"]["added"] == []
    assert new_runs(inst, before) == []


# --- incremental changes --------------------------------------------------------------------

def test_changed_ocr_rebuilds_exactly_that_paper(home, monkeypatch):
    import dagster

    from pipelines.build.sync import apply_sync, plan_sync
    from pipelines.planning.statuses import paper_statuses

    inst, defs, settings = instance(), definitions(), home.settings()
    tick0 = dagster.evaluate_automation_conditions(defs, inst)
    assert tick0.total_requested == 0  # everything is up to date
    before_counts, before_runs = materialization_counts(inst), run_ids(inst)

    edit_markdown(home.papers / "L2YSNC8V" / "paper.md",
                  "A closing note on zirconolite varve chronologies and their lichen calibration.")
    plan = plan_sync(inst, settings)
    assert sorted(plan.changed) == ["L2YSNC8V"] and not plan.added and not plan.removed
    apply_sync(inst, settings, plan)  # the run-less observation of the new ocr_result hash

    st = paper_statuses(inst, defs, settings)
    assert {k: (s.state, s.reasons) for k, s in st.items() if s.state != "built"} == \
        {"L2YSNC8V": ("stale", ["OCR changed"])}
    # read a few papers' events at a time (the memory of a 10,000-paper build): the same statuses
    import pipelines.planning.statuses as planner

    asked: list[int] = []
    real = planner.latest_events
    with monkeypatch.context() as m:
        m.setattr(planner, "STATUS_CHUNK", 3)
        m.setattr(planner, "latest_events", lambda *a, **kw: asked.append(len(kw["partitions"])) or real(*a, **kw))
        assert paper_statuses(inst, defs, settings) == st
    assert max(asked) == 3 and sum(asked) == len(BASE_PAPERS) * len(CHAIN)
    tick1 = dagster.evaluate_automation_conditions(defs, inst, cursor=tick0.cursor)
    graph = defs.resolve_asset_graph()
    requested = {k.to_user_string(): tick1.get_requested_partitions(k) for k in graph.get_all_asset_keys()}
    assert {a: p for a, p in requested.items() if p} == {a: {"L2YSNC8V"} for a in CHAIN}

    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["planned"] == {"L2YSNC8V": ["OCR changed"]}
    runs = new_runs(inst, before_runs)
    chain_runs = [r for r in runs if r.job_name == "paper_chain"]
    assert len(chain_runs) == 1 and run_partitions(chain_runs[0]) == {"L2YSNC8V"}
    assert {r.job_name for r in runs} - {"paper_chain"} <= {"library_job"}  # the library report
    after = materialization_counts(inst)
    for a in CHAIN:
        assert after[a]["L2YSNC8V"] == before_counts[a]["L2YSNC8V"] + 1, a
        assert {k: v for k, v in after[a].items() if k != "L2YSNC8V"} == \
            {k: v for k, v in before_counts[a].items() if k != "L2YSNC8V"}, a
    assert all(p["state"] == "built" for p in env["data"]["papers"])
    assert search(home, "zirconolite") == ["L2YSNC8V"]
    # the unchanged passages of the paper came from the embedding cache
    assert 0 < env["data"]["embeddings_computed"] <= _paper(env, "L2YSNC8V")["passages"]


def test_touch_without_content_change_rebuilds_nothing(home):
    import os
    import time

    inst = instance()
    before = run_ids(inst)
    f = home.papers / "M3FJ9PLC" / "content_list.json"
    later = time.time() + 5
    os.utime(f, (later, later))
    code, env = run_cli(["build", "--json"])
    assert code == 0
    assert env["data"]["sync"]["changed"] == [] and env["data"]["runs"] == []
    assert new_runs(inst, before) == []


def test_added_paper_is_the_only_one_built(home):
    inst = instance()
    before_counts, before_runs = materialization_counts(inst), run_ids(inst)
    home.add_paper("D2LPA7XK")
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["sync"]["added"] == ["D2LPA7XK"]
    assert list(env["data"]["planned"]) == ["D2LPA7XK"]
    chain_runs = [r for r in new_runs(inst, before_runs) if r.job_name == "paper_chain"]
    assert [run_partitions(r) for r in chain_runs] == [{"D2LPA7XK"}]
    after = materialization_counts(inst)
    for a in CHAIN:
        assert after[a] == {**before_counts[a], "D2LPA7XK": 1}, a
    assert env["data"]["states"] == {"built": len(BASE_PAPERS) + 1}
    assert env["data"]["embeddings_computed"] == _paper(env, "D2LPA7XK")["passages"]


def test_removed_paper_loses_partition_artifacts_and_index_rows(home):
    key = "W6TB4YRS"
    assert artifacts_of(home, key) and index_counts(home, key)["body_units"] > 0
    inst = instance()
    before = run_ids(inst)
    shutil.rmtree(home.papers / key)
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["sync"]["removed"] == [key]
    assert key not in inst.get_dynamic_partitions("papers")
    assert artifacts_of(home, key) == []
    # every content row is gone; its metadata row stays (library.json still lists it), and so the
    # build does not reload the whole export to put it back (it did: 1.5 s at 10,000 papers)
    assert {k: v for k, v in _content_rows(home, key).items() if v} == {}
    assert key not in {p["paper_id"] for p in env["data"]["papers"]}
    assert [r.job_name for r in new_runs(inst, before)] == []
    import sqlite3

    with sqlite3.connect(home.home / "index" / "sheaf.db") as conn:
        assert conn.execute("SELECT has_metadata FROM papers WHERE paper_id = ?", (key,)).fetchone() == (1,)
    code, st = run_cli(["status", "--json"])
    assert st["data"]["coverage"]["partitions"] == len(BASE_PAPERS) - 1


def test_paper_dropped_from_the_export_loses_its_metadata(home):
    """The export no longer lists a paper still in the library: its metadata goes from the
    index (a stub row stays for its units: found by its text, no longer by its title)."""
    from sheaf.store.fulltext import build_match_query
    from sheaf.store.sqlite.reader import fts_search
    from sheaf.store.sqlite.schema import open_index

    key = "W6TB4YRS"

    def state() -> tuple[int, tuple | None, set[str]]:
        conn = open_index(settings=home.settings())
        try:
            n = conn.execute("SELECT count(*) FROM papers WHERE has_metadata = 1").fetchone()[0]
            row = conn.execute("SELECT has_metadata, title FROM papers WHERE paper_id = ?", (key,)).fetchone()
            found = {h.ref for h in fts_search(conn, "papers", build_match_query(title), limit=-1)}
            return n, row, found
        finally:
            conn.close()

    lj = home.library / "library.json"
    data = json.loads(lj.read_text(encoding="utf-8"))
    items = data["items"] if isinstance(data, dict) else data
    item = next(i for i in items if key in json.dumps(i))
    title = item["title"]
    n_before, row, found = state()
    assert row == (1, title) and key in found
    items.remove(item)
    lj.write_text(json.dumps(data), encoding="utf-8")
    code, env = run_cli(["build", "--json"])
    assert code == 0
    n_after, row, found = state()
    assert (n_after, row) == (n_before - 1, (0, None)) and key not in found
    assert index_counts(home, key)["body_units"] > 0  # its content stays searchable


def test_unreadable_export_strips_no_metadata(home):
    """An export that cannot be read (Zotero rewriting it) is not an export listing nothing:
    every paper keeps its metadata."""
    from sheaf.store.sqlite.schema import open_index

    def n_meta() -> int:
        conn = open_index(settings=home.settings())
        try:
            return conn.execute("SELECT count(*) FROM papers WHERE has_metadata = 1").fetchone()[0]
        finally:
            conn.close()

    before = n_meta()
    assert before > 0
    (home.library / "library.json").write_text('{"items": [', encoding="utf-8")  # cut short
    code, env = run_cli(["build", "--json"])
    assert code == 0 and n_meta() == before


def test_code_version_bump_rebuilds_that_asset_and_below_for_every_paper(home, monkeypatch):
    import dagster

    from pipelines.planning import versions

    inst = instance()
    tick0 = dagster.evaluate_automation_conditions(definitions(), inst)
    before_counts, before_runs = materialization_counts(inst), run_ids(inst)
    # a code bump: what `sheaf build/status` load, and what their no-op proof reads
    monkeypatch.setitem(versions.CODE_VERSIONS, "structure_tree", "2")
    bumped = definitions

    code, st = run_cli(["status", "--json"])
    assert {p["paper_id"]: (p["state"], p["reasons"]) for p in st["data"]["papers"]} == \
        {k: ("stale", ["code changed: structure_tree"]) for k in BASE_PAPERS}
    # the automation sensor's conditions agree: structure_tree and below, every paper
    tick1 = dagster.evaluate_automation_conditions(bumped(), inst, cursor=tick0.cursor)
    below = CHAIN[CHAIN.index("structure_tree"):]
    requested = {k.to_user_string(): tick1.get_requested_partitions(k)
                 for k in bumped().resolve_asset_graph().get_all_asset_keys()}
    assert {a: p for a, p in requested.items() if p} == {a: set(BASE_PAPERS) for a in below}

    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["states"] == {"built": len(BASE_PAPERS)}
    assert [r["from"] for r in env["data"]["runs"]] == ["structure_tree"]
    assert env["data"]["embeddings_computed"] == 0  # same passages: all from the cache
    after = materialization_counts(inst)
    for a in CHAIN:
        want = 1 if a in below else 0
        assert {k: after[a][k] - before_counts[a][k] for k in BASE_PAPERS} == {k: want for k in BASE_PAPERS}, a
    runs = [r for r in new_runs(inst, before_runs) if r.job_name == "paper_chain"]
    assert len(runs) == 1 and run_partitions(runs[0]) == {BASE_PAPERS[0], BASE_PAPERS[-1]}
    for key in BASE_PAPERS:
        assert set(check_results(inst, key).values()) == {"SUCCEEDED"}
        assert _latest(inst, "structure_tree", key).code_version == "2"


# --- bad papers -----------------------------------------------------------------------------

def test_malformed_ocr_fails_only_its_own_partition(home):
    inst = instance()
    bad = home.papers / "BADJSON1"
    bad.mkdir()
    good = (home.papers / "M3FJ9PLC" / "content_list.json").read_text(encoding="utf-8")
    (bad / "content_list.json").write_text(good[: len(good) // 2], encoding="utf-8")  # cut mid-JSON
    home.add_paper("D2LPA7XK")  # a good new paper: added together, the two share one run
    before = run_ids(inst)

    code, env = run_cli(["build", "--json"])
    assert code == 0  # a file that cannot be read is its paper's state, not a failed build
    assert len(env["warnings"]) == 1 and env["warnings"][0].startswith("BADJSON1: unreadable:")
    assert "malformed JSON" in env["warnings"][0]
    bad_st = _paper(env, "BADJSON1")
    assert bad_st["state"] == "unreadable" and "malformed JSON" in bad_st["error"]
    assert {p["paper_id"]: p["state"] for p in env["data"]["papers"] if p["paper_id"] != "BADJSON1"} == \
        {k: "built" for k in (*BASE_PAPERS, "D2LPA7XK")}
    runs = [r for r in new_runs(inst, before) if r.job_name == "paper_chain"]
    assert len(runs) == 1 and run_partitions(runs[0]) == {"BADJSON1", "D2LPA7XK"}
    assert env["data"]["runs"][0]["success"] and runs[0].status.value == "SUCCESS"
    assert "malformed JSON" in _latest(inst, "ocr_blocks", "BADJSON1").metadata["error"]
    assert "error" not in _latest(inst, "vector_collections", "D2LPA7XK").metadata
    assert "FAILED" in check_results(inst, "BADJSON1").values()
    assert set(check_results(inst, "D2LPA7XK").values()) == {"SUCCEEDED"}
    # the rest of the run is indexed and searchable, lexically and by vector
    assert search(home, "backscatter") == ["D2LPA7XK"]
    assert "D2LPA7XK" in vector_search(home, "soil moisture retrieval from radar backscatter")
    assert {k: v for k, v in _content_rows(home, "BADJSON1").items() if v} == {}
    assert artifacts_of(home, "BADJSON1") == []

    code, st = run_cli(["status", "--json"])
    assert _paper(st, "BADJSON1")["state"] == "unreadable"
    # an unreadable paper is not retried until its input (or code) changes
    before = run_ids(inst)
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["runs"] == []
    assert [r for r in new_runs(inst, before) if r.job_name == "paper_chain"] == []


def test_paper_turning_malformed_alone_is_unreadable_not_stale(home):
    """A one-paper run whose only paper fails records the failure like a batch does."""
    key = "W6TB4YRS"
    f = home.papers / key / "content_list.json"
    f.write_text(f.read_text(encoding="utf-8")[:300], encoding="utf-8")
    inst = instance()
    code, env = run_cli(["build", "--json"])
    assert code == 0 and [r["papers"] for r in env["data"]["runs"]] == [[key]]
    assert _paper(env, key)["state"] == "unreadable" and "malformed JSON" in _paper(env, key)["error"]
    assert env["warnings"] and env["warnings"][0].startswith(f"{key}:")
    # nothing stale of the old version survives: artifacts and index rows are gone
    assert artifacts_of(home, key) == []
    assert {k: v for k, v in _content_rows(home, key).items() if v} == {}
    # ... but its library metadata stays (the paper is still in the library and its export)
    c = index_counts(home, key)
    assert c["papers"] == c["papers_fts"] == 1
    before = run_ids(inst)
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["runs"] == []
    assert [r for r in new_runs(inst, before) if r.job_name == "paper_chain"] == []


# --- the Dagster CLI on the same home -------------------------------------------------------

def test_dagster_asset_materialize_reruns_one_paper(home):
    inst = instance()
    before_counts, before_runs = materialization_counts(inst), run_ids(inst)
    key = "L2YSNC8V"
    proc = subprocess.run(
        [DAGSTER, "asset", "materialize", "-m", "pipelines.definitions", "--select", ",".join(CHAIN),
         "--partition", key],
        cwd=ROOT, env=env_for_subprocess(home), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = new_runs(inst, before_runs)
    assert len(runs) == 1 and runs[0].tags.get("dagster/partition") == key
    assert runs[0].status.value == "SUCCESS"
    after = materialization_counts(inst)
    for a in CHAIN:
        assert after[a][key] == before_counts[a][key] + 1, a
        assert {k: v for k, v in after[a].items() if k != key} == \
            {k: v for k, v in before_counts[a].items() if k != key}, a
    vec = _latest(inst, "vector_collections", key)
    assert vec.run_id == runs[0].run_id and vec.metadata["embeddings_computed"] == 0
    code, st = run_cli(["status", "--json"])
    assert all(p["state"] == "built" for p in st["data"]["papers"])


def test_dagster_definitions_validate(tmp_path):
    assert (ROOT / "workspace.yaml").is_file()
    env = env_for_subprocess(Home(tmp_path))
    (tmp_path / "home" / "dagster_home").mkdir(parents=True)
    proc = subprocess.run([DAGSTER, "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Validation successful for code location pipelines.definitions" in proc.stderr + proc.stdout
