"""The PaperForge Obsidian plugin's own code (../shared/clients/paperforge-plugin/plugin-client.cjs,
run with node) against `python -m sheaf.paperforge`, on a vault of the four real PaddleOCR-VL
outputs and the real Better BibTeX export: what the plugin renders and which build events its
NDJSON parser accepted. Skipped without node or ../shared. The tests of this module run in order
on one vault: the settings card of an unbuilt vault, a build, search, retrieve, the card of the
built vault, a stopped build on a fresh copy and its resume, queries that start with a dash, the
error cases (on a vault never built).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.kits.paperforge import KEYS, make_vault
from tests.kits.paths import SHARED_DATA

pytestmark = [pytest.mark.slow, pytest.mark.realdata, pytest.mark.heavy, pytest.mark.e2e]  # one build, read by the tests after it

CLIENT = SHARED_DATA.parent / "clients" / "paperforge-plugin" / "plugin-client.cjs"
NODE = shutil.which("node")


@pytest.fixture(scope="module")
def place(tmp_path_factory, onnx_export):
    if NODE is None:
        pytest.skip("node is not installed (the plugin's code runs under node)")
    if not CLIENT.is_file():
        pytest.skip(f"the PaperForge plugin client is not at {CLIENT}")
    from tests.kits.paths import link_onnx_export

    root = tmp_path_factory.mktemp("pf-plugin")
    template = make_vault(root / "template")
    vault = root / "vault"
    shutil.copytree(template, vault)
    for v in (vault,):
        link_onnx_export(onnx_export, v / "System" / "PaperForge" / "sheaf")  # no export in the build
    return {"root": root, "template": template, "vault": vault, "onnx": onnx_export}


def plugin(place: dict[str, Any], vault: Path, phase: str, *args: str, name: str = "out",
           python: str = sys.executable, module: str = "sheaf.paperforge") -> dict[str, Any]:
    """Run one phase of the plugin client (its Python path `python`, `-m paperforge` run as
    `-m module`); its OUT.json."""
    out = place["root"] / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]))  # warnings as a user's Python prints them
    proc = subprocess.run([NODE, str(CLIENT), "--python", python, "--module", module, "--vault", str(vault), "--out", str(out),
                           "--max-seconds", "600", "--full-output", phase, *args], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


def step(out: dict[str, Any], label: str) -> dict[str, Any]:
    return next(s for s in out["steps"] if label in s["label"])


def build_step(out: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in out["steps"] if "final_state" in s)


def accepted(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The build's events, every one accepted by the plugin's parser (its record cuts long lines:
    the events are read from the build's whole stdout)."""
    assert out["ndjson"] and all(n["verdict"] == "accepted" for n in out["ndjson"]), out["ndjson"]
    build = next(p for p in out["processes"] if "build" in p["argv"])
    events = [json.loads(line) for line in build["stdout"].splitlines() if line.strip()]
    assert [e["event"] for e in events] == [n["event"] for n in out["ndjson"]]
    return events


def test_settings_of_an_unbuilt_vault_offer_build_and_write_nothing(place):
    out = plugin(place, place["vault"], "settings", name="settings0")
    text = "\n".join(line for s in out["steps"] for line in s.get("visible_text", []))
    assert "Action Required" in text and "Build vector index" in text, text
    assert "Detection Failed" not in text and "invalid" not in text
    adv = step(out, "memory detail")["advanced_status"]
    assert adv["Reason Code"] == "memory.db_missing" and adv["Capability State"] == "needs_action"
    assert adv["Vector Model"] == "all-MiniLM-L6-v2" and adv["Build Status"] == "idle"
    assert not out["problems"], out["problems"]
    home = place["vault"] / "System" / "PaperForge" / "sheaf"
    assert not (home / "dagster_home").exists() and not (home / "index").exists()


def test_a_build_streams_per_paper_progress_the_plugin_accepts(place):
    out = plugin(place, place["vault"], "build", "force", name="build")
    b = build_step(out)
    assert b["final_state"] == "success" and b["final_warning"] is None, b
    events = accepted(out)
    assert [e["event"] for e in events] == ["start"] + ["progress"] * len(KEYS) + ["result"]
    assert all(e["schema_version"] == 1 and e["operation"] == "embed build" for e in events)
    assert [e["current"] for e in events[1:-1]] == [1, 2, 3, 4] and events[0]["total"] == len(KEYS)
    assert b["final_progress"]["current"] == b["final_progress"]["total"] == len(KEYS)
    polls = b.get("polls") or []
    assert all(p["exit"] == 0 and not p["killed_at_5s"] for p in polls), polls
    assert not out["problems"], out["problems"]


def test_search_and_deep_retrieve_render_cards_that_open_the_notes(place):
    out = plugin(place, place["vault"], "search", "photoacoustic cartilage", name="search")
    s = step(out, "search")
    assert s["plugin_state"] == "results" and s["cards"], s
    assert any(c.get("click_opens", "").startswith("Literature/tissue-engineering/") for c in s["cards"]), s["cards"]
    out = plugin(place, place["vault"], "retrieve", "photoacoustic signal of cartilage", name="retrieve")
    r = step(out, "retrieve")
    assert r["plugin_state"] == "results" and r["cards"], r
    assert any(p["argv"][-3:] == ["photoacoustic signal of cartilage", "--deep", "--json"] for p in out["processes"])


