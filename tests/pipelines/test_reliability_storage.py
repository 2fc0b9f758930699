"""Storage faults: a full disk, a read-only index folder, a damaged index file.

- **Disk full** — a real "No space left on device": SHEAF_HOME on a tmpfs of fixed size (root
  mounts one), filled by a file. Once full before the build starts (the build refuses before
  writing anything) and once with ~400 KB left (the build starts and the disk fills under it).
  Without mount rights the fallback is RLIMIT_FSIZE in the build process (EFBIG).
- **Read-only index folder** — a read-only bind mount of `<home>/index` (root ignores chmod);
  without root, chmod 0555.
Each time: `sheaf build` exits 2 with BACKEND_UNAVAILABLE naming the path (never a traceback),
the previous index still answers queries and equals the reference exactly, and once space is
freed (or the mount lifted) `sheaf build` completes; Dagster shows no run as running.

- **Damaged index** — truncated, random bytes over pages in the middle, the vec table dropped,
  a newer schema version, the file deleted: every query command answers an envelope
  (VECTOR_CORRUPTED / INDEX_NOT_FOUND / BACKEND_UNAVAILABLE with the migration message), never
  a traceback; `sheaf build --full` recovers (an unreadable file is moved aside to
  `sheaf.db.corrupt-<timestamp>` and the index rebuilt from the artifacts, with the embedding
  cache salvaged), and the index equals a clean build's.
"""
from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.kits import reliability as kit

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not kit.fork_supported(), reason="needs fork (Linux)")]

QUERIES = [["search", "pollinator elevation", "--no-server", "--json"],
           ["retrieve", "lichen growth curve", "--mode", "semantic", "--no-server", "--json"],
           ["retrieve", "lichen growth curve", "--no-server", "--json"],
           ["status", "--json"]]  # status (slow: it loads the Dagster definitions) only where asked
QUERY_NAMES = ["search", "retrieve semantic", "retrieve hybrid", "status"]
QUERY_ERRORS = {"VECTOR_CORRUPTED", "INDEX_NOT_FOUND", "BACKEND_UNAVAILABLE", "VECTOR_NOT_BUILT"}


def _tree_size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def _run(argv: list[str], env: dict[str, str], root: Path, name: str, faults=None) -> tuple[int, str]:
    return kit.zygote().run(argv, env, root, root / f"{name}.log", faults=faults, timeout=300)


def _assert_query_answers(env: dict[str, str], root: Path, tag: str, must_work: bool = False,
                          status: bool = False) -> list[str]:
    """Every query command answers an envelope, never a traceback; returns the error codes.
    (`must_work`: the index must answer: search and semantic retrieve are enough then.)"""
    codes = []
    queries = QUERIES[:2] if must_work else QUERIES if status else QUERIES[:3]
    for i, argv in enumerate(queries):
        code, text = _run(argv, env, root, f"{tag}-q{i}")
        assert "Traceback" not in text, (argv, text[-2000:])
        assert code in (0, 1, 2), (argv, code, text[-2000:])
        e = kit.envelope(text)
        if e["ok"]:
            codes.append("ok")
        else:
            assert e["error"]["code"] in QUERY_ERRORS, (argv, e["error"])
            codes.append(e["error"]["code"])
        if must_work and argv[0] != "status":
            assert e["ok"], (argv, e)
    return codes


def _no_running_runs(home: Path) -> None:
    runs = kit.dagster_runs(home / "dagster_home")
    bad = [(r["job"], r["status"]) for r in runs if r["status"] in ("STARTED", "STARTING", "NOT_STARTED", "CANCELING")]
    assert not bad, bad


