"""The discovery sensor and the nightly schedule, evaluated with build_sensor_context /
build_schedule_context on a real instance (temp DAGSTER_HOME)."""
from __future__ import annotations

import datetime as dt
import os
import shutil
import time

import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    RunRequest,
    SensorResult,
    SkipReason,
    build_schedule_context,
)

from tests.kits.pipeline import (
    BASE_PAPERS,
    CHAIN,
    SAMPLE,
    Home,
    built_base,
    clone,
    definitions,
    edit_markdown,
    instance,
    new_home,
)
from tests.kits.sensors import apply_sensor_result, sense, sheaf_config

KEYS = ("F7RZ4JDB", "L2YSNC8V", "M3FJ9PLC")


def _observed(result: SensorResult) -> dict[str, str]:
    return {e.partition: e.tags["dagster/data_version"] for e in result.asset_events}


@pytest.fixture
def fresh(tmp_path, monkeypatch) -> Home:
    """An unbuilt home over a 3-paper library (no model, no runs: fast)."""
    return new_home(tmp_path / "f", KEYS).apply(monkeypatch)


def test_discovery_sensor_adds_partitions_observes_changes_and_skips(fresh):
    from sheaf.formats import source_hash

    inst = instance()
    r1 = sense(fresh, inst)
    assert isinstance(r1, SensorResult)
    (add,) = r1.dynamic_partitions_requests
    assert add.partitions_def_name == "papers" and sorted(add.partition_keys) == sorted(KEYS)
    assert _observed(r1) == {k: source_hash(fresh.papers / k, k)[2] for k in KEYS}
    assert all(e.asset_key == AssetKey("ocr_result") for e in r1.asset_events)
    apply_sensor_result(inst, r1)
    assert sorted(inst.get_dynamic_partitions("papers")) == sorted(KEYS)

    # nothing changed: a SkipReason, no request, no event
    r2 = sense(fresh, inst)
    assert isinstance(r2, SkipReason) and "no change" in r2.skip_message

    # touched but identical: still nothing
    t = time.time() + 10
    os.utime(fresh.papers / "M3FJ9PLC" / "content_list.json", (t, t))
    assert isinstance(sense(fresh, inst), SkipReason)

    # one paper's OCR changed: one observation, no partition request
    edit_markdown(fresh.papers / "L2YSNC8V" / "paper.md", "A new paragraph about lichen thalli.")
    r3 = sense(fresh, inst)
    assert isinstance(r3, SensorResult) and r3.dynamic_partitions_requests == []
    assert _observed(r3) == {"L2YSNC8V": source_hash(fresh.papers / "L2YSNC8V", "L2YSNC8V")[2]}
    apply_sensor_result(inst, r3)
    assert isinstance(sense(fresh, inst), SkipReason)

    # a paper added and one removed: add + delete requests, an observation only for the new one
    shutil.copytree(SAMPLE / "papers" / "W6TB4YRS", fresh.papers / "W6TB4YRS")
    shutil.rmtree(fresh.papers / "F7RZ4JDB")
    r4 = sense(fresh, inst)
    kinds = {type(q).__name__: sorted(q.partition_keys) for q in r4.dynamic_partitions_requests}
    assert kinds == {"AddDynamicPartitionsRequest": ["W6TB4YRS"], "DeleteDynamicPartitionsRequest": ["F7RZ4JDB"]}
    assert list(_observed(r4)) == ["W6TB4YRS"]
    apply_sensor_result(inst, r4)
    assert sorted(inst.get_dynamic_partitions("papers")) == ["L2YSNC8V", "M3FJ9PLC", "W6TB4YRS"]
    assert isinstance(sense(fresh, inst), SkipReason)


def test_discovery_sensor_refuses_invalid_keys(fresh):
    inst = instance()
    (fresh.papers / "bad key!").mkdir()
    shutil.copy2(fresh.papers / "L2YSNC8V" / "paper.md", fresh.papers / "bad key!" / "paper.md")
    r = sense(fresh, inst)
    (add,) = r.dynamic_partitions_requests
    assert sorted(add.partition_keys) == sorted(KEYS)
    assert "bad key!" not in _observed(r)


