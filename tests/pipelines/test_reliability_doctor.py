"""`sheaf doctor`: every kind of drift planted for real, reported with its cause, repaired by
`--repair` rebuilding only the affected papers and removing the orphans.

Planted on a clean build of library A (four papers):
- M3FJ9PLC: its structure_tree artifact deleted, and one of its vectors overwritten on disk;
- P9KE3UHB: its render_map artifact edited outside Sheaf (hash mismatch);
- L2YSNC8V: its FTS rows deleted, and one of its passages + vector deleted;
- W6TB4YRS: untouched — it must not be rebuilt;
- D2LPA7XK: added to the library folder (not a partition yet);
- GHOST1: units in the index of a paper that is not a partition; OLD1: a partition (with an
  artifact) whose paper is not in the library; a temp file of an interrupted write; a vector
  row without a passage; an artifact of no paper (ZOMBIE9); a run left STARTED by a process
  that no longer exists.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.kits import reliability as kit

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not kit.fork_supported(), reason="needs fork (Linux)")]


def _plant(home: Path, lib: Path) -> None:
    import numpy as np
    from dagster import DagsterInstance, DagsterRunStatus

    from sheaf.core.models import BodyUnit
    from sheaf.store.sqlite.db import connect, transaction
    from sheaf.store.sqlite.schema import collections, fts_delete, fts_rows
    from sheaf.store.sqlite.writer import replace_paper
    from tests.kits.dagster_private import InstanceRef, create_run_for_test

    art = home / "artifacts"
    (art / "structure_tree" / "M3FJ9PLC.json").unlink()
    rm = art / "render_map" / "P9KE3UHB.json"
    d = json.loads(rm.read_text())
    d["headings"][0]["title"] = "Edited outside Sheaf"
    rm.write_text(json.dumps(d))
    shutil.copy(art / "body_units" / "W6TB4YRS.parquet", art / "body_units" / "OLD1.parquet")
    shutil.copy(art / "ocr_blocks" / "W6TB4YRS.parquet", art / "ocr_blocks" / "ZOMBIE9.parquet")
    (art / "ocr_blocks" / ".M3FJ9PLC.parquet.k2j4h1").write_bytes(b"half a parquet file")
    shutil.copytree(kit.SAMPLE / "papers" / "D2LPA7XK", lib / "papers" / "D2LPA7XK")

    conn = connect(home / "index" / "sheaf.db")
    try:
        ident = next(iter(collections(conn).values()))
        pt, vt = ident.passages_table, ident.vec_table
        with transaction(conn):
            # the paper's body FTS rows deleted (exactly: a contentless row goes with its values)
            fts_delete(conn, "body_units_fts", fts_rows(conn, "body_units_fts", "b.paper_id = 'L2YSNC8V'"))
            pr = conn.execute(f"SELECT passage_rowid FROM {pt} WHERE paper_id = 'L2YSNC8V' LIMIT 1").fetchone()[0]
            conn.execute(f"DELETE FROM {vt} WHERE passage_rowid = ?", (pr,))
            conn.execute(f"DELETE FROM {pt} WHERE passage_rowid = ?", (pr,))
            pr = conn.execute(f"SELECT passage_rowid FROM {pt} WHERE paper_id = 'M3FJ9PLC' LIMIT 1").fetchone()[0]
            v = np.zeros(ident.dimension, np.float32)
            v[0] = 1.0
            conn.execute(f"UPDATE {vt} SET embedding = ? WHERE passage_rowid = ?", (v.tobytes(), pr))
            conn.execute(f"INSERT INTO {vt}(passage_rowid, embedding, paper_id) VALUES (987654, ?, 'GHOST2')",
                         (v.tobytes(),))
        replace_paper(conn, "GHOST1", [BodyUnit("GHOST1:body:s1", "", "GHOST1", "s1", ("Ghost",), 1, (1, 1),
                                                ("p1:0",), "A unit nobody built.", 5, "body", 1)])
    finally:
        conn.close()

    inst = DagsterInstance.from_ref(InstanceRef.from_dir(str(home / "dagster_home")))
    try:
        inst.add_dynamic_partitions("papers", ["OLD1"])
        create_run_for_test(inst, job_name="paper_chain", status=DagsterRunStatus.STARTED,
                            tags={"sheaf/pid": "4194000", "sheaf/pid_start": "1"})
    finally:
        inst.dispose()


EXPECTED = {  # (kind, paper) the doctor must report
    ("missing_artifact", "M3FJ9PLC"), ("vector_corrupted", "M3FJ9PLC"),
    ("artifact_hash_mismatch", "P9KE3UHB"),
    ("index_fts_mismatch", "L2YSNC8V"), ("vectors_mismatch", "L2YSNC8V"),
    ("unregistered_paper", "D2LPA7XK"), ("orphan_partition", "OLD1"), ("orphan_index_rows", "GHOST1"),
    ("orphan_artifact", "ZOMBIE9"), ("orphan_file", None), ("orphan_rows", None), ("dead_run", None),
}


def test_doctor_reports_every_planted_drift_and_repair_fixes_only_those():
    refs = kit.references()
    root = kit.fast_root("sheaf-doctor-")
    home, lib = kit.clone_home(refs["A"], root)
    env = kit.env_for(home, lib)
    z = kit.zygote()
    code, text = z.run(["doctor", "--json"], env, root, root / "clean.log")
    assert code == 0 and kit.envelope(text)["data"]["issues"] == [], text[-2000:]

    _plant(home, lib)
    code, text = z.run(["doctor", "--json"], env, root, root / "doctor.log")
    assert code == 1, text[-2000:]
    issues = kit.envelope(text)["data"]["issues"]
    found = {(i["kind"], i["paper"]) for i in issues}
    assert EXPECTED <= found, sorted(EXPECTED - found)
    assert all(i["cause"] and i["repair"] for i in issues)
    assert not any(i["paper"] == "W6TB4YRS" for i in issues), [i for i in issues if i["paper"] == "W6TB4YRS"]

    code, text = z.run(["doctor", "--repair", "--json"], env, root, root / "repair.log", timeout=300)
    env_ = kit.envelope(text)
    assert code == 0, text[-3000:]
    data = env_["data"]
    assert data["after"]["issues"] == [], data["after"]["issues"]
    rebuilt = set(data["repaired"]["build"]["planned"]) | set(data["repaired"].get("forced_rebuild", {}).get("papers", []))
    assert "W6TB4YRS" not in rebuilt, rebuilt
    assert {"M3FJ9PLC", "P9KE3UHB", "L2YSNC8V", "D2LPA7XK"} <= rebuilt, rebuilt
    assert data["repaired"]["partitions_removed"] == ["OLD1"]
    assert data["repaired"]["index_rows_removed"] == ["GHOST1", "GHOST2"]  # GHOST2: the stray vector's paper
    assert len(data["repaired"]["dead_runs_failed"]) == 1

    snap = kit.snapshot(home / "index" / "sheaf.db")
    want_a, want_b = refs["A"]["snapshot"], refs["B"]["snapshot"]
    assert set(snap["papers"]) == set(kit.LIB_A) | {"D2LPA7XK"}
    assert not any(snap["orphans"].values()), snap["orphans"]
    for key in kit.LIB_A:  # the four papers exactly as a clean build has them
        only = {"papers": {key: snap["papers"][key]}, "orphans": {}, "totals": {}, "collections": snap["collections"]}
        ref = {"papers": {key: want_a["papers"][key]}, "orphans": {}, "totals": {}, "collections": want_a["collections"]}
        assert not kit.diff_snapshots(only, ref), key
    d2 = snap["papers"]["D2LPA7XK"]
    assert d2["body"] == want_b["papers"]["D2LPA7XK"]["body"] and d2["passages"] == want_b["papers"]["D2LPA7XK"]["passages"]
    files = kit.artifact_files(home)
    assert not any(k in f for f in files for k in ("OLD1", "ZOMBIE9", "/.")), sorted(files)
    runs = kit.dagster_runs(home / "dagster_home")
    assert not [r for r in runs if r["status"] == "STARTED"]
    kit.report("doctor", {"found": sorted(f"{k}:{p}" for k, p in found), "rebuilt": sorted(rebuilt),
                          "repaired": {k: v for k, v in data["repaired"].items() if k != "build"},
                          "after": len(data["after"]["issues"])})
    shutil.rmtree(root, ignore_errors=True)
