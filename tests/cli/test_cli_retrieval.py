"""`sheaf search | retrieve | get | timeline | grep`: every flag, the JSON envelope and the
tables for people, every error code with its exit status, and the cold-path import check.

Commands run in-process through `sheaf.cli.app.main` (the sample index of conftest.py, found
through SHEAF_INDEX_FILE) and, for the import and envelope-on-stdout checks, in a fresh
subprocess.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sheaf import __version__
from sheaf.cli.app import main
from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr
from tests.kits.papers import one_envelope

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CODE_PAPER = "R4N8DWTE"
OK_KEYS = {"ok", "command", "version", "data", "count", "warnings", "next_actions"}
ERROR_KEYS = {"ok", "command", "version", "error"}
MATCH_KEYS = {"zotero_key", "title", "first_author", "year", "journal", "domain", "score", "text", "heading",
              "source", "unit_id", "short_id", "section_path", "page_span"}
#: Modules the light commands must never import (checked in a fresh process).
HEAVY = {"numpy", "torch", "dagster", "pydantic", "pydantic_settings", "sentence_transformers", "transformers",
         "pyarrow", "sqlite_vec", "onnxruntime", "duckdb", "pipelines", "assets", "tokenizers",
         "psycopg", "pgvector"}  # the Postgres driver: only for a postgresql:// SHEAF_INDEX_URL


@pytest.fixture()
def env(sample_index, tmp_path, monkeypatch) -> dict[str, str]:
    """The sample index as the configured index (in this process and for subprocesses)."""
    values = {"SHEAF_INDEX_FILE": str(sample_index.path), "SHEAF_HOME": str(tmp_path / "home"),
              "SHEAF_LIBRARY": str(sample_index.library)}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SHEAF_EMBEDDING_MODEL", raising=False)
    monkeypatch.setenv("COLUMNS", "110")  # the tables' width whatever runs the tests (a terminal, xdist)
    return values


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


envelope = one_envelope


def ok_json(capsys, *args: str) -> dict[str, Any]:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, (args, err, out[:500])
    env = envelope(out)
    assert set(env) == OK_KEYS and env["ok"] is True and env["command"] == args[0]
    assert env["version"] == __version__ and env["count"] == len(env["data"]["matches"])
    for m in env["data"]["matches"]:
        assert MATCH_KEYS <= set(m)
    assert env["data"]["engines"]["served_by"] == "local"  # no server runs for these homes
    return env


def err_json(capsys, code_expected: str, *args: str, exit_code: int = 2) -> dict[str, Any]:
    code, out, err = run(capsys, *args, "--json")
    assert code == exit_code, (args, code, out, err)
    assert "Traceback" not in out + err
    env = envelope(out)
    assert set(env) == ERROR_KEYS and env["ok"] is False
    assert env["error"]["code"] == code_expected, env
    assert env["error"]["message"] and isinstance(env["error"]["details"], dict)
    return env


# --- search ------------------------------------------------------------------------------------

def test_search_json_and_every_flag(env, capsys):
    e = ok_json(capsys, "search", "QLN-482")
    assert e["data"]["matches"][0]["zotero_key"] == CODE_PAPER and e["data"]["query"] == "QLN-482"
    e = ok_json(capsys, "search", "results", "--limit", "3")
    assert e["count"] == 3
    e = ok_json(capsys, "search", "results", "--limit", "50", "--year-from", "2022", "--year-to", "2023")
    assert e["count"] and all(2022 <= m["year"] <= 2023 for m in e["data"]["matches"])
    assert e["data"]["filters"] == {"year_from": 2022, "year_to": 2023, "domain": None, "author": None,
                                    "collection": None, "tag": None}
    e = ok_json(capsys, "search", "results", "--domain", "Nowhere", "--domain", "Else")
    assert e["count"] == 0 and e["data"]["filters"]["domain"] == ["Nowhere", "Else"]
    assert e["data"]["coverage"]["indexed"] == 10 and e["next_actions"]
    e = ok_json(capsys, "search", "cough", "frequency")  # several words without quotes
    assert e["data"]["query"] == "cough frequency"


def test_search_table(env, capsys):
    code, out, err = run(capsys, "search", "QLN", "482")
    assert code == 0 and err == ""
    head, first = out.splitlines()[0], out.splitlines()[2]
    assert head.split() == ["#", "paper", "year", "first", "author", "rrf", "score", "title"], head
    assert re.match(r"^ 1\. R4N8DWTE  2023  O'Rourke +rrf \d\.\d{4} +Efficacy and safety of QLN-482", first), first
    assert out.splitlines()[3].startswith("      ") and "next:" in out
    code, out, _ = run(capsys, "search", "zebra")
    assert code == 0 and out.startswith("no matches\ncoverage: ") and "next: " in out


# --- retrieve ----------------------------------------------------------------------------------

COMPACT = re.compile(r"^ *\d+\. \[[0-9a-f]{4,}\] [A-Z0-9]{8} (\d{4}|----) (body|backmatter|figure|table) +"
                     r"(bm25|cosine|rrf) -?\d+\.\d+ +\S")


def test_retrieve_every_flag(env, capsys):
    for mode in ("lexical", "semantic", "hybrid"):
        e = ok_json(capsys, "retrieve", "awake", "cough", "frequency", "--mode", mode)
        d = e["data"]
        assert d["mode"] == mode and d["limit"] == 10 and d["per_paper"] == 2 and d["kind"] == "all"
        assert e["count"] == (9 if mode == "lexical" else 10)  # lexical: 9 units reachable at 2 per paper
        assert d["matches"][0]["zotero_key"] == CODE_PAPER
        assert all(m["legs"] for m in d["matches"]) and ("fusion" in d) == (mode == "hybrid")
    e = ok_json(capsys, "retrieve", "results", "--mode", "lexical", "--limit", "4", "--per-paper", "1")
    assert e["count"] == 4 and len({m["zotero_key"] for m in e["data"]["matches"]}) == 4
    e = ok_json(capsys, "retrieve", "results", "--mode", "lexical", "--limit", "30", "--per-paper", "0",
                "--paper", "T5GM2QWN", "--paper", "QX7HK2MA")
    assert {m["zotero_key"] for m in e["data"]["matches"]} == {"T5GM2QWN", "QX7HK2MA"}
    assert e["data"]["papers"] == ["T5GM2QWN", "QX7HK2MA"] and e["count"] >= 4
    e = ok_json(capsys, "retrieve", "cough", "--mode", "lexical", "--kind", "object", "--per-paper", "0")
    assert e["count"] and {m["source"] for m in e["data"]["matches"]} <= {"figure", "table"}
    e = ok_json(capsys, "retrieve", "cough", "--mode", "lexical", "--kind", "body")
    assert e["count"] and {m["source"] for m in e["data"]["matches"]} <= {"body", "backmatter"}
    e = ok_json(capsys, "retrieve", "cough", "--mode", "lexical", "--limit", "2", "--full")
    conn = ix.open_index(env["SHEAF_INDEX_FILE"], readonly=True)
    units = rd.get_units(conn, [m["unit_id"] for m in e["data"]["matches"]])
    conn.close()
    from sheaf.search.units import unit_text as _unit_text
    assert [m["text"] for m in e["data"]["matches"]] == [_unit_text(units[m["unit_id"]]) for m in e["data"]["matches"]]
    assert all(m["text_is_full"] for m in e["data"]["matches"])


def test_retrieve_tables(env, capsys):
    code, out, err = run(capsys, "retrieve", "awake cough frequency", "--mode", "lexical", "--limit", "5")
    lines = [line for line in out.splitlines() if re.match(r"^ *\d+\. \[", line)]
    assert code == 0 and len(lines) == 5, out
    assert out.splitlines()[0].split()[:3] == ["#", "short", "id"]
    for line in lines:
        assert COMPACT.match(line), line
    assert "next: sheaf get" in out
    code, out, _ = run(capsys, "retrieve", "awake cough frequency", "--mode", "lexical", "--limit", "1", "--full")
    assert code == 0 and out.startswith("[") and "\n    " in out and len(out) > 300


# --- get / timeline: the three layers --------------------------------------------------------------

def test_three_layers_round_trip(env, capsys):
    found = ok_json(capsys, "retrieve", "awake cough frequency", "--mode", "lexical", "--limit", "3")
    ids = [m["short_id"] for m in found["data"]["matches"]]
    got = ok_json(capsys, "get", *ids)
    assert [m["short_id"] for m in got["data"]["matches"]] == ids
    for compact, full in zip(found["data"]["matches"], got["data"]["matches"]):
        assert compact["unit_id"] == full["unit_id"] and len(full["text"]) >= len(compact["text"]) - 2
        assert full["text_is_full"] and full["score"] is None
    tl = ok_json(capsys, "timeline", ids[0], "--window", "1")
    offs = [m["offset"] for m in tl["data"]["matches"]]
    assert 0 in offs and offs == sorted(offs) and set(offs) <= {-1, 0, 1}
    assert tl["data"]["anchor"]["short_id"] == ids[0] and tl["data"]["window"] == 1
    assert ok_json(capsys, "timeline", ids[0])["data"]["window"] == 2
    code, out, _ = run(capsys, "get", ids[0], "nosuchid")
    assert code == 0 and out.startswith(f"[{ids[0]}]") and "warning: no unit with id nosuchid" in out
    code, out, _ = run(capsys, "timeline", ids[0], "--window", "1")
    assert code == 0 and f">> [{ids[0]}]" in out


# --- grep --------------------------------------------------------------------------------------

def test_grep_json_and_table(env, capsys):
    e = ok_json(capsys, "grep", "QLN482")
    d = e["data"]
    assert d["papers_with_hits"] == 1 and {"QLN-482", "QLN482", "QLN 482"} <= set(d["variants"])
    assert sum(d["variants"].values()) == e["count"]
    for m in d["matches"]:
        assert {"field", "char_start", "char_end", "span", "page"} <= set(m) and m["span"] in m["text"]
    e2 = ok_json(capsys, "grep", "QLN", "482", "--paper", CODE_PAPER)
    assert e2["count"] == e["count"]
    e3 = ok_json(capsys, "grep", "QLN-482", "--paper", "QX7HK2MA")
    assert e3["count"] == 0 and "coverage" in e3["data"]
    code, out, _ = run(capsys, "grep", "QLN\u2011482")
    assert code == 0 and re.search(r"^\[[0-9a-f]+\] R4N8DWTE p\.\d+ text:\d+-\d+  'QLN-482'(  |$)", out, re.M)
    assert f"{e['count']} occurrences in 1 paper;" in out


# --- errors ------------------------------------------------------------------------------------

def test_index_not_found(env, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SHEAF_INDEX_FILE", str(tmp_path / "missing.db"))
    for args in (("search", "x"), ("retrieve", "x"), ("get", "abcd"), ("timeline", "abcd"), ("grep", "x")):
        e = err_json(capsys, "INDEX_NOT_FOUND", *args)
        assert e["command"] == args[0] and "sheaf build" in e["error"]["details"]["hint"]
    code, out, err = run(capsys, "search", "x")  # people get the message on stderr
    assert code == 2 and out == "" and err.startswith("error [INDEX_NOT_FOUND]") and "hint:" in err


def test_backend_unavailable(env, capsys, tmp_path, monkeypatch):
    junk = tmp_path / "junk.db"
    junk.write_text("not a database " * 500)
    monkeypatch.setenv("SHEAF_INDEX_FILE", str(junk))
    err_json(capsys, "BACKEND_UNAVAILABLE", "search", "x")


def test_vector_errors(env, capsys, tmp_path, monkeypatch, sample_index):
    bare = tmp_path / "bare.db"
    conn = ix.open_index(bare)
    units = sample_index.papers[CODE_PAPER]
    wr.replace_paper(conn, CODE_PAPER, units.body_units, units.object_units)
    conn.close()
    monkeypatch.setenv("SHEAF_INDEX_FILE", str(bare))
    err_json(capsys, "VECTOR_NOT_BUILT", "retrieve", "cough")
    err_json(capsys, "VECTOR_NOT_BUILT", "retrieve", "cough", "--mode", "semantic")
    assert ok_json(capsys, "retrieve", "cough", "--mode", "lexical")["count"] > 0

    broken = sample_index.copy(tmp_path / "broken.db")
    conn = ix.open_index(broken)
    conn.execute(f"DROP TABLE {sample_index.identity.vec_table}_vector_chunks00")
    conn.close()
    monkeypatch.setenv("SHEAF_INDEX_FILE", str(broken))
    err_json(capsys, "VECTOR_CORRUPTED", "retrieve", "cough", "--mode", "semantic")

    monkeypatch.setenv("SHEAF_INDEX_FILE", str(sample_index.path))
    monkeypatch.setenv("SHEAF_EMBEDDING_MODEL", "intfloat/e5-small-v2")
    e = err_json(capsys, "MODEL_CHANGED", "retrieve", "cough")
    assert "SHEAF_EMBEDDING_MODEL" in e["error"]["details"]["hint"]


def test_bad_query_and_not_found(env, capsys):
    for q in ("***", '"', "()", "-"):
        e = err_json(capsys, "BAD_QUERY", "search", q)
        assert e["error"]["details"]["hint"]
        err_json(capsys, "BAD_QUERY", "retrieve", q, "--mode", "lexical")
    err_json(capsys, "NOT_FOUND", "get", "zzzz")
    err_json(capsys, "NOT_FOUND", "timeline", "zzzz")
    err_json(capsys, "NOT_FOUND", "retrieve", "x", "--paper", "NOSUCH99")
    err_json(capsys, "NOT_FOUND", "grep", "x", "--paper", "NOSUCH99")


def test_usage_errors_give_an_envelope_under_json(env, capsys):
    for args in (("retrieve", "x", "--limit", "0"), ("retrieve", "x", "--mode", "fuzzy"),
                 ("retrieve", "x", "--kind", "pdf"), ("search", "x", "--year-from", "soon"),
                 ("timeline", "abcd", "--window", "-1"), ("search",), ("retrieve", "x", "--per-paper", "-2")):
        e = err_json(capsys, "BAD_QUERY", *args)
        assert e["command"] == args[0]
    code, out, err = run(capsys, "retrieve", "x", "--limit", "0")
    assert code == 2 and out == "" and "must be 1 or more" in err and "usage:" in err


def test_internal_error_is_an_envelope(env, capsys, monkeypatch):
    from sheaf.search.retriever import Retriever

    def boom(self, *a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(Retriever, "search", boom)
    e = err_json(capsys, "INTERNAL_ERROR", "search", "x", exit_code=3)
    assert "kaboom" in e["error"]["message"]


# --- fresh processes: envelope on stdout, and the light import path -----------------------------

def sub(env: dict[str, str], *args: str, probe: bool = False) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env, "PYTHONIOENCODING": "utf-8"}
    if probe:  # run the command, then report which heavy modules got imported
        code = ("import json, sys\nfrom sheaf.cli.app import main\nrc = main(sys.argv[1:])\n"
                "sys.stderr.write('\\nMODULES ' + json.dumps(sorted(sys.modules)))\n"
                "sys.exit(rc)")
        cmd = [sys.executable, "-c", code, *args]
    else:
        cmd = [sys.executable, "-m", "sheaf.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", env=full_env, cwd=ROOT, timeout=120)


@pytest.mark.parametrize("args", [("search", "QLN-482", "--json"),
                                  ("retrieve", "awake cough frequency", "--mode", "lexical", "--json"),
                                  ("grep", "QLN 482", "--json"),
                                  ("search", "cough"),
                                  ("retrieve", "zebra", "--mode", "lexical", "--json")])
def test_light_commands_import_no_heavy_module(env, args):
    proc = sub(env, *args, probe=True)
    assert proc.returncode == 0, proc.stderr
    full = set(json.loads(proc.stderr.rsplit("MODULES ", 1)[1]))
    modules = {m.split(".")[0] for m in full}
    assert not modules & HEAVY, sorted(modules & HEAVY)
    assert not {m for m in full if m.startswith("sheaf.store.postgres")}  # the SQLite default never loads it
    if args[0] == "search" or "lexical" in args:  # the vector stack stays out of a keystroke's process
        assert not full & {"sheaf.vectors.query_encoder", "sheaf.vectors.embedder", "sheaf.vectors.onnx"}
    if "--json" in args:
        assert envelope(proc.stdout)["ok"] is True


def test_get_and_timeline_are_light_too(env):
    e = envelope(sub(env, "retrieve", "cough", "--mode", "lexical", "--limit", "1", "--json").stdout)
    sid = e["data"]["matches"][0]["short_id"]
    for args in (("get", sid, "--json"), ("timeline", sid, "--json")):
        proc = sub(env, *args, probe=True)
        full = json.loads(proc.stderr.rsplit("MODULES ", 1)[1])
        assert proc.returncode == 0 and not {m.split(".")[0] for m in full} & HEAVY


def test_errors_in_a_fresh_process(env, tmp_path):
    proc = sub({**env, "SHEAF_INDEX_FILE": str(tmp_path / "none.db")}, "search", "x", "--json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert envelope(proc.stdout)["error"]["code"] == "INDEX_NOT_FOUND"
    proc = sub(env, "retrieve", "x", "--limit", "zero", "--json")
    assert proc.returncode == 2 and envelope(proc.stdout)["error"]["code"] == "BAD_QUERY"
