"""The per-paper IO manager round-trips through Dagster's `materialize` on a temp instance, on a
local folder and on fsspec's `memory://` filesystem; the definitions keep today's local root."""
from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from dagster import AssetIn, DagsterInstance, StaticPartitionsDefinition, asset, materialize

from io_managers.parquet import PaperArtifactIOManager
from sheaf.store.artifact_store import artifact_store

PARTS = StaticPartitionsDefinition(["K1", "K2"])
FAIL: set[str] = set()  # papers the `units` step "fails" (leaves out of its output)


@asset(partitions_def=PARTS, io_manager_key="artifacts")
def blocks(context) -> dict:
    return {k: pa.table({"paper_id": [k] * 3, "n": [1, 2, 3]}) for k in context.partition_keys}


@asset(partitions_def=PARTS, io_manager_key="artifacts", ins={"blocks": AssetIn()})
def units(context, blocks: dict) -> dict:
    return {k: {"rows": t.num_rows, "paper": t.column("paper_id")[0].as_py()}
            for k, t in blocks.items() if k not in FAIL}


@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path) -> str:
    return str(tmp_path / "artifacts") if request.param == "local" else f"memory://io-{uuid.uuid4().hex[:8]}/a"


def test_round_trip_through_materialize_and_a_failed_paper_leaves_no_stale_artifact(root):
    resources = {"artifacts": PaperArtifactIOManager(root=root)}
    with DagsterInstance.ephemeral() as instance:
        for key in ("K1", "K2"):
            assert materialize([blocks, units], partition_key=key, resources=resources, instance=instance).success
        store = artifact_store(root)
        assert store.names("blocks") == {"K1.parquet", "K2.parquet"}
        assert store.read("units", "K2") == {"paper": "K2", "rows": 3}
        FAIL.add("K2")
        try:  # K2 fails its `units` step: its old artifact must go
            assert materialize([blocks, units], partition_key="K2", resources=resources, instance=instance).success
        finally:
            FAIL.clear()
        assert store.names("units") == {"K1.json"} and store.rows("blocks", "K2") == 3


def test_the_definitions_keep_the_local_root_and_take_a_url(tmp_path, monkeypatch):
    from pipelines.definitions import build_definitions

    monkeypatch.delenv("SHEAF_ARTIFACTS_URL", raising=False)
    io = build_definitions(home=str(tmp_path / "h")).resources["artifacts"]
    assert io.root == str((tmp_path / "h" / "artifacts").resolve())
    monkeypatch.setenv("SHEAF_ARTIFACTS_URL", "memory://lab/artifacts")
    assert build_definitions(home=str(tmp_path / "h")).resources["artifacts"].root == "memory://lab/artifacts"



SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample-library"
SEEN: dict[str, pa.Table] = {}  # the tables `sheaf_blocks` returned, by paper
LOADED: dict[str, pa.Table] = {}


def _sheaf_tables(key: str) -> dict[str, pa.Table]:
    """A bundled sample paper's blocks, body units and object units as Sheaf's assets make them."""
    from sheaf.library.discover import discover
    from sheaf.store.artifacts import body_units_to_table, object_units_to_table, paper_to_table
    from sheaf.transform import chain

    paper = sorted(discover(SAMPLE).papers, key=lambda p: p.key)[0]
    out = chain.process_paper(paper.path, key)
    return {"blocks": paper_to_table(out.paper), "body": body_units_to_table(out.body_units),
            "objects": object_units_to_table(out.object_units)}


@asset(partitions_def=PARTS, io_manager_key="artifacts")
def sheaf_blocks(context) -> dict:
    SEEN.update({k: _sheaf_tables(k)["blocks"] for k in context.partition_keys})
    return {k: SEEN[k] for k in context.partition_keys}


@asset(partitions_def=PARTS, io_manager_key="artifacts", ins={"sheaf_blocks": AssetIn()})
def counts(context, sheaf_blocks: dict) -> dict:
    LOADED.update(sheaf_blocks)
    return {k: {"rows": t.num_rows} for k, t in sheaf_blocks.items()}


def test_sheafs_tables_equal_what_their_files_give_back(tmp_path):
    """Every table an asset writes (lists, nulls, the paper's schema metadata) reads back from its
    file as an equal table, types included: what lets a run's later steps take the table it wrote
    from memory instead of its file."""
    store = artifact_store(tmp_path)
    for name, table in _sheaf_tables("K1").items():
        assert table.num_rows and any(pa.types.is_list(f.type) for f in table.schema)
        store.write(name, "K1", table)
        assert store.read(name, "K1").equals(table, check_metadata=True), name


def test_a_run_loads_the_tables_it_wrote_from_memory_and_the_next_run_from_their_files(root):
    """Within a run, a later step gets the very table an earlier step wrote (no read of its
    file); the next run has a new IO manager and reads the file, an equal table."""
    resources = {"artifacts": PaperArtifactIOManager(root=root)}
    with DagsterInstance.ephemeral() as instance:
        assert materialize([sheaf_blocks, counts], partition_key="K1", resources=resources, instance=instance).success
        assert LOADED["K1"] is SEEN["K1"]
        LOADED.clear()
        assert materialize([sheaf_blocks.to_source_asset(), counts], partition_key="K1", resources=resources,
                           instance=instance, selection=[counts]).success
        assert LOADED["K1"] is not SEEN["K1"] and LOADED["K1"].equals(SEEN["K1"], check_metadata=True)
