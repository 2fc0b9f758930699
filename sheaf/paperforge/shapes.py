"""The payload shapes the PaperForge Obsidian plugin reads, made from Sheaf's own answers.

The plugin spawns ``python -m paperforge --vault VAULT <command> ... --json``; Sheaf's
compatibility entry (`python -m sheaf.paperforge`, `sheaf.paperforge.commands`) translates that argv
onto the same service functions every Sheaf command uses and passes their envelopes through
these functions, which only add or rename fields:

- search / retrieve: each match gains `abstract` (from the index's papers table) and
  `note_path` (the vault-relative path of the paper's note, when the vault has one);
- ``embed status``: `model, mode, deps_installed, body_chunk_count, object_chunk_count,
  chunk_count, total_chunks, build_state{status, current, total, paper_id, ...}`;
- ``memory status``: `paper_count_db, fresh, needs_rebuild` (with the Sheaf status beside).

Light: nothing here imports Dagster; `embed status` reaches it through `sheaf.service.builds`.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError
from sheaf.core.models import UNREADABLE_FIX
from sheaf.core.settings import VAULT_HOME, get_settings
from sheaf.store.select import open_backend

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

__all__ = ["VAULT_HOME", "vault_settings", "with_plugin_fields", "note_paths", "embed_status_data",
           "memory_status_data"]

_SKIP_DIRS = {".obsidian", ".trash", ".git", "System"}
_KEY_LINE = re.compile(r"^(?:zotero_key|zoteroKey|key)\s*:\s*['\"]?([A-Za-z0-9._-]+)['\"]?\s*$", re.M)


def vault_settings(vault: str | Path) -> Any:
    """Settings for a vault: the vault is the library; the home is `<vault>/System/PaperForge/sheaf`
    unless SHEAF_HOME is set."""
    v = Path(vault).expanduser()
    if not v.is_dir():
        raise SheafError("NOT_FOUND", f"vault folder not found: {v}", {"vault": str(v)},
                         hint="pass --vault with the Obsidian vault's folder")
    home = None if os.environ.get("SHEAF_HOME") else v / VAULT_HOME
    return get_settings(library=v, home=home)


# --- matches -----------------------------------------------------------------------------------

_NOTES: dict[str, dict[str, str]] = {}


def note_paths(vault: Path) -> dict[str, str]:
    """Paper key → vault-relative path of its note: a Markdown file whose front matter names
    the key (``zotero_key: KEY``), else one whose file name starts with the key. Read once per
    process (front matter only: the first 2 KiB of each note)."""
    ident = str(vault.resolve())
    if ident in _NOTES:
        return _NOTES[ident]
    by_front: dict[str, str] = {}
    by_name: dict[str, str] = {}
    for root, dirs, files in os.walk(vault):
        if Path(root) == vault:
            dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            if not f.endswith(".md"):
                continue
            p = Path(root) / f
            rel = p.relative_to(vault).as_posix()
            try:
                with open(p, encoding="utf-8", errors="replace") as fh:
                    head = fh.read(2048)
            except OSError:
                continue
            if head.startswith("---"):
                front = head.split("\n---", 1)[0]
                m = _KEY_LINE.search(front)
                if m:
                    by_front.setdefault(m.group(1), rel)
                    continue
            stem = re.split(r"[\s_\-–—.]", f, maxsplit=1)[0]
            if stem and stem != f:
                by_name.setdefault(stem, rel)
    _NOTES[ident] = {**by_name, **by_front}
    return _NOTES[ident]


def _abstracts(settings: Settings, keys: list[str]) -> dict[str, str]:
    if not keys or (settings.index_backend == "sqlite" and not Path(settings.index_path).exists()):
        return {}
    try:
        index = open_backend(settings, readonly=True)
    except Exception:  # noqa: BLE001 - the query itself already reported any index problem
        return {}
    try:
        return {k: t["abstract"] for k in keys if (t := index.paper_text(k)) and t["abstract"]}
    finally:
        index.close()


def with_plugin_fields(envelope: dict[str, Any], settings: Settings, vault: Path | None) -> dict[str, Any]:
    """A search/retrieve envelope whose matches carry `abstract` and `note_path` too (the
    plugin's cards show them); `domain` stays what the library says (None without one)."""
    if not envelope.get("ok"):
        return envelope
    matches = envelope["data"].get("matches") or []
    keys = sorted({m["zotero_key"] for m in matches})
    abstracts = _abstracts(settings, keys)
    notes = note_paths(vault) if vault is not None else {}
    for m in matches:
        m["abstract"] = abstracts.get(m["zotero_key"], "")
        m["note_path"] = notes.get(m["zotero_key"])
    return envelope


# --- status payloads ------------------------------------------------------------------------------

def deps_installed() -> dict[str, bool]:
    """Which of the embedding stack's packages this Python can import (found, not imported)."""
    return {name: importlib.util.find_spec(name) is not None
            for name in ("onnxruntime", "sentence_transformers", "sqlite_vec", "tokenizers")}


def unreadable_rows(unreadable: dict[str, str]) -> list[dict[str, str]]:
    """The papers whose file cannot be read, each with its reason and the fix (as `sheaf status`)."""
    return [{"paper_id": k, "reason": why, "fix": UNREADABLE_FIX} for k, why in unreadable.items()]


def embed_status_data(settings: Settings, probe: dict[str, Any], build_state: dict[str, Any],
                      unreadable: dict[str, str] | None = None) -> dict[str, Any]:
    """`embed status` data from the index probe, the live build state and the papers the last
    build found unreadable ({paper: reason})."""
    rows = probe.get("rows") or {}
    body = int(rows.get("body_units", 0))
    objects = int(rows.get("object_units", 0))
    passages = sum(int(v) for k, v in rows.items() if k.startswith("passages_"))
    deps = deps_installed()
    if not build_state.get("total"):
        # no count: a build still planning, or none running (the plugin polls until its build's
        # process exits, after the build let go of the home); it would take a 0 here for 0 of 1
        # over the total its build stream gave it, and end on "1/1"
        build_state = {**build_state, "current": None}
    return {
        "model": settings.embedding_model, "mode": "local", "backend": settings.embed_backend,
        "deps_installed": deps["sqlite_vec"] and (deps["onnxruntime"] or deps["sentence_transformers"]),
        "deps": deps, "db_exists": bool(probe.get("exists")), "healthy": not probe.get("problem"),
        "error": probe.get("problem", ""), "body_chunk_count": body, "object_chunk_count": objects,
        "chunk_count": body + objects, "total_chunks": passages, "papers_indexed": int(probe.get("indexed", 0)),
        "papers_embedded": int(probe.get("embedded", 0)), "collections": probe.get("collections", {}),
        "index_path": probe.get("path"), "build_state": build_state,
        "unreadable": unreadable_rows(unreadable or {}),
    }


def memory_status_data(status_data: dict[str, Any]) -> dict[str, Any]:
    """`memory status` data from `sheaf status`'s: the papers in the index's metadata table, and
    the fresh / needs-rebuild verdict."""
    probe = status_data.get("index") or {}
    rows = probe.get("rows") or {}
    coverage = status_data.get("coverage") or {}
    return {"db_exists": bool(probe.get("exists")), "paper_count_db": int(rows.get("papers", 0)),
            "paper_count_index": int(coverage.get("library", 0)), "papers_indexed": int(probe.get("indexed", 0)),
            "fresh": bool(status_data.get("fresh")), "needs_rebuild": bool(status_data.get("needs_rebuild")),
            "verdict_reasons": status_data.get("verdict_reasons", []), "coverage": coverage,
            "build_state": status_data.get("build_state"),
            "unreadable": unreadable_rows({p["paper_id"]: p.get("error") or "" for p in status_data.get("papers") or []
                                           if p.get("state") == "unreadable"})}


# --- the plugin's own commands -----------------------------------------------------------------

#: Sheaf's commands in next actions and hints → what a PaperForge user does in the plugin.
_PLUGIN_ACTIONS = (
    ("`sheaf build --full`", "`embed build --force` (Build vector index in PaperForge's settings)"),
    ("`sheaf build`", "`embed build --resume` (Build vector index, or Resume vector build, in PaperForge's "
                      "settings)"),
    ("`sheaf stop`", "`embed stop` (the Stop button)"),
    ("`sheaf doctor --repair`", "`embed build --force` (Build vector index in PaperForge's settings)"),
    ("`sheaf doctor`", "`doctor` (Run Doctor)"),
    ("`sheaf status`", "`memory status`"),
    ("(sheaf build)", "(Rebuild vector index in PaperForge's settings)"),
)


def plugin_text(text: str) -> str:
    """`text` with Sheaf's command names replaced by the plugin's actions."""
    for sheaf_cmd, plugin in _PLUGIN_ACTIONS:
        text = text.replace(sheaf_cmd, plugin)
    return text


def for_plugin(envelope: dict[str, Any], home: Path | None = None) -> dict[str, Any]:
    """An envelope whose next actions and error hint name the plugin's commands, and whose error
    message names the vault's index `home` (when known) if it does not already."""
    env = dict(envelope)
    if env.get("next_actions"):
        env["next_actions"] = [plugin_text(a) for a in env["next_actions"]]
    if not env.get("ok") and isinstance(env.get("error"), dict):
        err = dict(env["error"])
        details = dict(err.get("details") or {})
        if isinstance(details.get("hint"), str):
            details["hint"] = plugin_text(details["hint"])
        if home is not None and str(home) not in str(err.get("message", "")):
            err["message"] = f"{err.get('message', '')} (the index home of this vault: {home})"
            details.setdefault("home", str(home))
        err["message"] = plugin_text(str(err.get("message", "")))
        err["details"] = details
        env["error"] = err
    return env


def vault_of(vault: str | None, cwd: Path) -> Path:
    """The vault: `--vault`, else the working folder when it is a PaperForge vault (the plugin
    runs `doctor`, `dashboard`, `status` in the vault without `--vault`)."""
    if vault:
        return Path(vault).expanduser()
    if (cwd / "System" / "PaperForge").is_dir() or (cwd / ".obsidian").is_dir():
        return cwd
    raise SheafError("NOT_FOUND", f"no --vault given and the working folder {cwd} is not a PaperForge vault "
                     "(no System/PaperForge/ or .obsidian/ in it)", {"cwd": str(cwd)},
                     hint="pass --vault with the Obsidian vault's folder, or run it in the vault")


# --- probe: the plugin's capability envelope (schema_version 2) ----------------------------------

#: The plugin's `SCHEMA_VERSION` and modules (constants.ts): `probe` answers in that shape exactly.
PROBE_SCHEMA_VERSION = 2
PROBE_MODULES = ("installation", "library", "ocr", "memory", "maintenance", "help")
PROBE_TTL_S = 60


def _action(action_id: str, label: str, count: int) -> dict[str, Any]:
    return {"action_id": action_id, "verb": "run", "label": label, "availability": "available",
            "safety_class": "safe", "preservation_facts": ["papers already built stay searchable while it runs"],
            "replacement_facts": [], "interruptible": True, "confirmation_required": False,
            "confirmation_prompt": None, "scope": "memory", "scope_count": count}


def _retry_action() -> dict[str, Any]:
    return {"action_id": "memory.probe", "verb": "probe", "label": "Retry", "availability": "available",
            "safety_class": "safe", "preservation_facts": [], "replacement_facts": [], "interruptible": True,
            "confirmation_required": False, "confirmation_prompt": None, "scope": "memory", "scope_count": 1}


def _envelope(module: str, *, capability: str, user: str, kind: str, severity: str, code: str, text: str,
              action: dict[str, Any] | None, now: str, activity: dict[str, Any] | None = None,
              impact: str | None = None, details: dict[str, Any] | None = None) -> dict[str, Any]:
    env: dict[str, Any] = {
        "schema_version": PROBE_SCHEMA_VERSION, "module": module, "capability_state": capability,
        "activity_state": "running" if activity else "idle",
        "activity_label": activity["label"] if activity else None,
        "activity_progress": {"current": activity["current"], "total": activity["total"]} if activity else None,
        "user_state": user, "capability_kind": kind, "severity": severity, "maintenance_eligible": False,
        "user_visible_failure": severity == "error", "user_impact": impact, "notices": [],
        "reason": {"code": code, "text": text}, "action": {"primary": action}, "updated_at": now,
        "ttl_seconds": PROBE_TTL_S, "details": details or {}}
    if module == "maintenance":
        env.update(items=[], orphan={"count": 0, "orphans": []})
    return env


def not_provided_envelope(module: str, now: str) -> dict[str, Any]:
    """A module of PaperForge's that Sheaf does not serve (installation, library, OCR, ...)."""
    return _envelope(module, capability="unavailable", user="not_enabled", kind="not_provided", severity="unknown",
                     code=f"{module}.not_provided",
                     text=f"Sheaf serves PaperForge's memory layer (search, deep retrieval, the vector index); "
                          f"the {module} module is PaperForge's own", action=None, now=now)


def memory_envelope(status: dict[str, Any] | None, now: str, *, home: Path, failure: str | None = None) -> dict[str, Any]:
    """The memory module's probe envelope from `memory status`'s Sheaf status data (None with
    `failure`: the status itself failed)."""
    if status is None:
        return _envelope("memory", capability="unknown", user="detection_failed", kind="local_index",
                         severity="error", code="memory.probe_failed", text=failure or "the index could not be read",
                         action=_retry_action(), now=now, details={"home": str(home)})
    probe = status.get("index") or {}
    live = status.get("build_state") or {}
    coverage = status.get("coverage") or {}
    states = status.get("states") or {}
    papers = int(coverage.get("library", 0))
    todo = sum(int(states.get(k, 0)) for k in ("missing", "stale", "removed", "failed"))
    activity = None
    if live.get("status") in ("running", "stopping"):
        total = int(live.get("total") or 0)
        activity = {"label": ("Stopping the vector build" if live["status"] == "stopping" else
                              f"Building the vector index: {live.get('current', 0)}/{total} papers"),
                    "current": int(live.get("current") or 0), "total": total}
    details = {"home": str(home), "index_path": probe.get("path"), "build_state": live,
               "api_key_configured": True,  # Sheaf embeds on this machine: no key to ask for
               "api_key_required": False, "papers": papers, "papers_indexed": int(probe.get("indexed", 0)),
               "papers_embedded": int(probe.get("embedded", 0)), "states": states,
               "verdict_reasons": status.get("verdict_reasons", [])}
    common = {"kind": "local_index", "now": now, "activity": activity, "details": details}
    if not probe.get("exists"):
        return _envelope("memory", capability="needs_action", user="action_required", severity="warning",
                         code="memory.db_missing",
                         text=f"No vector index yet in {home}: build it to search {papers} papers",
                         impact="Search and @ deep retrieval need the index",
                         action=_action("embed.build", "Build vector index", papers), **common)
    if probe.get("problem"):
        return _envelope("memory", capability="unavailable", user="action_required", severity="error",
                         code="memory.db_corrupt",
                         text=f"The index in {home} cannot be read ({probe['problem']}): rebuild it",
                         impact="Search and @ deep retrieval are unavailable",
                         action=_action("embed.build", "Rebuild vector index", papers), **common)
    if status.get("fresh") and not status.get("needs_rebuild") and not todo:
        return _envelope("memory", capability="ready", user="ready", severity="ok", code="memory.ready",
                         text=f"{papers} papers indexed and searchable", action=None, **common)
    what = ", ".join(f"{n} {k}" for k, n in states.items() if k != "built" and n)
    return _envelope("memory", capability="limited", user="action_required", severity="warning",
                     code="memory.index_stale",
                     text=f"{int(states.get('built', 0))} of {papers} papers are indexed ({what}): resume the build",
                     impact="Papers not built yet are missing from search results",
                     action=_action("embed.resume", "Resume vector build", max(todo, 1)), **common)


# --- embed build: the plugin's NDJSON stream ------------------------------------------------------

class PluginStream:
    """`embed build`'s events as the plugin's `NdjsonStreamParser` accepts them: each with
    `schema_version` 1 and `operation`; only `start` and `progress` while it runs (warning
    events are folded into the last event's `result.warnings`, which the build controller
    reads); last exactly one `result`, `error` or, when stopped, `cancelled`."""

    OPERATION = "embed build"

    def __init__(self, write: Any, home: Path | None = None) -> None:
        self.write = write
        self.home = home  # the vault's index home, named in an error's message
        self.warnings: list[str] = []
        self.current = 0
        self.total = 0

    def _emit(self, event: dict[str, Any]) -> None:
        self.write({"schema_version": 1, "operation": self.OPERATION, **event})

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "warning":
            message = str(event.get("message") or "")
            if message and message not in self.warnings:
                self.warnings.append(message)
            return
        if kind == "start":
            self.total = int(event.get("total") or 0)
        elif kind == "progress":
            self.current = int(event.get("current") or 0)
        elif kind not in ("phase", "item_result"):
            return  # not one the plugin knows
        self._emit(event)

    def finish(self, envelope: dict[str, Any], stopped: bool) -> dict[str, Any]:
        """The terminal event: `cancelled` for a stopped build, else `result` / `error`; returns
        the envelope as the event carries it."""
        env = for_plugin(envelope, self.home)
        if env.get("ok"):
            folded = [w for w in env.get("warnings") or []]
            folded += [w for w in self.warnings if w not in folded and not any(w in f for f in folded)]
            env["warnings"] = folded
        if stopped and env.get("ok"):
            self._emit({"event": "cancelled", "current": self.current, "total": self.total, "result": env})
        else:
            self._emit({"event": "result" if env.get("ok") else "error", "result": env})
        return env