# --- the nightly schedule on a built home --------------------------------------------------

@pytest.fixture
def built(tmp_path_factory, tmp_path, monkeypatch) -> Home:
    base, _ = built_base(tmp_path_factory)
    return clone(base, tmp_path / "b").apply(monkeypatch)


def _schedule(h: Home, inst: DagsterInstance, defs=None):
    """Evaluate the nightly schedule as the daemon does: in the code location of `defs`
    (default: `definitions()`), whose asset graph the schedule reads from its context."""
    from pipelines.automation.schedules import nightly_rebuild

    repo = (defs or definitions()).get_repository_def()
    at = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.timezone.utc)
    with build_schedule_context(instance=inst, resources={"sheaf": sheaf_config(h)}, repository_def=repo,
                                scheduled_execution_time=at) as ctx:
        out = nightly_rebuild(ctx)  # closed after the tick (see `sense`)
        return out if isinstance(out, SkipReason) else list(out)


def _ranges(reqs: list[RunRequest]) -> list[tuple[str, str]]:
    return [(r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
            for r in reqs]


@pytest.mark.slow
def test_schedule_requests_partition_ranges_only_for_missing_and_stale(built):
    from pipelines.build.sync import apply_sync, plan_sync

    inst = instance()
    skip = _schedule(built, inst)
    assert isinstance(skip, SkipReason) and f"all {len(BASE_PAPERS)} papers are built" in skip.skip_message

    # order of partitions: L2YSNC8V M3FJ9PLC P9KE3UHB W6TB4YRS, then D2LPA7XK (added last)
    edit_markdown(built.papers / "L2YSNC8V" / "paper.md", "Stale now: a new closing paragraph.")
    built.add_paper("D2LPA7XK")
    apply_sync(inst, built.settings(), plan_sync(inst, built.settings()))
    reqs = _schedule(built, inst)
    assert all(isinstance(r, RunRequest) for r in reqs)
    # L2YSNC8V (stale) and D2LPA7XK (missing) are not contiguous: two range runs, nothing else
    assert _ranges(reqs) == [("L2YSNC8V", "L2YSNC8V"), ("D2LPA7XK", "D2LPA7XK")]
    assert all(r.asset_selection is None for r in reqs)  # the whole chain
    assert len({r.run_key for r in reqs}) == 2
    # the preview and the runs name their papers and why
    assert [r.tags["sheaf/papers"] for r in reqs] == ["L2YSNC8V (OCR changed)", "D2LPA7XK (missing: never built)"]

    # the request is runnable as is: execute it in process, then nothing is left to do
    defs = definitions()
    job = defs.resolve_job_def("paper_chain")
    for r in reqs:
        res = job.execute_in_process(instance=inst, tags=r.tags, raise_on_error=False,
                                     run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
        assert res.success
    assert isinstance(_schedule(built, inst), SkipReason)
    # each check of each rebuilt paper is recorded under its partition (a one-paper range run's
    # results were stored with none: the Partitions tab read them "Skipped")
    from assets.checks import ALL_CHECKS
    from pipelines.dagster_internals.event_reads import check_partition_statuses
    from pipelines.partitions import papers_partitions

    for ck in (ck for chk in ALL_CHECKS for ck in chk.check_keys):
        assert check_partition_statuses(inst, ck.asset_key.path[-1], ck.name, papers_partitions) == {
            "SUCCEEDED": sorted([*BASE_PAPERS, "D2LPA7XK"])}, ck

    # a code bump of body_units: every paper, one contiguous range, from body_units down
    reqs = _schedule(built, inst, definitions(code_versions={"body_units": "2"}))
    assert _ranges(reqs) == [("L2YSNC8V", "D2LPA7XK")]
    assert sorted(k.path[-1] for k in reqs[0].asset_selection) == \
        sorted(CHAIN[CHAIN.index("body_units"):])


def test_schedule_reads_the_chain_from_its_code_location_not_from_definitions():
    """The schedule module never imports `pipelines.definitions` (no import circle): importing
    it leaves the definitions unloaded, and it refuses to run without a code location."""
    import subprocess
    import sys

    from tests.kits.pipeline import ROOT

    probe = ("import sys, pipelines.automation.schedules; "
             "print(sorted(m for m in sys.modules if m.startswith(('pipelines.definitions', 'assets.index'))))")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_schedule_skips_on_an_empty_library(fresh):
    """Evaluated in a code location (as the daemon does), on a library not yet discovered."""
    out = _schedule(fresh, instance())
    assert isinstance(out, SkipReason) and "all 0 papers are built" in out.skip_message


def test_sensors_and_nightly_schedule_run_whenever_the_daemon_runs():
    """`dagster dev` starts discovery, automation and the nightly schedule without a click."""
    from dagster import DefaultScheduleStatus, DefaultSensorStatus

    from pipelines.definitions import defs

    assert [s.default_status for s in defs.schedules] == [DefaultScheduleStatus.RUNNING]
    assert {s.name: s.default_status for s in defs.sensors} == {
        "library_discovery_sensor": DefaultSensorStatus.RUNNING, "sheaf_automation": DefaultSensorStatus.RUNNING,
        "library_status_refresh_sensor": DefaultSensorStatus.RUNNING}


def test_every_asset_has_its_own_description():
    """The UI shows each asset's description: every one set, no two multi-asset outputs sharing one."""
    from pipelines.definitions import defs

    graph = defs.resolve_asset_graph()
    descriptions = {k.to_user_string(): graph.get(k).description for k in graph.get_all_asset_keys()}
    assert all(descriptions.values()), [k for k, d in descriptions.items() if not d]
    assert len(set(descriptions.values())) == len(descriptions), descriptions


@pytest.mark.slow
def test_rebuild_stale_job_rebuilds_exactly_the_papers_needing_work(built):
    """`rebuild_stale`, launched with no config (as from the Launchpad), runs paper_chain for the
    papers the nightly schedule would rebuild now, one run per contiguous range, naming them;
    with nothing to do it runs nothing."""
    from pipelines.build.sync import apply_sync, plan_sync
    from pipelines.planning.statuses import paper_statuses

    inst = instance()
    defs = definitions()
    job = defs.resolve_job_def("rebuild_stale")
    assert not job.run_config_schema.config_type.fields or all(
        not f.is_required for f in job.run_config_schema.config_type.fields.values())
    edit_markdown(built.papers / "L2YSNC8V" / "paper.md", "Stale now: a new closing paragraph.")
    built.add_paper("D2LPA7XK")
    apply_sync(inst, built.settings(), plan_sync(inst, built.settings()))
    assert {k for k, st in paper_statuses(inst, defs).items() if st.state != "built"} == {"L2YSNC8V", "D2LPA7XK"}
    planned = _schedule(built, inst)

    before = {r.run_id for r in inst.get_runs()}
    res = job.execute_in_process(instance=inst)
    assert res.success
    chain_runs = [r for r in inst.get_runs() if r.run_id not in before and r.job_name == "paper_chain"]
    # the nightly's plan, run as it is: the same ranges, papers and reasons
    from pipelines.automation.sensors import papers_of_run

    assert sorted((papers_of_run(r.tags), r.tags["sheaf/papers"]) for r in chain_runs) == sorted(
        (papers_of_run(q.tags), q.tags["sheaf/papers"]) for q in planned)
    assert {r.tags["sheaf/papers"] for r in chain_runs} == {"L2YSNC8V (OCR changed)", "D2LPA7XK (missing: never built)"}
    assert all(r.tags["sheaf/launched_by"] == f"rebuild_stale {res.run_id}" for r in chain_runs)
    # the UI's "Launched by" (the `user` tag) names the job's run, not `sheaf build`
    assert {r.tags["user"] for r in chain_runs} == {f"rebuild_stale run {res.run_id[:8]}"}
    assert {st.state for st in paper_statuses(inst, defs).values()} == {"built"}

    before = {r.run_id for r in inst.get_runs()}
    again = job.execute_in_process(instance=inst)
    assert again.success
    assert [r.job_name for r in inst.get_runs() if r.run_id not in before] == ["rebuild_stale"]
    assert any("all 5 papers are built" in e.user_message for e in inst.all_logs(again.run_id))
