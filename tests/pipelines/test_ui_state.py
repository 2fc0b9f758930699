"""What the Dagster UI reads of each paper, on a real instance: check partition status after
multi-paper runs, the `paper_up_to_date` check and the `library_status` table after an edit,
papers' identity in their metadata, and the discovery sensor's report."""
from __future__ import annotations

import pytest
from dagster import AssetKey, SensorResult

from pipelines.dagster_internals.event_reads import check_partition_statuses
from pipelines.partitions import papers_partitions
from tests.kits.pipeline import BASE_PAPERS, Home, built_base, clone, definitions, edit_markdown, instance, run_cli
from tests.kits.sensors import apply_sensor_result, sense, sheaf_config

EDITED = "L2YSNC8V"  # a Markdown paper of the base library


@pytest.fixture
def built(tmp_path_factory, tmp_path, monkeypatch) -> Home:
    base, _ = built_base(tmp_path_factory)
    return clone(base, tmp_path / "b").apply(monkeypatch)


def _discover(h: Home, inst) -> SensorResult:
    """One tick of the discovery sensor, applied as the daemon does (partitions, then events)."""
    res = sense(h, inst)
    assert isinstance(res, SensorResult), res
    apply_sensor_result(inst, res)
    return res


def _statuses(inst, asset: str, check: str) -> dict[str, list[str]]:
    return check_partition_statuses(inst, asset, check, papers_partitions)


def _status_table(inst) -> dict[str, dict]:
    ev = inst.get_latest_materialization_event(AssetKey("library_status"))
    table = ev.asset_materialization.metadata["papers_table"]
    return {r.data["key"]: r.data for r in table.records}


def _description(inst, partition: str) -> str:
    from dagster import AssetCheckKey

    from tests.kits.dagster_private import PartitionKeyFilter

    hist = inst.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey("vector_collections"), "paper_up_to_date"), limit=1,
        partition_filter=PartitionKeyFilter(key=partition))
    return hist[0].event.dagster_event.event_specific_data.description


def test_every_check_partition_is_passed_after_a_multi_paper_run(built):
    """The base home was built by one run over its four papers: every paper of every check is
    Passed in the check's Partitions tab (the per-paper evaluations used to lack the
    materialization they checked, so Dagster counted none of them: "Missing (4)")."""
    from assets.checks import ALL_CHECKS

    inst = instance()
    for chk in ALL_CHECKS:
        for ck in chk.check_keys:
            assert _statuses(inst, ck.asset_key.path[-1], ck.name) == {"SUCCEEDED": sorted(BASE_PAPERS)}, ck
    # the run's log names the paper of each evaluation (the UI shows its metadata and its message)
    from dagster import AssetCheckKey

    from tests.kits.dagster_private import PartitionKeyFilter

    key = BASE_PAPERS[0]
    (rec,) = inst.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey("vector_collections"), "vectors_match_passages"), limit=1,
        partition_filter=PartitionKeyFilter(key=key))
    assert rec.event.dagster_event.event_specific_data.metadata["paper"].value == key
    assert f"for paper {key} passed" in rec.event.dagster_event.message


def test_an_edited_paper_is_red_with_its_reason_until_rebuilt(built):
    inst = instance()
    defs = definitions()
    edit_markdown(built.papers / EDITED / "paper.md", "A new paragraph about lichen thalli.")
    res = _discover(built, inst)
    assert [r.tags["sheaf/discovery"] for r in res.run_requests] == ["0 added, 0 removed, 1 changed"]
    assert res.run_requests[0].tags["sheaf/changes"].startswith(f"changed {EDITED}: OCR ")
    (obs,) = res.asset_events
    assert obs.partition == EDITED and obs.metadata["previous_ocr_result_hash"].value != obs.tags["dagster/data_version"]

    # what the sensor's run does: refresh library_status (and the changed paper's check)
    assert defs.resolve_job_def("library_status_job").execute_in_process(instance=inst).success
    assert _statuses(inst, "vector_collections", "paper_up_to_date") == {
        "FAILED": [EDITED], "SUCCEEDED": sorted(set(BASE_PAPERS) - {EDITED})}
    assert _description(inst, EDITED) == "OCR changed"
    rows = _status_table(inst)
    assert rows[EDITED]["state"] == "stale" and rows[EDITED]["why"] == "OCR changed"
    assert {k: r["state"] for k, r in rows.items() if k != EDITED} == {k: "built" for k in BASE_PAPERS if k != EDITED}
    assert all(r["paper"] and r["last_built"] for r in rows.values())
    assert list(rows)[0] == EDITED  # papers that need work come first

    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["planned"] == {EDITED: ["OCR changed"]}, env
    assert _statuses(inst, "vector_collections", "paper_up_to_date") == {"SUCCEEDED": sorted(BASE_PAPERS)}
    assert defs.resolve_job_def("library_status_job").execute_in_process(instance=inst).success
    assert {r["state"] for r in _status_table(inst).values()} == {"built"}


