"""`sheaf mcp`: the library as a Model Context Protocol server (the official Python SDK, `mcp`).

A transport beside the CLI and `sheaf serve`, on the same service layer: one process keeps
the engines warm (`sheaf.serve.server.WarmEngines`: query encoder, in-memory matrix and
full-text tables, a pool of open Retrievers), and every tool call is one typed service
request (`sheaf.service.requests`) answered by the query service (`sheaf.service.queries`),
or by `sheaf.service.builds` for `status` and `stop`. A rebuild of the index between two
calls is seen by the second (the pool reopens a replaced or changed index).

Tools (inputs named as the CLI's options): `search`, `retrieve`, `get`, `timeline`, `grep`,
`status`, and `build` / `stop`, which write and are refused unless the server was started
with ``--allow-build``. Resource: ``sheaf://paper/{key}``, a paper's metadata and section
outline. Every tool answers structured content (its output schema) and a short text
rendering of it; the answers with units keep within ``max_tokens`` (estimated as
ceil(characters / 4) of the larger of the two), saying what they left out. Layer 1 (`retrieve`
without ``full``) is one compact line per unit (`Brief`: short id, paper key, page, section
leaf, a summary of at most `SUMMARY_MAX` characters, score); `get`, `timeline` and ``full``
give whole units. A refused request is a tool error (``isError``) carrying the envelope's code,
message and hint, in the tools' own words: an argument is named as the tool names it
(``limit must be an integer >= 1``, never a CLI flag or a validation library's text), and an
argument a tool does not have is refused (each input schema has ``additionalProperties: false``).

Transports: stdio (what desktop agents spawn) or, with ``--http``, streamable HTTP bound to
a loopback address only.
"""
from __future__ import annotations

import inspect
import json
import logging
import math
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from sheaf import __version__
from sheaf.core.defaults import DEFAULT_LIMIT, DEFAULT_PER_PAPER, DEFAULT_WINDOW, KINDS, MODES
from sheaf.core.envelope import SheafError, error, ok
from sheaf.core.lazy import lazy_module
from sheaf.search.snippets import clip, make_snippet
from sheaf.serve.client import LOOPBACK_HOSTS
from sheaf.serve.server import WarmEngines
from sheaf.service.requests import (
    GetRequest,
    GrepRequest,
    Outcome,
    PaperRequest,
    RetrieveRequest,
    SearchRequest,
    TimelineRequest,
)

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

builds = lazy_module("sheaf.service.builds")  # the Dagster side: only when status, build or stop runs

__all__ = ["FILTERS", "CHARS_PER_TOKEN", "DEFAULT_MAX_TOKENS", "estimate_tokens", "SheafTools", "make_server",
           "check_http_host", "mcp_command"]

#: Tokens are estimated as ceil(characters / CHARS_PER_TOKEN) (English text and JSON, as the
#: query benchmark counts them).
CHARS_PER_TOKEN = 4
DEFAULT_MAX_TOKENS = 2000
#: The most left-out ids an answer names (it counts the rest).
MAX_LEFT_OUT_IDS = 50
#: Layer 1: a unit's summary and its section's leaf are clipped to these many characters.
SUMMARY_MAX = 80
SECTION_MAX = 40
MISSING = inspect.Parameter.empty

#: The metadata filters of `search` and `retrieve`: input name (= the request field and the
#: CLI option) -> (type, default, description). One more filter is one more row here (and its
#: field in `sheaf.service.requests`).
FILTERS: dict[str, tuple[Any, Any, str]] = {
    "year_from": (int | None, None, "only papers of this year or later"),
    "year_to": (int | None, None, "only papers of this year or earlier"),
    "author": (list[str], [], "only papers with an author of one of these names (any case or accents)"),
    "collection": (list[str], [], "only papers in one of these Zotero collections or below it"),
    "domain": (list[str], [], "only papers of one of these domains (a PaperForge export's file name)"),
    "tag": (list[str], [], "only papers with one of these Zotero tags or keywords (whole, any case)"),
}


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# --- output schemas --------------------------------------------------------------------------------

class LeftOut(BaseModel):
    """What an answer left out to keep within `max_tokens`."""

    count: int = Field(description="matches left out")
    ids: list[str] = Field(description=f"their short ids (paper keys for search), best first, at most "
                                        f"{MAX_LEFT_OUT_IDS}")
    reason: str


class _Answer(BaseModel):
    count: int = Field(description="matches in this answer")
    tokens: int = Field(description="estimated tokens of this answer (ceil(characters / 4))")
    max_tokens: int
    left_out: LeftOut | None = Field(None, description="matches left out to keep within max_tokens")
    warnings: list[str] = []
    next_actions: list[str] = []


class Paper(BaseModel):
    zotero_key: str
    title: str | None = None
    first_author: str | None = None
    year: int | None = None
    journal: str | None = None
    domain: str | None = None


