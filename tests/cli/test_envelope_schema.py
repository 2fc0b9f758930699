"""The result envelope contract: docs/result-envelope.schema.json validates the real output of
every command (success, nothing found, and every error code, each produced for real where a
command can produce it), and rejects envelopes that break the contract."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sheaf.cli.app import main
from sheaf.core import home_record
from sheaf.core.envelope import ERROR_CODES, error
from sheaf.store.sqlite import reader as rd
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr

jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "docs" / "result-envelope.schema.json"
CODE_PAPER = "R4N8DWTE"


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def indexes(sample_index, tmp_path_factory) -> dict[str, Path]:
    """The sample index plus damaged variants: no vectors, unreadable vectors, not a database."""
    d = tmp_path_factory.mktemp("schema-indexes")
    bare = d / "bare.db"
    conn = ix.open_index(bare)
    out = sample_index.papers[CODE_PAPER]
    wr.replace_paper(conn, CODE_PAPER, out.body_units, out.object_units)
    conn.close()
    broken = sample_index.copy(d / "broken.db")
    conn = ix.open_index(broken)
    conn.execute(f"DROP TABLE {sample_index.identity.vec_table}_vector_chunks00")
    conn.close()
    junk = d / "junk.db"
    junk.write_text("not a database " * 500)
    home_record.write_record(d / "home", d / "recorded-library", "plain")  # the home of every case
    (d / "bad-paper").mkdir()
    (d / "bad-paper" / "result.json").write_text("{ this is not json", encoding="utf-8")
    return {"sample": sample_index.path, "bare": bare, "broken": broken, "junk": junk,
            "missing": d / "missing.db", "bad_paper": d / "bad-paper" / "result.json", "dir": d}


def short_ids(path: Path) -> list[str]:
    conn = ix.open_index(path, readonly=True)
    b, _ = rd.paper_units(conn, CODE_PAPER)
    conn.close()
    return [u.short_id for u in b[:3]]


# (label, index key, extra env, argv, expected error code or None)
CASES: list[tuple[str, str, dict[str, str], list[str], str | None]] = [
    ("search", "sample", {}, ["search", "QLN-482"], None),
    ("search-filtered", "sample", {}, ["search", "results", "--year-from", "2020", "--year-to", "2023", "--limit", "3"], None),
    ("search-empty", "sample", {}, ["search", "zebra"], None),
    ("search-metadata-only", "sample", {}, ["search", "Respiratory Therapeutics"], None),
    ("retrieve-lexical", "sample", {}, ["retrieve", "awake cough frequency", "--mode", "lexical"], None),
    ("retrieve-semantic", "sample", {}, ["retrieve", "awake cough frequency", "--mode", "semantic", "--kind", "body"], None),
    ("retrieve-hybrid", "sample", {}, ["retrieve", "awake cough frequency", "--per-paper", "1", "--limit", "5"], None),
    ("retrieve-full", "sample", {}, ["retrieve", "cough", "--mode", "lexical", "--full", "--kind", "object",
                                     "--paper", CODE_PAPER], None),
    ("retrieve-empty", "sample", {}, ["retrieve", "zebra", "--mode", "lexical"], None),
    ("get", "sample", {}, ["get", "@0", "@1", "nosuchid"], None),
    ("timeline", "sample", {}, ["timeline", "@1", "--window", "1"], None),
    ("grep", "sample", {}, ["grep", "QLN 482"], None),
    ("grep-empty", "sample", {}, ["grep", "zebra", "--paper", CODE_PAPER], None),
    ("INDEX_NOT_FOUND", "missing", {}, ["search", "x"], "INDEX_NOT_FOUND"),
    ("VECTOR_NOT_BUILT", "bare", {}, ["retrieve", "cough"], "VECTOR_NOT_BUILT"),
    ("VECTOR_CORRUPTED", "broken", {}, ["retrieve", "cough", "--mode", "semantic"], "VECTOR_CORRUPTED"),
    ("MODEL_CHANGED", "sample", {"SHEAF_EMBEDDING_MODEL": "intfloat/e5-small-v2"}, ["retrieve", "cough"], "MODEL_CHANGED"),
    ("BAD_QUERY", "sample", {}, ["search", "*** ()"], "BAD_QUERY"),
    ("BAD_QUERY-usage", "sample", {}, ["retrieve", "x", "--limit", "0"], "BAD_QUERY"),
    ("NOT_FOUND", "sample", {}, ["timeline", "nosuchid"], "NOT_FOUND"),
    ("BACKEND_UNAVAILABLE", "junk", {}, ["grep", "x"], "BACKEND_UNAVAILABLE"),
    ("INTERNAL_ERROR", "sample", {}, ["get", "@0"], "INTERNAL_ERROR"),
    ("BAD_INPUT", "sample", {}, ["parse", "@bad_paper", "--format", "paddleocr-vl"], "BAD_INPUT"),
    ("LIBRARY_MISMATCH", "sample", {}, ["search", "x", "--library", "@dir"], "LIBRARY_MISMATCH"),
]


def run_case(case, indexes, monkeypatch, capsys) -> dict[str, Any]:
    label, key, extra, argv, _ = case
    monkeypatch.setenv("SHEAF_INDEX_FILE", str(indexes[key]))
    monkeypatch.setenv("SHEAF_HOME", str(indexes["dir"] / "home"))
    monkeypatch.delenv("SHEAF_EMBEDDING_MODEL", raising=False)
    for k, v in extra.items():
        monkeypatch.setenv(k, v)
    ids = short_ids(indexes["sample"])
    argv = [ids[int(a[1:])] if a.startswith("@") and a[1:].isdigit() else
            str(indexes[a[1:]]) if a.startswith("@") else a for a in argv]
    if label == "INTERNAL_ERROR":
        from sheaf.search.retriever import Retriever
        monkeypatch.setattr(Retriever, "get", lambda self, refs: 1 / 0)
    capsys.readouterr()
    code = main(argv + ["--json"])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    env = json.loads(lines[0])
    assert (code == 0) == env["ok"]
    return env


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_command_and_error_validates(case, indexes, validator, monkeypatch, capsys):
    env = run_case(case, indexes, monkeypatch, capsys)
    errors = sorted(validator.iter_errors(env), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    expected = case[4]
    if expected is None:
        assert env["ok"] is True and env["count"] == len(env["data"]["matches"])
        assert env["data"]["engines"]["served_by"] == "local"
        if not env["data"]["matches"]:
            assert "coverage" in env["data"] and env["next_actions"]
    else:
        assert env["ok"] is False and env["error"]["code"] == expected


def test_every_error_code_is_covered_and_in_the_schema(validator):
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert set(schema["$defs"]["error_code"]["enum"]) == set(ERROR_CODES)
    produced = {c[4] for c in CASES if c[4]}
    assert set(ERROR_CODES) - produced == {"TIMEOUT"}  # no command has a deadline yet
    validator.validate(error("retrieve", "TIMEOUT", "the query took longer than 10 s", {"hint": "retry"}))


def test_other_commands_validate(validator, tmp_path):
    """parse, report, status and build (Dagster, on an empty library) in fresh processes."""
    lib = tmp_path / "lib"
    (lib / "papers").mkdir(parents=True)
    env = {**os.environ, "SHEAF_HOME": str(tmp_path / "home"), "SHEAF_LIBRARY": str(lib),
           "PYTHONIOENCODING": "utf-8"}
    paper = ROOT / "data" / "sample-library" / "papers" / "F7RZ4JDB"
    for argv in (["parse", str(paper)], ["parse", str(paper), "--stage", "tree"], ["report"], ["status"],
                 ["build"], ["parse", str(tmp_path / "nope")]):
        proc = subprocess.run([sys.executable, "-m", "sheaf.cli", *argv, "--json"], capture_output=True,
                              text=True, encoding="utf-8", env=env, cwd=tmp_path, timeout=300)
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(out)]
        assert not errors, (argv, errors[:5])
        assert out["command"] == argv[0] and (proc.returncode == 0) == out["ok"]


def test_schema_rejects_broken_envelopes(validator, indexes, monkeypatch, capsys):
    good = run_case(CASES[0], indexes, monkeypatch, capsys)
    grep = run_case(CASES[11], indexes, monkeypatch, capsys)
    bad_err = error("search", "INDEX_NOT_FOUND", "no index")
    validator.validate(good)
    validator.validate(grep)
    validator.validate(bad_err)

    def mutated(env, fn):
        e = copy.deepcopy(env)
        fn(e)
        return e

    broken = [
        mutated(good, lambda e: e.pop("count")),
        mutated(good, lambda e: e.update(extra=1)),
        mutated(good, lambda e: e.update(ok=False)),
        mutated(good, lambda e: e["data"]["matches"][0].pop("zotero_key")),
        mutated(good, lambda e: e["data"]["matches"][0].update(year="2023")),
        mutated(good, lambda e: e["data"]["matches"][0].update(source="pdf")),
        mutated(good, lambda e: e["data"]["matches"][0].update(page_span=[1])),
        mutated(good, lambda e: e["data"].pop("matches")),
        mutated(good, lambda e: e.update(warnings=[1])),
        mutated(good, lambda e: e["data"].pop("engines")),
        mutated(good, lambda e: e["data"]["engines"].pop("served_by")),
        mutated(good, lambda e: e["data"]["engines"].update(served_by="elsewhere")),
        mutated(grep, lambda e: e["data"]["matches"][0].pop("char_start")),
        mutated(grep, lambda e: e["data"]["matches"][0].update(field="nearby_text")),
        mutated(bad_err, lambda e: e["error"].update(code="OOPS")),
        mutated(bad_err, lambda e: e["error"].pop("details")),
        mutated(bad_err, lambda e: e.update(data={})),
    ]
    for b in broken:
        assert list(validator.iter_errors(b)), b
