"""A program drives Sheaf the way a plugin does: it spawns the CLI (`python -m sheaf`, argv, stdout parsed as JSON or
NDJSON), streams a build's events, polls `status` from a second process while the build runs,
stops it with `sheaf stop`, and settles a build that was killed. One small home is shared by
the tests of this module, in order: a fresh streamed build (real `python -m sheaf`), then
builds forked from the warm zygote (tests/kits/reliability.py) that wait at a gate after each
paper, so the test, not a timer, decides when the build moves on (no sleeps, no races).
`status` and `stop` are always real `python -m sheaf` processes.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.kits import reliability as kit

jsonschema = pytest.importorskip("jsonschema")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not kit.fork_supported(), reason="needs fork (Linux)")]

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("L2YSNC8V", "M3FJ9PLC", "P9KE3UHB", "W6TB4YRS")  # small papers of four formats
GATE = {"kind": "gate", "target": "sheaf.core.progress:notify", "arg0": "vector_collections"}


def _validator(name: str):
    schema = json.loads((ROOT / "docs" / name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def events_schema():
    return _validator("build-events.schema.json")


@pytest.fixture(scope="module")
def envelope_schema():
    return _validator("result-envelope.schema.json")


@pytest.fixture(scope="module")
def place(onnx_export):
    """The module's home and library; the session's ONNX export linked in (shared with the other
    tests of a session: the first build needs no torch and exports nothing)."""
    from tests.kits.paths import link_onnx_export

    root = kit.fast_root("sheaf-ctl-")
    lib = kit.make_library(root / "lib", KEYS)
    link_onnx_export(onnx_export, root / "home")
    yield {"root": root, "home": root / "home", "lib": lib, "env": kit.env_for(root / "home", lib)}
    shutil.rmtree(root, ignore_errors=True)


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_"))}
    env.update(extra, PYTHONWARNINGS="ignore", PYTHONIOENCODING="utf-8")
    return env


def sheaf(argv: list[str], env: dict[str, str], cwd: Path, module: str = "sheaf") -> tuple[int, dict[str, Any]]:
    """`python -m <module> <argv>` in a fresh process: (exit code, the one JSON object on stdout)."""
    proc = subprocess.run([sys.executable, "-m", module, *argv], env=_env(env), cwd=cwd, capture_output=True,
                          text=True, encoding="utf-8", timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc.returncode, json.loads(lines[0])


def ndjson(text: str) -> list[dict[str, Any]]:
    """The events of a log that may hold human lines too (a zygote child's stdout and stderr)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"event"')]


def wait_events(log: Path, pred, timeout: float = 120) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        evs = ndjson(log.read_text(errors="replace")) if log.exists() else []
        if pred(evs):
            return evs
        time.sleep(0.1)
    raise AssertionError(f"events not seen in {timeout} s:\n{log.read_text(errors='replace')[-3000:]}")


def progress(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in evs if e["event"] == "progress"]