def test_each_paper_materialization_names_the_paper(built):
    from pipelines.planning.events import latest_events

    evs = latest_events(instance(), "ocr_blocks")
    assert set(evs) == set(BASE_PAPERS)
    for e in evs.values():
        assert e.metadata["title"] and e.metadata["first_author"] and isinstance(e.metadata["year"], int)


def test_discovery_sensor_drops_partitions_added_by_hand(built):
    """A partition added in the UI ("Add a partition") that is no paper of the library, even one
    whose key is not a valid paper key, is deleted by the next tick (the tick used to fail on
    the bad key, so it stayed for good)."""
    inst = instance()
    inst.add_dynamic_partitions("papers", ["NOTAPAPER", "../etc"])
    res = _discover(built, inst)
    (delete,) = res.dynamic_partitions_requests
    assert sorted(delete.partition_keys) == ["../etc", "NOTAPAPER"]
    assert sorted(inst.get_dynamic_partitions("papers")) == sorted(BASE_PAPERS)


def test_sheaf_build_runs_name_their_launcher_and_partitions(built):
    """The UI shows a run's launcher from its `user` tag (else "Manually launched") and its
    partitions from the partition / partition-range tags."""
    runs = [r for r in instance().get_runs() if r.job_name == "paper_chain"]
    assert runs
    for r in runs:
        assert r.tags["user"].startswith("sheaf build on "), r.tags
        assert "dagster/partition" in r.tags or {"dagster/asset_partition_range_start",
                                                 "dagster/asset_partition_range_end"} <= set(r.tags), r.tags
    # `sheaf build --json` writes its progress tags at most once a second, and the last counts at the end
    last = max(runs, key=lambda r: int(r.tags["sheaf/current"]))
    assert last.tags["sheaf/current"] == last.tags["sheaf/total"] == str(len(BASE_PAPERS)), last.tags
    # a finished run of several papers is labelled with none of them
    assert all(not r.tags.get("sheaf/current_paper") and "sheaf/paper_id" not in r.tags for r in runs), runs


def test_library_status_has_its_paper_table_after_a_plain_sheaf_build(built):
    """`sheaf build` records the plan run-less; that record carries the same per-paper table as a
    `library_status` run (it used to have the counts only, until a run inside Dagster)."""
    ev = instance().get_latest_materialization_event(AssetKey("library_status"))
    assert ev.run_id == ""  # the CLI build's run-less record, not a Dagster run
    rows = _status_table(instance())
    assert set(rows) == set(BASE_PAPERS)
    assert all(r["state"] == "built" and r["paper"] and r["last_built"] for r in rows.values()), rows


def _check_statuses(inst) -> dict[str, dict[str, list[str]]]:
    from assets.checks import ALL_CHECKS

    return {f"{ck.asset_key.path[-1]}/{ck.name}": _statuses(inst, ck.asset_key.path[-1], ck.name)
            for chk in ALL_CHECKS for ck in chk.check_keys}


def test_a_one_paper_range_run_records_every_check_under_its_partition(built):
    """Backfills and the nightly schedule tag a run with a partition RANGE, also for one paper:
    each check's result is still that paper's (it used to be stored with no partition, so the
    rebuilt paper's checks read "Missing" in the Partitions tab: its new materialization had no
    evaluation)."""
    inst = instance()
    job = definitions().resolve_job_def("paper_chain")
    tags = {"dagster/asset_partition_range_start": EDITED, "dagster/asset_partition_range_end": EDITED}
    assert job.execute_in_process(instance=inst, tags=tags, run_config={
        "loggers": {"console": {"config": {"log_level": "WARNING"}}}}).success
    for check, statuses in _check_statuses(inst).items():
        assert statuses == {"SUCCEEDED": sorted(BASE_PAPERS)}, check
    run = inst.get_runs(limit=1)[0]
    assert run.tags["dagster/asset_partition_range_start"] == EDITED
    for check in _check_statuses(inst):
        asset, name = check.split("/")
        from dagster import AssetCheckKey

        from tests.kits.dagster_private import PartitionKeyFilter

        (rec,) = inst.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(AssetKey(asset), name), limit=1, partition_filter=PartitionKeyFilter(key=EDITED))
        assert rec.run_id == run.run_id, check


