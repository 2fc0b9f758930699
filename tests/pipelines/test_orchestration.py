"""What makes a build cost what changed (issue: orchestration at the speed of the work), asserted
on a real instance: the event log storage Sheaf configures, one planned event per asset per
run, per-paper metadata in one step, the recorded plan that lets a no-op build read no
paper's events and a one-paper change read and write that paper's only, and a paper's latest
events read as stored (the same as Dagster's read, without its deserializer).
"""
from __future__ import annotations

import math
import os

import pytest

from tests.kits.pipeline import (
    BASE_PAPERS,
    CHAIN,
    Home,
    built_base,
    clone,
    instance,
    new_home,
    run_cli,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return built_base(tmp_path_factory)


@pytest.fixture
def base_env(base, monkeypatch) -> Home:
    return base[0].apply(monkeypatch)


@pytest.fixture
def home(base, tmp_path, monkeypatch) -> Home:
    return clone(base[0], tmp_path / "h").apply(monkeypatch)


def _events_after(inst, cursor: int, event_type):
    from dagster import EventRecordsFilter

    return inst.get_event_records(EventRecordsFilter(event_type=event_type, after_cursor=cursor))


def _newest_id(inst) -> int:
    from dagster import DagsterEventType, EventRecordsFilter

    ids = [r.storage_id for t in (DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_OBSERVATION,
                                  DagsterEventType.ASSET_CHECK_EVALUATION)
           for r in inst.get_event_records(EventRecordsFilter(event_type=t), limit=1, ascending=False)]
    return max(ids, default=0)


def test_home_uses_sheafs_event_log_storage_in_one_file(base):
    h, _ = base
    text = (h.dagster_home / "dagster.yaml").read_text()
    assert "class: SheafEventLogStorage" in text and "class: SheafRunStorage" in text
    assert "base_dir" not in text  # no path: a copied home works
    assert (h.dagster_home / "history" / "event_log.db").is_file()
    assert not (h.dagster_home / "history" / "runs" / "index.db").exists()


def test_a_multi_paper_run_plans_each_asset_once_not_once_per_paper(base, base_env):
    from dagster import DagsterEventType, EventRecordsFilter

    inst = instance()
    planned = inst.get_event_records(EventRecordsFilter(event_type=DagsterEventType.ASSET_MATERIALIZATION_PLANNED))
    chain_planned = [r for r in planned if r.asset_key.path[-1] in CHAIN]
    assert len(chain_planned) == len(CHAIN)  # one run of 4 papers: one planned event per asset
    subset = chain_planned[0].event_log_entry.dagster_event.event_specific_data.partitions_subset
    assert sorted(subset.get_partition_keys()) == sorted(BASE_PAPERS)


def test_no_op_build_launches_no_run_and_reads_no_papers_events(home):
    inst = instance()
    runs_before = len(inst.get_runs())
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["runs"] == [] and env["data"]["states"] == {"built": len(BASE_PAPERS)}
    assert env["data"]["plan"] == {"record": "current", "papers_read": 0, "dagster": False}  # pipelines.planning.noop
    assert len(inst.get_runs()) == runs_before
    # status reads the same record: every paper's state without reading its events
    code, st = run_cli(["status", "--json"])
    assert code == 0 and {p["paper_id"]: p["state"] for p in st["data"]["papers"]} == {k: "built" for k in BASE_PAPERS}


def test_one_paper_edited_reads_and_writes_that_paper_only(home):
    from dagster import DagsterEventType

    key = BASE_PAPERS[0]
    inst = instance()
    cursor = _newest_id(inst)
    md = next((home.papers / key).glob("*.md"), None) or next((home.papers / key).iterdir())
    md.write_text(md.read_text(encoding="utf-8") + "\n\nAn added paragraph about quokkas.\n", encoding="utf-8")
    code, env = run_cli(["build", "--json"])
    assert code == 0, env
    assert env["data"]["plan"] == {"record": "current", "papers_read": 1, "dagster": True,
                                   "no_op_proof": "a paper's OCR output changed"}
    assert [r["papers"] for r in env["data"]["runs"]] == [[key]]
    for t in (DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_OBSERVATION,
              DagsterEventType.ASSET_CHECK_EVALUATION):
        partitions = {r.partition_key for r in _events_after(inst, cursor, t)}
        assert partitions <= {key, None}, (t, partitions)  # None: the library-wide report and status
    code, hits = run_cli(["search", "quokkas", "--json"])
    assert code == 0 and hits["data"]["matches"][0]["zotero_key"] == key


def test_a_full_build_reads_each_papers_status_once_after_its_runs(home, monkeypatch):
    """`--full` rebuilds every paper whatever its status: the statuses are read after the runs
    only (they were also read before, for nothing), and the build reports and records them."""
    import pipelines.build.command as build
    import pipelines.planning.recorded_plan as record

    reads: list[list[str]] = []
    real = build.paper_statuses

    def counted(instance, defs, settings=None, keys=None, observed=None):
        reads.append(sorted(keys))
        return real(instance, defs, settings, keys, observed)

    monkeypatch.setattr(build, "paper_statuses", counted)
    monkeypatch.setattr(record, "paper_statuses", counted)
    code, env = run_cli(["build", "--full", "--json"])
    assert code == 0 and env["data"]["states"] == {"built": len(BASE_PAPERS)}, env
    assert sorted(k for r in env["data"]["runs"] for k in r["papers"]) == sorted(BASE_PAPERS)
    assert env["data"]["plan"] == {"record": "skipped (--full)", "papers_read": 0, "dagster": True}
    assert reads == [sorted(BASE_PAPERS)]
    code, env = run_cli(["build", "--json"])  # what it recorded is current: nothing to do, no paper read
    assert code == 0 and env["data"]["runs"] == [] and env["data"]["plan"]["papers_read"] == 0, env


def _index_rows(home: Home) -> dict[str, list[tuple]]:
    """Every unit and passage row of the index with its rowid (a rewrite gives new rowids)."""
    from sheaf.store.sqlite.schema import collections, open_index

    conn = open_index(settings=home.settings())
    try:
        out = {t: conn.execute(f"SELECT unit_rowid, unit_id FROM {t} ORDER BY 1").fetchall()
               for t in ("body_units", "object_units")}
        for ident in collections(conn).values():
            out[ident.passages_table] = conn.execute(
                f"SELECT passage_rowid, passage_id FROM {ident.passages_table} ORDER BY 1").fetchall()
        return out
    finally:
        conn.close()


def test_a_full_rebuild_of_an_unchanged_library_rewrites_no_index_row(home):
    """Every paper runs again, and each step finds the index already holding exactly its rows:
    none is deleted and written again (the FTS step says so in its metadata), nothing is embedded."""
    from pipelines.planning.events import latest_events

    before = _index_rows(home)
    assert before["body_units"] and any(k.startswith("passages_") and v for k, v in before.items())
    code, env = run_cli(["build", "--full", "--json"])
    assert code == 0 and sorted(k for r in env["data"]["runs"] for k in r["papers"]) == sorted(BASE_PAPERS)
    assert env["data"]["embeddings_computed"] == 0
    assert _index_rows(home) == before
    fts = latest_events(instance(), "fts_tables", partitions=list(BASE_PAPERS))
    assert {k: e.metadata["rows_unchanged"] for k, e in fts.items()} == {k: True for k in BASE_PAPERS}


def test_a_build_stopped_while_it_plans_ends_before_any_run(home, monkeypatch):
    """A stop that comes while the build plans ends it at the next planning step (the plugin's
    Stop must settle within seconds), with no run started."""
    import pipelines.build.command as build

    monkeypatch.setattr(build, "stop_requested", lambda: True)
    code, env = run_cli(["build", "--full", "--json"])
    assert env["data"]["runs"] == [] and env["data"]["interrupted"], env
    assert env["data"]["plan"]["stopped"] == "after the library scan", env["data"]["plan"]


def test_a_build_stopped_after_reading_the_statuses_reports_them(home, monkeypatch):
    import pipelines.build.command as build

    read: list[bool] = []
    real = build.statuses_from
    monkeypatch.setattr(build, "statuses_from", lambda *a, **kw: read.append(True) or real(*a, **kw))
    monkeypatch.setattr(build, "stop_requested", lambda: bool(read))
    md = next((home.papers / BASE_PAPERS[0]).glob("*.md"))  # a change: the build goes the Dagster way
    md.write_text(md.read_text(encoding="utf-8") + "\n\nA paragraph about numbats.\n", encoding="utf-8")
    code, env = run_cli(["build", "--json"])
    assert env["data"]["runs"] == [] and env["data"]["interrupted"], env
    assert env["data"]["plan"]["stopped"] == "after reading the papers' statuses"
    states = {p["paper_id"]: p["state"] for p in env["data"]["papers"]}
    assert sorted(states) == sorted(BASE_PAPERS) and states[BASE_PAPERS[0]] != "built", states


def test_an_edit_unpacks_the_record_once(home, monkeypatch):
    """The no-op proof read and checked the record before it saw the edit: the Dagster way takes
    it from the proof (checked current again, not read and unpacked again)."""
    import pipelines.planning.noop
    import pipelines.planning.recorded_plan

    unpacked = []
    real = pipelines.planning.recorded_plan.record_from_json

    def counted(raw):
        unpacked.append(1)
        return real(raw)

    monkeypatch.setattr(pipelines.planning.noop, "record_from_json", counted)
    monkeypatch.setattr(pipelines.planning.recorded_plan, "record_from_json", counted)
    md = next((home.papers / BASE_PAPERS[0]).glob("*.md"), None) or next((home.papers / BASE_PAPERS[0]).iterdir())
    md.write_text(md.read_text(encoding="utf-8") + "\n\nAn added paragraph about wombats.\n", encoding="utf-8")
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["plan"]["record"] == "current" and env["data"]["plan"]["papers_read"] == 1
    assert len(unpacked) == 1


def test_a_run_the_record_did_not_see_makes_the_next_plan_read_every_paper(home):
    """A run launched elsewhere (the UI, the automation sensor) moves a chain asset's latest
    materialization: the record is stale and the plan reads the events again."""
    from pipelines.definitions import build_definitions

    inst = instance()
    defs = build_definitions()
    job = defs.resolve_job_def("paper_chain")
    assert job.execute_in_process(instance=inst, partition_key=BASE_PAPERS[1]).success
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["runs"] == []
    assert env["data"]["plan"] == {"record": "none or stale", "papers_read": len(BASE_PAPERS), "dagster": True,
                                   "no_op_proof": "papers were materialized since the recorded plan"}
    code, env = run_cli(["build", "--json"])  # and records again
    assert env["data"]["plan"] == {"record": "current", "papers_read": 0, "dagster": False}


def test_a_code_change_is_seen_through_the_record(home):
    """The record holds the chain's code versions: a bump makes it stale, the papers stale."""
    from pipelines.build.command import build
    from pipelines.definitions import build_definitions

    defs = build_definitions(code_versions={"structure_tree": "2"})
    settings = home.settings()
    from pipelines.build.command import get_instance
    from pipelines.planning.recorded_plan import load_record
    from pipelines.planning.statuses import chain_of

    assert load_record(get_instance(settings), chain_of(build_definitions())) is not None
    assert load_record(get_instance(settings), chain_of(defs)) is None
    rep = build(settings, defs)
    assert rep.plan["record"] == "none or stale"
    assert sorted(rep.planned) == sorted(BASE_PAPERS)
    assert all(r["from"] == "structure_tree" for r in rep.runs)


def test_a_home_with_dagsters_per_run_layout_keeps_it_and_its_history(tmp_path, monkeypatch):
    """A home built before Sheaf chose the consolidated file (Dagster's default storage: a
    database per run and an index) is switched to Sheaf's storage of that same layout, and its
    build history is kept: the next build has nothing to do."""
    from pipelines.dagster_internals.home_files import YAML_HEADER

    h = new_home(tmp_path / "old", keys=(BASE_PAPERS[0],)).apply(monkeypatch)
    (h.dagster_home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 1\n")  # Dagster's own
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["states"] == {"built": 1}
    assert (h.dagster_home / "history" / "runs" / "index.db").is_file()
    (h.dagster_home / "dagster.yaml").write_text(f"{YAML_HEADER}: an older one\nconcurrency:\n  pools:\n"
                                                 "    default_limit: 1\n")
    code, env = run_cli(["build", "--json"])
    assert "class: SheafShardedEventLogStorage" in (h.dagster_home / "dagster.yaml").read_text()
    assert code == 0 and env["data"]["runs"] == [] and env["data"]["states"] == {"built": 1}
    assert not (h.dagster_home / "history" / "event_log.db").exists()
    custom = "# my own\ntelemetry:\n  enabled: false\n"
    (h.dagster_home / "dagster.yaml").write_text(custom)
    code, env = run_cli(["status", "--json"])
    assert (h.dagster_home / "dagster.yaml").read_text() == custom  # a user's file is left alone


def _page_size(db) -> int:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return conn.execute("PRAGMA page_size").fetchone()[0]


def test_a_new_events_database_packs_its_events_in_large_pages(base):
    """Dagster's events are 1-3.5 KB each: in SQLite's default 4 KiB pages most take a page
    nearly alone, and a 1,000-paper home held 76 KB of events a paper (58 KB in 16 KiB pages).
    A new home's events database is made with 16 KiB pages, and its event rows fill them."""
    import sqlite3

    from pipelines.dagster_internals.sqlite_storage import EVENTS_PAGE_SIZE

    h, _ = base
    db = h.dagster_home / "history" / "event_log.db"
    assert _page_size(db) == EVENTS_PAGE_SIZE == 16384
    with sqlite3.connect(db) as conn:
        try:
            used, unused = conn.execute("SELECT sum(pgsize), sum(unused) FROM dbstat WHERE name = 'event_logs'").fetchone()
        except sqlite3.OperationalError:  # pragma: no cover - an SQLite built without dbstat
            pytest.skip("this SQLite has no dbstat table")
    assert unused / used < 0.2, (used, unused)  # a 1,000-paper home in 4 KiB pages: 26% unused


def test_an_events_file_left_without_tables_is_initialised(tmp_path, monkeypatch):
    """A process killed while Dagster created the events database leaves the file without its
    tables; the next command initialises it instead of failing on every query (with the large
    pages of a new file: SQLite had not written a page yet)."""
    h = new_home(tmp_path / "torn", keys=(BASE_PAPERS[0],)).apply(monkeypatch)
    (h.dagster_home / "history").mkdir(parents=True)
    (h.dagster_home / "history" / "event_log.db").write_bytes(b"")
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["states"] == {"built": 1}, env
    assert _page_size(h.dagster_home / "history" / "event_log.db") == 16384


def test_an_events_file_left_with_some_of_its_tables_is_completed(tmp_path, monkeypatch):
    """Killed part way through Dagster's table creation (seen in CI: the events table there, the
    asset tables and the alembic stamp not), the file is completed by the next command, which
    then builds; before, every later build failed with INTERNAL_ERROR "NoSuchTableError: asset_keys"."""
    import sqlite3

    h = new_home(tmp_path / "torn", keys=(BASE_PAPERS[0],)).apply(monkeypatch)
    (h.dagster_home / "history").mkdir(parents=True)
    with sqlite3.connect(h.dagster_home / "history" / "event_log.db") as conn:
        conn.execute("CREATE TABLE event_logs (id INTEGER PRIMARY KEY, run_id VARCHAR(255), event TEXT NOT NULL, "
                     "dagster_event_type TEXT, timestamp DATETIME, step_key TEXT, asset_key TEXT, partition TEXT)")
        conn.execute("CREATE TABLE secondary_indexes (id INTEGER PRIMARY KEY, name VARCHAR(512) UNIQUE, "
                     "create_timestamp DATETIME, migration_completed DATETIME)")
    code, env = run_cli(["build", "--json"])
    assert code == 0 and env["data"]["states"] == {"built": 1}, env
    db = h.dagster_home / "history" / "event_log.db"
    assert _page_size(db) == 4096  # an existing file keeps its pages
    names = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master")}
    assert {"asset_keys", "asset_event_tags", "idx_asset_event_tags"} <= names
    with sqlite3.connect(db) as conn:  # killed between a table and its index
        conn.execute("DROP INDEX idx_asset_event_tags")
    inst = instance()  # any process that loads the instance
    inst.dispose()
    assert "idx_asset_event_tags" in {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master")}


def test_a_small_change_leaves_the_report_to_the_automation_sensor(home):
    """The report reads every paper's artifacts, so a build that rebuilt under a tenth of the
    library does not refresh it; the automation sensor does (after any run, UI ones too)."""
    import dagster as dg

    from pipelines.build.command import report_due
    from pipelines.definitions import build_definitions

    inst = instance()
    assert inst.get_latest_materialization_event(dg.AssetKey("library_report")) is not None
    assert report_due(inst, 1, 4) and not report_due(inst, 1, 20) and report_due(inst, 2, 20)
    defs = build_definitions()
    first = dg.evaluate_automation_conditions(defs=defs, instance=inst)  # the sensor's first tick
    report = dg.AssetKey("library_report")
    job = defs.resolve_job_def("paper_chain")
    assert job.execute_in_process(instance=inst, partition_key=BASE_PAPERS[2]).success  # as from the UI
    later = dg.evaluate_automation_conditions(defs=defs, instance=inst, cursor=first.cursor)
    assert later.get_num_requested(report) == 1


def test_artifact_rows_reads_the_count_from_the_footer(tmp_path):
    """The index checks count a paper's units from the Parquet footer, not by loading them."""
    import pyarrow as pa

    from io_managers.parquet import artifact_rows, write_artifact

    write_artifact(tmp_path, "body_units", "K1", pa.table({"unit_id": ["a", "b", "c"]}))
    assert artifact_rows(tmp_path, "body_units", "K1") == 3
    assert artifact_rows(tmp_path, "body_units", "NOPE") is None
    write_artifact(tmp_path, "render_map", "K1", {"headings": []})  # a JSON artifact has no rows
    assert artifact_rows(tmp_path, "render_map", "K1") is None


@pytest.mark.parametrize("batch", ["default", "0"])
def test_a_steps_materializations_of_many_papers_are_stored_as_one_batch(batch, tmp_path, monkeypatch, request):
    """Sheaf's processes turn on Dagster's event batching (`DAGSTER_EVENT_BATCH_SIZE`, unless
    set) and its SQLite storage writes a batch in one transaction with the asset's latest entry
    written once, not once per paper; with batching off, event by event. Either way every paper's
    materialization is recorded and the asset's latest entry is the last one written."""
    from dagster import (
        AssetKey,
        DagsterEventType,
        DagsterInstance,
        Definitions,
        DynamicPartitionsDefinition,
        EventRecordsFilter,
        MaterializeResult,
        asset,
        define_asset_job,
    )

    import pipelines.dagster_internals.sqlite_storage as sqlite_storage
    from pipelines.build.runs import ensure_dagster_home
    from sheaf.core.settings import get_settings

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dh"))  # ensure_dagster_home sets it: restored after
    if batch == "default":  # the tests' session sets it as `sheaf build` does: restored after
        monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE")
    else:
        monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", batch)
    dh = ensure_dagster_home(get_settings(home=tmp_path))
    assert os.environ["DAGSTER_EVENT_BATCH_SIZE"] == ("1000" if batch == "default" else batch)
    papers = DynamicPartitionsDefinition(name="batch_papers")

    @asset(partitions_def=papers)
    def step(context):
        return MaterializeResult(metadata={"papers": len(context.partition_keys)})

    writes: list[int] = []
    real = sqlite_storage.SheafEventLogStorage._store_asset_event

    def counted(self, conn, event, event_id):
        if event.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION:
            writes.append(event_id)
        return real(self, conn, event, event_id)

    monkeypatch.setattr(sqlite_storage.SheafEventLogStorage, "_store_asset_event", counted)
    inst = DagsterInstance.from_config(str(dh))
    request.addfinalizer(inst.dispose)
    inst.add_dynamic_partitions("batch_papers", ["p1", "p2", "p3"])
    job = Definitions(assets=[step], jobs=[define_asset_job("batch_job", [step])]).resolve_job_def("batch_job")
    assert job.execute_in_process(instance=inst, tags={"dagster/asset_partition_range_start": "p1",
                                                       "dagster/asset_partition_range_end": "p3"}).success
    records = inst.get_event_records(EventRecordsFilter(DagsterEventType.ASSET_MATERIALIZATION, AssetKey("step")))
    assert sorted(r.partition_key for r in records) == ["p1", "p2", "p3"]
    assert len(writes) == (1 if batch == "default" else 3)
    latest = inst.get_asset_records([AssetKey("step")])[0].asset_entry.last_materialization_record
    assert latest.storage_id == max(r.storage_id for r in records) == writes[-1]
    assert inst.get_materialized_partitions(AssetKey("step")) == {"p1", "p2", "p3"}


def test_a_syncs_observations_of_many_papers_are_stored_as_one_batch(home, monkeypatch):
    """A build records an `ocr_result` observation for each new or changed paper (10,000 in a
    first build of 10,000 papers); they were stored one by one, a transaction and an update of
    the asset's row each (3.6 of 29.7 s under cProfile in a first build of 300 papers). They now
    reach the storage as one batch: one transaction, the asset's row written once, every paper's
    observation recorded with its data version, and the newest observation the last one written."""
    from dagster import AssetKey, DagsterEventType

    import pipelines.dagster_internals.sqlite_storage as sqlite_storage
    from pipelines.build.sync import apply_sync, plan_sync
    from pipelines.planning.events import latest_observed_versions

    changed = ("D2LPA7XK", "F7RZ4JDB", "QX7HK2MA")  # papers new to the library: an observation each
    for key in changed:
        home.add_paper(key)
    batches: list[list[str]] = []
    alone: list[str] = []
    rows: list[int] = []
    real_one, real_batch = sqlite_storage.SheafEventLogStorage.store_event, sqlite_storage.SheafEventLogStorage.store_event_batch
    real_row = sqlite_storage.SheafEventLogStorage._store_asset_event

    def one(self, event):
        if event.dagster_event_type == DagsterEventType.ASSET_OBSERVATION:
            alone.append(event.dagster_event.partition)
        return real_one(self, event)

    def batch(self, events):
        if events[0].dagster_event_type == DagsterEventType.ASSET_OBSERVATION:
            batches.append([e.dagster_event.partition for e in events])
        return real_batch(self, events)

    def row(self, conn, event, event_id):
        if event.dagster_event_type == DagsterEventType.ASSET_OBSERVATION:
            rows.append(event_id)
        return real_row(self, conn, event, event_id)

    for name, fn in (("store_event", one), ("store_event_batch", batch), ("_store_asset_event", row)):
        monkeypatch.setattr(sqlite_storage.SheafEventLogStorage, name, fn)
    inst = instance()
    cursor = _newest_id(inst)
    plan = plan_sync(inst, home.settings())
    assert sorted(plan.changed) == sorted(plan.added) == sorted(changed)
    apply_sync(inst, home.settings(), plan)
    assert batches == [sorted(changed)] and alone == []
    observed = _events_after(inst, cursor, DagsterEventType.ASSET_OBSERVATION)
    assert sorted(r.partition_key for r in observed) == sorted(changed)
    assert latest_observed_versions(inst) == plan.versions  # the changed papers' new hashes, the others' as they were
    newest = inst.fetch_observations(AssetKey("ocr_result"), limit=1).records[0]  # what the build's record reads
    assert rows == [newest.storage_id] == [max(r.storage_id for r in observed)]


def test_a_run_reads_the_papers_partitions_once(home, monkeypatch):
    """Dagster turns a run's range of papers into keys by reading every paper's partition, again
    at each step, input and output (68 reads of the whole library for one run of the chain: a
    cost per paper that grew with the library, ~22 ms a paper at 10,000 papers); a run now
    resolves its range against one read (`dagster_internals.storage_base.partitions_snapshot`)."""
    from pipelines.build.runs import run_chain
    from tests.kits.dagster_private import SqlEventLogStorage

    reads: list[str] = []
    real = SqlEventLogStorage.get_dynamic_partitions

    def counted(self, name):
        reads.append(name)
        return real(self, name)

    inst = instance()
    defs = _chain_defs(home)
    keys = list(inst.get_dynamic_partitions("papers"))
    monkeypatch.setattr(SqlEventLogStorage, "get_dynamic_partitions", counted)
    res = run_chain(inst, defs, keys)
    assert res["success"] and len(keys) > 1, res
    assert reads.count("papers") == 1, len(reads)
    reads.clear()
    inst.get_dynamic_partitions("papers")
    inst.get_dynamic_partitions("papers")
    assert len(reads) == 2  # outside a run every read goes to the storage, as before


def test_a_checks_evaluations_of_many_papers_are_stored_as_one_batch(home, monkeypatch):
    """Each paper's evaluation of a check was an event stored on its own (two transactions: the
    event, then the check's execution row), 5 a paper; a check's evaluations of a run's papers
    now reach the storage as one batch, stored in one transaction, and read as before."""
    from dagster import DagsterEventType

    import pipelines.dagster_internals.sqlite_storage as sqlite_storage
    from assets.checks import ALL_CHECKS
    from pipelines.dagster_internals.event_reads import check_partition_statuses
    from pipelines.partitions import papers_partitions

    alone: list[str | None] = []  # evaluations stored outside any batch: their partitions
    one_by_one: list[str | None] = []  # evaluations of a batch stored event by event
    batches: list[int] = []
    in_batch = [False]
    real_one, real_batch = sqlite_storage.SheafEventLogStorage.store_event, sqlite_storage.SheafEventLogStorage.store_event_batch

    def one(self, event):
        if event.dagster_event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            (one_by_one if in_batch[0] else alone).append(event.dagster_event.event_specific_data.partition)
        return real_one(self, event)

    def batch(self, events):
        if events[0].dagster_event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            batches.append(len(events))
        in_batch[0] = True
        try:
            return real_batch(self, events)
        finally:
            in_batch[0] = False

    inst, keys, res = _run_with_storage(home, monkeypatch, store_event=one, store_event_batch=batch)
    assert res["success"], res
    n_checks = sum(len(list(c.check_keys)) for c in ALL_CHECKS)
    assert batches == [len(keys)] * n_checks
    assert alone == [None] * n_checks  # only each step's verdict over the run, which has no partition
    assert one_by_one == []  # a batch's events inserted in one statement, its check rows in one UPDATE
    for chk in ALL_CHECKS:
        for ck in chk.check_keys:
            got = check_partition_statuses(inst, ck.asset_key.path[-1], ck.name, papers_partitions)
            assert got == {"SUCCEEDED": sorted(keys)}, (ck, got)


def test_a_runs_planned_check_rows_are_dagsters_rows_written_in_one_statement(home, monkeypatch):
    """A run plans each check for each of its papers: a PLANNED row of the check's executions a
    paper. Dagster serialises the planned event again for each row and compiles a statement of
    all the rows; Sheaf's storage serialises it once and runs one statement for all. The rows are
    the ones Dagster writes, but for the event a row holds: the planned event without the run's
    partitions (the row names its own), so a row's size does not grow with the run's papers
    (with them, the evaluation that overwrites the row later left its pages ~40% empty)."""
    from dagster import DagsterEventType, EventRecordsFilter, deserialize_value
    from dagster_shared import serdes
    from sqlalchemy import select

    import pipelines.dagster_internals.sqlite_storage as sqlite_storage
    from tests.kits.dagster_private import SqlEventLogStorage

    serialised: list[int] = []
    real = serdes.serialize_value

    def counted(value, *a, **kw):
        serialised.append(1)
        return real(value, *a, **kw)

    inst, keys, res = _run_with_storage(home, monkeypatch)
    assert res["success"] and len(keys) > 1, res
    planned = inst.get_event_records(EventRecordsFilter(event_type=DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED),
                                     limit=1, ascending=False)[0]
    storage = inst.event_log_storage
    assert isinstance(storage, sqlite_storage.SheafEventLogStorage)
    T = sqlite_storage.AssetCheckExecutionsTable

    def rows(run_id: str) -> list[dict]:
        with storage.index_connection() as conn:
            got = conn.execute(select(T).where(T.c.run_id == run_id).order_by(T.c.partition)).mappings().all()
        return [{k: v for k, v in r.items() if k != "id"} for r in got]

    entry = planned.event_log_entry
    ours, theirs = (entry._replace(run_id=r) for r in ("run-sheaf", "run-dagster"))
    SqlEventLogStorage._store_asset_check_evaluation_planned(storage, theirs, planned.storage_id)
    monkeypatch.setattr(serdes, "serialize_value", counted)
    storage._store_asset_check_evaluation_planned(ours, planned.storage_id)
    assert len(serialised) == 1
    monkeypatch.setattr(serdes, "serialize_value", real)
    got, want = rows("run-sheaf"), rows("run-dagster")
    assert len(got) == len(keys) and [r["partition"] for r in got] == sorted(keys)
    plain = lambda r: {k: v.replace("run-dagster", "run-sheaf") if isinstance(v, str) else v  # noqa: E731
                       for k, v in r.items() if k != "evaluation_event"}
    assert [plain(r) for r in got] == [plain(r) for r in want]
    for g, w in zip(got, want):
        mine, dagsters = deserialize_value(g["evaluation_event"]), deserialize_value(w["evaluation_event"])
        assert sorted(dagsters.dagster_event.event_specific_data.partitions_subset.get_partition_keys()) == sorted(keys)
        assert mine.dagster_event.event_specific_data.partitions_subset is None
        assert mine.dagster_event_type == DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED
        assert (mine.run_id, mine.step_key, mine.timestamp) == ("run-sheaf", dagsters.step_key, dagsters.timestamp)
        assert mine.dagster_event.event_specific_data.asset_check_key == \
            dagsters.dagster_event.event_specific_data.asset_check_key
    # Dagster reads them back as the run's planned executions of the check, paper by paper
    from tests.kits.dagster_private import AssetCheckExecutionRecordStatus
    check_key = entry.dagster_event.event_specific_data.asset_check_key
    records = [r for r in storage.get_asset_check_execution_history(
        check_key, limit=10_000, status={AssetCheckExecutionRecordStatus.PLANNED}) if r.run_id == "run-sheaf"]
    assert sorted(r.partition for r in records) == sorted(keys)
    assert {r.event.step_key for r in records} == {entry.step_key}
    # a row's size does not grow with the run's papers (Dagster's does)
    from tests.kits.dagster_private import DefaultPartitionsSubset
    many = [f"P{i:07d}" for i in range(300)]
    big = entry.dagster_event.event_specific_data
    bigger = entry._replace(run_id="run-large", dagster_event=entry.dagster_event._replace(
        event_specific_data=type(big)(asset_key=big.asset_key, check_name=big.check_name,
                                      partitions_subset=DefaultPartitionsSubset(set(many)))))
    storage._store_asset_check_evaluation_planned(bigger, planned.storage_id)
    large = rows("run-large")
    assert len(large) == 300
    assert not any(k in r["evaluation_event"] for r in large for k in many if k != r["partition"])
    assert {len(r["evaluation_event"]) for r in large} == {len(got[0]["evaluation_event"])}  # run ids of one length


@pytest.mark.parametrize("failure", ["disk", "unplanned"])
def test_a_batch_that_fails_part_way_writes_nothing_and_is_stored_event_by_event(home, monkeypatch, failure):
    """A batch of a check's evaluations is one transaction: when it fails after its events were
    inserted (the disk went away; or a paper's planned check row is missing, which Dagster's own
    writer inserts), none of it stays, and Dagster stores its events one by one (no evaluation
    lost, none twice)."""
    from dagster import AssetCheckKey, AssetKey, DagsterEventType, deserialize_value
    from sqlalchemy import text

    import pipelines.dagster_internals.sqlite_storage as sqlite_storage
    from assets.checks import ALL_CHECKS

    real_insert, real_batch = sqlite_storage.SheafEventLogStorage._sheaf_insert_rows, sqlite_storage.SheafEventLogStorage.store_event_batch
    state = {"failed": 0, "one_by_one": 0}
    failed: list[AssetCheckKey] = []

    def insert(self, conn, rows):
        ids = real_insert(self, conn, rows)
        if failure == "disk" and not state["failed"] and rows[0]["dagster_event_type"] == "ASSET_CHECK_EVALUATION":
            state["failed"] += 1
            ev = deserialize_value(rows[0]["event"]).dagster_event.event_specific_data
            failed.append(AssetCheckKey(ev.asset_key, ev.check_name))
            raise OSError("injected: the disk went away mid-batch")
        return ids

    def batch(self, events):
        ev = events[0].dagster_event
        if failure == "unplanned" and not state["failed"] and ev.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            state["failed"] += 1
            failed.append(AssetCheckKey(ev.event_specific_data.asset_key, ev.event_specific_data.check_name))
            with self._connect() as conn:  # one paper's planned row gone
                conn.execute(text("DELETE FROM asset_check_executions WHERE run_id = :r AND check_name = :c "
                                  "AND partition = :p"), {"r": events[0].run_id, "c": ev.event_specific_data.check_name,
                                                          "p": ev.event_specific_data.partition})
        try:
            return real_batch(self, events)
        except Exception:
            state["one_by_one"] += 1
            raise

    inst, keys, res = _run_with_storage(home, monkeypatch, _sheaf_insert_rows=insert, store_event_batch=batch)
    assert res["success"] and state == {"failed": 1, "one_by_one": 1}, (res, state)
    for key in [*failed, AssetCheckKey(AssetKey("body_units"), "units_cover_body_blocks")]:
        hist = inst.event_log_storage.get_asset_check_execution_history(key, limit=100)
        mine = [r for r in hist if r.run_id == res["run_id"] and r.partition is not None]
        assert sorted(r.partition for r in mine) == sorted(keys), key  # each paper once
        assert {r.status.value for r in mine} == {"SUCCEEDED"}
    stored = inst.get_records_for_run(res["run_id"], of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records
    n_checks = sum(len(list(c.check_keys)) for c in ALL_CHECKS)
    assert len(stored) == n_checks * (len(keys) + 1)  # each paper's evaluations and each step's verdict, once


def test_a_run_from_the_middle_of_the_chain_evaluates_only_the_checks_of_its_assets(home):
    """The five checks are one step that runs any subset: a run from `fts_tables` down evaluates
    the index and up-to-date checks for each paper, and not the units' checks (their asset was
    not rebuilt), each result targeting the paper's new materialization."""
    from dagster import DagsterEventType

    from pipelines.build.runs import run_chain
    from pipelines.planning.events import latest_events

    inst = instance()
    defs = _chain_defs(home)
    keys = list(inst.get_dynamic_partitions("papers"))
    res = run_chain(inst, defs, keys, "fts_tables")
    assert res["success"], res
    evals = [r.event_log_entry.dagster_event.event_specific_data for r in
             inst.get_records_for_run(res["run_id"], of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records]
    per_paper = {(e.asset_key.path[-1], e.check_name) for e in evals if e.partition is not None}
    assert per_paper == {("fts_tables", "fts_rows_match_units"), ("vector_collections", "vectors_match_passages"),
                         ("vector_collections", "paper_up_to_date")}
    assert all(e.passed for e in evals)
    assert len([e for e in evals if e.partition is not None]) == 3 * len(keys)
    fts_latest = {k: e.storage_id for k, e in latest_events(inst, "fts_tables", partitions=keys).items()}
    assert {e.partition: e.target_materialization_data.storage_id for e in evals
            if e.check_name == "fts_rows_match_units" and e.partition} == fts_latest


def test_each_event_of_a_batch_keeps_its_own_id_and_tags(home):
    """A step's materializations are inserted with one multi-row statement; each paper's event
    keeps its own storage id, and its indexed tag rows point at it, not at another paper's event
    of the batch (each row carries its event's own timestamp: they agree for every event)."""
    import sqlite3

    from pipelines.build.runs import run_chain
    from pipelines.planning.events import latest_events

    inst = instance()
    defs = _chain_defs(home)
    keys = list(inst.get_dynamic_partitions("papers"))
    res = run_chain(inst, defs, keys)
    assert res["success"]
    for asset in CHAIN:
        latest = latest_events(inst, asset, partitions=keys)
        assert sorted(latest) == sorted(keys) and {e.run_id for e in latest.values()} == {res["run_id"]}
    with sqlite3.connect(home.dagster_home / "history" / "event_log.db") as conn:
        tagged, wrong = conn.execute(
            "SELECT count(*), sum(t.event_timestamp != e.timestamp OR t.asset_key != e.asset_key) "
            "FROM asset_event_tags t JOIN event_logs e ON e.id = t.event_id WHERE e.run_id = ?",
            (res["run_id"],)).fetchone()
    assert tagged == len(CHAIN) * len(keys) and wrong == 0


def _chain_defs(home: Home):
    """The home's Definitions with the tests' shared embedder (what `sheaf build` runs)."""
    from pipelines.build.runs import with_embedder
    from tests.kits.pipeline import definitions, shared_embedder

    return with_embedder(definitions(home=str(home.home), library=str(home.library)), shared_embedder(home))


def _run_with_storage(home: Home, monkeypatch, **methods):
    """One run of the whole chain over every paper, with `methods` of Sheaf's event log storage
    replaced: (instance, papers, run result)."""
    import pipelines.dagster_internals.sqlite_storage as sqlite_storage
    from pipelines.build.runs import run_chain

    inst = instance()
    defs = _chain_defs(home)
    keys = list(inst.get_dynamic_partitions("papers"))
    for name, fn in methods.items():
        monkeypatch.setattr(sqlite_storage.SheafEventLogStorage, name, fn)
    return inst, keys, run_chain(inst, defs, keys)


def test_the_check_step_reads_each_assets_latest_events_once(home, monkeypatch):
    """The up-to-date check reads each chain asset's latest materializations of the run's papers
    (a paper's status); the evaluations' targets are the same events, no longer read again."""
    from collections import Counter

    import pipelines.planning.events as state
    import pipelines.planning.statuses as planner
    from pipelines.build.runs import run_chain

    reads: Counter[tuple[str, str]] = Counter()
    real = state.latest_events

    def counted(instance, asset, kind="materialization", partitions=None):
        reads[(asset, kind)] += 1
        return real(instance, asset, kind, partitions)

    import assets.checks as checks
    monkeypatch.setattr(checks, "latest_events", counted)
    monkeypatch.setattr(planner, "latest_events", counted)
    inst = instance()
    keys = list(inst.get_dynamic_partitions("papers"))
    res = run_chain(inst, _chain_defs(home), keys)
    assert res["success"] and len(keys) > 1, res
    assert reads and max(reads.values()) == 1, reads
    assert ("vector_collections", "materialization") in reads and ("ocr_result", "observation") in reads


# --- the latest events read as stored: the same as Dagster's read, without its deserializer ---------

def dagsters_read(inst, asset: str, kind: str, partitions: list[str]) -> dict:
    """The latest events per partition through Dagster's public records API (what
    `latest_events` read before it read the stored JSON), in `EventInfo`s."""
    from dagster import AssetKey, AssetRecordsFilter, DagsterEventType

    from pipelines.dagster_internals.event_reads import latest_storage_ids
    from pipelines.planning.events import EventInfo

    key = AssetKey(asset)
    et = DagsterEventType.ASSET_MATERIALIZATION if kind == "materialization" else DagsterEventType.ASSET_OBSERVATION
    ids = sorted(latest_storage_ids(inst, key, et, partitions).values())
    fetch = inst.fetch_materializations if kind == "materialization" else inst.fetch_observations
    out = {}
    for r in fetch(AssetRecordsFilter(asset_key=key, storage_ids=ids), limit=len(ids) + 1).records:
        ev = r.asset_materialization if kind == "materialization" else r.asset_observation
        out[r.partition_key] = EventInfo(r.partition_key, r.storage_id, r.timestamp, r.run_id,
                                         {k: getattr(v, "value", v) for k, v in (ev.metadata or {}).items()},
                                         dict(ev.tags or {}))
    return out


def test_the_chains_latest_events_read_as_stored_equal_dagsters_read(home):
    from pipelines.planning.events import latest_events

    inst = instance()
    keys = list(inst.get_dynamic_partitions("papers"))
    for asset, kind in [*((a, "materialization") for a in CHAIN), ("ocr_result", "observation")]:
        got = latest_events(inst, asset, kind, partitions=keys)
        assert got == dagsters_read(inst, asset, kind, keys), asset
        assert set(got) == set(keys), asset
    assert latest_events(inst, CHAIN[0], partitions=keys[:1]).keys() == {keys[0]}


def test_the_chains_events_are_read_without_dagsters_deserializer(home, monkeypatch):
    """What makes the read cheap: Sheaf's own events are plain JSON to it. Dagster's deserializer
    built every object of each event (~2 ms a paper for a status read)."""
    import pipelines.planning.events as state
    from tests.kits.dagster_private import sql_event_log

    def refuse(*a, **kw):
        raise AssertionError("an event went through Dagster's deserializer")

    inst = instance()
    keys = list(inst.get_dynamic_partitions("papers"))
    monkeypatch.setattr(sql_event_log, "deserialize_value", refuse)
    monkeypatch.setattr(state, "deserialize_value", refuse, raising=False)
    got = state.latest_events(inst, "vector_collections", partitions=keys)
    assert set(got) == set(keys) and all(e.metadata.get("passages") for e in got.values())
    assert all(e.code_version and e.data_version for e in got.values())


def test_every_kind_of_metadata_value_reads_as_dagster_reads_it(home):
    """Values the plain reader knows (text, empty text, int, float, NaN, bool, JSON, Markdown, URL,
    path) and values it does not (a table, a null, a timestamp, an asset key): every event reads
    as Dagster reads it, the unknown ones through its deserializer."""
    from dagster import (
        AssetKey,
        DynamicPartitionsDefinition,
        MetadataValue,
        TableColumn,
        TableRecord,
        TableSchema,
        asset,
        materialize,
    )

    from pipelines.dagster_internals.event_reads import plain_asset_event, stored_events
    from pipelines.planning.events import latest_events

    inst = instance()
    keys = list(inst.get_dynamic_partitions("papers"))[:2]
    plain = {"text": "a title", "empty": MetadataValue.text(""), "int": 7, "float": 1.5, "nan": float("nan"),
             "bool": True, "json": {"list": [1, 2.5, None, {"x": "y"}], "n": 3}, "json_list": ["a"],
             "md": MetadataValue.md("# head"), "url": MetadataValue.url("https://example.org"),
             "path": MetadataValue.path("/tmp/x.parquet")}
    other = {**plain, "table": MetadataValue.table(records=[TableRecord({"a": 1})],
                                                   schema=TableSchema(columns=[TableColumn("a", "int")])),
             "null": MetadataValue.null(), "ts": MetadataValue.timestamp(1700000000.0),
             "asset": MetadataValue.asset(AssetKey("elsewhere"))}

    @asset(name="probe", partitions_def=DynamicPartitionsDefinition(name="papers"))
    def probe(context):
        context.add_output_metadata(plain if context.partition_key == keys[0] else other)
        return 1

    for key in keys:
        assert materialize([probe], instance=inst, partition_key=key).success
    got = latest_events(inst, "probe", partitions=keys)
    want = dagsters_read(inst, "probe", "materialization", keys)
    assert set(got) == set(keys)
    for key in keys:
        g, w = got[key], want[key]
        assert math.isnan(g.metadata.pop("nan")) and math.isnan(w.metadata.pop("nan"))
        assert g == w, key
    assert got[keys[0]].metadata["json"] == plain["json"] and got[keys[0]].metadata["empty"] == ""
    stored = dict(stored_events(inst, [got[k].storage_id for k in keys]))
    plain_one, other_one = (stored[got[k].storage_id] for k in keys)
    assert plain_asset_event(plain_one, "ASSET_MATERIALIZATION") is not None, \
        "an event of plain values went through Dagster's deserializer"
    assert plain_asset_event(other_one, "ASSET_MATERIALIZATION") is None, \
        "values the plain reader does not know were read as plain"
    assert plain_asset_event(plain_one, "ASSET_OBSERVATION") is None  # not the kind asked for
    assert plain_asset_event("not json", "ASSET_MATERIALIZATION") is None


TABLE_ARTIFACTS = ("ocr_blocks", "body_units", "object_units")


def _counting_reads(monkeypatch) -> list[str]:
    """The assets whose stored artifacts are read from now on (one entry a read)."""
    from sheaf.store.artifact_store import LocalArtifactStore

    reads: list[str] = []
    real = LocalArtifactStore.read

    def counted(self, asset, key):
        reads.append(asset)
        return real(self, asset, key)

    monkeypatch.setattr(LocalArtifactStore, "read", counted)
    return reads


def test_a_run_reads_the_tables_it_wrote_from_memory_not_their_files(home, monkeypatch):
    """A paper's `ocr_blocks` was read back from its Parquet file four times a run (three later
    steps and the checks) and its units twice each, ~0.5 ms a read: the tables a run wrote now
    come to its later steps and its checks from the run's IO manager; JSON artifacts and tables
    the run did not write are read from their files, and every check passes as before."""
    from dagster import DagsterEventType

    from pipelines.build.runs import run_chain

    inst = instance()
    defs = _chain_defs(home)
    keys = list(inst.get_dynamic_partitions("papers"))
    reads = _counting_reads(monkeypatch)
    res = run_chain(inst, defs, keys)
    assert res["success"] and len(keys) > 1, res
    assert not [a for a in reads if a in TABLE_ARTIFACTS], reads
    assert reads.count("render_map") >= len(keys)  # JSON: always from the file
    evals = [r.event_log_entry.dagster_event.event_specific_data for r in
             inst.get_records_for_run(res["run_id"], of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records]
    assert len([e for e in evals if e.partition]) == 5 * len(keys) and all(e.passed for e in evals)

    reads.clear()  # a run from the middle of the chain did not write the units: it reads their files
    res = run_chain(inst, defs, keys, "fts_tables")
    assert res["success"], res
    assert {a for a in reads if a in TABLE_ARTIFACTS} == set(TABLE_ARTIFACTS)
