"""The per-paper IO manager round-trips through Dagster's `materialize` on a temp instance, on a
local folder and on fsspec's `memory://` filesystem; the definitions keep today's local root."""
from __future__ import annotations

import uuid

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
