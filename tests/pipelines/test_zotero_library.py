"""A Zotero data directory used as a user uses it: `sheaf build --library DIR`, `status`, `search`,
`retrieve`, `doctor` on a copy of a real one from ../shared, then Zotero's own changes (a PDF
attached later, a title edited, an item trashed), each rebuilding only its paper; the data
directory's bytes and mtimes unchanged by every command."""
from __future__ import annotations

import pytest

from tests.kits.pipeline import run_cli
from tests.kits.zotero import ZOTERO_DIRS, ZoteroDb, copy_zotero_dir, tree_state

pytestmark = [pytest.mark.slow, pytest.mark.realdata]


@pytest.fixture
def zotero_home(shared_data, tmp_path, monkeypatch):
    lib = copy_zotero_dir(shared_data, ZOTERO_DIRS[1], tmp_path / "Zotero")
    for k in ("SHEAF_INDEX_FILE", "SHEAF_EMBEDDING_MODEL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SHEAF_LIBRARY", str(lib))  # the query commands read the home it was built into
    monkeypatch.setenv("SHEAF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster_home"))
    return lib


def _cli(*argv: str) -> dict:
    code, env = run_cli([*argv, "--json"])
    assert code == 0, env
    return env


def test_a_zotero_directory_built_searched_and_kept_current(zotero_home, shared_data):
    lib = str(zotero_home)
    before = tree_state(zotero_home)
    st = _cli("status", "--library", lib)
    assert st["data"]["layout"] == "zotero" and st["data"]["states"] == {"missing": 15}
    assert st["data"]["metadata_only"] == [{"paper": "QYKJ596D", "reason": "no attachment: metadata only"}]

    env = _cli("build", "--library", lib)
    assert env["data"]["states"] == {"built": 15}
    # a known item found from its own text, and from Zotero's extracted text where its PDF is missing
    hits = _cli("retrieve", "map and reduce primitives present in Lisp", "--mode", "lexical")
    kinds = {(m["zotero_key"], m["source"]) for m in hits["data"]["matches"]}
    assert ("YDQMNNXT", "annotation") in kinds and ("YDQMNNXT", "body") in kinds
    found = _cli("search", "Chubby lock service loosely-coupled distributed systems")
    assert found["data"]["matches"][0]["zotero_key"] == "EMKZAIYM"
    meta = _cli("search", "Dean Ghemawat MapReduce")["data"]["matches"][0]
    assert meta["zotero_key"] == "YDQMNNXT" and meta["title"] == "MapReduce: simplified data processing on large clusters"
    assert meta["link"] == "zotero://select/library/items/YDQMNNXT"
    tagged = _cli("retrieve", "consensus protocol", "--tag", "CONSENSUS", "--mode", "lexical")
    assert {m["zotero_key"] for m in tagged["data"]["matches"]} == {"7B2NZTTN"}
    assert tagged["data"]["filters"]["tag"] == ["CONSENSUS"]
    assert {m["zotero_key"] for m in _cli("search", "blockchain", "--tag", "fuzzing")["data"]["matches"]} == {"IBPA9MB3"}
    assert _cli("doctor", "--library", lib)["data"]["issues"] == []
    assert _cli("build", "--library", lib)["data"]["embeddings_computed"] == 0
    assert tree_state(zotero_home) == before  # nothing of Zotero's was written

    pdf = next((shared_data / "zotero_dirs" / ZOTERO_DIRS[1] / "storage").rglob("Fischer*.pdf"))
    with ZoteroDb(zotero_home) as z:
        z.add_pdf(z.item_id("QYKJ596D"), "LATERPDF", pdf)  # a PDF attached after indexing
        z.set_field(z.item_id("ACZDSL6G"), "title", "Bigtable, renamed in Zotero")
        z.trash(z.item_id("YETXCY5K"))
    env = _cli("build", "--library", lib)
    assert env["data"]["sync"]["added"] == ["QYKJ596D"] and env["data"]["sync"]["removed"] == ["YETXCY5K"]
    assert env["data"]["sync"]["changed"] == ["QYKJ596D"]
    assert env["data"]["states"] == {"built": 15}
    assert set(env["data"]["planned"]) == {"QYKJ596D"}  # the title edit and the trash rebuilt nothing
    new = next(p for p in env["data"]["papers"] if p["paper_id"] == "QYKJ596D")
    assert new["passages"] > 0  # (its PDF is another item's too: its passages come from the embedding cache)
    impossible = _cli("retrieve", "impossibility of distributed consensus with one faulty process",
                      "--mode", "lexical")
    assert "QYKJ596D" in {m["zotero_key"] for m in impossible["data"]["matches"]}
    renamed = _cli("search", "Bigtable renamed in Zotero")["data"]["matches"][0]
    assert renamed["title"] == "Bigtable, renamed in Zotero"
    gone = _cli("search", "Google File System")["data"]["matches"]
    assert "YETXCY5K" not in {m["zotero_key"] for m in gone}


def test_the_discovery_sensor_watches_the_zotero_database(shared_data, tmp_path, monkeypatch):
    """Under `dagster dev`: the discovery tick adds a Zotero library's papers as partitions, skips
    when the database did not move, and sees a PDF attached in Zotero on its next tick."""
    from dagster import SensorResult, SkipReason

    from tests.kits.pipeline import Home
    from tests.kits.sensors import apply_sensor_result, sense

    h = Home(tmp_path / "z")
    copy_zotero_dir(shared_data, ZOTERO_DIRS[1], h.library)
    h.dagster_home.mkdir(parents=True)
    h.apply(monkeypatch)
    from tests.kits.pipeline import instance

    inst = instance()
    first = sense(h, inst)
    assert isinstance(first, SensorResult)
    added = {k for r in first.dynamic_partitions_requests for k in r.partition_keys}
    assert len(added) == 15 and "Y82DIS32" in added and "QYKJ596D" not in added
    apply_sensor_result(inst, first)
    assert isinstance(sense(h, inst), SkipReason)
    pdf = next((shared_data / "zotero_dirs" / ZOTERO_DIRS[1] / "storage").rglob("Fischer*.pdf"))
    with ZoteroDb(h.library) as z:
        z.add_pdf(z.item_id("QYKJ596D"), "LATERPDF", pdf)
    later = sense(h, inst)
    assert [k for r in later.dynamic_partitions_requests for k in r.partition_keys] == ["QYKJ596D"]