def test_build_streams_start_progress_result(place, events_schema, envelope_schema):
    """A fresh build streamed: start (4 planned, with reasons) → progress × 4 → result; stdout holds
    events only, human lines go to stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "sheaf", "build", "--events"], env=_env(place["env"]),
                            cwd=place["root"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            encoding="utf-8")
    lines = [line for line in proc.stdout]  # read as a plugin does, line by line while it runs
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0, err[-3000:]
    assert "Traceback" not in err and "✓ L2YSNC8V" in err
    events = [json.loads(line) for line in lines]
    for e in events:
        assert not list(events_schema.iter_errors(e)), e
    kinds = [e["event"] for e in events]
    assert kinds == ["start"] + ["progress"] * len(KEYS) + ["result"], kinds
    start, result = events[0], events[-1]["result"]
    assert start["total"] == len(KEYS) and set(start["planned"]) == set(KEYS)
    assert all(r == ["never built"] for r in start["planned"].values())
    assert [e["current"] for e in events[1:-1]] == [1, 2, 3, 4]
    assert {e["item_id"] for e in events[1:-1]} == set(KEYS) and all(e["ok"] for e in events[1:-1])
    assert not list(envelope_schema.iter_errors(result))
    assert result["count"] == len(KEYS) and result["data"]["states"] == {"built": len(KEYS)}
    assert events[-2]["embeddings_computed"] == result["data"]["embeddings_computed"] > 0


def test_status_polled_while_building_then_stopped(place, envelope_schema):
    """A second process polls `status` during a build (running, current advancing), then `sheaf stop`
    ends it at a paper boundary: exit 130, its run canceled; the next build carries on."""
    z = kit.zygote()
    log, gate = place["root"] / "gated.log", place["root"] / "gate"
    pid = z.spawn(["build", "--full", "--events"], place["env"], place["root"], log,
                  [{**GATE, "path": str(gate)}])
    try:
        seen = []
        for n in (1, 2):
            evs = wait_events(log, lambda e: len(progress(e)) >= n)  # the build waits at gate n
            code, st = sheaf(["status", "--json"], place["env"], place["root"])
            assert code == 0 and not list(envelope_schema.iter_errors(st))
            bs = st["data"]["build_state"]
            assert bs["status"] == "running" and bs["pid"] == pid, bs
            assert bs["current"] == n and bs["total"] == len(KEYS) and bs["paper_id"] == progress(evs)[-1]["item_id"]
            assert bs["run_ids"] and bs["started_at"] and st["data"]["fresh"] is False
            seen.append(bs)
            if n == 1:
                (gate.parent / f"{gate.name}.1").touch()
        assert seen[1]["current"] > seen[0]["current"]
        code, stop = sheaf(["stop", "--json"], place["env"], place["root"])
        assert code == 0 and not list(envelope_schema.iter_errors(stop)), stop
    finally:
        if z.poll(pid) is None and "stop" not in locals():
            os.kill(pid, signal.SIGKILL)
    assert z.wait(pid, timeout=120) == 130
    d = stop["data"]
    assert d["outcome"] == "stopped" and d["pid"] == pid and d["build_state"]["status"] == "idle"
    chain_runs = [r for r in d["runs"] if r["job"] == "paper_chain"]
    assert [r["status"] for r in chain_runs] == ["CANCELED"], d["runs"]
    evs = ndjson(log.read_text())
    assert len(progress(evs)) == 2 and evs[-1]["event"] == "result"
    # the stop is said once, by Sheaf; not as a failed step with Dagster's stack trace
    assert "Stack Trace" not in log.read_text() and "STEP_FAILURE" not in log.read_text(), log.read_text()[-3000:]
    assert evs[-1]["result"]["data"]["interrupted"] is True
    # the next build resumes: the steps that finished stay done, the vector step runs again
    code, text = z.run(["build", "--json"], place["env"], place["root"], place["root"] / "resume.log")
    env = kit.envelope(text)
    assert code == 0 and env["data"]["states"] == {"built": len(KEYS)}, text[-2000:]
    assert [r["from"] for r in env["data"]["runs"]] == ["vector_collections"]
    assert env["data"]["embeddings_computed"] == 0  # every passage came from the cache


def test_stop_of_a_killed_build_settles(place, envelope_schema, monkeypatch):
    """kill -9 mid-build: `status` reads idle with the dead run reported; `sheaf stop` marks it failed."""
    from sheaf.core.settings import get_settings
    from sheaf.service import builds

    z = kit.zygote()
    log = place["root"] / "killed.log"
    pid = z.spawn(["build", "--full", "--events"], place["env"], place["root"], log,
                  [{**GATE, "path": str(place["root"] / "never")}])
    wait_events(log, lambda e: len(progress(e)) >= 1)
    os.kill(pid, signal.SIGKILL)
    assert z.wait(pid, timeout=60) == -signal.SIGKILL
    monkeypatch.setenv("DAGSTER_HOME", str(place["home"] / "dagster_home"))
    settings = get_settings(home=place["home"], library=place["lib"])
    bs = builds.build_state(settings)
    assert bs["status"] == "idle" and [d["pid"] for d in bs["dead_runs"]] == [pid], bs
    code, stop = sheaf(["stop", "--json"], place["env"], place["root"])
    assert code == 0 and not list(envelope_schema.iter_errors(stop))
    d = stop["data"]
    assert d["outcome"] == "died" and d["pid"] == pid and d["runs"] and {r["status"] for r in d["runs"]} == {"FAILURE"}
    assert d["build_state"]["status"] == "idle" and d["build_state"]["dead_runs"] == []
    assert "were marked failed" in d["message"] and stop["next_actions"]


# --- the PaperForge plugin's argv on a PaperForge vault ---------------------------------------------------

PF_KEY = "5MAW65YD"  # the smallest of the real PaddleOCR-VL outputs


def _vault(shared: Path, dest: Path) -> Path:
    """A PaperForge vault: the real OCR output, the real 26-item Better BibTeX export with the
    paper's own Zotero record added (from its source_metadata.json), and a literature note."""
    ocr = dest / "System" / "PaperForge" / "ocr" / PF_KEY / "json"
    ocr.mkdir(parents=True)
    shutil.copyfile(shared / "paddleocr_vl" / PF_KEY / "result.json", ocr / "result.json")
    meta = json.loads((shared / "paddleocr_vl" / PF_KEY / "source_metadata.json").read_text(encoding="utf-8"))
    export = json.loads((shared / "zotero" / "bbt_zotero_26items.json").read_text(encoding="utf-8"))
    names = [a.rsplit(" ", 1) for a in meta["authors"]]
    export["items"].append({
        "key": PF_KEY, "itemType": "journalArticle", "title": meta["title"], "date": str(meta["year"]),
        "publicationTitle": meta["journal"], "DOI": meta["doi"], "abstractNote": "Photoacoustic measurement of "
        "tissue-engineered cartilage (the abstract field the plugin's cards show).",
        "creators": [{"creatorType": "author", "firstName": f, "lastName": last} for f, last in names]})
    exports = dest / "System" / "PaperForge" / "exports"
    exports.mkdir(parents=True)
    (exports / "tissue-engineering.json").write_text(json.dumps(export), encoding="utf-8")
    notes = dest / "Literature" / "tissue-engineering"
    notes.mkdir(parents=True)
    (notes / "Ishihara 2003 - Biomechanical characterization.md").write_text(
        f"---\nzotero_key: {PF_KEY}\ntitle: \"{meta['title']}\"\n---\n\n# Notes\n", encoding="utf-8")
    return dest


