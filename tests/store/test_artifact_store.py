"""The artifact store (`sheaf.store.artifact_store`): the same operations on a local folder, a
``file://`` URL and fsspec's ``memory://`` filesystem; atomic writes; keys that cannot escape;
clear errors naming the URL without its credentials."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import sheaf.store.artifact_store as store_mod
from sheaf.core.envelope import SheafError
from sheaf.core.settings import get_settings
from sheaf.store.artifact_store import (
    FsspecArtifactStore,
    LocalArtifactStore,
    artifact_store,
    open_artifacts,
)

ROOT = Path(__file__).resolve().parents[2]


def memory_url() -> str:
    return f"memory://sheaf-test-{uuid.uuid4().hex[:8]}/artifacts"


@pytest.fixture(params=["local", "file", "memory", "fsspec-local"])
def store(request, tmp_path):
    if request.param == "local":
        return artifact_store(tmp_path / "artifacts")
    if request.param == "file":  # file:// is the local folder (pathlib), as a plain path
        return artifact_store(f"file://{tmp_path}/artifacts")
    if request.param == "fsspec-local":  # fsspec's own local filesystem: a temp file, then a move
        return FsspecArtifactStore(f"file://{tmp_path}/artifacts")
    return artifact_store(memory_url())


def test_round_trip_listing_and_deletion(store):
    assert store.assets() == [] and store.names("body_units") == set() and store.read("body_units", "K1") is None
    store.write("body_units", "K1", pa.table({"unit_id": ["a", "b", "c"]}))
    store.write("render_map", "K1", {"headings": [], "title": "Ünïcode"})
    store.write("render_map", "K2", {"x": 1})
    assert store.read("body_units", "K1").column("unit_id").to_pylist() == ["a", "b", "c"]
    assert store.read("render_map", "K1") == {"headings": [], "title": "Ünïcode"}
    assert store.rows("body_units", "K1") == 3 and store.rows("render_map", "K1") is None
    assert store.rows("body_units", "NOPE") is None
    assert store.assets() == ["body_units", "render_map"]
    assert store.names("render_map") == {"K1.json", "K2.json"}
    assert store.exists("body_units", "K1", ".parquet") and not store.exists("body_units", "K2", ".parquet")
    assert store.read_file("body_units", "K1.parquet").num_rows == 3
    # a payload of the other kind replaces the paper's artifact of the first kind
    store.write("render_map", "K2", pa.table({"a": [1]}))
    assert store.names("render_map") == {"K1.json", "K2.parquet"}
    assert len(store.delete_paper("K1")) == 2
    assert store.read("body_units", "K1") is None and store.names("render_map") == {"K2.parquet"}
    assert store.remove("render_map", "K2.parquet") and not store.remove("render_map", "K2.parquet")


@pytest.mark.parametrize("key", ["../escape", "a/b", "", "..", "x y", "/abs"])
def test_keys_that_could_escape_the_root_are_refused(store, key):
    with pytest.raises(ValueError, match="invalid paper key"):
        store.write("ocr_blocks", key, {"x": 1})
    with pytest.raises(ValueError):
        store.read("ocr_blocks", key)
    with pytest.raises(ValueError, match="invalid artifact name"):
        store.path("../up", "K1", ".json")
    with pytest.raises(ValueError, match="invalid artifact name"):
        store.remove("ocr_blocks", "../K1.json")


def test_the_partition_key_is_in_every_path(store):
    for asset, suffix in (("ocr_blocks", ".parquet"), ("structure_tree", ".json")):
        p = str(store.path(asset, "QX7HK2MA", suffix))
        assert p.endswith(f"/{asset}/QX7HK2MA{suffix}")
        assert store.show(asset, "QX7HK2MA", suffix).endswith(f"{asset}/QX7HK2MA{suffix}")


def test_a_failed_local_write_leaves_the_old_file_and_no_partial_one(tmp_path, monkeypatch):
    store = artifact_store(tmp_path)
    store.write("ocr_blocks", "K1", pa.table({"a": [1]}))

    real_fdopen = os.fdopen

    class Torn:  # the temp file's descriptor: half the bytes written, then the disk is full
        def __init__(self, fd, *a, **kw):
            self.f = real_fdopen(fd, *a, **kw)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[:len(data) // 2])
            self.f.flush()
            raise OSError(28, "No space left on device")
    monkeypatch.setattr(store_mod.os, "fdopen", Torn)
    with pytest.raises(OSError):
        store.write("ocr_blocks", "K1", pa.table({"a": [1, 2]}))
    monkeypatch.undo()
    assert store.names("ocr_blocks") == {"K1.parquet"}  # no temp file left beside it
    assert store.read("ocr_blocks", "K1").num_rows == 1  # the previous version, whole
    with pytest.raises(TypeError):  # a payload that cannot be serialized writes nothing
        store.write("render_map", "K1", {"x": object()})
    assert store.names("render_map") == set()


def test_writing_the_bytes_a_file_holds_leaves_it_untouched(tmp_path):
    """A rebuild that gives a paper the same artifact writes nothing (no temp file, no rename,
    the same inode and mtime); other bytes replace the file; the other format's file still goes."""
    store = artifact_store(tmp_path)
    table = pa.table({"a": [1, 2]})
    path = Path(store.write("ocr_blocks", "K1", table))
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = path.stat()
    store.write("ocr_blocks", "K1", pa.table({"a": [1, 2]}))
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, 1_000_000_000)
    store.write("ocr_blocks", "K1", pa.table({"a": [1, 3]}))
    assert path.stat().st_ino != before.st_ino and store.read("ocr_blocks", "K1").column("a").to_pylist() == [1, 3]
    json_path = Path(store.write("render_map", "K1", {"x": 1}))
    os.utime(json_path, ns=(1_000_000_000, 1_000_000_000))
    store.write("render_map", "K1", {"x": 1})
    assert json_path.stat().st_mtime_ns == 1_000_000_000
    store.write("render_map", "K1", {"x": 2})
    assert json_path.stat().st_mtime_ns != 1_000_000_000 and store.read("render_map", "K1") == {"x": 2}
    (tmp_path / "render_map" / "K1.parquet").write_bytes(b"stale")  # a paper's artifact changed format
    store.write("render_map", "K1", {"x": 2})
    assert store.names("render_map") == {"K1.json"}


