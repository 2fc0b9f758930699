"""`sheaf serve`: the in-memory matrix answers exactly what sqlite-vec answers, the client
gives up fast when no server runs, and served commands print the very envelope the local
command prints."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sheaf.core.models import BodyUnit
from sheaf.core.settings import get_settings
from sheaf.serve.client import CONNECT_TIMEOUT, DISCOVERY_FILE, read_discovery, server_signature, try_server
from sheaf.service.requests import SERVED_COMMANDS, SearchRequest
from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr
from sheaf.store.sqlite.memory_vectors import MatrixAccelerator, _vec0_cosine
from sheaf.vectors.identity import EmbeddedPassages, ModelIdentity, Passage, QueryVector
from tests.kits.index import write_vector_index
from tests.kits.papers import without_engines

ROOT = Path(__file__).resolve().parents[2]
DIM = 16
IDENT = ModelIdentity("test/random", "f" * 64, DIM, True, 128, "{text}")


# --- the matrix accelerator against sqlite-vec ------------------------------------------------


def _random_index(path: Path, n: int, papers: int, seed: int = 0) -> np.ndarray:
    """An index whose collection holds `n` random unit vectors over `papers` papers, with
    runs of exact duplicates (the ties sqlite-vec and the matrix must break alike)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, DIM)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    for a in range(0, n - 40, max(n // 7, 41)):  # duplicate runs across papers
        X[a + 1:a + 13] = X[a]
    write_vector_index(path, X, papers, IDENT)
    return X


def _both(conn, acc, q, k, papers=None):
    want = rd.vector_search(conn, q, k, paper_ids=papers)
    got = rd.vector_search(conn, q, k, paper_ids=papers, engine=acc)
    return want, got


def test_vec0_cosine_is_bit_exact(tmp_path):
    X = _random_index(tmp_path / "i.db", 500, 10)
    conn = ix.open_index(tmp_path / "i.db", readonly=True)
    rng = np.random.default_rng(3)
    for _ in range(10):
        q = rng.standard_normal(DIM).astype(np.float32)
        rows = conn.execute(f"SELECT passage_rowid, distance FROM {IDENT.vec_table} WHERE embedding MATCH ? "
                            "AND k = 100", (q.tobytes(),)).fetchall()
        ids = np.array([r[0] for r in rows]) - 1
        assert _vec0_cosine(X[ids], q).tolist() == [r[1] for r in rows]
    conn.close()


def test_accelerator_answers_exactly_what_sqlite_vec_answers(tmp_path):
    path = tmp_path / "i.db"
    X = _random_index(path, 3000, 60)
    acc = MatrixAccelerator(path)
    assert acc.matrix(IDENT, wait=True) is not None
    conn = ix.open_index(path, readonly=True)
    rng = np.random.default_rng(11)
    t0 = time.monotonic()
    for i in range(120):
        assert time.monotonic() - t0 < 120
        if i % 3 == 0:  # right on a duplicate run: ties at the k boundary
            q = X[(i * 37) % len(X)].copy()
        else:
            q = rng.standard_normal(DIM).astype(np.float32)
            q /= np.linalg.norm(q)
        k = int(rng.choice([1, 3, 5, 10, 12, 13, 50, 200]))
        papers = None if i % 4 else [f"P{j:03d}" for j in rng.choice(60, int(rng.integers(1, 8)), replace=False)]
        want, got = _both(conn, acc, QueryVector(IDENT, q, "q"), k, papers)
        assert got == want, (i, k, papers)
    assert acc.stats["answered"] == 120 and acc.stats["declined"] == 0 and not acc.disabled
    # filters that match nothing, and k past the collection
    want, got = _both(conn, acc, QueryVector(IDENT, X[0], "q"), 5, ["nope"])
    assert got == want == []
    want, got = _both(conn, acc, QueryVector(IDENT, X[0], "q"), 4000)
    assert got == want and len(got) == 3000
    conn.close()
    acc.close()


def test_accelerator_sees_index_changes(tmp_path):
    path = tmp_path / "i.db"
    X = _random_index(path, 400, 8)
    acc = MatrixAccelerator(path)
    reader = ix.open_index(path, readonly=True)
    q = QueryVector(IDENT, X[200], "q")  # not in a duplicate run
    assert acc.matrix(IDENT, wait=True) is not None
    want, got = _both(reader, acc, q, 5)
    assert got == want and acc.stats["loads"] == 1
    _both(reader, acc, q, 5)
    assert acc.stats["loads"] == 1  # unchanged index: no reload
    writer = ix.open_index(path)
    with ix.transaction(writer):  # a build replaces one paper's vectors
        writer.execute(f"DELETE FROM {IDENT.vec_table} WHERE passage_rowid = 201")
        writer.execute(f"DELETE FROM {IDENT.passages_table} WHERE passage_rowid = 201")
        v = (X[200] * 0.999 + 0.001).astype(np.float32)
        writer.execute(f"INSERT INTO {IDENT.passages_table}(passage_rowid, passage_id, unit_id, unit_type, "
                       "paper_id, ordinal, char_start, char_end, text_sha256) VALUES (401,'new#0','new',"
                       "'body','P000',0,0,1,'y')")
        writer.execute(f"INSERT INTO {IDENT.vec_table}(passage_rowid, embedding, paper_id) VALUES (?,?,?)",
                       (401, v.tobytes(), "P000"))
    answered = acc.stats["answered"]
    want, got = _both(reader, acc, q, 5)  # the matrix reloads in the background: sqlite-vec answers
    assert got == want and got[0].passage_id == "new#0" and acc.stats["answered"] == answered
    assert acc.wait_idle(60) and acc.stats["loads"] == 2
    want, got = _both(reader, acc, q, 5)
    assert got == want and acc.stats["answered"] == answered + 1  # the new matrix
    with ix.transaction(writer):  # a commit elsewhere (metadata): no reload of the matrix
        writer.execute("UPDATE papers SET title = 'x' WHERE paper_id = 'P001'")
    _both(reader, acc, q, 5)
    assert acc.wait_idle(60) and acc.stats["loads"] == 2 and acc.stats["answered"] == answered + 2
    writer.close()
    reader.close()
    acc.close()


def _paper_with_vectors(pid: str, vectors: np.ndarray, text: str) -> tuple[list, EmbeddedPassages]:
    """A paper's body units (one a vector) and their passages of IDENT, as a build writes them."""
    import hashlib

    units, passages = [], []
    for j in range(len(vectors)):
        uid = f"{pid}:body:n{j}"
        t = f"{text} {j}"
        units.append(BodyUnit(uid, hashlib.sha1(uid.encode()).hexdigest()[:8], pid, f"n{j}", ("Results",), 1,
                              (1, 1), ("p1:0",), t, len(t.split()), "body", 0))
        passages.append(Passage(f"{uid}#0", uid, pid, "body", 0, 0, len(t), t,
                                hashlib.sha256(t.encode()).hexdigest(), 8))
    return units, EmbeddedPassages(IDENT, tuple(passages), np.asarray(vectors, dtype=np.float32))


def test_accelerator_sees_re_embedding_that_reuses_rowids(tmp_path):
    """Re-embedding the paper that holds the highest passage rowids, same passage count: the
    writer reuses the very rowids (max + 1), so count, max and sum of the rowids are unchanged;
    the vectors epoch (replaced on every vector write) tells the matrix it is stale. Vectors
    the index already holds are not written again, and the epoch stays."""
    path = tmp_path / "i.db"
    rng = np.random.default_rng(21)

    def unit(n: int) -> np.ndarray:
        X = rng.standard_normal((n, DIM))
        return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)

    writer = ix.open_index(path)
    for pid in ("PAPERAAA", "PAPERBBB"):
        units, ep = _paper_with_vectors(pid, unit(40), "old text")
        wr.replace_paper(writer, pid, units, [], ep)
    pt = IDENT.passages_table
    rows_before = writer.execute(f"SELECT passage_rowid, passage_id FROM {pt} ORDER BY 1").fetchall()
    acc = MatrixAccelerator(path)
    reader = ix.open_index(path, readonly=True)
    q = unit(1)[0]
    qv = QueryVector(IDENT, q, "q")
    try:
        assert acc.matrix(IDENT, wait=True) is not None
        want, got = _both(reader, acc, qv, 10)
        assert got == want and acc.stats["answered"] == 1 and acc.stats["loads"] == 1
        new = unit(40)
        new[7] = q  # one re-embedded passage is the query itself: the nearest, distance 0
        units, ep = _paper_with_vectors("PAPERBBB", new, "new text")
        wr.replace_paper(writer, "PAPERBBB", units, [], ep)
        rows_after = writer.execute(f"SELECT passage_rowid, passage_id FROM {pt} ORDER BY 1").fetchall()
        assert rows_after == rows_before  # same rowids, same passage ids: only the vectors changed
        want, got = _both(reader, acc, qv, 10)
        assert want[0].passage_id == "PAPERBBB:body:n7#0" and abs(want[0].distance) < 1e-6
        assert got == want and acc.stats["answered"] == 1  # sqlite-vec answered: the matrix is stale
        assert acc.wait_idle(60) and acc.stats["loads"] == 2
        want, got = _both(reader, acc, qv, 10)
        assert got == want and acc.stats["answered"] == 2  # the new matrix
        # The same vectors written again: the writer holds them byte for byte and writes
        # nothing, so the epoch does not move and the matrix stays current (no reload).
        wr.replace_paper_vectors(writer, "PAPERBBB", ep)
        want, got = _both(reader, acc, qv, 10)
        assert got == want and acc.stats["answered"] == 3
        assert acc.wait_idle(60) and acc.stats["loads"] == 2
    finally:
        writer.close()
        reader.close()
        acc.close()


def test_accelerator_declines_other_files(tmp_path):
    _random_index(tmp_path / "a.db", 50, 2)
    X = _random_index(tmp_path / "b.db", 50, 2, seed=1)
    acc = MatrixAccelerator(tmp_path / "a.db")
    conn = ix.open_index(tmp_path / "b.db", readonly=True)
    want, got = _both(conn, acc, QueryVector(IDENT, X[0], "q"), 3)
    assert got == want and acc.stats["declined"] == 1 and acc.stats["answered"] == 0
    conn.close()
    acc.close()


# --- the client without a (live) server --------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_try_server_gives_up_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("SHEAF_HOME", str(tmp_path))
    monkeypatch.delenv("SHEAF_INDEX_FILE", raising=False)
    s = get_settings()
    disc = tmp_path / DISCOVERY_FILE

    def timed() -> float:
        t0 = time.perf_counter()
        assert try_server(SearchRequest("x"), s) is None
        return time.perf_counter() - t0

    assert timed() < 0.05  # no discovery file
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, timeout=60)
    dead_pid = int(dead.stdout)
    info = {"host": "127.0.0.1", "port": _free_port(), "pid": dead_pid, "token": "t",
            "signature": server_signature(s)}
    disc.write_text(json.dumps(info))
    assert timed() < 0.05 and not disc.exists()  # dead pid: the stale file is removed
    info["pid"] = os.getpid()  # alive, but nothing listens on the port
    disc.write_text(json.dumps(info))
    assert timed() < CONNECT_TIMEOUT + 0.2 and disc.exists()
    assert read_discovery(s)["pid"] == os.getpid()
    info["signature"] = {**info["signature"], "index_path": "/elsewhere/sheaf.db"}
    disc.write_text(json.dumps(info))
    assert timed() < 0.05  # a server of another index is not asked
    info["host"] = "192.0.2.1"  # never anything but loopback
    info["signature"] = server_signature(s)
    disc.write_text(json.dumps(info))
    assert timed() < 0.05
    disc.write_text("{not json")
    assert timed() < 0.05
    assert try_server({"query": "x"}, s) is None  # not a typed query request
    assert "parse" not in SERVED_COMMANDS  # not a served command