def test_disk_full_is_a_clear_error_and_the_previous_index_stays_usable():
    refs = kit.references()
    root = kit.fast_root("sheaf-full-")
    mnt = root / "mnt"
    mounted = not os.environ.get("SHEAF_TEST_NO_MOUNT") and kit.mount_tmpfs(
        mnt, _tree_size(refs["A"]["home"]) + _tree_size(refs["A"]["lib"]) + 24 * 2 ** 20)
    try:
        base = mnt if mounted else root
        home, lib = kit.clone_home(refs["A"], base)
        env = kit.env_for(home, lib)
        ref = refs["A"]["snapshot"]
        phases: list[tuple[str, int, Any]] = [("full before the build", 0, None), ("fills during the build", 400_000, None)]
        if not mounted:  # no tmpfs: no file of the build process may grow past 64 KiB (EFBIG)
            phases = [("file size limit (RLIMIT_FSIZE)", 0, [{"kind": "rlimit_fsize", "bytes": 65536}])]
        messages: list[str] = []
        for i, (what, leave, faults) in enumerate(phases):
            filler = kit.fill_disk(base, leave) if mounted else None
            code, text = _run(["build", "--full", "--json"], env, root, f"full{i}", faults)
            assert code == 2, (what, code, text[-2000:])
            assert "Traceback" not in text
            err = kit.envelope(text)["error"]
            assert err["code"] == "BACKEND_UNAVAILABLE", err
            assert err["details"]["problem"] == "disk full" and str(base) in err["details"]["path"], err
            assert "no space left" in err["message"], err
            messages.append(err["message"])
            if filler is not None:
                filler.unlink()
            assert not kit.diff_snapshots(kit.snapshot(home / "index" / "sheaf.db"), ref), what
            _assert_query_answers(env, root, f"full{i}", must_work=True)
        code, text = _run(["build", "--json"], env, root, "after")
        assert code == 0, text[-3000:]
        assert kit.envelope(text)["data"]["states"] == {"built": 4}
        kit.report("disk-full", {"how": "tmpfs" if mounted else "RLIMIT_FSIZE", "phases": [p[0] for p in phases],
                                 "messages": messages})
        assert not kit.diff_snapshots(kit.snapshot(home / "index" / "sheaf.db"), ref)
        _no_running_runs(home)
    finally:
        if mounted:
            kit.umount(mnt)
        shutil.rmtree(root, ignore_errors=True)


def test_read_only_index_folder_is_a_clear_error_and_the_index_stays_usable():
    refs = kit.references()
    root = kit.fast_root("sheaf-ro-")
    home, lib = kit.clone_home(refs["A"], root)
    env = kit.env_for(home, lib)
    index_dir = home / "index"
    how = "read-only bind mount" if not os.environ.get("SHEAF_TEST_NO_MOUNT") and kit.mount_readonly(index_dir) \
        else None
    if how is None and os.geteuid() != 0:
        index_dir.chmod(0o555)
        how = "chmod 0555"
    if how is None:
        pytest.skip("cannot make a folder read-only for root here (no mount rights)")
    try:
        code, text = _run(["build", "--full", "--json"], env, root, "ro-build")
        assert code == 2, text[-2000:]
        err = kit.envelope(text)["error"]
        assert err["code"] == "BACKEND_UNAVAILABLE" and err["details"]["problem"] == "read-only", err
        assert err["details"]["path"] == str(index_dir) and str(index_dir) in err["message"], err
        _assert_query_answers(env, root, "ro", must_work=True)
        kit.report("read-only", {"how": how, "message": err["message"]})
    finally:
        if how == "read-only bind mount":
            kit.umount(index_dir)
        else:
            index_dir.chmod(0o755)
    assert not kit.diff_snapshots(kit.snapshot(index_dir / "sheaf.db"), refs["A"]["snapshot"])
    code, text = _run(["build", "--json"], env, root, "ro-after")
    assert code == 0, text[-2000:]
    _no_running_runs(home)
    shutil.rmtree(root, ignore_errors=True)


# --- damaged index files -------------------------------------------------------------------------------