def test_a_failed_put_leaves_no_object_on_the_store(monkeypatch):
    store = artifact_store(memory_url())
    assert isinstance(store, FsspecArtifactStore) and store.atomic_put
    store.write("ocr_blocks", "K1", pa.table({"a": [1]}))
    with pytest.raises(TypeError):
        store.write("render_map", "K1", {"x": object()})  # serialized in memory first: nothing sent
    assert store.names("render_map") == set()

    def refused(path, value, **kw):
        raise PermissionError("Access Denied")
    monkeypatch.setattr(store.fs, "pipe_file", refused)
    with pytest.raises(SheafError) as e:
        store.write("ocr_blocks", "K1", pa.table({"a": [1, 2]}))
    assert e.value.code == "BACKEND_UNAVAILABLE" and store.location in e.value.message
    monkeypatch.undo()
    assert store.read("ocr_blocks", "K1").num_rows == 1 and store.names("ocr_blocks") == {"K1.parquet"}


def test_a_store_that_writes_in_place_goes_through_a_temp_object(monkeypatch):
    store = artifact_store(memory_url())
    store.atomic_put = False  # as sftp/smb: write a temp name, then move it over the artifact
    store.write("ocr_blocks", "K1", {"v": 1})
    assert store.names("ocr_blocks") == {"K1.json"}

    def cut(*a, **kw):
        raise ConnectionError("connection reset")
    monkeypatch.setattr(store.fs, "mv", cut)
    with pytest.raises(SheafError):
        store.write("ocr_blocks", "K1", {"v": 2})
    monkeypatch.undo()
    assert store.names("ocr_blocks") == {"K1.json"} and store.read("ocr_blocks", "K1") == {"v": 1}