class Brief(BaseModel):
    """A unit at layer 1 (`retrieve` without full): what an agent chooses by, one line of text.
    Absent: `page` when the unit has none, `kind` for body text."""

    short_id: str = Field(description="pass to get / timeline")
    paper: str = Field(description="the paper's key")
    page: int | None = Field(None, description="the unit's first page")
    section: str = Field(description=f"the leaf of its section path (at most {SECTION_MAX} characters)")
    kind: str | None = Field(None, description="the unit's kind unless body text: backmatter, figure, table, "
                             "note or annotation")
    summary: str = Field(description=f"the unit's words nearest the query, at most {SUMMARY_MAX} characters")
    score: float | None = None


class Unit(BaseModel):
    """A whole unit (a section's passage, a figure or a table): layer 2 (`get`, `retrieve` with
    full) and 3 (`timeline`), with the paper's title and year and the unit's whole text."""

    short_id: str = Field(description="pass to get / timeline")
    paper: str = Field(description="the paper's key")
    title: str | None = None
    year: int | None = None
    section_path: list[str]
    page_span: list[int] | None = None
    kind: str = Field(description="body, backmatter, figure or table")
    score: float | None = None
    offset: int | None = Field(None, description="timeline: position relative to the anchor unit")
    text: str = Field(description="the whole unit text")


class RetrieveResult(_Answer):
    query: str
    mode: str
    score_kind: str
    strong_matches: int
    matches: list[Brief | Unit] = Field(description="layer 1: one brief per unit; with full: whole units")


class PaperHit(Paper):
    score: float
    summary: str = Field(description="the paper's best evidence, one line")
    short_id: str | None = Field(None, description="the unit of that evidence (none for a metadata match)")
    source: str = Field(description="where the evidence is: metadata, body, figure, table, ...")


class SearchResult(_Answer):
    query: str
    matches: list[PaperHit]


class GetResult(_Answer):
    missing: list[str]
    matches: list[Unit]


class TimelineResult(_Answer):
    anchor: str
    paper: Paper
    window: int
    units_in_paper: int
    matches: list[Unit]


class GrepHit(BaseModel):
    short_id: str
    paper: str
    section_path: list[str]
    page: int | None = None
    field: str = Field(description="text, caption or table_text")
    span: str = Field(description="the occurrence, verbatim")
    char_start: int
    char_end: int
    context: str


class GrepResult(_Answer):
    term: str
    variants: dict[str, int] = Field(description="each spelling found and how often")
    papers_with_hits: int
    matches: list[GrepHit]


class NotBuilt(BaseModel):
    paper: str
    state: str = Field(description="stale, missing, unreadable (its file cannot be read), failed or removed")
    reasons: list[str]


class StatusResult(BaseModel):
    fresh: bool = Field(description="every paper built, the index usable, no build running")
    needs_rebuild: bool
    verdict_reasons: list[str]
    states: dict[str, int]
    coverage: dict[str, int | None]
    build_state: dict[str, Any] = Field(description="the live build: status idle / running / stopping, ...")
    not_built: list[NotBuilt] = Field(description="the papers not built and why (at most 50)")
    warnings: list[str] = []
    next_actions: list[str] = []


class BuildResult(BaseModel):
    started: bool
    pid: int | None = None
    log: str | None = Field(None, description="the build's output (its last line: the JSON envelope)")
    message: str


class StopResult(BaseModel):
    outcome: str = Field(description="idle, stopped or died")
    stopped: bool
    message: str
    next_actions: list[str] = []


# --- answers -----------------------------------------------------------------------------------------

#: Every input name of the tools (a CLI option's name with `_` for `-`).
INPUTS = frozenset({"query", "mode", "limit", "per_paper", "paper", "kind", "full", "min_score", "max_tokens",
                    "ids", "id", "window", "term", "timeout", *FILTERS})
#: The tools that are CLI commands of the same name and inputs.
QUERY_TOOLS = ("search", "retrieve", "get", "timeline", "grep")
_FLAG_RE = re.compile(r"--([a-z][a-z-]*[a-z])(?: (-?\d[\d.]*|[A-Z][A-Z0-9_]+\b))?")
_SHEAF_TOOL_RE = re.compile(rf"\bsheaf ({'|'.join(QUERY_TOOLS)})\b")


def in_tool_terms(text: str) -> str:
    """`text` (a message, hint, warning or next action written for the CLI) in the tools' words:
    `--per-paper 0` -> `per_paper=0`, `--limit` -> `limit`, `sheaf get SHORT_ID` -> `get SHORT_ID`.
    A flag that is no tool's input, and a quoted command line of another command (`sheaf build
    --full`, for a person to run), are left as they are."""
    def flag(m: re.Match[str]) -> str:
        name = m.group(1).replace("-", "_")
        if name not in INPUTS:
            return m.group(0)
        return f"{name}={m.group(2)}" if m.group(2) else name

    def part(p: str) -> str:
        if p.startswith("`sheaf ") and not _SHEAF_TOOL_RE.match(p[1:]):
            return p
        return _SHEAF_TOOL_RE.sub(r"\1", _FLAG_RE.sub(flag, p))

    return "".join(part(p) for p in re.split(r"(`[^`]*`)", text))


