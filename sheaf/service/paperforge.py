"""The payload shapes the PaperForge Obsidian plugin reads, made from Sheaf's own answers.

The plugin spawns ``python -m paperforge --vault VAULT <command> ... --json``; Sheaf's
compatibility entry (`python -m sheaf.paperforge`, `sheaf.cli.paperforge`) translates that argv
onto the same service functions every Sheaf command uses and passes their envelopes through
these functions, which only add or rename fields:

- search / retrieve: each match gains `abstract` (from the index's papers table) and
  `note_path` (the vault-relative path of the paper's note, when the vault has one);
- ``embed status``: `model, mode, deps_installed, body_chunk_count, object_chunk_count,
  chunk_count, total_chunks, build_state{status, current, total, paper_id, ...}`;
- ``memory status``: `paper_count_db, fresh, needs_rebuild` (with the Sheaf status beside).

Light: nothing here imports Dagster; `embed status` reaches it through `sheaf.service.pipeline`.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

from sheaf.core.envelope import SheafError
from sheaf.core.settings import get_settings
from sheaf.store.select import open_backend

__all__ = ["VAULT_HOME", "vault_settings", "with_plugin_fields", "note_paths", "embed_status_data",
           "memory_status_data"]

#: Where a vault's Sheaf home (artifacts, index, Dagster home) lives unless SHEAF_HOME is set.
VAULT_HOME = Path("System/PaperForge/sheaf")
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


def _abstracts(settings: Any, keys: list[str]) -> dict[str, str]:
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


def with_plugin_fields(envelope: dict[str, Any], settings: Any, vault: Path | None) -> dict[str, Any]:
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


def embed_status_data(settings: Any, probe: dict[str, Any], build_state: dict[str, Any]) -> dict[str, Any]:
    """`embed status` data from the index probe and the live build state."""
    rows = probe.get("rows") or {}
    body = int(rows.get("body_units", 0))
    objects = int(rows.get("object_units", 0))
    passages = sum(int(v) for k, v in rows.items() if k.startswith("passages_"))
    deps = deps_installed()
    return {
        "model": settings.embedding_model, "mode": "local", "backend": settings.embed_backend,
        "deps_installed": deps["sqlite_vec"] and (deps["onnxruntime"] or deps["sentence_transformers"]),
        "deps": deps, "db_exists": bool(probe.get("exists")), "healthy": not probe.get("problem"),
        "error": probe.get("problem", ""), "body_chunk_count": body, "object_chunk_count": objects,
        "chunk_count": body + objects, "total_chunks": passages, "papers_indexed": int(probe.get("indexed", 0)),
        "papers_embedded": int(probe.get("embedded", 0)), "collections": probe.get("collections", {}),
        "index_path": probe.get("path"), "build_state": build_state,
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
            "build_state": status_data.get("build_state")}