def test_sweep_removes_temp_files_of_interrupted_local_writes(tmp_path):
    store = artifact_store(tmp_path)
    store.write("ocr_blocks", "K1", {"v": 1})
    (tmp_path / "ocr_blocks" / ".K1.parquet.k2j4h1").write_bytes(b"half")
    (tmp_path / ".stats.abc").write_text("{")
    (tmp_path / "ocr_blocks" / ".K3.json.x1").mkdir()  # a temp name that is not a file: left alone
    (tmp_path / "ocr_blocks" / "K1.parquet.k2j4h1").write_bytes(b"not hidden: not a temp file")
    gone = store.sweep_temp()
    assert sorted(Path(p).name for p in gone) == [".K1.parquet.k2j4h1", ".stats.abc"]
    assert all(not Path(p).exists() for p in gone)
    assert (tmp_path / "ocr_blocks" / ".K3.json.x1").is_dir()
    assert store.names("ocr_blocks") == {"K1.json", "K1.parquet.k2j4h1"}
    assert artifact_store(memory_url()).sweep_temp() == []  # one put: nothing to sweep


def test_settings_choose_the_store_and_keep_the_default_paths(tmp_path):
    s = get_settings({})
    assert s.artifacts_dir == Path("data/artifacts") and not s.artifacts_remote
    assert s.artifacts_root == str(Path("data/artifacts").resolve())
    store = open_artifacts(s)
    assert isinstance(store, LocalArtifactStore) and store.root == Path("data/artifacts")
    local = get_settings({"SHEAF_ARTIFACTS_URL": str(tmp_path / "shared")})
    assert local.artifacts_dir == tmp_path / "shared" and isinstance(open_artifacts(local), LocalArtifactStore)
    assert get_settings({"SHEAF_ARTIFACTS_URL": f"file://{tmp_path}/x"}).artifacts_dir == tmp_path / "x"
    url = memory_url()
    remote = get_settings({"SHEAF_ARTIFACTS_URL": url, "SHEAF_HOME": str(tmp_path)})
    assert remote.artifacts_remote and remote.artifacts_root == url and remote.artifacts_location == url
    assert remote.artifacts_dir == tmp_path / "artifacts"  # this machine's caches only
    assert isinstance(open_artifacts(remote), FsspecArtifactStore)


def test_a_url_with_a_password_is_refused_without_showing_it():
    with pytest.raises(SheafError) as e:
        get_settings({"SHEAF_ARTIFACTS_URL": "s3://AKIAKEY:t0ps3cret@bucket/prefix"})
    err = e.value
    assert err.code == "BAD_INPUT" and "SHEAF_ARTIFACTS_URL" in err.message and "AWS_ACCESS_KEY_ID" in err.message
    assert "t0ps3cret" not in str(err.details) + err.message


def test_a_scheme_without_its_filesystem_package_says_what_to_install(monkeypatch):
    with pytest.raises(SheafError) as e:
        artifact_store("nosuchscheme://bucket/prefix")
    assert e.value.code == "BAD_INPUT" and "nosuchscheme://bucket/prefix" in e.value.message

    def missing(url, **kw):
        raise ImportError("Install s3fs to access S3")
    monkeypatch.setattr(store_mod.fsspec.core, "url_to_fs", missing)
    with pytest.raises(SheafError) as e:
        artifact_store("s3://bucket/prefix")
    assert e.value.code == "BAD_INPUT" and "s3fs" in e.value.message and "sheaf[cluster]" in e.value.message
    assert "s3://bucket/prefix" in e.value.message


def test_an_unreachable_store_is_one_clear_error_without_credentials(monkeypatch):
    store = artifact_store(memory_url())

    def down(*a, **kw):
        raise ConnectionError("could not reach https://user:hunter2@minio.lab:9000/ (timeout)")
    monkeypatch.setattr(store.fs, "ls", down)
    with pytest.raises(SheafError) as e:
        store.names("ocr_blocks")
    err = e.value
    assert err.code == "BACKEND_UNAVAILABLE" and store.location in err.message and err.details["hint"]
    assert "hunter2" not in err.message + str(err.details) and "ConnectionError" in err.message