def _tool_error(env: dict[str, Any]) -> CallToolResult:
    """An error envelope as an MCP tool error: code, message and hint in the text and in the
    structured content, in the tools' words (`in_tool_terms`)."""
    e = env["error"]
    details = dict(e.get("details") or {})
    hint = details.pop("hint", None)
    message = in_tool_terms(e["message"])
    hint = in_tool_terms(hint) if hint else hint
    text = f"{e['code']}: {message}" + (f"\nhint: {hint}" if hint else "")
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True,
                          structured_content={"error": {"code": e["code"], "message": message, "hint": hint,
                                                        "details": details}})


def _unit(m: dict[str, Any]) -> dict[str, Any]:
    """A match as a whole unit (layer 2 and 3): with the paper's title and year and the text."""
    u = {"short_id": m["short_id"], "paper": m["zotero_key"], "section_path": m.get("section_path") or [],
         "page_span": m.get("page_span"), "kind": m["source"], "score": m.get("score"), "offset": m.get("offset"),
         "title": m.get("title"), "year": m.get("year"), "text": m["text"]}
    return {k: v for k, v in u.items() if v is not None or k == "page_span"}


def brief(m: dict[str, Any], query: str) -> dict[str, Any]:
    """A match as layer 1's brief: short id, paper key, first page, section leaf, kind (not for
    body text), a summary of at most `SUMMARY_MAX` characters around the query's words, score
    (4 decimals)."""
    pages = m.get("page_span")
    leaf = (m.get("section_path") or [""])[-1]
    b = {"short_id": m["short_id"], "paper": m["zotero_key"], "page": pages[0] if pages else None,
         "section": clip(leaf, SECTION_MAX), "kind": None if m["source"] == "body" else m["source"],
         "summary": short_summary(m.get("summary") or m.get("text") or "", query),
         "score": None if m.get("score") is None else round(m["score"], 4)}
    return {k: v for k, v in b.items() if v is not None}


def short_summary(text: str, query: str) -> str:
    """At most `SUMMARY_MAX` characters of `text` (a snippet, its cut ends marked "…"): the
    window holding the most query words, cut at word boundaries."""
    # a space after each "…" lets the window start at the word that follows it
    s = make_snippet(text.replace("…", "… "), query, SUMMARY_MAX - 2)
    return clip(re.sub(r"…\s+", "…", s), SUMMARY_MAX)


def brief_line(b: dict[str, Any]) -> str:
    """Layer 1's text: one line per unit, `[short id] KEY p.N · section · kind · summary · score`."""
    parts = [f"[{b['short_id']}] {b['paper']}" + (f" p.{b['page']}" if b.get("page") is not None else ""),
             b["section"] or "(no section)", *([b["kind"]] if b.get("kind") else []), b["summary"]]
    if b.get("score") is not None:
        parts.append(f"{b['score']:.4g}")
    return " · ".join(parts)


def _where(u: dict[str, Any]) -> str:
    pages = u.get("page_span")
    page = "" if not pages else f" p.{pages[0]}" + (f"-{pages[1]}" if pages[1] != pages[0] else "")
    section = " > ".join(u.get("section_path") or [])
    paper = f"{u['paper']} {u['year']}" if u.get("year") else u["paper"]
    return f"{paper} · {section or '(no section)'}{page} · {u['kind']}"


def _render_units(head: str, d: dict[str, Any]) -> str:
    """Whole units: a header line each and the text below it; briefs (layer 1): one line each."""
    lines = [head]
    for u in d["matches"]:
        if "text" not in u:
            lines.append(brief_line(u))
            continue
        score = f" · {u['score']:.4g}" if u.get("score") is not None else ""
        off = f"{u['offset']:+d} " if u.get("offset") is not None else ""
        title = f" · {u['title']}" if u.get("title") else ""
        lines.append(f"{off}[{u['short_id']}] {_where(u)}{score}{title}")
        lines.append(f"  {u['text']}")
    return "\n".join(lines + _tail(d))


def _tail(d: dict[str, Any]) -> list[str]:
    out = []
    if d.get("left_out"):
        lo = d["left_out"]
        out.append(f"left out: {lo['count']} ({lo['reason']}): {', '.join(lo['ids'])}")
    out += [f"warning: {w}" for w in d.get("warnings") or []]
    out += [f"next: {a}" for a in d.get("next_actions") or []]
    return out


def _fit(d: dict[str, Any], max_tokens: int, render: Callable[[dict[str, Any]], str], ids: Callable[[dict], str],
         command: str) -> dict[str, Any]:
    """`d` with as many of its matches (best first) as keep both the JSON and the text within
    `max_tokens`, the rest named in `left_out`; `tokens` set. BAD_QUERY when not even the
    answer without matches fits."""
    matches = d["matches"]

    def sized(k: int) -> tuple[dict[str, Any], int]:
        rest = matches[k:]
        out = {**d, "matches": matches[:k], "count": k, "max_tokens": max_tokens, "tokens": 10 ** 9,
               "left_out": {"count": len(rest), "ids": [ids(m) for m in rest[:MAX_LEFT_OUT_IDS]],
                            "reason": f"max_tokens {max_tokens}"} if rest else None}
        return out, max(estimate_tokens(_json(out)), estimate_tokens(render(out)))

    best, size = sized(len(matches))
    if size > max_tokens:
        best, size = sized(0)
        if size > max_tokens:
            raise SheafError("BAD_QUERY", f"max_tokens {max_tokens} is below the smallest {command} answer "
                             f"(~{size} tokens)", {"max_tokens": max_tokens, "needed": size},
                             hint=f"give max_tokens {size} or more")
        for k in range(1, len(matches)):  # the most matches, in rank order, that fit
            cand, s = sized(k)
            if s > max_tokens:
                break
            best, size = cand, s
    best["tokens"] = size  # the 10**9 placeholder had the most digits: the answer only shrank
    return best