@pytest.mark.realdata
def test_paperforge_argv_on_a_vault(place, shared_data, envelope_schema, events_schema):
    vault = _vault(shared_data, place["root"] / "vault")
    home = vault / "System" / "PaperForge" / "sheaf"  # the vault's index, SHEAF_HOME unset
    kit.seed_models(home, place["home"])  # the ONNX export of the first build (no torch here)
    env = {"PYTHONUNBUFFERED": "1"}
    pf = ["--vault", str(vault)]

    proc = subprocess.run([sys.executable, "-m", "sheaf.paperforge", *pf, "embed", "build", "--force"],
                          env=_env(env), cwd=vault, capture_output=True, text=True, encoding="utf-8", timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    for e in events:
        assert not list(events_schema.iter_errors(e)), e
    assert [e["event"] for e in events] == ["start", "progress", "result"]
    assert events[1]["item_id"] == PF_KEY and events[-1]["result"]["command"] == "embed build"
    assert (home / "index" / "sheaf.db").is_file()

    code, st = sheaf([*pf, "embed", "status", "--json"], env, vault, module="sheaf.paperforge")
    assert code == 0 and not list(envelope_schema.iter_errors(st)), st
    d = st["data"]
    assert d["model"] and d["mode"] == "local" and d["deps_installed"] is True
    assert d["body_chunk_count"] > 0 and d["chunk_count"] == d["body_chunk_count"] + d["object_chunk_count"]
    assert d["total_chunks"] >= d["body_chunk_count"]
    assert {k: d["build_state"][k] for k in ("status", "current", "total", "paper_id")} == \
        {"status": "idle", "current": None, "total": 0, "paper_id": None}

    code, mem = sheaf([*pf, "memory", "status", "--json"], env, vault, module="sheaf.paperforge")
    assert code == 0 and not list(envelope_schema.iter_errors(mem)), mem
    assert mem["data"]["paper_count_db"] >= 1 and mem["data"]["fresh"] is True and mem["data"]["needs_rebuild"] is False

    code, se = sheaf([*pf, "search", "photoacoustic", "cartilage", "--json"], env, vault, module="sheaf.paperforge")
    assert code == 0 and not list(envelope_schema.iter_errors(se)), se
    m = next(m for m in se["data"]["matches"] if m["zotero_key"] == PF_KEY)
    assert m["domain"] == "tissue-engineering" and m["first_author"] and m["year"] == 2003
    assert m["abstract"].startswith("Photoacoustic measurement")
    assert m["note_path"] == "Literature/tissue-engineering/Ishihara 2003 - Biomechanical characterization.md"

    code, rt = sheaf([*pf, "retrieve", "photoacoustic signal of cartilage", "--deep", "--json"], env, vault,
                     module="sheaf.paperforge")
    assert code == 0 and not list(envelope_schema.iter_errors(rt)), rt
    assert rt["data"]["deep"] is True and rt["data"]["matches"]
    for m in rt["data"]["matches"]:
        assert {"zotero_key", "title", "first_author", "year", "journal", "domain", "abstract", "score", "text",
                "heading", "source", "note_path"} <= set(m)

    code, stop = sheaf([*pf, "embed", "stop", "--json"], env, vault, module="sheaf.paperforge")
    assert code == 0 and stop["data"]["state"] == "idle" and not list(envelope_schema.iter_errors(stop))

    code, bad = sheaf([*pf, "embed", "frobnicate", "--json"], env, vault, module="sheaf.paperforge")
    assert code == 2 and bad["ok"] is False and bad["error"]["code"] == "BAD_QUERY" and bad["command"] == "embed"
    code, missing = sheaf(["--vault", str(vault / "nope"), "memory", "status", "--json"], env, vault,
                          module="sheaf.paperforge")
    assert code == 2 and missing["error"]["code"] == "NOT_FOUND" and not list(envelope_schema.iter_errors(missing))


# --- for people --------------------------------------------------------------------------------------------

def test_a_terminal_gets_one_progress_bar_and_a_line_per_problem(monkeypatch):
    from sheaf.cli.progress_view import BuildView

    monkeypatch.setenv("COLUMNS", "200")

    err, out = io.StringIO(), io.StringIO()
    with BuildView(stdout=out, stderr=err, bar=True) as view:
        view.event({"event": "start", "total": 3, "considered": 3, "planned": {}, "sync": {}})
        view.line("+ AAA: new paper")
        for i, key in enumerate(("AAA", "BBB", "CCC"), 1):
            view.line(f"✓ {key}: 4 passages, 4 embedded")
            view.event({"event": "progress", "current": i, "total": 3, "item_id": key, "stage": "vector_collections",
                        "ok": True, "passages": 4, "embeddings_computed": 4 * i})
        view.event({"event": "warning", "item_id": "CCC", "stage": "ocr_blocks", "message": "CCC: ocr_blocks: bad"})
    text = err.getvalue()
    assert "3/3" in text and "12 passages embedded" in text and "ETA" in text and "papers/s" in text
    assert "+ AAA: new paper" in text and "✗ CCC: ocr_blocks: bad" in text and "✓ AAA" not in text
    assert out.getvalue() == ""
    plain = io.StringIO()
    view = BuildView(stdout=plain, stderr=io.StringIO())  # not a terminal: the plain lines, as before
    view.event({"event": "start", "total": 1})
    view.line("✓ AAA: 4 passages, 4 embedded")
    assert plain.getvalue() == "✓ AAA: 4 passages, 4 embedded\n"


def test_a_piped_build_is_never_silent_for_long():
    """Piped (a log, a program), a build that prints nothing for `heartbeat` seconds (a step
    parsing or embedding a whole batch) prints a heartbeat line with the phase the build said
    last (`sheaf.core.progress.phase`) and the papers done."""
    import time

    from sheaf.cli.progress_view import BuildView
    from sheaf.core.progress import phase

    plain = io.StringIO()
    with BuildView(stdout=plain, stderr=io.StringIO(), heartbeat=0.2) as view:
        view.event({"event": "start", "total": 3})
        view.event({"event": "progress", "current": 1, "total": 3})
        phase("embed 2/3")
        deadline = time.monotonic() + 10
        while "still building" not in plain.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "… still building: embed 2/3; 1 of 3 papers done (" in plain.getvalue()
    phase("after the build")  # the view stopped listening when it closed
    assert view._phase == "embed 2/3"
    quiet = io.StringIO()
    with BuildView(stdout=quiet, json_only=True, heartbeat=0.05):  # --json: nothing while it runs
        time.sleep(0.3)
    assert quiet.getvalue() == ""


def test_events_schema_rejects_broken_events(events_schema):
    good = {"event": "progress", "current": 1, "total": 2, "item_id": "K1", "stage": "vector_collections", "ok": True,
            "passages": 3, "embeddings_computed": 0}
    events_schema.validate(good)
    for bad in ({**good, "current": 0}, {k: v for k, v in good.items() if k != "item_id"}, {**good, "event": "tick"},
                {"event": "result", "result": {"ok": False, "command": "build", "error": {}}},
                {"event": "start", "total": -1, "considered": 0, "planned": {}, "sync": {}}):
        assert list(events_schema.iter_errors(bad)), bad
