"""The PaperForge plugin's shapes made by `sheaf.paperforge.shapes` (no node, no build): the build
stream its parser accepts, the probe envelope its `isValidEnvelope` requires, the index home
named in messages, and next actions in the plugin's words."""
from __future__ import annotations

from pathlib import Path

from sheaf.core.settings import VAULT_HOME, get_settings, where
from sheaf.paperforge import shapes as pf

KNOWN = {"start", "phase", "progress", "item_result", "result", "error", "cancelled"}  # long-task-client.ts
ENVELOPE_KEYS = {"schema_version", "module", "capability_state", "activity_state", "user_state", "capability_kind",
                 "maintenance_eligible", "user_visible_failure", "user_impact", "activity_label",
                 "activity_progress", "notices", "reason", "action", "updated_at", "ttl_seconds"}


def _stream() -> tuple[pf.PluginStream, list[dict]]:
    out: list[dict] = []
    return pf.PluginStream(out.append), out


def test_warnings_fold_into_the_result_and_every_event_is_versioned():
    s, out = _stream()
    s.event({"event": "start", "total": 2})
    s.event({"event": "warning", "message": "AAA: ocr_blocks: bad"})
    s.event({"event": "progress", "current": 1, "total": 2, "item_id": "AAA"})
    s.finish({"ok": True, "command": "build", "data": {}, "warnings": [], "next_actions": ["run `sheaf build`"]},
             stopped=False)
    assert [e["event"] for e in out] == ["start", "progress", "result"]
    assert all(e["schema_version"] == 1 and e["operation"] == "embed build" and e["event"] in KNOWN for e in out)
    assert out[-1]["result"]["warnings"] == ["AAA: ocr_blocks: bad"]
    assert "`embed build --resume`" in out[-1]["result"]["next_actions"][0]


def test_a_stopped_build_ends_with_cancelled():
    s, out = _stream()
    s.event({"event": "start", "total": 3})
    s.event({"event": "progress", "current": 1, "total": 3, "item_id": "AAA"})
    s.finish({"ok": True, "command": "build", "data": {}, "warnings": []}, stopped=True)
    assert out[-1]["event"] == "cancelled" and (out[-1]["current"], out[-1]["total"]) == (1, 3)


def test_probe_envelopes_have_every_field_the_plugin_validates(tmp_path):
    now = "2026-01-01T00:00:00+00:00"
    missing = pf.memory_envelope({"index": {"exists": False}, "coverage": {"library": 4}, "states": {"missing": 4},
                                  "build_state": {"status": "idle"}}, now, home=tmp_path)
    assert ENVELOPE_KEYS <= set(missing) and missing["schema_version"] == 2
    assert missing["reason"]["code"] == "memory.db_missing" and str(tmp_path) in missing["reason"]["text"]
    assert missing["action"]["primary"]["action_id"] == "embed.build"
    ready = pf.memory_envelope({"index": {"exists": True}, "coverage": {"library": 4}, "states": {"built": 4},
                                "fresh": True, "needs_rebuild": False, "build_state": {"status": "idle"}},
                               now, home=tmp_path)
    assert ready["user_state"] == "ready" and ready["action"]["primary"] is None
    other = pf.not_provided_envelope("maintenance", now)
    assert ENVELOPE_KEYS <= set(other) and other["items"] == [] and other["action"]["primary"] is None


def test_messages_name_the_vaults_index_home(tmp_path, monkeypatch):
    monkeypatch.delenv("SHEAF_HOME", raising=False)
    s = get_settings(library=tmp_path, home=tmp_path / VAULT_HOME)
    text = where(s, "home", environ={})
    assert "index home of the PaperForge vault" in text and "./data" not in text
    assert str(Path(tmp_path) / VAULT_HOME) in text


def test_embed_status_of_a_planning_build_or_of_none_gives_the_plugin_no_count():
    """A build still planning, or none running, has no total: a count of 0 there made the plugin,
    which takes a poll's total (0 → 1) over its build stream's, end a 4-paper build on "1/1"."""
    from sheaf.core.settings import get_settings
    from sheaf.paperforge.shapes import embed_status_data

    planning = {"status": "running", "pid": 1, "run_ids": [], "started_at": "t", "current": 0, "total": 0,
                "paper_id": None, "dead_runs": []}
    data = embed_status_data(get_settings(), {"exists": False}, planning)
    assert data["build_state"]["current"] is None and planning["current"] == 0
    running = {**planning, "current": 2, "total": 4}
    assert embed_status_data(get_settings(), {"exists": True}, running)["build_state"]["current"] == 2
    idle = {**planning, "status": "idle"}
    assert embed_status_data(get_settings(), {"exists": True}, idle)["build_state"]["current"] is None
