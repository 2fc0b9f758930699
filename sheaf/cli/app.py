"""The `sheaf` command line: parse argv, get the command's answer from the service layer (for a
query command: a running `sheaf serve` through the client, else the service run here), then
print it: the JSON envelope (--json) or the readable view (`sheaf.cli.tables`).

Light: `sheaf search` must start fast and never import dagster or torch, so the modules of the
other commands (transforms, Dagster, eval, the server) and the index code are imported only by
the command that needs them.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from sheaf.cli import tables
from sheaf.cli.parser import (
    FORMATS,
    STAGES,
    Parser,  # noqa: F401 - importable from here (the help-width test)
    UsageError,
    build_parser,
    request_from_args,
)
from sheaf.cli.progress_view import BuildView, event_line
from sheaf.cli.terminal import terminal_columns as _terminal_columns  # noqa: F401 - as Parser
from sheaf.core.envelope import SheafError, emit, error
from sheaf.core.heap import quick_exit
from sheaf.core.lazy import lazy_module
from sheaf.core.settings import VAULT_HOME, check_home_library, get_settings
from sheaf.serve.client import try_server
from sheaf.service import report
from sheaf.service.queries import RetrieverSource, run_query
from sheaf.service.requests import SERVED_COMMANDS, Outcome

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

index_copy = lazy_module("sheaf.service.index_copy")  # the index code: only `sheaf index` loads it

__all__ = ["main", "build_parser", "STAGES", "FORMATS", "UsageError"]


def _say(quiet: bool, file: Any = None, prefix: str = "") -> Any:
    """A progress callback: nothing under --json (or --quiet), else one line per message."""
    if quiet:
        return lambda m: None
    return lambda m: print(f"{prefix}{m}", file=file or sys.stdout, flush=True)


# --- query commands ----------------------------------------------------------------------------

def _open_retriever(settings: Settings) -> Any:
    """A Retriever on the configured index, opened by this process (it closes on ``__exit__``)."""
    from sheaf.search.retriever import Retriever  # the index code: only when this process queries

    return Retriever.open(settings)


def local_retrievers(settings: Settings) -> RetrieverSource:
    return functools.partial(_open_retriever, settings)


def _query_settings(args: argparse.Namespace) -> Any:
    """The settings of a query command: with --library, the home of that library (a PaperForge
    vault's own home unless SHEAF_HOME is set), refused when the home records another library."""
    if not args.library:
        return get_settings()
    lib = Path(args.library).expanduser()
    vault_home = lib / VAULT_HOME
    home = vault_home if vault_home.is_dir() and not os.environ.get("SHEAF_HOME") else None
    settings = get_settings(library=lib, **({"home": home} if home is not None else {}))
    check_home_library(settings, f"sheaf {args.command}")
    return settings


def cmd_query(args: argparse.Namespace) -> Outcome:
    """search / retrieve / get / timeline / grep: a running `sheaf serve` answers when one does
    (warm encoder and index) within ~50 ms, unless --no-server; else the same service here."""
    req = request_from_args(args)
    settings = _query_settings(args)
    out = None if args.no_server else try_server(req, settings)
    if out is None:
        out = run_query(req, local_retrievers(settings))
    if not args.json:
        (tables.query if out.envelope["ok"] else tables.error)(out.envelope)
    return out


# --- parse, build, status, report, doctor, eval, serve ---------------------------------------------

def cmd_parse(args: argparse.Namespace) -> Outcome:
    from sheaf.service import parsing  # the transforms: not for a query's process

    settings = get_settings()
    out = parsing.parse(args.path, fmt=args.format, stage=args.stage, paper_id=args.paper_id,
                        token_cap=settings.unit_token_cap, ocr=parsing.page_ocr(settings))
    if not args.json:
        tables.parse(out.envelope, out.view)
    return out


def _builds_service() -> Any:
    """The service module of build/status/doctor: it reaches the Dagster side, imported only
    here, so `sheaf search` and the other light commands never load it."""
    from sheaf.service import builds

    return builds


def _settings(args: argparse.Namespace) -> Any:
    given = {"library": args.library} if getattr(args, "library", None) else {}
    if getattr(args, "workers", None) is not None:
        given["build_workers"] = args.workers
    return get_settings(**given)


def _say_library(builds: Any, settings: Settings, args: argparse.Namespace) -> None:
    """One line on stderr when a command uses the home's recorded library (none under --json)."""
    line = builds.library_line(settings)
    if line and not getattr(args, "json", False):
        print(line, file=sys.stderr, flush=True)


def cmd_build(args: argparse.Namespace) -> Outcome:
    builds, settings = _builds_service(), _settings(args)
    _say_library(builds, settings, args)
    with BuildView(json_only=args.json, events=args.events) as view:
        out = builds.build(settings, papers=args.paper, full=args.full,
                             progress=view.line, events=view.event, exact_progress=args.events,
                             switch_library=args.switch_library)
    if not args.json and not args.events:
        tables.build(out.envelope, out.view)
    return out


def cmd_stop(args: argparse.Namespace) -> Outcome:
    """`sheaf stop`: the build lock's holder is asked to stop; no Definitions needed."""
    from sheaf.service import builds

    out = builds.stop(get_settings(), timeout=args.timeout, progress=_say(args.json, sys.stderr))
    if not args.json:
        tables.stop(out.envelope)
    return out


def cmd_status(args: argparse.Namespace) -> Outcome:
    builds, settings = _builds_service(), _settings(args)
    _say_library(builds, settings, args)
    out = builds.status(settings)
    if not args.json:
        tables.status(out.envelope, out.view)
    return out


def cmd_report(args: argparse.Namespace) -> Outcome:
    out = report.report(get_settings())
    if not args.json:
        print(report.report_markdown(out.envelope["data"]), end="")
    return out


def cmd_doctor(args: argparse.Namespace) -> Outcome:
    builds, settings = _builds_service(), _settings(args)
    _say_library(builds, settings, args)
    out = builds.doctor(settings, repair=args.repair, progress=_say(args.json))
    if not args.json:
        tables.doctor(*out.view)
    return out


def cmd_eval(args: argparse.Namespace) -> Outcome:
    """`sheaf eval beir|library`: progress on stderr, results as the envelope (and in --out FILE)."""
    from sheaf.service import evaluation  # the eval suites: not for a query's process

    say = _say(args.quiet, sys.stderr, "[eval] ")
    modes = [m for m in args.modes.split(",") if m.strip()]
    if args.eval_command == "beir":
        out = evaluation.beir(get_settings(), args.corpus, args.queries, args.qrels, modes=modes,
                              cache_dir=args.cache_dir, rebuild=args.rebuild, max_queries=args.max_queries,
                              per_query=args.per_query, out=args.out, progress=say)
    else:
        out = evaluation.library(sample=args.sample, seed=args.seed, modes=modes, per_query=args.per_query,
                                 out=args.out, progress=say)
    if not args.json:
        tables.eval_table(out.envelope, evaluation.METRICS)
    return out


def cmd_index(args: argparse.Namespace) -> Outcome:
    """`sheaf index copy --to URL`."""
    out = index_copy.copy(get_settings(), args.to, source=args.source, progress=_say(args.json, sys.stderr))
    if not args.json:
        d = out.envelope["data"]
        print(f"copied {d['papers']} papers, {d['passages']} passages and {d['cache_entries']} cached embeddings "
              f"from {d['from']} to {d['to']} in {d['seconds']} s")
        for a in out.envelope["next_actions"]:
            print(f"  next: {a}")
    return out


def cmd_serve(args: argparse.Namespace) -> Outcome:
    from sheaf.serve import server  # numpy, the accelerators: only the server's process

    return server.serve_command(get_settings(), host=args.host, port=args.port,
                                announce=_say(False, sys.stderr))


def cmd_mcp(args: argparse.Namespace) -> Outcome:
    """`sheaf mcp`: the MCP server (the SDK, the warm engines: only this command's process).
    On stdio its stdout is the protocol's: nothing else is printed there."""
    from sheaf.serve import mcp_server

    return mcp_server.mcp_command(get_settings(), http=args.http, host=args.host, port=args.port,
                                  allow_build=args.allow_build, announce=_say(False, sys.stderr))


COMMANDS = {"parse": cmd_parse, "build": cmd_build, "stop": cmd_stop, "status": cmd_status, "report": cmd_report,
            "doctor": cmd_doctor, "eval": cmd_eval, "serve": cmd_serve, "index": cmd_index, "mcp": cmd_mcp,
            **{name: cmd_query for name in SERVED_COMMANDS}}


# --- main --------------------------------------------------------------------------------------

def _answer(args: argparse.Namespace | None, env: dict[str, Any], argv: list[str] | None = None) -> None:
    """Print the final envelope for a program: as the last NDJSON event under `build --events`
    (`result`, or `error` for an error envelope), else as one JSON line."""
    streaming = getattr(args, "events", False) if args is not None else "--events" in (argv or [])
    if streaming:
        sys.stdout.write(event_line({"event": "result" if env.get("ok") else "error", "result": env}) + "\n")
        sys.stdout.flush()
    else:
        emit(env)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `sheaf` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        argv = sys.argv[1:] if argv is None else list(argv)
        command = next((a for a in argv if not a.startswith("-")), "sheaf")
        if "--json" in argv or "--events" in argv:
            _answer(None, error(command, "BAD_QUERY", str(e), {"hint": f"see `sheaf {command} --help`"
                                                                 if command != "sheaf" else "see `sheaf --help`"}),
                    argv)
        else:
            (e.parser or parser).print_usage(sys.stderr)
            print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        get_settings()  # every SHEAF_* value checked before any command starts (BAD_INPUT names it)
        out = COMMANDS[args.command](args)
    except SheafError as e:
        out = Outcome(error(args.command, e.code, e.message, e.details), 2)
        if not _machine(args):
            tables.error(out.envelope)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `sheaf ... | head`: the reader left; no traceback, no error line
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:  # noqa: BLE001 - never a traceback for the caller; the envelope names the failure
        env = error(args.command, "INTERNAL_ERROR", f"{type(e).__name__}: {e}",
                    {"hint": "this is a bug in sheaf; please report it with the command you ran"})
        if _machine(args):
            _answer(args, env)
        else:
            print(f"error [INTERNAL_ERROR]: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    if _machine(args):
        _answer(args, out.envelope)
    return out.exit_code


def _machine(args: argparse.Namespace) -> bool:
    """A program reads stdout: one envelope (--json), or the event stream (build --events)."""
    return bool(getattr(args, "json", False) or getattr(args, "events", False))


def console() -> NoReturn:
    """The `sheaf` console script and `python -m sheaf`: `main` in a process of its own, which
    exits without the interpreter's last scan of every object (`sheaf.core.heap.quick_exit`)."""
    sys.exit(quick_exit(main()))


if __name__ == "__main__":
    console()
