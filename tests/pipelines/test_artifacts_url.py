"""A home whose artifacts live on a non-local store (fsspec's `memory://`, within one process):
`sheaf doctor` cross-checks them, the build's drift check sees one that is missing, the report
reads them, and `doctor --repair` rebuilds and removes through the same store. The local folder
holds none of them."""
from __future__ import annotations

import json
import uuid

import pytest

from tests.kits.pipeline import built_base, clone, run_cli

pytestmark = pytest.mark.slow


def test_doctor_drift_report_and_repair_on_a_memory_store(tmp_path_factory, tmp_path, monkeypatch):
    import fsspec

    from sheaf.store.artifact_store import artifact_store

    base, _ = built_base(tmp_path_factory)
    h = clone(base, tmp_path / "h")
    url = f"memory://sheaf-{uuid.uuid4().hex[:8]}/artifacts"
    mem = fsspec.filesystem("memory")
    local = h.home / "artifacts"
    for f in sorted(local.glob("*/*")):  # the built artifacts moved to the store
        mem.pipe_file(f"{url}/{f.parent.name}/{f.name}", f.read_bytes())
        f.unlink()
    h.apply(monkeypatch)
    monkeypatch.setenv("SHEAF_ARTIFACTS_URL", url)
    store = artifact_store(url)

    code, env = run_cli(["doctor", "--json"])
    assert code == 0 and env["ok"] and not env["data"]["issues"], env
    code, env = run_cli(["report", "--json"])
    assert code == 0 and env["data"]["papers"] == 4, env

    assert store.remove("structure_tree", "M3FJ9PLC.json")
    mem.pipe_file(f"{url}/ocr_blocks/ZOMBIE9.parquet", mem.cat_file(f"{url}/ocr_blocks/W6TB4YRS.parquet"))
    code, env = run_cli(["doctor", "--json"])
    kinds = {(i["kind"], i["paper"]) for i in env["data"]["issues"]}
    assert code == 1 and {("missing_artifact", "M3FJ9PLC"), ("orphan_artifact", "ZOMBIE9")} <= kinds, kinds

    code, env = run_cli(["build", "--json"])  # the drift check sees the missing artifact: that paper is rebuilt
    assert code == 0 and "artifact structure_tree missing" in json.dumps(env), env
    assert "M3FJ9PLC.json" in store.names("structure_tree")
    code, env = run_cli(["doctor", "--repair", "--json"])
    assert code == 0 and env["ok"], env
    assert "ZOMBIE9.parquet" not in store.names("ocr_blocks")
    assert not any(p.is_file() for p in local.glob("*/*"))  # nothing written to the local folder
    mem.rm(url.removeprefix("memory://"), recursive=True)  # the process's memory filesystem is shared
