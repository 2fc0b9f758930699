"""The no-op proof (`pipelines.planning.noop`): `sheaf build` and `sheaf status` answer "nothing changed"
without loading Dagster, from Dagster's own record read straight from its files, and only while
that record provably holds; every change sends them the Dagster way.

Asserted on real homes: the reader's answers against Dagster's API, the quick envelopes against
the Dagster way's, a fresh process that never imports dagster, and one case per kind of change.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.kits.pipeline import (
    BASE_PAPERS,
    CHAIN,
    ROOT,
    Home,
    built_base,
    clone,
    edit_markdown,
    env_for_subprocess,
    instance,
    run_cli,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The base home with one paper that cannot be read (unreadable, retried only when it changes),
    built twice: the second build records the plan with every paper settled."""
    h, _ = built_base(tmp_path_factory)
    b = clone(h, tmp_path_factory.mktemp("noop") / "b")
    bad = b.papers / "BADJSON1"
    bad.mkdir()
    good = (b.papers / "M3FJ9PLC" / "content_list.json").read_text(encoding="utf-8")
    (bad / "content_list.json").write_text(good[: len(good) // 2], encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        b.apply(mp)
        code, env = run_cli(["build", "--json"])
        assert code == 0 and env["data"]["states"] == {"built": len(BASE_PAPERS), "unreadable": 1}, env
    return b


@pytest.fixture
def home(base, tmp_path, monkeypatch) -> Home:
    return clone(base, tmp_path / "h").apply(monkeypatch)


def _proof(home: Home, **kw):
    from pipelines.planning.noop import prove_unchanged

    return prove_unchanged(home.settings(), **kw)


def _fresh(home: Home, *argv: str) -> tuple[dict, set[str]]:
    """`sheaf <argv>` in a fresh process: (envelope, the top-level modules it imported)."""
    code = ("import json, sys\nfrom sheaf.cli.app import main\nrc = main(sys.argv[1:])\n"
            "sys.stderr.write('\\nMODULES ' + json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
            "sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT,
                          env=env_for_subprocess(home), timeout=120)
    return json.loads(proc.stdout), set(json.loads(proc.stderr.rsplit("MODULES ", 1)[1]))


# --- the reader against Dagster's API ---------------------------------------------------------------

def test_the_files_answer_what_dagsters_api_answers(home):
    from dagster import AssetKey, DagsterRunStatus, RunsFilter

    from pipelines.dagster_internals.home_files import DagsterFiles
    from pipelines.definitions import build_definitions
    from pipelines.partitions import papers_partitions
    from pipelines.planning.recorded_plan import chain_cursor, observation_cursor
    from pipelines.planning.statuses import chain_of

    inst = instance()
    chain = chain_of(build_definitions())
    with DagsterFiles(home.dagster_home) as files:
        assert files.partitions(papers_partitions.name) == list(inst.get_dynamic_partitions(papers_partitions.name))
        assert files.cursor(chain.assets) == chain_cursor(inst, chain) > 0
        assert files.newest_observation("ocr_result") == observation_cursor(inst) > 0
        unfinished = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
                      DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
        assert files.unfinished_runs() == len(inst.get_runs(RunsFilter(statuses=unfinished))) == 0
        for asset in ("library_status", "library_metadata", "body_units"):
            mat = inst.get_latest_materialization_event(AssetKey(asset)).asset_materialization
            # every plain value as Dagster reads it; a table (the UI's `papers_table`) is read as None
            tables = {k for k, v in mat.metadata.items() if type(v).__name__ == "TableMetadataValue"}
            got = files.latest_metadata(asset)
            assert {k: got[k] for k in tables} == dict.fromkeys(tables)
            assert {k: v for k, v in got.items() if k not in tables} == {
                k: getattr(v, "value", v) for k, v in mat.metadata.items() if k not in tables}
        assert files.latest_metadata("never_materialized") is None


def test_the_chain_code_versions_are_the_ones_the_definitions_give(home):
    """`pipelines.planning.versions` is where every chain asset's code version comes from: the chain Dagster
    sees has exactly these assets and versions (the model's fingerprint in vector_collections')."""
    from pipelines.definitions import build_definitions
    from pipelines.partitions import papers_partitions
    from pipelines.planning import noop
    from pipelines.planning.recorded_plan import STATUS_ASSET
    from pipelines.planning.statuses import chain_of
    from pipelines.planning.versions import chain_code_versions
    from sheaf.formats.pdf.ocr import from_settings

    chain = chain_of(build_definitions())
    ocr = from_settings(home.settings()).code_version
    assert dict(chain.code_versions) == chain_code_versions(home.settings().embedding_model, ocr)
    # the OCR engine is part of the parse's version (SHEAF_OCR=auto by default): a new engine re-reads
    assert chain.code_versions["ocr_blocks"] == f"1+ocr.{ocr}" and ocr.startswith("auto:")
    assert chain_code_versions("m", "")["ocr_blocks"] == "1"  # OCR off: the version of before
    assert (noop.PAPERS, noop.STATUS_ASSET) == (papers_partitions.name, STATUS_ASSET)
    keys = {k.path[-1] for k in build_definitions().resolve_asset_graph().get_all_asset_keys()}
    assert {noop.SOURCE_ASSET, noop.METADATA_ASSET} <= keys


# --- nothing changed: the same answer, without Dagster ----------------------------------------------

def test_a_no_op_build_and_status_load_no_dagster_and_answer_as_the_dagster_way(home):
    env, modules = _fresh(home, "build", "--json")
    assert env["ok"] and env["data"]["runs"] == [] and env["data"]["plan"] == {
        "record": "current", "papers_read": 0, "dagster": False}
    assert env["data"]["states"] == {"built": len(BASE_PAPERS), "unreadable": 1}
    assert "BADJSON1" in " ".join(env["warnings"]) and "malformed JSON" in " ".join(env["warnings"])
    assert not modules & {"dagster", "torch", "sentence_transformers"}, modules & {"dagster", "torch"}
    st, modules = _fresh(home, "status", "--json")
    assert st["data"]["plan"]["dagster"] is False and "dagster" not in modules
    assert st["data"]["build_state"]["status"] == "idle"

    # the same envelope as the Dagster way's no-op (apart from timings and how it was planned)
    from sheaf.service import builds

    settings = home.settings()
    quick = builds.build(settings).envelope
    full = builds.build(settings, builds.definitions(settings)).envelope
    assert quick["data"]["plan"]["dagster"] is False and full["data"]["plan"]["dagster"] is True
    for env in (quick, full):
        env["data"].pop("seconds"), env["data"].pop("plan"), env.pop("meta", None)
    assert {k: (v, full["data"].get(k)) for k, v in quick["data"].items() if full["data"].get(k) != v} == {}
    assert quick == full


def test_status_without_dagster_is_the_status_the_dagster_way_gives(home, monkeypatch):
    from pipelines.planning import noop
    from sheaf.service import builds

    settings = home.settings()
    quick = builds.status(settings).envelope
    monkeypatch.setattr(noop, "quick_status", lambda s: noop.Proof.no("asked to go the Dagster way"))
    full = builds.status(settings).envelope
    assert (quick["data"]["plan"]["dagster"], full["data"]["plan"]["dagster"]) == (False, True)
    for env in (quick, full):
        env["data"].pop("plan"), env.pop("meta", None)
    assert {k: (v, full["data"].get(k)) for k, v in quick["data"].items() if full["data"].get(k) != v} == {}
    assert quick == full
    assert quick["data"]["fresh"] is True  # the unreadable paper: no build can do more
    assert any("unreadable" in r for r in quick["data"]["verdict_reasons"])


def test_a_program_polling_an_idle_home_loads_no_dagster(home):
    """`build_state` (what `embed status` and other pollers ask) answers idle without Dagster."""
    code = ("import json, sys\nfrom sheaf.core.settings import get_settings\nfrom sheaf.service import builds\n"
            "print(json.dumps([builds.build_state(get_settings()), 'dagster' in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=env_for_subprocess(home), timeout=120)
    state, loaded = json.loads(proc.stdout)
    assert state["status"] == "idle" and state["dead_runs"] == [] and loaded is False, proc.stderr


def test_a_no_op_streams_its_events_as_a_build_does(home):
    proc = subprocess.run([sys.executable, "-m", "sheaf", "build", "--events"], capture_output=True, text=True,
                          cwd=ROOT, env=env_for_subprocess(home), timeout=120)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["event"] for e in events] == ["start", "result"], events
    assert events[0]["total"] == 0 and events[0]["considered"] == len(BASE_PAPERS) + 1
    assert events[1]["result"]["data"]["plan"]["dagster"] is False


# --- every change goes the Dagster way --------------------------------------------------------------

def _edit(home: Home) -> None:
    edit_markdown(next((home.papers / BASE_PAPERS[0]).glob("*.md")), "A paragraph about quokkas.")


def _add(home: Home) -> None:
    home.add_paper("D2LPA7XK")


def _remove(home: Home) -> None:
    import shutil

    shutil.rmtree(home.papers / BASE_PAPERS[1])


def _run_elsewhere(home: Home) -> None:  # the UI, the automation sensor, `dagster asset materialize`
    from pipelines.definitions import build_definitions

    job = build_definitions().resolve_job_def("paper_chain")
    assert job.execute_in_process(instance=instance(), partition_key=BASE_PAPERS[2]).success


def _observed(home: Home) -> None:  # the discovery sensor saw a change
    from dagster import AssetObservation

    instance().report_runless_asset_event(AssetObservation("ocr_result", partition=BASE_PAPERS[0],
                                                           tags={"dagster/data_version": "x" * 64}))


def _wiped(home: Home) -> None:
    from dagster import AssetKey

    instance().wipe_assets([AssetKey("body_units")])


def _unfinished_run(home: Home) -> None:
    from dagster import DagsterRun, DagsterRunStatus

    instance().add_run(DagsterRun(job_name="paper_chain", run_id="0" * 8 + "-0000-0000-0000-" + "0" * 12,
                                  status=DagsterRunStatus.STARTED))


def _index_rows_lost(home: Home) -> None:  # a paper's units deleted outside Sheaf
    from sheaf.store.sqlite.schema import open_index

    conn = open_index(settings=home.settings())
    try:
        with conn:
            conn.execute("DELETE FROM body_units WHERE paper_id = ?", (BASE_PAPERS[3],))
    finally:
        conn.close()


def _artifact_lost(home: Home) -> None:
    next((home.home / "artifacts" / "structure_tree").glob(f"{BASE_PAPERS[0]}*")).unlink()


def _metadata_export(home: Home) -> None:
    f = home.library / "library.json"
    f.write_text(f.read_text(encoding="utf-8").rstrip() + "\n\n", encoding="utf-8")


def _code(home: Home, monkeypatch) -> None:
    from pipelines.planning import versions

    monkeypatch.setitem(versions.CODE_VERSIONS, "structure_tree", "2")


def _yaml(home: Home) -> None:
    cfg = home.dagster_home / "dagster.yaml"
    cfg.write_text(cfg.read_text().replace("# Written by sheaf", "# mine"))


def _work_left(home: Home) -> None:  # a build whose run failed whole recorded papers still to build
    from pipelines.definitions import build_definitions
    from pipelines.planning.recorded_plan import chain_cursor, load_record, write_record
    from pipelines.planning.statuses import chain_of

    inst, chain = instance(), chain_of(build_definitions())
    rec = load_record(inst, chain)
    statuses = {k: st.copy() for k, st in rec.statuses.items()}
    statuses[BASE_PAPERS[0]].state, statuses[BASE_PAPERS[0]].reasons = "stale", ["code changed: structure_tree"]
    write_record(inst, chain, statuses, rec.versions, chain_cursor(inst, chain), [])


CHANGES = {
    "work left": (_work_left, "the recorded plan has papers to build"),
    "edited": (_edit, "a paper's OCR output changed"),
    "added": (_add, "papers were added or removed"),
    "removed": (_remove, "papers were added or removed"),
    "run elsewhere": (_run_elsewhere, "papers were materialized since the recorded plan"),
    "observed": (_observed, "OCR results were observed since"),
    "wiped": (_wiped, "wiped"),
    "unfinished run": (_unfinished_run, "a run is unfinished"),
    "index rows lost": (_index_rows_lost, "index rows or artifacts disagree"),
    "artifact lost": (_artifact_lost, "index rows or artifacts disagree"),
    "metadata export": (_metadata_export, "library metadata export changed"),
    "code version": (_code, "code or the model changed"),
    "user's dagster.yaml": (_yaml, "dagster.yaml is not the one this Sheaf writes"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_any_change_goes_the_dagster_way(home, change, monkeypatch):
    assert _proof(home).unchanged
    make, why = CHANGES[change]
    make(home, monkeypatch) if change == "code version" else make(home)
    proof = _proof(home, write_cache=False)
    assert not proof.unchanged and why in proof.why, proof.why


def test_the_dagster_way_then_builds_what_changed_and_records_again(home):
    """After a change the build reads the papers from their events, rebuilds the changed one
    and records a new plan: the next build is a no-op without Dagster again."""
    _edit(home)
    _index_rows_lost(home)
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["plan"]["dagster"] is True  # the unreadable paper is its state, not a failure
    assert env["data"]["plan"]["no_op_proof"] == "a paper's OCR output changed"
    assert sorted(k for r in env["data"]["runs"] for k in r["papers"]) == sorted([BASE_PAPERS[0], BASE_PAPERS[3]])
    code, env = run_cli(["build", "--json"])
    assert env["data"]["plan"] == {"record": "current", "papers_read": 0, "dagster": False}
    assert [r for r in env["data"]["runs"]] == []


def test_status_goes_the_dagster_way_while_a_build_holds_the_lock(home):
    from pipelines.build_lock import build_lock
    from pipelines.planning.noop import quick_status

    settings = home.settings()
    assert quick_status(settings).unchanged
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pipelines.build_lock import build_lock\n"
                             "with build_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)",
                             str(settings.home)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "held"
        proof = quick_status(settings)
        assert not proof.unchanged and proof.why == "a build is running"
        from sheaf.service import builds

        assert builds.build_state(settings)["status"] == "running"  # the Dagster way: its runs, its pid
    finally:
        proc.kill()
        proc.wait()
    with build_lock(settings.home):  # free again (the kernel dropped the dead holder's lock)
        pass
    assert quick_status(settings).unchanged
    assert set(CHAIN) == set(_proof(home).record.assets)


@pytest.mark.parametrize("change", ["artifact lost", "index rows lost"])
def test_status_says_stale_for_what_the_next_build_would_rebuild(home, change):
    """An artifact or a paper's index rows gone: the proof goes the Dagster way, and `sheaf
    status` then says the paper is stale for index drift, as the build that follows plans it
    (it used to say every paper was fresh)."""
    from sheaf.service import builds

    key = BASE_PAPERS[0] if change == "artifact lost" else BASE_PAPERS[3]
    CHANGES[change][0](home)
    env = builds.status(home.settings()).envelope
    assert env["data"]["plan"]["dagster"] is True
    paper = next(p for p in env["data"]["papers"] if p["paper_id"] == key)
    assert paper["state"] == "stale" and any(r.startswith("index drift: ") for r in paper["reasons"]), paper
    assert env["data"]["fresh"] is False and env["data"]["states"]["stale"] == 1
    code, built = run_cli(["build", "--json"])
    assert sorted(k for r in built["data"]["runs"] for k in r["papers"]) == [key]


def test_a_build_after_a_change_scans_the_library_once(home, monkeypatch):
    """The no-op proof's scan (a stat per OCR file: ~1.4 s at 10,000 papers) is the one the build
    then plans with, when the proof fails; so is `sheaf status`'s."""
    from pipelines.build import sync
    from pipelines.planning import noop
    from sheaf.service import builds

    calls = []

    def counting(real):
        def scan(*a, **kw):
            calls.append(a[0])
            return real(*a, **kw)
        return scan

    for mod in (noop, sync):
        monkeypatch.setattr(mod, "scan_sources", counting(mod.scan_sources))
    _edit(home)
    assert builds.status(home.settings()).envelope["data"]["plan"]["dagster"] is True
    assert len(calls) == 1
    code, env = run_cli(["build", "--json"])
    assert env["data"]["plan"]["no_op_proof"] == "a paper's OCR output changed"
    assert [k for r in env["data"]["runs"] for k in r["papers"]] == [BASE_PAPERS[0]] and len(calls) == 2


def test_the_record_packs_its_papers_and_reads_the_older_form():
    """A record's per-paper part is one packed string (Dagster's serializer walks a JSON value node
    by node: 1.8 MB and ~3 s a build at 10,000 papers); a record of the older, plain form reads."""
    import base64
    import json
    import zlib

    from pipelines.planning.plan import PaperStatus, record_from_json, record_json

    statuses = {f"P{i:04d}": PaperStatus(f"P{i:04d}", "built", [], None, {"passages": i, "model": "m"})
                for i in range(2000)}
    statuses["P0001"] = PaperStatus("P0001", "failed", ["cannot be read"], "malformed JSON", {})
    versions = {k: f"h{k}" for k in statuses}
    raw = record_json(statuses, versions, cursor=7, observed=3, code="c", assets=("a", "b"), artifacts={"a": ".json"})
    assert "papers" not in raw and isinstance(raw["papers_zlib"], str) and len(json.dumps(raw)) < 40_000
    rec = record_from_json(json.loads(json.dumps(raw)))
    assert rec is not None and rec.versions == versions and rec.cursor == 7
    assert {k: (s.state, s.reasons, s.error, s.metadata) for k, s in rec.statuses.items()} == {
        k: (s.state, s.reasons, s.error, s.metadata) for k, s in statuses.items()}
    older = {**{k: v for k, v in raw.items() if k != "papers_zlib"},
             "papers": json.loads(zlib.decompress(base64.b64decode(raw["papers_zlib"])))}
    assert record_from_json(older).statuses == rec.statuses
    assert record_from_json({**raw, "papers_zlib": "not base64!"}) is None


def test_statuses_compare_as_the_record_holds_them_and_stop_at_the_first_difference(monkeypatch):
    """`same_statuses`: the statuses read back from a record equal the ones it was written from
    (a tuple read back as a list); any paper added, removed or changed differs; a removal's
    statuses (one key fewer) are told apart without writing any paper's status out."""
    import pipelines.planning.recorded_plan as record
    from pipelines.planning.plan import PaperStatus, record_from_json, record_json

    statuses = {f"P{i:04d}": PaperStatus(f"P{i:04d}", "built", [], None, {"passages": i, "model": "m"})
                for i in range(500)}
    statuses["P0009"] = PaperStatus("P0009", "stale", ("OCR changed",), None, {"passages": 9}, rebuild_from="a")
    raw = record_json(statuses, {k: "h" for k in statuses}, cursor=1, observed=1, code="c", assets=("a",),
                      artifacts={"a": ".json"})
    back = record_from_json(json.loads(json.dumps(raw))).statuses
    assert record.same_statuses(back, statuses) and record.same_statuses(statuses, back)
    changed = dict(statuses, P0007=PaperStatus("P0007", "stale", ["OCR changed"], None, {"passages": 7}))
    assert not record.same_statuses(back, changed)
    dumped: list[object] = []
    real = json.dumps
    monkeypatch.setattr(record.json, "dumps", lambda *a, **kw: dumped.append(a) or real(*a, **kw))
    assert not record.same_statuses(back, {k: v for k, v in statuses.items() if k != "P0003"})
    assert dumped == []


def test_the_drift_check_counts_the_index_once(home, monkeypatch):
    """A paper's units and FTS rows are counted with its collection's passages and vectors: one
    pass over the index per collection, not a second one for the units alone."""
    from sheaf.store.sqlite.backend import SqliteIndex

    calls = []
    real = SqliteIndex.paper_index_stats

    def counted(self, *a, **k):
        calls.append(a)
        return real(self, *a, **k)

    monkeypatch.setattr(SqliteIndex, "paper_index_stats", counted)
    assert _proof(home, write_cache=False).unchanged
    assert len(calls) == 1 and calls[0][0] is not None  # with the collection