def test_serve_refuses_non_loopback(tmp_path):
    from sheaf.core.envelope import SheafError
    from sheaf.serve.server import SheafServer

    with pytest.raises(SheafError) as ei:
        SheafServer(get_settings(home=tmp_path), host="0.0.0.0", port=0)
    assert "loopback" in ei.value.message


# --- the served CLI against the local CLI, over the sample library ----------------------------

_CHILD = r"""
import contextlib, io, json, sys
from sheaf.cli.app import main
out = []
for argv in json.loads(sys.argv[1]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    out.append({"argv": argv, "code": code, "stdout": buf.getvalue()})
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "sentence_transformers", "onnxruntime"})
print(json.dumps({"runs": out, "heavy": heavy}))
"""


def _run_cli_batch(argvs: list[list[str]], env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(argvs)], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _health(home: Path) -> dict:
    import http.client

    info = json.loads((home / DISCOVERY_FILE).read_text())
    c = http.client.HTTPConnection(info["host"], info["port"], timeout=10)
    c.request("GET", "/v1/health", headers={"X-Sheaf-Token": info["token"]})
    r = c.getresponse()
    body = json.loads(r.read())
    c.close()
    return body


def _start_server(env: dict[str, str], home: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "sheaf.cli", "serve", "--port", "0"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while not (home / DISCOVERY_FILE).exists():
        if proc.poll() is not None:
            raise AssertionError(f"sheaf serve exited: {proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, "sheaf serve did not start within 180 s"
        time.sleep(0.1)
    return proc


def _stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _home_with_index(sample_index, onnx_export, home: Path) -> dict[str, str]:
    """`home` holding a copy of the sample index and the session's ONNX export; the
    environment of a process using it (no other SHEAF_* variable leaks in)."""
    from tests.kits.paths import link_onnx_export

    sample_index.copy(home / "index" / "sheaf.db")
    link_onnx_export(onnx_export, home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHEAF_")}
    env.update({"SHEAF_HOME": str(home), "SHEAF_LIBRARY": str(sample_index.library), "PYTHONPATH": str(ROOT)})
    return env


@pytest.fixture(scope="module")
def served(sample_index, onnx_export, tmp_path_factory):
    home = tmp_path_factory.mktemp("served") / "home"
    env = _home_with_index(sample_index, onnx_export, home)
    proc = _start_server(env, home)
    try:
        yield home, env, proc
    finally:
        _stop_server(proc)
    assert not (home / DISCOVERY_FILE).exists()  # removed on exit


def _cases(short_ids: list[str]) -> list[list[str]]:
    cases = [
        ["search", "alumina", "creep"], ["search", "QLN-482"], ["search", "pollinator", "elevation", "--limit", "3"],
        ["search", "soil", "moisture", "--year-from", "2022"], ["search", "zzzz", "qqqq"],
        ["grep", "QLN-482"], ["grep", "QLN", "482", "--paper", "R4N8DWTE"], ["grep", "µm"],
        ["get", "nonexistent-id"], ["retrieve", "?"], ["timeline", "nope"],
    ]
    for q in (["theta", "gamma", "coupling", "in", "the", "hippocampus"], ["soil", "moisture", "from", "radar"],
              ["does", "the", "P2X3", "antagonist", "reduce", "cough"], ["shrinkage", "priors", "small", "areas"],
              ["yttrium", "doped", "alumina", "creep", "rate"], ["骨密度"], ["SPG-302"]):
        for mode in ("lexical", "semantic", "hybrid"):
            cases.append(["retrieve", *q, "--mode", mode])
    cases += [
        ["retrieve", "solid", "fuel", "pneumonia", "--full", "--limit", "3"],
        ["retrieve", "figure", "of", "the", "creep", "rate", "--kind", "object", "--mode", "semantic"],
        ["retrieve", "electrolyte", "conductivity", "--paper", "P9KE3UHB", "--per-paper", "0"],
        ["retrieve", "lichen", "growth", "--limit", "2", "--mode", "hybrid", "--per-paper", "1"],
        ["get", *short_ids[:3]], ["timeline", short_ids[0]], ["timeline", short_ids[1], "--window", "1"],
    ]
    return cases


def test_served_and_local_envelopes_are_identical(served):
    home, env, _ = served
    first = _run_cli_batch([["retrieve", "creep", "of", "alumina", "--json", "--no-server", "--limit", "5"]], env)
    short_ids = [m["short_id"] for m in json.loads(first["runs"][0]["stdout"])["data"]["matches"]]
    assert len(short_ids) >= 3
    cases = _cases(short_ids)
    before = _health(home)["requests"]
    local = _run_cli_batch([[*c, "--json", "--no-server"] for c in cases], env)
    remote = _run_cli_batch([[*c, "--json"] for c in cases], env)
    after = _health(home)["requests"]
    assert sum(after.values()) - sum(before.values()) == len(cases)  # every one was served
    assert remote["heavy"] == []  # the served client neither encodes nor imports a model runtime
    assert "torch" not in local["heavy"] and "onnxruntime" in local["heavy"]  # local: ONNX encoder
    oks = 0
    for a, b in zip(local["runs"], remote["runs"]):
        assert a["code"] == b["code"], a["argv"]
        ea, eb = json.loads(a["stdout"]), json.loads(b["stdout"])
        if ea["ok"]:  # who answered is the one difference
            assert ea["data"]["engines"]["served_by"] == "local" and eb["data"]["engines"]["served_by"] == "server"
        assert without_engines(ea) == without_engines(eb), a["argv"]
        oks += ea["ok"]
        assert not any("ONNX query encoder missing" in w for w in ea.get("warnings", []))
    assert oks >= len(cases) - 4  # the error cases are compared too
    health = _health(home)
    assert health["accelerator"]["answered"] > 0 and health["accelerator"]["declined"] == 0
    # the full-text legs were ranked from the server's in-memory copy, bit for bit as FTS5
    lex = health["lexical"]
    assert lex["stats"]["answered"] > 20 and lex["disabled"] == {}, lex
    assert set(lex["tables_bytes"]) == {"papers_fts", "body_units_fts", "object_units_fts"}


def test_served_and_local_tables_are_identical(served):
    _, env, _ = served
    cases = [["retrieve", "theta", "gamma", "coupling"], ["search", "alumina"], ["grep", "QLN-482"],
             ["retrieve", "shrinkage", "prior", "--full", "--limit", "2"]]
    local = _run_cli_batch([[*c, "--no-server"] for c in cases], {**env, "COLUMNS": "120"})
    remote = _run_cli_batch(cases, {**env, "COLUMNS": "120"})
    for a, b in zip(local["runs"], remote["runs"]):
        assert (a["code"], a["stdout"]) == (b["code"], b["stdout"]) and a["stdout"], a["argv"]
    assert remote["heavy"] == []


def test_dead_server_is_detected_and_its_file_removed(sample_index, onnx_export, tmp_path):
    home = tmp_path / "home"
    env = _home_with_index(sample_index, onnx_export, home)
    proc = _start_server(env, home)
    try:
        second = subprocess.run([sys.executable, "-m", "sheaf.cli", "serve", "--json"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and "already runs" in second.stdout  # one server per home
        proc.kill()  # no cleanup: the discovery file stays behind
        proc.wait(timeout=30)
        assert (home / DISCOVERY_FILE).exists()
        t0 = time.perf_counter()
        out = _run_cli_batch([["search", "alumina", "--json"]], env)
        assert json.loads(out["runs"][0]["stdout"])["ok"]
        assert not (home / DISCOVERY_FILE).exists()
        assert time.perf_counter() - t0 < 60
    finally:
        _stop_server(proc)