def _truncate(db: Path) -> None:
    os.truncate(db, db.stat().st_size // 2)


def _random_middle(db: Path) -> None:
    size = db.stat().st_size
    rnd = random.Random(7)
    page = 8192
    with open(db, "r+b") as f:
        f.seek((size // 2 // page) * page)
        f.write(bytes(rnd.randrange(256) for _ in range(4 * page)))


def _drop_vec_table(db: Path) -> None:
    from sheaf.store.sqlite.db import connect
    from sheaf.store.sqlite.schema import collections

    conn = connect(db)
    try:
        for ident in collections(conn).values():
            conn.execute(f"DROP TABLE {ident.vec_table}")
    finally:
        conn.close()


def _newer_schema(db: Path) -> None:
    from sheaf.store.sqlite.db import connect

    conn = connect(db)
    try:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    finally:
        conn.close()


def _delete(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)


DAMAGES = {
    "truncated": (_truncate, "quarantine"),
    "random_bytes_middle": (_random_middle, "quarantine"),
    "missing_vec_table": (_drop_vec_table, "plain"),
    "newer_schema": (_newer_schema, "schema"),
    "deleted": (_delete, "plain"),  # + a negative control: the same build without the drift check
}


def _checkpoint(db: Path) -> None:
    """Fold the WAL into the file, so that damage to the file is damage to the index."""
    from sheaf.store.sqlite.db import connect

    conn = connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_index_answers_cleanly_and_a_build_recovers(damage: str):
    refs = kit.references()
    root = kit.fast_root(f"sheaf-dmg-{damage}-")
    home, lib = kit.clone_home(refs["A"], root)
    env = kit.env_for(home, lib)
    db = home / "index" / "sheaf.db"
    _checkpoint(db)
    fn, recovery = DAMAGES[damage]
    fn(db)
    codes = _assert_query_answers(env, root, "q", status=damage in ("random_bytes_middle", "missing_vec_table"))
    if damage in ("truncated", "deleted", "newer_schema", "missing_vec_table"):
        assert codes[1] != "ok", codes  # a semantic query cannot pretend
    if damage == "newer_schema":
        code, text = _run(["retrieve", "lichen", "--no-server", "--json"], env, root, "schema-q")
        assert "schema" in kit.envelope(text)["error"]["message"]
    if damage in ("random_bytes_middle", "missing_vec_table"):  # the doctor names the damage too
        code, text = _run(["doctor", "--json"], env, root, "doctor")
        assert "Traceback" not in text and code == 1, text[-2000:]
        kinds = {i["kind"] for i in kit.envelope(text)["data"]["issues"]}
        assert kinds & {"index_damaged", "vectors_missing", "vectors_mismatch"}, kinds
    if recovery == "schema":  # a plain build refuses (never misreads), naming the way out
        code, text = _run(["build", "--json"], env, root, "plain")
        assert code == 2, text[-2000:]
        err = kit.envelope(text)["error"]
        assert "schema" in err["message"] and "--full" in err["details"]["hint"], err
    if damage == "deleted":  # negative control: with the drift check off, the build would call
        off = [{"kind": "noop", "target": "pipelines.planning.statuses:index_drift", "returns": {}},  # it all built
               {"kind": "noop", "target": "pipelines.planning.drift:metadata_missing", "returns": False}]
        code, text = _run(["build", "--json"], env, root, "negative-control", faults=off)
        data = kit.envelope(text)["data"]
        assert code == 0 and data["states"] == {"built": 4} and data["planned"] == {}, data
        assert not db.exists() or not kit.snapshot(db)["papers"]
    argv = ["build", "--json"] if recovery == "plain" else ["build", "--full"]
    code, text = _run(argv, env, root, "recover")
    assert code == 0, text[-3000:]
    if recovery in ("quarantine", "schema"):
        assert "moved it aside" in text, text[-2000:]
        aside = sorted(p.name for p in db.parent.iterdir() if p.name.startswith("sheaf.db.") and "-" in p.name
                       and not p.name.endswith(("-wal", "-shm")))
        assert aside and (aside[0].startswith("sheaf.db.corrupt-") or aside[0].startswith("sheaf.db.schema99-")), aside
    if damage == "missing_vec_table":
        assert kit.envelope(text)["data"]["embeddings_computed"] == 0  # rebuilt from the embedding cache
    assert not kit.diff_snapshots(kit.snapshot(db), refs["A"]["snapshot"]), damage
    _assert_query_answers(env, root, "after", must_work=True)
    salvaged = re.search(r"(\d+) cached embeddings salvaged", text)
    kit.report(f"damage-{damage}", {"queries": dict(zip(QUERY_NAMES, codes)),
                                    "recovery": " ".join(argv), "salvaged": int(salvaged.group(1)) if salvaged else 0,
                                    "moved_aside": recovery in ("quarantine", "schema")})
    shutil.rmtree(root, ignore_errors=True)