def _refresh_tick(inst):
    from dagster import build_sensor_context

    from pipelines.automation.sensors import library_status_refresh_sensor

    with build_sensor_context(instance=inst) as ctx:
        return library_status_refresh_sensor(ctx)


def test_library_status_is_refreshed_after_a_run_over_papers_whatever_launched_it(built):
    """A rebuild with automation paused (here: no automation at all, a range run as a backfill
    launches it) leaves library_status stale; the refresh sensor sees the finished run and
    requests one refresh, named after the papers, then skips until another run finishes."""
    from dagster import RunRequest, SkipReason

    inst = instance()
    defs = definitions()
    assert isinstance(_refresh_tick(inst), SkipReason)  # `sheaf build` wrote the status after its runs
    edit_markdown(built.papers / EDITED / "paper.md", "A new paragraph about lichen thalli.")
    _discover(built, inst)
    assert defs.resolve_job_def("library_status_job").execute_in_process(instance=inst).success
    assert _status_table(inst)[EDITED]["state"] == "stale"
    assert isinstance(_refresh_tick(inst), SkipReason)  # a status run is no run over papers

    tags = {"dagster/asset_partition_range_start": EDITED, "dagster/asset_partition_range_end": EDITED}
    assert defs.resolve_job_def("paper_chain").execute_in_process(instance=inst, tags=tags).success
    assert _status_table(inst)[EDITED]["state"] == "stale"  # nothing refreshed it yet
    req = _refresh_tick(inst)
    assert isinstance(req, RunRequest) and EDITED in req.tags["sheaf/refresh_after"], req
    assert req.run_key == _refresh_tick(inst).run_key  # one refresh however many ticks see the run
    assert defs.resolve_job_def("library_status_job").execute_in_process(instance=inst, tags=req.tags).success
    assert {r["state"] for r in _status_table(inst).values()} == {"built"}
    assert isinstance(_refresh_tick(inst), SkipReason)


