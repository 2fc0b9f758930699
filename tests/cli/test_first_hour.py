"""A newcomer's first hour, run the way a user runs Sheaf: `python -m sheaf` in a
fresh process, text and JSON.

- a built library (the pipeline kit's base home, built once per process by `sheaf build`) and a
  copy of it with one paper edited, one removed, one new, one with invalid JSON, an empty folder
  and a folder named `bad key`: what `status`, `doctor` and `parse` say about it, and that
  `status` writes nothing;
- a home that was never built: `status`, `doctor`, `report`, `search` say so, create nothing,
  and name the paths they looked at;
- bad settings: BAD_INPUT naming the variable, exit 2, for every command;
- the result tables of the query commands (lexical: no model in the subprocess) on the same
  built home, their filters and their errors.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sheaf.core.settings import Settings, variable
from tests.kits.papers import one_envelope
from tests.kits.pipeline import Home, built_base, clone, edit_markdown, env_for_subprocess, make_library

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "result-envelope.schema.json"


def sheaf(env: dict[str, str], *argv: str, cwd: Path | None = None, columns: int = 100) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "sheaf", *argv], capture_output=True, text=True, encoding="utf-8",
                          env={**env, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT)}, cwd=cwd or ROOT,
                          timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    return proc


def envelope(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    return one_envelope(proc.stdout, proc.stderr)


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


@pytest.fixture(scope="module")
def validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Home:
    """The built base home (4 papers: Markdown without headings, two MinerU, a PDF)."""
    return built_base(tmp_path_factory)[0]


@pytest.fixture(scope="module")
def changed(base, tmp_path_factory) -> Home:
    """A copy of the built home whose library changed since: L2YSNC8V edited, M3FJ9PLC removed,
    F7RZ4JDB new, BADJSON1 with invalid JSON, EMPTY0001 an empty folder, `bad key` a folder
    whose name is not a paper key."""
    h = clone(base, tmp_path_factory.mktemp("changed") / "copy")
    edit_markdown(h.papers / "L2YSNC8V" / "paper.md", "A paragraph added after the build.")
    shutil.rmtree(h.papers / "M3FJ9PLC")
    h.add_paper("F7RZ4JDB")
    (h.papers / "BADJSON1").mkdir()
    # broken before its head names a format: it reads as no known output unless the JSON is checked
    (h.papers / "BADJSON1" / "result.json").write_text('[\n  {"type": "text",\n    "text": oops}\n]\n')
    (h.papers / "EMPTY0001").mkdir()
    h.add_paper("bad key", "W6TB4YRS")
    return h


# --- status: the library as the build sees it ------------------------------------------------------

def test_status_sees_the_changed_library_and_writes_nothing(changed, validator):
    import sqlite3

    env = env_for_subprocess(changed)
    conn = sqlite3.connect(changed.home / "index" / "sheaf.db")
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    conn.close()  # the last connection closed: the WAL checkpointed, no -wal/-shm left
    assert not list((changed.home / "index").glob("*-wal"))
    before = files_under(changed.root)
    stats = changed.home / "artifacts" / "_source_stats.json"
    stats_before = stats.stat().st_mtime_ns
    proc = sheaf(env, "status", "--json")
    out = envelope(proc)
    assert proc.returncode == 0 and out["ok"], out
    assert not list(validator.iter_errors(out))
    papers = {p["paper_id"]: p for p in out["data"]["papers"]}
    assert (papers["L2YSNC8V"]["state"], papers["L2YSNC8V"]["reasons"]) == ("stale", ["OCR changed"])
    assert papers["M3FJ9PLC"]["state"] == "removed" and "sheaf build" in papers["M3FJ9PLC"]["reasons"][0]
    assert (papers["F7RZ4JDB"]["state"], papers["F7RZ4JDB"]["reasons"]) == ("missing", ["never built"])
    assert papers["BADJSON1"]["state"] == "missing"
    assert re.search(r"result\.json: invalid JSON at line 3 column \d+", papers["BADJSON1"]["reasons"][-1])
    assert "the folder is empty" in papers["EMPTY0001"]["reasons"][-1]
    assert {k: p["state"] for k, p in papers.items() if p["state"] == "built"} == \
        {"P9KE3UHB": "built", "W6TB4YRS": "built"}
    assert [s["folder"] for s in out["data"]["skipped"]] == ["bad key"]
    assert "contains a space" in out["data"]["skipped"][0]["reason"]
    assert out["data"]["states"] == {"stale": 1, "missing": 3, "built": 2, "removed": 1}
    assert out["next_actions"][0].startswith("run `sheaf build` to build 3 missing and 1 stale papers")
    assert "drop 1 removed paper" in out["next_actions"][0]
    assert any("rename the skipped folders" in a for a in out["next_actions"])

    text = sheaf(env, "status", columns=80)
    lines = text.stdout.splitlines()
    assert text.returncode == 0 and lines[0].split() == ["paper", "state", "why"]
    assert re.search(r"^L2YSNC8V +stale +OCR changed$", text.stdout, re.M)
    assert re.search(r"^M3FJ9PLC +removed +removed from the library", text.stdout, re.M)
    assert re.search(r"^bad key +skipped +not a valid paper key: it contains a space", text.stdout, re.M)
    flat = " ".join(text.stdout.split())  # the reasons are wrapped at 80 columns, never cut
    assert "cannot be read: result.json: invalid JSON at line 3 column" in flat
    assert lines[-2].startswith("next: run `sheaf build` to build 3 missing and 1 stale papers")
    assert lines[-1] == "next: rename the skipped folders to the paper's Zotero item key"
    # read-only: no file made or rewritten (not even the stat cache of the discovery). SQLite's
    # -wal/-shm beside the index are not Sheaf's: a read-only reader of a WAL database makes them
    # when they are missing and leaves them (whether the copied home had them depended on the
    # tests run before in the same process: this failed in a full run, passed alone)
    def ours(files: set[str]) -> set[str]:
        return {f for f in files if not f.endswith(("-wal", "-shm"))}

    assert ours(files_under(changed.root)) == ours(before) and stats.stat().st_mtime_ns == stats_before


def test_doctor_names_the_bad_key_problem(changed):
    proc = sheaf(env_for_subprocess(changed), "doctor", "--json")
    out = envelope(proc)
    assert proc.returncode == 1 and out["ok"]  # issues remain: exit 1, as --help and the README say
    bad = [i for i in out["data"]["issues"] if i["kind"] == "invalid_key"]
    assert len(bad) == 1 and "contains a space" in bad[0]["cause"] and "path characters" not in bad[0]["cause"]


def test_parse_of_the_library_shows_each_failure_whole(changed):
    env = env_for_subprocess(changed)
    proc = sheaf(env, "parse", str(changed.library), columns=70)
    assert proc.returncode == 1
    assert re.search(r"^failed: BADJSON1: result\.json: invalid JSON at line 3 column \d+ \(.+\)$", proc.stdout, re.M)
    assert re.search(r"^failed: EMPTY0001: found no recognised OCR/layout output .*: the folder is empty$",
                     proc.stdout, re.M)
    assert "warning: folder 'bad key' skipped: not a valid paper key: it contains a space" in proc.stdout
    one = envelope(sheaf(env, "parse", str(changed.papers / "BADJSON1"), "--json"))
    assert one["error"]["code"] == "BAD_INPUT" and "result.json: invalid JSON at line 3" in one["error"]["message"]


# --- a home never built ------------------------------------------------------------------------------

def test_a_home_never_built_says_so_and_creates_nothing(tmp_path, validator):
    lib = make_library(tmp_path / "lib", ("L2YSNC8V", "W6TB4YRS"))
    nowhere = tmp_path / "nowhere"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_"))}
    env.update({"SHEAF_HOME": str(nowhere), "SHEAF_LIBRARY": str(lib), "PYTHONWARNINGS": "ignore"})
    out = envelope(sheaf(env, "status", "--json"))
    assert out["ok"] and not list(validator.iter_errors(out))
    assert out["data"]["built_before"] is False and "no build yet" in out["data"]["message"]
    assert {p["paper_id"]: p["state"] for p in out["data"]["papers"]} == {"L2YSNC8V": "missing", "W6TB4YRS": "missing"}
    assert out["next_actions"] == ["no build yet in this home: run `sheaf build` to build the 2 papers"]
    doctor = sheaf(env, "doctor", "--json")
    assert doctor.returncode == 1 and {i["kind"] for i in envelope(doctor)["data"]["issues"]} == {"unregistered_paper"}
    report = sheaf(env, "report", "--json")
    err = envelope(report)["error"]
    assert report.returncode == 2 and err["code"] == "INDEX_NOT_FOUND" and f"SHEAF_HOME={nowhere}" in err["message"]
    search = sheaf(env, "search", "soil", "--json")
    err = envelope(search)["error"]
    assert search.returncode == 2 and err["code"] == "INDEX_NOT_FOUND"
    assert str(nowhere / "index" / "sheaf.db") in err["message"] and "SHEAF_HOME" in err["details"]["hint"]
    assert not nowhere.exists()  # status, doctor, report and search made nothing
    # no SHEAF_HOME: the path is relative to the folder sheaf runs in, and the error says so
    del env["SHEAF_HOME"]
    text = sheaf(env, "search", "soil", cwd=tmp_path)
    assert text.returncode == 2
    assert f"{tmp_path}/data/index/sheaf.db: SHEAF_HOME is not set, so the home is ./data in the current " \
           f"folder ({tmp_path})" in text.stderr
    missing_lib = sheaf({**env, "SHEAF_LIBRARY": "no-such-lib"}, "status", cwd=tmp_path)
    assert missing_lib.returncode == 2 and f"{tmp_path}/no-such-lib" in missing_lib.stderr
    assert "NOT_FOUND" in missing_lib.stderr and "--library" in missing_lib.stderr
    assert files_under(tmp_path) == files_under(tmp_path) & ({"lib"} | {f"lib/{p}" for p in files_under(lib)})


# --- settings -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("var, value, allowed", [
    ("SHEAF_UNIT_TOKEN_CAP", "abc", "an integer"),
    ("SHEAF_UNIT_TOKEN_CAP", "-5", "an integer >= 1"),
    ("SHEAF_EMBED_BACKEND", "foo", "one of auto, onnx, torch, sentence-transformers"),
    ("SHEAF_EMBED_PRECISION", "fp8", "one of auto, fp32, bf16, fp16"),
    ("SHEAF_NIGHTLY_CRON", "bogus", "a cron expression of five fields"),
    ("SHEAF_NIGHTLY_CRON", "61 * * * *", "a cron expression of five fields"),
])
def test_a_bad_setting_is_bad_input_for_every_command(var, value, allowed, tmp_path):
    env = {**os.environ, "SHEAF_HOME": str(tmp_path / "home"), var: value}
    for argv in (["status"], ["search", "soil"], ["report"]):
        proc = sheaf(env, *argv, "--json", cwd=tmp_path)
        err = envelope(proc)["error"]
        assert proc.returncode == 2 and err["code"] == "BAD_INPUT", (argv, err)
        assert err["message"] == f"{var} must be {allowed}{err['message'].split(allowed, 1)[1]}"
        assert err["details"]["variable"] == var and err["details"]["value"] == value
    assert not (tmp_path / "home").exists()


# --- the query commands' tables, filters and errors ------------------------------------------------

def test_result_tables_for_people(base):
    env = env_for_subprocess(base)
    js = envelope(sheaf(env, "retrieve", "soil", "temperature", "--mode", "lexical", "--per-paper", "0", "--json"))
    d = js["data"]
    assert d["score_kind"] == "bm25" and d["matches"]
    strong = [m["strong"] for m in d["matches"]]
    assert strong[0] and not strong[-1] and strong == sorted(strong, reverse=True)
    assert d["strong_matches"] == sum(strong)
    text = sheaf(env, "retrieve", "soil", "temperature", "--mode", "lexical", "--per-paper", "0", columns=60)
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["#", "short", "id", "paper", "year", "kind", "bm25", "score", "title"]
    first = d["matches"][0]
    assert re.match(rf"^ 1\. \[{first['short_id']}\] {first['zotero_key']} {first['year']} {first['source']} +"
                    rf"bm25 \d+\.\d+ +\S", lines[2]), lines[2]
    assert sum("weaker matches below" in line for line in lines) == 1
    flat = " ".join(text.stdout.split())
    for m in d["matches"]:  # at 60 columns every summary is there whole: a hit is never cut
        assert " ".join(m["summary"].split()) in flat, m["summary"]
    # --min-score keeps what scores that or more
    cut = first["score"] - 0.01
    kept = envelope(sheaf(env, "retrieve", "soil", "temperature", "--mode", "lexical", "--per-paper", "0",
                          "--min-score", str(cut), "--json"))["data"]["matches"]
    assert kept and all(m["score"] >= cut for m in kept) and len(kept) < len(d["matches"])
    # the per-paper cap says when it trimmed the answer
    capped = envelope(sheaf(env, "retrieve", "elevation", "--mode", "lexical", "--paper", "W6TB4YRS", "--limit", "3",
                            "--json"))
    assert capped["count"] == 2 and capped["data"]["capped"]["W6TB4YRS"] >= 1
    assert any("--per-paper 2 left out" in w and "--per-paper 0" in w for w in capped["warnings"])
    # grep counts in words
    one = sheaf(env, "grep", "snowmelt", "--paper", "W6TB4YRS")
    n = len(envelope(sheaf(env, "grep", "snowmelt", "--paper", "W6TB4YRS", "--json"))["data"]["matches"])
    assert f"{n} occurrence{'s' if n != 1 else ''} in 1 paper;" in one.stdout


def test_filters_and_evidence(base):
    env = env_for_subprocess(base)

    def keys(*argv: str) -> list[str]:
        return sorted({m["zotero_key"] for m in envelope(sheaf(env, *argv, "--json"))["data"]["matches"]})

    # a plain library has no domain (not "library" from the file name); its collections filter
    search = envelope(sheaf(env, "search", "temperature", "--json"))
    assert search["data"]["score_kind"] == "rrf" and {m["domain"] for m in search["data"]["matches"]} == {None}
    assert keys("retrieve", "temperature", "--mode", "lexical", "--collection", "ecology") == ["W6TB4YRS"]
    assert keys("search", "temperature", "--collection", "Sheaf sample library/Ecology") == ["W6TB4YRS"]
    assert keys("retrieve", "results", "--mode", "lexical", "--author", "muller") == ["P9KE3UHB"]  # Müller-Lenz
    years = envelope(sheaf(env, "retrieve", "results", "--mode", "lexical", "--year-from", "2022", "--year-to", "2022",
                           "--per-paper", "0", "--json"))["data"]
    assert years["matches"] and {m["year"] for m in years["matches"]} == {2022}
    assert years["filters"]["year_from"] == years["filters"]["year_to"] == 2022
    for cmd in (["search", "soil"], ["retrieve", "soil", "--mode", "lexical"]):
        proc = sheaf(env, *cmd, "--year-from", "2023", "--year-to", "2020", "--json")
        assert proc.returncode == 2 and envelope(proc)["error"]["code"] == "BAD_QUERY", cmd
    # the evidence label names the field that matched (Müller is an author, not the title)
    muller = envelope(sheaf(env, "search", "Muller", "--json"))["data"]["matches"]
    assert muller and all(m["heading"] == "Authors" for m in muller)


@pytest.fixture()
def sample_env(sample_index, tmp_path) -> dict[str, str]:
    return {**os.environ, "SHEAF_INDEX_FILE": str(sample_index.path), "SHEAF_HOME": str(tmp_path / "home"),
            "SHEAF_LIBRARY": str(sample_index.library)}


def test_search_evidence_and_key_errors(sample_env):
    m = {x["zotero_key"]: x for x in envelope(sheaf(sample_env, "search", "soil", "--json"))["data"]["matches"]}
    assert m["D2LPA7XK"]["source"] == "body" and "Acknowledg" not in m["D2LPA7XK"]["heading"]
    wrong_case = sheaf(sample_env, "retrieve", "soil", "--paper", "w6tb4yrs", "--mode", "lexical", "--json")
    err = envelope(wrong_case)["error"]
    assert err["code"] == "NOT_FOUND" and "did you mean W6TB4YRS" in err["message"]
    as_unit = envelope(sheaf(sample_env, "get", "W6TB4YRS", "--json"))["error"]
    assert as_unit["code"] == "NOT_FOUND" and "is a paper key" in as_unit["message"]
    assert "retrieve QUERY --paper W6TB4YRS" in as_unit["details"]["hint"]
    bad = sheaf(sample_env, "timeline", "abc", "--window", "abc")
    assert bad.returncode == 2 and bad.stderr.startswith("usage: sheaf timeline ")
    assert "--window: must be an integer, not 'abc'" in bad.stderr and "_nonnegative_int" not in bad.stderr


# --- the documentation a newcomer reads ------------------------------------------------------------

#: The commands whose README examples run on the sample library (build, stop, doctor, eval change
#: the home or need other data).
README_COMMANDS = ("search", "retrieve", "get", "grep", "timeline", "status", "report", "parse")


def readme_examples() -> list[list[str]]:
    """The argv (after `sheaf`) of every example of README_COMMANDS in the README's "Using it"
    section's code blocks, in their order, comments dropped."""
    import shlex

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Using it\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.splitlines():
            argv = shlex.split(re.sub(r"\s+#\s.*$", "", line))
            argv = argv[1:] if argv[:1] == ["scripts/dev"] else argv
            if argv[:1] == ["sheaf"] and argv[1:2] and argv[1] in README_COMMANDS:
                out.append(argv[1:])
    return out