def test_the_local_store_imports_neither_fsspec_nor_pyarrow_until_used():
    code = ("import sys; from sheaf.core.settings import get_settings; "
            "from sheaf.store.artifact_store import open_artifacts; s = open_artifacts(get_settings()); "
            "s.names('ocr_blocks'); print([m for m in ('fsspec', 'pyarrow') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_the_drift_check_lists_a_memory_store(tmp_path):
    from types import SimpleNamespace

    from pipelines.planning.drift import artifact_index_drift

    url = memory_url()
    s = get_settings({"SHEAF_ARTIFACTS_URL": url, "SHEAF_HOME": str(tmp_path)})
    store = open_artifacts(s)
    for key in ("K1", "K2"):
        store.write("ocr_blocks", key, pa.table({"a": [1]}))
    store.write("structure_tree", "K1", {"title": "t"})
    built = SimpleNamespace(state="built", metadata={}, reasons=[])
    drift = artifact_index_drift(s, {"K1": built, "K2": built},
                                 {"ocr_blocks": ".parquet", "structure_tree": ".json"})
    assert "artifact structure_tree missing" in drift["K2"][1] and "structure_tree" in drift["K2"][0]
    assert not any("artifact" in r for r in drift["K1"][1])  # K1 drifts only by its (absent) index


def test_the_drift_check_of_a_few_papers_looks_their_files_up(tmp_path, monkeypatch):
    """An edit's one paper: its files are looked up, not every paper's listed."""
    from types import SimpleNamespace

    from pipelines.planning.drift import artifact_index_drift

    s = get_settings({"SHEAF_ARTIFACTS_URL": memory_url(), "SHEAF_HOME": str(tmp_path)})
    store = open_artifacts(s)
    for key in ("K1", "K2"):
        store.write("ocr_blocks", key, pa.table({"a": [1]}))
    store.write("structure_tree", "K1", {"title": "t"})
    monkeypatch.setattr(type(store), "names", lambda self, asset: pytest.fail(f"listed {asset}"))
    built = SimpleNamespace(state="built", metadata={}, reasons=[])
    artifacts = {"ocr_blocks": ".parquet", "structure_tree": ".json"}
    drift = artifact_index_drift(s, {"K2": built}, artifacts)
    assert [r for r in drift["K2"][1] if "artifact" in r] == ["artifact structure_tree missing"]
    assert not any("artifact" in r for r in artifact_index_drift(s, {"K1": built}, artifacts)["K1"][1])



def test_reading_a_parquet_artifact_from_bytes_starts_no_arrow_worker_thread(tmp_path):
    """An artifact read from bytes (every `read_file`, every read of a remote store) is decoded on
    the calling thread. Decoded on Arrow's CPU pool, a worker could drop the last reference to
    the Python bytes after `read` returned; when that fell on the interpreter's exit, the process
    aborted (SIGABRT, `terminate called without an active exception`) after printing its answer:
    seen in CI as `sheaf doctor` exiting -6. In a fresh process (the pool starts its threads on
    first use and keeps them): a table written, read back from bytes, and not one thread more
    than before the reads. (A read from a local path may start Arrow's I/O pool: it holds only
    Arrow's own memory, never a Python object.)"""
    code = """if True:
        import os, sys
        import pyarrow as pa
        from sheaf.store.artifact_store import artifact_store
        threads = lambda: len(os.listdir("/proc/self/task"))
        table = pa.table({f"c{i}": pa.array([f"text {j} of column {i}" for j in range(20_000)])
                          for i in range(8)})
        local, memory = artifact_store(sys.argv[1]), artifact_store("memory://sheaf-threads/artifacts")
        for store in (local, memory):
            store.write("body_units", "ABCD1234", table)
        before = threads()
        for _ in range(3):
            assert local.read_file("body_units", "ABCD1234.parquet").equals(table)
            assert memory.read("body_units", "ABCD1234").equals(table)
            assert memory.read_file("body_units", "ABCD1234.parquet").equals(table)
        print(before, threads())
    """
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "artifacts")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    before, after = map(int, proc.stdout.split())
    assert after == before, f"{after - before} threads started by the reads"