def test_settings_of_a_built_vault_are_ready(place):
    out = plugin(place, place["vault"], "settings", name="settings1")
    adv = step(out, "memory detail")["advanced_status"]
    assert adv["Reason Code"] == "memory.ready" and adv["Capability State"] == "ready", adv
    assert adv["FTS5 Fresh"] == "Yes" and adv["Needs Rebuild"] == "No" and int(adv["Total Chunks"]) > 0
    assert not out["problems"], out["problems"]


def test_a_poll_while_no_build_runs_leaves_the_build_bar_alone(place):
    """The plugin polls `embed status` every 2 s until its build's process has exited, so a poll
    can land after the build has let go of the home, or before it has taken it. An idle home's
    answer gives the controller no count: it took "0 of 0" as 0 of 1 over its stream's total,
    and a 4-paper build ended on "1/1"."""
    out = plugin(place, place["vault"], "embed-status", name="poll")
    poll = step(out, "build progress poll")
    assert poll["poll_exit"] == 0 and not poll["killed_at_5s"], poll
    assert not poll["applied"] and poll["progress_shown"] == {"current": 0, "total": 0, "key": ""}, poll
    assert step(out, "embed status")["data"]["build_state"]["status"] == "idle"


def test_a_stop_settles_within_the_grace_and_the_resume_finishes(place):
    vault = place["root"] / "stopped"
    shutil.copytree(place["template"], vault)
    from tests.kits.paths import link_onnx_export

    link_onnx_export(place["onnx"], vault / "System" / "PaperForge" / "sheaf")
    out = plugin(place, vault, "build", "force", "--stop-after-ms", "9000", name="stop")
    b = build_step(out)
    assert b["final_state"] == "cancelled", b
    assert b["close_after_stop_ms"] is not None and b["close_after_stop_ms"] < 5000, b  # no hard kill
    events = accepted(out)
    # on a busy machine 9 s may still be in the planning: then the stream is `cancelled` alone
    assert events[-1]["event"] == "cancelled" and [e["event"] for e in events[:-1]] in (
        [], ["start"] + ["progress"] * (len(events) - 2)), events
    build = next(p for p in out["processes"] if "build" in p["argv"])
    assert build["exit_code"] == 130 and build["signal"] is None and build["stderr"] == ""
    out = plugin(place, vault, "build", "resume", name="resume")
    b = build_step(out)
    assert b["final_state"] == "success" and b["final_warning"] is None, b  # nothing alarming
    events = accepted(out)
    assert events[-1]["event"] == "result" and not events[-1]["result"]["warnings"]
    assert not out["problems"], out["problems"]


#: The plugin client's `errors` phase: what is typed in the search box -> the query the plugin sends
#: (`@`: deep retrieval, the `@` stripped) and the arguments after it.
DASH_QUERIES = {"--limit": ("--limit", ["--json"]), "-bone": ("-bone", ["--json"]),
                "@--paper": ("--paper", ["--deep", "--json"])}


def test_a_query_that_starts_with_a_dash_searches(place):
    """What the user types is the query, never an option: `-bone`, `--limit` and `@--paper`
    search (exit 0: results or none), where they showed *Search backend unavailable*."""
    out = plugin(place, place["vault"], "errors", name="dash")
    for typed, (query, tail) in DASH_QUERIES.items():
        s = next(s for s in out["steps"] if s.get("typed") == typed)
        assert s["spawned"][-len(tail) - 1:] == [query, *tail], s  # as the plugin sends it
        assert s["exit_code"] == 0 and s["plugin_state"] in ("results", "empty"), s
    dash = [p for p in out["problems"] if "the search view shows" in p and ("option" in p or "dash" in p)]
    assert not dash, dash
    for p in out["processes"]:
        assert "Traceback" not in (p.get("stderr") or "") and "usage:" not in (p.get("stdout") or ""), p


def test_errors_the_plugin_can_show(place):
    """On a vault never built every search shows *Search backend unavailable*; its Run Doctor
    button runs `doctor`, which says what to do."""
    vault = place["root"] / "unbuilt"
    shutil.copytree(place["template"], vault)
    out = plugin(place, vault, "errors", name="errors")
    doctor = [p for p in out["processes"] if p["argv"][-1:] == ["doctor"]]
    assert doctor and all(p["exit_code"] in (0, 1) and "Traceback" not in p["stderr"] for p in doctor), \
        out["processes"]
    assert "no vector index yet" in doctor[0]["stdout"], doctor[0]
    for p in out["processes"]:
        assert "Traceback" not in (p.get("stderr") or ""), p


def test_the_launcher_as_the_plugins_python_gives_the_version_badge(place):
    """`sheaf-paperforge-python` (as pip writes the console script) set as the Python path: the
    plugin's own `-m paperforge` and version check reach Sheaf, the badge shows Sheaf's version."""
    from sheaf import __version__

    exe = place["root"] / "sheaf-paperforge-python"
    exe.write_text(f"#!{sys.executable}\nimport sys\nfrom sheaf.paperforge.commands import console_launcher\n"
                   "sys.exit(console_launcher())\n", encoding="utf-8")
    exe.chmod(0o755)
    out = plugin(place, place["vault"], "dashboard", name="dashboard", python=str(exe), module="paperforge")
    assert step(out, "dashboard")["version_badge"] == f"v{__version__} (Sheaf)", step(out, "dashboard")
    out = plugin(place, place["vault"], "search", "photoacoustic cartilage", name="search-launcher",
                 python=str(exe), module="paperforge")
    assert step(out, "search")["plugin_state"] == "results"
    for p in out["processes"]:
        assert "Traceback" not in (p.get("stderr") or ""), p