class SheafTools:
    """The tools' implementations over warm engines: each builds the typed request of its
    command, has the service answer it, and shapes the envelope into the tool's output."""

    def __init__(self, settings: Settings, engines: WarmEngines, *, allow_build: bool = False,
                 python: str = sys.executable) -> None:
        self.settings = settings
        self.engines = engines
        self.allow_build = allow_build
        self.python = python
        self._build: subprocess.Popen[bytes] | None = None
        self._build_lock = threading.Lock()

    # -- one service request -----------------------------------------------------------------------

    def _ask(self, command: str, request: Callable[[], Any]) -> Outcome:
        try:
            req = request()
        except SheafError as e:  # a request that does not fit (BAD_QUERY): named as the tool's input schema
            details = {**e.details, "hint": f"see the input schema of {command} (tools/list)"}
            return Outcome(error(command, e.code, e.message, details), 2)
        return self.engines.run(req)

    @staticmethod
    def _answer(out: Outcome, shape: Callable[[dict[str, Any]], dict[str, Any]], max_tokens: int | None,
                render: Callable[[dict[str, Any]], str], ids: Callable[[dict], str] = lambda m: m["short_id"]
                ) -> CallToolResult:
        env = out.envelope
        if not env["ok"]:
            return _tool_error(env)
        d = {**shape(env["data"]), "warnings": [in_tool_terms(w) for w in env["warnings"]],
             "next_actions": [in_tool_terms(a) for a in env["next_actions"]]}
        if max_tokens is not None:
            try:
                d = _fit(d, max_tokens, render, ids, env["command"])
            except SheafError as e:
                return _tool_error(error(env["command"], e.code, e.message, e.details))
        return CallToolResult(content=[TextContent(type="text", text=render(d))], structured_content=d)

    # -- layer 1: search, retrieve ---------------------------------------------------------------

    def search(self, query: str, limit: int, max_tokens: int, **filters: Any) -> CallToolResult:
        out = self._ask("search", lambda: SearchRequest.from_dict({"query": query, "limit": limit, **filters}))

        def shape(data: dict[str, Any]) -> dict[str, Any]:
            hits = [{**{k: m.get(k) for k in Paper.model_fields}, "score": round(m["score"], 4),
                     "summary": short_summary(m["summary"] or "", query),
                     "short_id": m.get("short_id"), "source": m["source"]} for m in data["matches"]]
            return {"query": data["query"], "matches": [{k: v for k, v in h.items() if v is not None}
                                                        for h in hits]}

        def render(d: dict[str, Any]) -> str:  # one line per paper
            lines = [f"{d['count']} papers for {d['query']!r}"]
            for m in d["matches"]:
                lines.append(f"{m['zotero_key']} · {m.get('first_author') or '?'} {m.get('year') or ''} · "
                             f"{m.get('title') or '(no title)'} · {m['summary']} · {m['score']:.4g}")
            return "\n".join(lines + _tail(d))

        return self._answer(out, shape, max_tokens, render, ids=lambda m: m["zotero_key"])

    def retrieve(self, query: str, mode: str, limit: int, per_paper: int, paper: list[str], kind: str,
                 full: bool, min_score: float | None, max_tokens: int, **filters: Any) -> CallToolResult:
        out = self._ask("retrieve", lambda: RetrieveRequest.from_dict(
            {"query": query, "mode": mode, "limit": limit, "per_paper": per_paper, "paper": paper, "kind": kind,
             "full": full, "min_score": min_score, **filters}))

        def shape(data: dict[str, Any]) -> dict[str, Any]:
            return {"query": data["query"], "mode": data["mode"], "score_kind": data["score_kind"],
                    "strong_matches": data["strong_matches"],
                    "matches": [_unit(m) if full else brief(m, query) for m in data["matches"]]}

        return self._answer(out, shape, max_tokens, lambda d: _render_units(
            f"{d['count']} units for {d['query']!r} ({d['mode']}, score {d['score_kind']})", d))

    # -- layer 2 and 3: get, timeline ----------------------------------------------------------------

    def get(self, ids: list[str], max_tokens: int) -> CallToolResult:
        out = self._ask("get", lambda: GetRequest.from_dict({"ids": ids}))
        return self._answer(out, lambda data: {"missing": data["missing"],
                                               "matches": [_unit(m) for m in data["matches"]]},
                            max_tokens, lambda d: _render_units(f"{d['count']} units", d))

    def timeline(self, id: str, window: int, max_tokens: int) -> CallToolResult:  # noqa: A002 - the CLI's name
        out = self._ask("timeline", lambda: TimelineRequest.from_dict({"id": id, "window": window}))

        def shape(data: dict[str, Any]) -> dict[str, Any]:
            return {"anchor": data["anchor"]["short_id"], "paper": data["paper"], "window": data["window"],
                    "units_in_paper": data["units_in_paper"],
                    "matches": [_unit(m) for m in data["matches"]]}

        return self._answer(out, shape, max_tokens, lambda d: _render_units(
            f"{d['count']} of the {d['units_in_paper']} units of {d['paper']['zotero_key']} around "
            f"{d['anchor']}, in reading order", d))

    # -- grounding: grep -------------------------------------------------------------------------------

    def grep(self, term: str, paper: list[str], max_tokens: int, kind: str = "all") -> CallToolResult:
        out = self._ask("grep", lambda: GrepRequest.from_dict({"term": term, "paper": paper, "kind": kind}))

        def shape(data: dict[str, Any]) -> dict[str, Any]:
            hits = [{"short_id": m["short_id"], "paper": m["zotero_key"], "section_path": m["section_path"],
                     "page": m.get("page"), "field": m["field"], "span": m["span"], "char_start": m["char_start"],
                     "char_end": m["char_end"], "context": m["text"]} for m in data["matches"]]
            return {"term": data["term"], "variants": data["variants"], "papers_with_hits": data["papers_with_hits"],
                    "matches": hits}

        def render(d: dict[str, Any]) -> str:
            lines = [f"{d['count']} occurrences of {d['term']!r} in {d['papers_with_hits']} papers "
                     f"(spellings: {', '.join(d['variants']) or 'none'})"]
            lines += [f"[{m['short_id']}] {m['paper']} p.{m['page']} {m['field']}[{m['char_start']}:"
                      f"{m['char_end']}]: {m['context']}" for m in d["matches"]]
            return "\n".join(lines + _tail(d))

        return self._answer(out, shape, max_tokens, render)

    # -- the resource: a paper's outline ------------------------------------------------------------

    def paper(self, key: str) -> str:
        out = self._ask("paper", lambda: PaperRequest(key))
        env = out.envelope
        if not env["ok"]:
            e = env["error"]
            hint = (e.get("details") or {}).get("hint")
            raise ResourceError(f"{e['code']}: {e['message']}" + (f" (hint: {hint})" if hint else ""))
        return _json({**env["data"], "next_actions": env["next_actions"]})

    # -- the pipeline: status, build, stop -------------------------------------------------------------

    @staticmethod
    def _pipeline(command: str, run: Callable[[], Outcome]) -> Outcome:
        try:
            return run()
        except SheafError as e:
            return Outcome(error(command, e.code, e.message, e.details), 2)

    def status(self) -> CallToolResult:
        out = self._pipeline("status", lambda: builds.status(self.settings))
        env = out.envelope
        if not env["ok"]:
            return _tool_error(env)
        data = env["data"]
        not_built = [{"paper": p["paper_id"], "state": p["state"],
                      "reasons": ([p["error"]] if p.get("error") else []) + list(p.get("reasons") or [])}
                     for p in data["papers"] if p["state"] != "built"][:50]
        d = {"fresh": data["fresh"], "needs_rebuild": data["needs_rebuild"],
             "verdict_reasons": data["verdict_reasons"], "states": data["states"],
             "coverage": {k: v for k, v in data["coverage"].items() if v is None or isinstance(v, int)},
             "build_state": data.get("build_state") or {}, "not_built": not_built,
             "warnings": env["warnings"], "next_actions": env["next_actions"]}
        state = "fresh" if d["fresh"] else ("needs a build" if d["needs_rebuild"] else "not fresh")
        lines = [f"index {state}: " + ", ".join(f"{n} {s}" for s, n in sorted(d["states"].items())),
                 f"build: {d['build_state'].get('status', 'idle')}"]
        lines += [f"  {r}" for r in d["verdict_reasons"]]
        lines += [f"{p['paper']}: {p['state']} ({'; '.join(p['reasons'])})" for p in not_built]
        return CallToolResult(content=[TextContent(type="text", text="\n".join(lines + _tail(d)))],
                              structured_content=d)

    def _refused(self, command: str) -> CallToolResult | None:
        if self.allow_build:
            return None
        return _tool_error(error(command, "BAD_QUERY", f"{command} is off: this server was started without "
                                 "--allow-build (building writes the index)",
                                 {"hint": "start the server with `sheaf mcp --allow-build`, or run "
                                          f"`sheaf {command}` yourself"}))

    def build(self, full: bool, paper: list[str]) -> CallToolResult:
        refused = self._refused("build")
        if refused is not None:
            return refused
        with self._build_lock:
            if self._build is not None and self._build.poll() is None:
                d = {"started": False, "pid": self._build.pid, "log": str(self._log()),
                     "message": f"a build started by this server is still running (pid {self._build.pid}); "
                                "`status` follows it, `stop` stops it"}
            else:
                # `sheaf build` in a process of its own: the build holds the home's lock and answers
                # `sheaf stop` (SIGTERM) without taking this server down
                argv = [self.python, "-m", "sheaf", "build", "--json", *(["--full"] if full else []),
                        *[a for k in paper for a in ("--paper", k)]]
                log = self._log()
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "wb") as f:
                    self._build = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                                   start_new_session=True, env={**os.environ, "COLUMNS": "100"})
                d = {"started": True, "pid": self._build.pid, "log": str(log),
                     "message": f"an incremental build started (pid {self._build.pid}); `status` follows it and "
                                "the query tools see its result as soon as it is written"}
        return CallToolResult(content=[TextContent(type="text", text=d["message"])], structured_content=d)

    def _log(self) -> Path:
        return Path(self.settings.home) / "mcp-build.log"

    def stop(self, timeout: float) -> CallToolResult:
        refused = self._refused("stop")
        if refused is not None:
            return refused
        out = self._pipeline("stop", lambda: builds.stop(self.settings, timeout=timeout))
        env = out.envelope
        if not env["ok"]:
            return _tool_error(env)
        with self._build_lock:
            if self._build is not None:
                self._build.poll()  # reap it
        data = env["data"]
        d = {"outcome": data["outcome"], "stopped": data["stopped"], "message": data["message"],
             "next_actions": env["next_actions"]}
        return CallToolResult(content=[TextContent(type="text", text="\n".join([d["message"], *_tail(d)]))],
                              structured_content=d)

    def close(self) -> None:
        self.engines.close()


