"""`python -m sheaf.paperforge --vault VAULT <command> ... --json`: the PaperForge plugin's argv,
translated onto Sheaf's service functions (the same ones `sheaf` runs; no second
implementation), answering with the payload shapes the plugin reads
(`sheaf.service.paperforge`). See docs/paperforge.md.

Commands: ``search QUERY``, ``retrieve QUERY [--deep]``, ``embed build [--resume|--force]``
(always NDJSON events on stdout: start, progress, warning, then result or error),
``embed status``, ``embed stop``, ``memory build``, ``memory status``. A line
``PAPERFORGE_STOP`` on stdin stops a running ``embed build`` at the next paper boundary (the
plugin's cooperative stop), as SIGTERM and ``embed stop`` do. Every error is an error envelope
on stdout with a code, exit non-zero; stderr carries diagnostics only.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

from sheaf.cli.app import _answer, _local_retrievers
from sheaf.cli.parser import UsageError, _Parser, _positive_int
from sheaf.cli.progress_view import BuildView
from sheaf.core.defaults import DEFAULT_LIMIT
from sheaf.core.envelope import SheafError, error, ok
from sheaf.core.progress import request_stop
from sheaf.service import paperforge as pf
from sheaf.service.client import try_server
from sheaf.service.queries import run_query
from sheaf.service.requests import Outcome, RetrieveRequest, SearchRequest

__all__ = ["main", "build_parser", "STOP_LINE"]

#: What the plugin writes on the build's stdin to stop it.
STOP_LINE = "PAPERFORGE_STOP"


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m sheaf.paperforge", description="PaperForge's memory-layer commands, answered by Sheaf.")
    ap.add_argument("--vault", required=True, help="the Obsidian vault (the library; its index lives in "
                    "<vault>/System/PaperForge/sheaf unless SHEAF_HOME is set)")
    ap.add_argument("--json", action="store_true", dest="json_first")
    sub = ap.add_subparsers(dest="command", required=True)
    se = sub.add_parser("search")
    se.add_argument("query", nargs="+")
    se.add_argument("--limit", type=_positive_int, default=DEFAULT_LIMIT)
    se.add_argument("--domain", action="append", default=[])
    se.add_argument("--year-from", type=int, default=None)
    se.add_argument("--year-to", type=int, default=None)
    rt = sub.add_parser("retrieve")
    rt.add_argument("query", nargs="+")
    rt.add_argument("--deep", action="store_true", help="hybrid retrieval with whole unit texts")
    rt.add_argument("--limit", type=_positive_int, default=5)
    rt.add_argument("--paper", action="append", default=[])
    rt.add_argument("--expand", action="store_true", help="accepted for compatibility (Sheaf's hybrid "
                    "retrieval already searches every unit)")
    em = sub.add_parser("embed")
    ems = em.add_subparsers(dest="sub", required=True)
    eb = ems.add_parser("build")
    g = eb.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="build what is missing or stale (the default)")
    g.add_argument("--force", action="store_true", help="rebuild every paper")
    ems.add_parser("status")
    ems.add_parser("stop")
    me = sub.add_parser("memory")
    mes = me.add_subparsers(dest="sub", required=True)
    mes.add_parser("build")
    mes.add_parser("status")
    for p in (se, rt, *ems.choices.values(), *mes.choices.values()):
        p.add_argument("--json", action="store_true")
    return ap


def _name(args: argparse.Namespace) -> str:
    return f"{args.command} {args.sub}" if getattr(args, "sub", None) else args.command


# --- commands --------------------------------------------------------------------------------------

def _query(args: argparse.Namespace, settings: Any) -> Outcome:
    if args.command == "search":
        req: Any = SearchRequest(" ".join(args.query), limit=args.limit, year_from=args.year_from,
                                 year_to=args.year_to, domain=tuple(args.domain))
    else:
        req = RetrieveRequest(" ".join(args.query), mode="hybrid", limit=args.limit, paper=tuple(args.paper),
                              full=args.deep)
    out = try_server(req, settings) or run_query(req, _local_retrievers(settings))
    env = pf.with_plugin_fields(out.envelope, settings, settings.library)
    if env.get("ok") and args.command == "retrieve":
        env["data"]["deep"] = bool(args.deep)
    return Outcome(env, out.exit_code)


def _stdin_stop() -> None:
    """Stop the build when the plugin writes PAPERFORGE_STOP on our stdin (a pipe)."""
    def read() -> None:
        try:
            for line in sys.stdin:
                if line.strip() == STOP_LINE:
                    request_stop("PaperForge (PAPERFORGE_STOP on stdin)")
                    return
        except (OSError, ValueError):
            return

    if sys.stdin is not None and not sys.stdin.isatty():
        threading.Thread(target=read, name="paperforge-stop", daemon=True).start()


def _pipeline() -> Any:
    """`sheaf.service.pipeline` (the Dagster side): only for the build and status commands."""
    from sheaf.service import pipeline

    return pipeline


def _build(args: argparse.Namespace, settings: Any, events: bool) -> Outcome:
    pipeline = _pipeline()
    full = bool(getattr(args, "force", False))
    if events:
        _stdin_stop()
    with BuildView(events=events, json_only=not events, stdout=sys.stdout, stderr=sys.stderr) as view:
        # stderr: warnings only (the plugin shows stderr text as a warning)
        out = pipeline.build(settings, full=full, events=view.event if events else None, exact_progress=events,
                             progress=lambda m: view.line(m) if m.startswith(("!", "✗")) else None)
    env = dict(out.envelope)
    env["command"] = _name(args)
    return Outcome(env, out.exit_code, out.view)


def _status(args: argparse.Namespace, settings: Any) -> Outcome:
    pipeline = _pipeline()

    if args.sub == "stop":
        out = pipeline.stop(settings, progress=lambda m: print(m, file=sys.stderr, flush=True))
        d = out.envelope["data"]
        data = {**d, "state": "stopped" if d["stopped"] else "idle"}
        return Outcome(ok("embed stop", data, count=out.envelope["count"], next_actions=out.envelope["next_actions"]),
                       out.exit_code)
    if args.command == "embed":
        data = pf.embed_status_data(settings, pipeline.index_probe(settings), pipeline.build_state(settings))
        acts = [] if data["total_chunks"] else ["run `embed build`"]
        return Outcome(ok("embed status", data, count=data["total_chunks"], next_actions=acts))
    st = pipeline.status(settings)
    data = pf.memory_status_data(st.envelope["data"])
    return Outcome(ok("memory status", data, count=data["paper_count_db"], next_actions=st.envelope["next_actions"]))


def _run(args: argparse.Namespace) -> Outcome:
    settings = pf.vault_settings(args.vault)
    if args.command in ("search", "retrieve"):
        return _query(args, settings)
    if args.sub == "build":
        return _build(args, settings, events=args.command == "embed")
    return _status(args, settings)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    streams = "embed" in argv and "build" in argv  # `embed build` always answers as events
    try:
        args = build_parser().parse_args(argv)
    except UsageError as e:
        values = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--vault"}
        command = next((a for a in argv if not a.startswith("-") and a not in values), "paperforge")
        if "--json" in argv or streams:
            _answer(argparse.Namespace(events=streams), error(command, "BAD_QUERY", str(e),
                                                                {"hint": "see `python -m sheaf.paperforge --help`"}))
        else:
            print(f"error: {e}", file=sys.stderr)
        return 2
    machine = args.json or args.json_first or (args.command == "embed" and args.sub == "build")
    wrap = argparse.Namespace(events=args.command == "embed" and args.sub == "build")
    try:
        out = _run(args)
    except SheafError as e:
        out = Outcome(error(_name(args), e.code, e.message, e.details), 2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 141
    except Exception as e:  # noqa: BLE001 - never a traceback for the plugin; the envelope names the failure
        out = Outcome(error(_name(args), "INTERNAL_ERROR", f"{type(e).__name__}: {e}",
                            {"hint": "this is a bug in sheaf; please report it with the command you ran"}), 3)
    if machine:
        _answer(wrap, out.envelope)
    elif out.envelope.get("ok"):
        print(json.dumps(out.envelope["data"], ensure_ascii=False, indent=1, default=str))
    else:
        err = out.envelope["error"]
        print(f"error [{err['code']}]: {err['message']}", file=sys.stderr)
    return out.exit_code