def test_run_steps_are_named_after_the_assets_they_write(built):
    """A run's timeline shows steps, the graph shows assets: each step of the chain is named
    after the assets it writes (a multi-asset's two, joined by "_and_"), and renaming the steps
    changed neither the assets nor their code versions, so no paper became stale."""
    from pipelines.planning.statuses import chain_of, paper_statuses
    from pipelines.planning.versions import chain_code_versions
    from sheaf.core.settings import get_settings

    defs = definitions()
    chain = chain_of(defs)
    from sheaf.formats.pdf.ocr import from_settings

    assert chain.code_versions == chain_code_versions(get_settings().embedding_model,
                                                      from_settings(get_settings()).code_version)
    expected = {"_and_".join(step) for step in chain.steps} | {"paper_checks"}
    assert expected >= {"fulltext_markdown_and_render_map", "body_units_and_object_units"}
    inst = instance()
    assert {st.state for st in paper_statuses(inst, defs).values()} == {"built"}  # built before the run
    res = defs.resolve_job_def("paper_chain").execute_in_process(instance=inst, partition_key=EDITED, run_config={
        "loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    assert res.success
    started = {e.step_key for e in res.all_events if e.event_type_value == "STEP_START"}
    assert started == expected


def test_loading_the_code_location_emits_no_beta_or_preview_warning():
    """`dagster dev` loads `pipelines.definitions` in its code server and in every run: our
    knowing use of Beta/Preview APIs printed a warning per definition each time (~80 lines of
    its log). A fresh process showing every warning (`-W always`) prints none of those now."""
    import os
    import subprocess
    import sys

    from tests.kits.pipeline import ROOT

    out = subprocess.run([sys.executable, "-W", "always", "-c", "import pipelines.definitions"], cwd=ROOT,
                         capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    warned = [line for line in out.stderr.splitlines() if "Warning:" in line]
    assert not [w for w in warned if "BetaWarning" in w or "PreviewWarning" in w], warned
    assert len(warned) <= 3, warned  # what is left is not ours (a Dagster deprecation inside Dagster)


def test_library_status_table_shows_whole_titles_in_few_short_columns():
    """Titles were cut at 48 characters and the table, seven columns wide, ran past its panel
    (last_built out of sight): five short-headed columns, the paper whole as 'Title (Author,
    Year)', the build time to the minute."""
    import re

    from pipelines.planning.paper_view import status_table
    from pipelines.planning.plan import PaperStatus

    title = "A very long title about the microtubule capture sites of focal adhesions in migrating cells"
    statuses = {"AAAA1111": PaperStatus("AAAA1111", "built"),
                "BBBB2222": PaperStatus("BBBB2222", "stale", reasons=["OCR changed"]),
                "CCCC3333": PaperStatus("CCCC3333", "missing", reasons=["never built"])}
    ids = {"AAAA1111": {"title": title, "first_author": "Ana Author", "year": 2001},
           "BBBB2222": {"title": "Short", "year": 2019}}
    table = status_table(statuses, ids, {"AAAA1111": 1796000000.0, "BBBB2222": 1796000000.0})
    assert [c.name for c in table.schema.columns] == ["state", "key", "why", "paper", "last_built"]
    assert all(c.description for c in table.schema.columns)
    rows = [r.data for r in table.records]
    assert [r["key"] for r in rows] == ["BBBB2222", "CCCC3333", "AAAA1111"]  # needing work first
    assert rows[2]["paper"] == f"{title} (Ana Author, 2001)"  # whole, however long
    assert rows[0]["paper"] == "Short (2019)" and rows[1]["paper"] == ""
    assert rows[0]["why"] == "OCR changed" and rows[1]["why"] == "missing: never built" and rows[2]["why"] == ""
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", rows[2]["last_built"]) and rows[1]["last_built"] == ""


def test_titles_shown_where_dagster_lets_a_paper_carry_one(built):
    """A partition key cannot carry a title (Dagster's dynamic partitions are bare keys), so each
    paper's `paper_up_to_date` result carries it in its metadata (shown when the paper is clicked
    in the check's Partitions tab), after a run over papers and after a status refresh; the
    nightly schedule's requests (and the runs they launch) carry `sheaf/titles`."""
    from dagster import AssetCheckKey

    from pipelines.planning.events import latest_events
    from pipelines.planning.paper_view import titles_of
    from tests.kits.dagster_private import PartitionKeyFilter

    inst = instance()
    defs = definitions()
    titles = titles_of(latest_events(inst, "ocr_blocks", partitions=list(BASE_PAPERS)))
    assert set(titles) == set(BASE_PAPERS)

    def title_in_check(key: str):
        (rec,) = inst.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(AssetKey("vector_collections"), "paper_up_to_date"), limit=1,
            partition_filter=PartitionKeyFilter(key=key))
        return rec.event.dagster_event.event_specific_data.metadata["title"].value

    tags = {"dagster/asset_partition_range_start": BASE_PAPERS[0], "dagster/asset_partition_range_end": BASE_PAPERS[1]}
    assert defs.resolve_job_def("paper_chain").execute_in_process(instance=inst, tags=tags, run_config={
        "loggers": {"console": {"config": {"log_level": "WARNING"}}}}).success
    assert [title_in_check(k) for k in BASE_PAPERS[:2]] == [titles[k] for k in BASE_PAPERS[:2]]
    assert defs.resolve_job_def("paper_chain").execute_in_process(instance=inst, partition_key=EDITED, run_config={
        "loggers": {"console": {"config": {"log_level": "WARNING"}}}}).success
    assert title_in_check(EDITED) == titles[EDITED]

    edit_markdown(built.papers / EDITED / "paper.md", "A new paragraph about lichen thalli.")
    _discover(built, inst)
    assert defs.resolve_job_def("library_status_job").execute_in_process(instance=inst).success
    assert _description(inst, EDITED) == "OCR changed" and title_in_check(EDITED) == titles[EDITED]

    import datetime as dt

    from dagster import build_schedule_context

    from pipelines.automation.schedules import nightly_rebuild

    at = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.timezone.utc)
    with build_schedule_context(instance=inst, resources={"sheaf": sheaf_config(built)},
                                repository_def=defs.get_repository_def(), scheduled_execution_time=at) as ctx:
        (req,) = list(nightly_rebuild(ctx))
    assert req.tags["sheaf/titles"] == f"{EDITED}: {titles[EDITED]}"[:250]