# --- the server -----------------------------------------------------------------------------------

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)

_MAX_TOKENS = Annotated[int, Field(ge=1, description="the answer's budget in tokens (estimated as characters / 4); "
                                   "matches that do not fit are left out, best first kept, and named")]
_KIND = Annotated[str, Field(description="which units: body text, objects (figures and tables), Zotero notes, "
                             "Zotero annotations, back matter alone (acknowledgements, funding, footnotes), "
                             "or all", json_schema_extra={"enum": list(KINDS)})]


def _with_filters(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (which takes ``**filters``) with one keyword input per row of `FILTERS` in its
    signature, so that the SDK publishes them in the tool's input schema."""
    sig = inspect.signature(fn, eval_str=True)
    params = [p for p in sig.parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
    for name, (kind, default, doc) in FILTERS.items():
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=Annotated[kind, Field(description=doc)]))
    fn.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return fn


def describe(schema: dict[str, Any]) -> str:
    """What a JSON schema of one input accepts, in words: "an integer >= 1", "a list of
    strings", "a number or null", "one of lexical, semantic, hybrid"."""
    if "anyOf" in schema:
        return " or ".join(describe(s) for s in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    kind = schema.get("type")
    if kind == "array":
        item = describe(schema.get("items") or {}).removeprefix("an ").removeprefix("a ")
        base = f"a {'non-empty ' if schema.get('minItems') else ''}list of {item}s"
    else:
        base = {"integer": "an integer", "number": "a number", "boolean": "a boolean", "string": "a string",
                "null": "null", "object": "an object"}.get(kind, "a value")
    bounds = [f"{op} {schema[k]:g}" for k, op in (("minimum", ">="), ("exclusiveMinimum", ">"),
                                                   ("maximum", "<="), ("exclusiveMaximum", "<")) if k in schema]
    return " ".join([base, *bounds])


def argument_error(tool: str, schema: dict[str, Any], arguments: dict[str, Any],
                   invalid: ValidationError | None = None) -> dict[str, Any] | None:
    """The error envelope (BAD_QUERY) of `arguments` that do not fit `tool`'s input `schema`:
    an argument it does not have, one it needs and lacks, or (`invalid`: the SDK's validation
    failure) a value of the wrong type or range, each named as the tool names it with what it
    accepts; None when nothing is wrong (without `invalid`: the checks done before the SDK's)."""
    props = schema.get("properties") or {}
    hint = f"the inputs of {tool}: {', '.join(props) or 'none'} (its input schema: tools/list)"
    unknown = sorted(str(k) for k in arguments if k not in props)
    if unknown:
        return error(tool, "BAD_QUERY", f"unknown argument{'s' if len(unknown) > 1 else ''} for {tool}: "
                     f"{', '.join(unknown)}", {"arguments": unknown, "hint": hint})
    missing = [k for k in schema.get("required") or [] if k not in arguments]
    if missing:
        return error(tool, "BAD_QUERY", f"{tool} needs {', '.join(missing)} "
                     f"({'; '.join(f'{k}: {describe(props[k])}' for k in missing)})",
                     {"arguments": missing, "hint": hint})
    if invalid is None:
        return None
    names = list(dict.fromkeys(str(e["loc"][0]) for e in invalid.errors() if e.get("loc")))
    bad = [k for k in names if k in props]
    if not bad:  # not an argument's fault that can be named: say what the tool takes
        return error(tool, "BAD_QUERY", f"the arguments do not fit {tool}'s input schema", {"hint": hint})
    return error(tool, "BAD_QUERY", "; ".join(f"{k} must be {describe(props[k])}, not {arguments.get(k)!r}"
                                              for k in bad),
                 {"arguments": bad, "hint": f"see the input schema of {tool} (tools/list)"})


class _SheafMCPServer(MCPServer):
    """The SDK's server, whose own refusals carry an envelope code as Sheaf's do and speak the
    tools' words: arguments that do not fit a tool's input schema (unknown, missing, of the wrong
    type or range: `argument_error`) and unknown tools are BAD_QUERY, a crash in a tool
    INTERNAL_ERROR (its traceback on stderr). No validation library's text reaches the client."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            refused = argument_error(name, tool.parameters, arguments)
            if refused is not None:
                return _tool_error(refused)
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as e:
            cause = e.__cause__ or e
            logging.getLogger("sheaf.mcp").error("tool %s failed", name, exc_info=cause)
            return _tool_error(error(name, "INTERNAL_ERROR", f"{type(cause).__name__}: {cause}",
                                     {"hint": "this is a bug in sheaf; please report it with the call you made"}))
        except ToolError as e:
            if tool is not None and isinstance(e.__cause__, ValidationError):
                return _tool_error(argument_error(name, tool.parameters, arguments, e.__cause__)
                                   or error(name, "BAD_QUERY", f"the arguments do not fit {name}'s input schema"))
            tools = ", ".join(t.name for t in await self.list_tools())
            if tool is None:
                return _tool_error(error(name, "BAD_QUERY", f"unknown tool: {name}", {"hint": f"the tools are {tools}"}))
            return _tool_error(error(name, "BAD_QUERY", str(e).removeprefix(f"Error executing tool {name}: "),
                                     {"hint": f"see the input schema of {name} (tools/list)"}))

    def add_tool(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        """The SDK's, and the tool's input schema refuses arguments it does not name (as
        `call_tool` does)."""
        super().add_tool(fn, *args, **kwargs)
        self._tool_manager.get_tool(kwargs.get("name") or fn.__name__).parameters["additionalProperties"] = False


def make_server(tools: SheafTools) -> MCPServer:
    """The MCP server of `tools`: its tools, each described for an agent to choose by, and the
    paper resource."""
    srv = _SheafMCPServer("sheaf", version=__version__, instructions=(
        "Sheaf answers from the user's own paper library. Work in layers to keep context small: "
        "`retrieve` (or `search` for whole papers) gives one compact line per unit (short id, paper, page, section, "
        "summary, score); "
        "`get` the few you need in full; `timeline` reads the units around one; `grep` finds exact codes. "
        "Read sheaf://paper/{key} for a paper's outline. `status` says whether the index is fresh."))

    @_with_filters
    def search(query: Annotated[str, Field(description="words, a phrase in quotes, or a code (SPG-302)")],
               limit: Annotated[int, Field(ge=1, description="papers to return")] = DEFAULT_LIMIT,
               kind: _KIND = "all",
               max_tokens: _MAX_TOKENS = DEFAULT_MAX_TOKENS,
               **filters: Any) -> Annotated[CallToolResult, SearchResult]:
        return tools.search(query, limit, max_tokens, kind=kind, **filters)

    srv.add_tool(search, description=(
        "Find papers (not passages) in the user's library by words in their title, authors, abstract, journal or "
        "full text (lexical, ranked by reciprocal-rank fusion). One match per paper with its key, title, first "
        "author, year and the line of best evidence. Use to find which papers discuss something or to list an "
        "author's papers; use `retrieve` for the passages that answer a question."), annotations=READ_ONLY)

    @_with_filters
    def retrieve(query: Annotated[str, Field(description="a question or words")],
                 mode: Annotated[str, Field(description="lexical (bm25), semantic (embeddings) or hybrid (both, "
                                            "fused)", json_schema_extra={"enum": list(MODES)})] = "hybrid",
                 limit: Annotated[int, Field(ge=1, description="units to return")] = DEFAULT_LIMIT,
                 per_paper: Annotated[int, Field(ge=0, description="at most this many units of one paper (0: no "
                                                 "cap)")]
                 = DEFAULT_PER_PAPER,
                 paper: Annotated[list[str], Field(description="only these papers (keys)")] = [],  # noqa: B006
                 kind: _KIND = "all",
                 full: Annotated[bool, Field(description="the whole text of each unit (the deep layer: many more "
                                             "tokens); default: a one-line summary, then `get` the units you need")]
                 = False,
                 min_score: Annotated[float | None, Field(description="only matches scoring this or more")] = None,
                 max_tokens: _MAX_TOKENS = DEFAULT_MAX_TOKENS,
                 **filters: Any) -> Annotated[CallToolResult, RetrieveResult]:
        return tools.retrieve(query, mode, limit, per_paper, paper, kind, full, min_score, max_tokens, **filters)

    srv.add_tool(retrieve, description=(
        "The best passages (units: a section's paragraph run, a figure, a table) for a question, from the user's "
        "papers. Layer 1: one compact line per unit (short id, paper key, page, section, a summary of at most "
        f"{SUMMARY_MAX} characters around the query's words, score), so that many candidates cost few tokens; then "
        "call `get` with the short ids you need (or pass full for whole units). "
        "Hybrid (lexical + semantic) by default. The answer keeps within max_tokens and names what it left out."),
        annotations=READ_ONLY)

    def get(ids: Annotated[list[str], Field(min_length=1, description="short ids from retrieve, search, grep or "
                                            "timeline")],
            max_tokens: _MAX_TOKENS = DEFAULT_MAX_TOKENS) -> Annotated[CallToolResult, GetResult]:
        return tools.get(ids, max_tokens)

    srv.add_tool(get, description=(
        "Layer 2: whole units by short id, in the order asked, with their paper, section path and pages. Ask only "
        "for the units whose summary looked relevant; ids that no longer exist (a paper rebuilt) are named in "
        "`missing`."), annotations=READ_ONLY)

    def timeline(id: Annotated[str, Field(description="the short id of the unit to read around")],  # noqa: A002
                 window: Annotated[int, Field(ge=0, description="units on each side")] = DEFAULT_WINDOW,
                 max_tokens: _MAX_TOKENS = DEFAULT_MAX_TOKENS) -> Annotated[CallToolResult, TimelineResult]:
        return tools.timeline(id, window, max_tokens)

    srv.add_tool(timeline, description=(
        "Layer 3: the units before and after one unit, in the paper's reading order (figures and tables where "
        "they are cited), each with its offset from the anchor: read the context of a passage."),
        annotations=READ_ONLY)

    def grep(term: Annotated[str, Field(description="a term, identifier or code: SPG302, SPG 302 and SPG-302 "
                                        "are the same code")],
             paper: Annotated[list[str], Field(description="only these papers (keys)")] = [],  # noqa: B006
             kind: _KIND = "all",
             max_tokens: _MAX_TOKENS = DEFAULT_MAX_TOKENS) -> Annotated[CallToolResult, GrepResult]:
        return tools.grep(term, paper, max_tokens, kind)

    srv.add_tool(grep, description=(
        "Every occurrence of an exact term or code in the library's text, figure captions and tables, verbatim, "
        "with its unit, page and character offsets, and the spellings found. Use for identifiers, gene or drug "
        "codes, accession numbers: what meaning-based retrieval may blur."), annotations=READ_ONLY)

    def status() -> Annotated[CallToolResult, StatusResult]:
        return tools.status()

    srv.add_tool(status, description=(
        "Is the index fresh? Per library: papers built / stale (and why) / missing / failed, coverage "
        "(library, parsed, indexed, embedded) and whether a build is running. Writes nothing."), annotations=READ_ONLY)

    def build(full: Annotated[bool, Field(description="rebuild every paper, changed or not")] = False,
              paper: Annotated[list[str], Field(description="only these papers (keys)")] = [],  # noqa: B006
              ) -> Annotated[CallToolResult, BuildResult]:
        return tools.build(full, paper)

    srv.add_tool(build, description=(
        "Start an incremental build of the library (new and changed papers only) in the background and return "
        "at once; follow it with `status`. Writes the index: refused unless the server was started with "
        "--allow-build."), annotations=WRITES)

    def stop(timeout: Annotated[float, Field(gt=0, description="give up after this many seconds")] = 60.0,
             ) -> Annotated[CallToolResult, StopResult]:
        return tools.stop(timeout)

    srv.add_tool(stop, description=(
        "Stop the running build at the next paper boundary and wait until it has. Refused unless the server was "
        "started with --allow-build."), annotations=WRITES)

    @srv.resource("sheaf://paper/{key}", name="paper", mime_type="application/json", description=(
        "A paper's metadata (title, authors, year, journal, abstract) and its section outline: each section's "
        "path, pages, number of units, figures and tables, and its first unit's short id (for get / timeline)."))
    def paper(key: str) -> str:
        return tools.paper(key)

    return srv


def check_http_host(host: str) -> None:
    """Streamable HTTP is served on a loopback address only (anyone who reaches the port reads
    the library)."""
    if host not in LOOPBACK_HOSTS:
        raise SheafError("BAD_QUERY", f"sheaf mcp --http listens on the loopback interface only, not {host!r}",
                         {"host": host}, hint="use --host 127.0.0.1 (or ::1)")


def mcp_command(settings: Settings, *, http: bool = False, host: str = "127.0.0.1", port: int = 8765,
                allow_build: bool = False, announce: Callable[[str], None] = lambda m: None) -> Outcome:
    """`sheaf mcp`: serve until the client closes stdin (stdio) or until SIGINT/SIGTERM (HTTP);
    then a summary envelope (never printed on the stdio transport, whose stdout is the protocol's)."""
    if http:
        check_http_host(host)
    engines = WarmEngines(settings)
    tools = SheafTools(settings, engines, allow_build=allow_build)
    try:
        notes = engines.warm()
        srv = make_server(tools)
        for n in notes:
            announce(f"sheaf mcp: note: {n}")
        if http:
            announce(f"sheaf mcp: http://{f'[{host}]' if ':' in host else host}:{port}/mcp "
                     f"(index {settings.index_location}{', build allowed' if allow_build else ''})")
            srv.run("streamable-http", host=host, port=port)
        else:
            announce(f"sheaf mcp: stdio (index {settings.index_location}{', build allowed' if allow_build else ''})")
            srv.run("stdio")
    finally:
        tools.close()
    return Outcome(ok("mcp", {"transport": "http" if http else "stdio", "notes": notes}, count=0))