def test_the_readme_examples_run_on_the_sample_library(base):
    """Each README example of a command that reads the library or the index, run as written on
    the built sample library (SHORT_ID: the first short id the README's retrieve example gave):
    exit 0 and an ok envelope."""
    examples = readme_examples()
    assert {a[0] for a in examples} == set(README_COMMANDS), examples
    env = env_for_subprocess(base)
    short = None
    for argv in examples:
        if "SHORT_ID" in argv:
            assert short, f"{argv}: no retrieve example before it gave a short id"
            argv = [short if a == "SHORT_ID" else a for a in argv]
        proc = sheaf(env, argv[0], "--json", *(a for a in argv[1:] if a != "--json"))
        e = envelope(proc)
        assert proc.returncode == 0 and e["ok"] is True, (argv, proc.returncode, e)
        if argv[0] == "retrieve" and short is None and e["data"]["matches"]:
            short = e["data"]["matches"][0]["short_id"]

def test_readme_and_help_cover_settings_and_exit_codes():
    from dataclasses import fields

    from sheaf.cli.parser import EXIT_CODES

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(f"`{variable(f.name)}`" in readme for f in fields(Settings) if not f.metadata.get("internal"))
    assert all(re.search(rf"^\| {code} \|", readme, re.M) for code, _ in EXIT_CODES)
    for section in ("### When a paper fails", "### Exit codes", "### How long a build takes", "**Paper keys.**",
                    "**Files per format**"):
        assert section in readme
    docs = [p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")] + [SCHEMA.read_text()]
    assert not [d for d in docs + [readme] if re.search(r"DESIGN §", d)]
    help_ = sheaf(dict(os.environ), "--help")
    assert "exit codes:" in help_.stdout and all(f"  {code} " in help_.stdout for code, _ in EXIT_CODES)


def test_strong_semantic_and_hybrid_matches(sample_index, tmp_path):
    """The line where strong matches end, for the semantic and hybrid legs (in process: the
    session's loaded model embeds the query)."""
    from sheaf.core.settings import get_settings
    from sheaf.search.retriever import Retriever

    settings = get_settings(index_file=sample_index.path, home=tmp_path / "home", library=sample_index.library)
    with Retriever.open(settings, query_encoder=sample_index.query_encoder) as r:
        for mode, kind in (("semantic", "cosine"), ("hybrid", "rrf")):
            d = r.retrieve("how does snow melt timing affect pollinators", mode=mode).data
            strong = [m["strong"] for m in d["matches"]]
            assert d["score_kind"] == kind and strong == sorted(strong, reverse=True), (mode, strong)
            assert {m["zotero_key"] for m in d["matches"] if m["strong"]} == {"W6TB4YRS"}, mode
            assert 0 < d["strong_matches"] < len(d["matches"])
