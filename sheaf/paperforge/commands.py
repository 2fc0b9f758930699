"""`python -m sheaf.paperforge [--vault VAULT] <command> ... [--json]`: the PaperForge plugin's argv,
translated onto Sheaf's service functions (the same ones `sheaf` runs; no second
implementation), answering with the payload shapes the plugin reads
(`sheaf.paperforge.shapes`). See docs/paperforge.md.

Commands: ``search QUERY``, ``retrieve QUERY [--deep]`` (QUERY as typed, a leading dash
included: never read as an option), ``embed build [--resume|--force]``
(always the plugin's NDJSON stream on stdout: start, progress per paper, then result, error or
cancelled), ``embed status``, ``embed stop``, ``memory build``, ``memory status``,
``probe memory|all|MODULE`` (the plugin's capability envelope), ``doctor`` and
``auth status embedding``. Without ``--vault`` the working folder is the vault when it is one
(the plugin runs ``doctor`` that way). A line ``PAPERFORGE_STOP`` on stdin stops a running
``embed build`` (the plugin's cooperative stop) between two embedding batches or two papers, as
SIGTERM and ``embed stop`` do. Every error is an error envelope on stdout with a code, exit
non-zero (``probe`` always exits 0: the plugin reads no answer of an exit code other than 0);
stderr carries nothing but a failed build's reason.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf import __version__
from sheaf.cli.app import local_retrievers
from sheaf.cli.parser import Parser, UsageError, positive_int
from sheaf.cli.progress_view import event_line
from sheaf.core.defaults import DEFAULT_LIMIT
from sheaf.core.envelope import SheafError, emit, error, ok
from sheaf.core.heap import quick_exit
from sheaf.core.progress import request_stop, stop_on_sigterm
from sheaf.paperforge import shapes as pf
from sheaf.serve.client import try_server
from sheaf.service.queries import run_query
from sheaf.service.requests import Outcome, RetrieveRequest, SearchRequest

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

__all__ = ["main", "build_parser", "launcher", "STOP_LINE"]

#: What the plugin writes on the build's stdin to stop it.
STOP_LINE = "PAPERFORGE_STOP"


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="python -m sheaf.paperforge", description="PaperForge's memory-layer commands, answered by Sheaf.")
    ap.add_argument("--vault", default=None, help="the Obsidian vault (the library; its index lives in "
                    "<vault>/System/PaperForge/sheaf unless SHEAF_HOME is set); default: the working folder "
                    "when it is a vault")
    ap.add_argument("--json", action="store_true", dest="json_first")
    sub = ap.add_subparsers(dest="command", required=True)
    se = sub.add_parser("search")
    se.add_argument("query", nargs="+")
    se.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT)
    se.add_argument("--domain", action="append", default=[])
    se.add_argument("--year-from", type=int, default=None)
    se.add_argument("--year-to", type=int, default=None)
    rt = sub.add_parser("retrieve")
    rt.add_argument("query", nargs="+")
    rt.add_argument("--deep", action="store_true", help="hybrid retrieval with whole unit texts")
    rt.add_argument("--limit", type=positive_int, default=5)
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
    pr = sub.add_parser("probe", help="the plugin's capability envelope of a module (memory is Sheaf's)")
    pr.add_argument("module", choices=("all", *pf.PROBE_MODULES))
    pr.add_argument("--expected-version", default=None, help="accepted (the plugin's installation probe)")
    pr.add_argument("--last-operation-exit-code", type=int, default=None, help="accepted (the library probe)")
    doc = sub.add_parser("doctor", help="check the vault's index (`sheaf doctor`, read-only)")
    au = sub.add_parser("auth")
    aus = au.add_subparsers(dest="sub", required=True)
    ast = aus.add_parser("status")
    ast.add_argument("target", choices=("embedding",))
    for p in (se, rt, *ems.choices.values(), *mes.choices.values(), pr, doc, ast):
        p.add_argument("--json", action="store_true")
    return ap


def _name(args: argparse.Namespace) -> str:
    return f"{args.command} {args.sub}" if getattr(args, "sub", None) else args.command


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- commands --------------------------------------------------------------------------------------

def _query(args: argparse.Namespace, settings: Settings) -> Outcome:
    if args.command == "search":
        req: Any = SearchRequest(" ".join(args.query), limit=args.limit, year_from=args.year_from,
                                 year_to=args.year_to, domain=tuple(args.domain))
    else:
        req = RetrieveRequest(" ".join(args.query), mode="hybrid", limit=args.limit, paper=tuple(args.paper),
                              full=args.deep)
    out = try_server(req, settings) or run_query(req, local_retrievers(settings))
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


def _builds() -> Any:
    """`sheaf.service.builds` (the Dagster side): only for the build and status commands."""
    from sheaf.service import builds

    return builds


def _write_event(event: dict[str, Any]) -> None:
    sys.stdout.write(event_line(event) + "\n")
    sys.stdout.flush()


def _embed_build(args: argparse.Namespace, settings: Settings) -> int:
    """`embed build`: the plugin's NDJSON stream on stdout, first to last; stderr stays empty
    unless the build fails (then its reason, which the plugin shows). A paper that failed is a
    warning of a published index (exit 0; the plugin shows "published with warning")."""
    stream = pf.PluginStream(_write_event, home=settings.home)
    try:
        with stop_on_sigterm():  # from here on, a stop is kept (the build's own scope does not clear it)
            _stdin_stop()
            out = _builds().build(settings, full=bool(args.force), events=stream.event, exact_progress=True)
        env, code = dict(out.envelope), out.exit_code
    except SheafError as e:
        env, code = error("embed build", e.code, e.message, e.details), 2
    except Exception as e:  # noqa: BLE001 - never a traceback for the plugin; the event names the failure
        env = error("embed build", "INTERNAL_ERROR", f"{type(e).__name__}: {e}",
                    {"hint": "this is a bug in sheaf; please report it with the command you ran"})
        code = 3
    env["command"] = "embed build"
    stopped = code == 130
    if code == 1 and env.get("ok"):  # papers failed: the index is published without them
        code = 0
    env = stream.finish(env, stopped)
    if code not in (0, 130):
        err = env.get("error") or {}
        print(f"{err.get('code', 'ERROR')}: {err.get('message', 'the build failed')}", file=sys.stderr, flush=True)
    return code


def _memory_build(settings: Settings) -> Outcome:
    with stop_on_sigterm():
        _stdin_stop()
        out = _builds().build(settings, exact_progress=False)
    env = dict(out.envelope)
    env["command"] = "memory build"
    return Outcome(env, out.exit_code, out.view)


def _status(args: argparse.Namespace, settings: Settings) -> Outcome:
    builds = _builds()
    if args.sub == "stop":
        out = builds.stop(settings, progress=lambda m: print(m, file=sys.stderr, flush=True))
        d = out.envelope["data"]
        data = {**d, "state": "stopped" if d["stopped"] else "idle"}
        return Outcome(ok("embed stop", data, count=out.envelope["count"], next_actions=out.envelope["next_actions"]),
                       out.exit_code)
    if args.command == "embed":
        data = pf.embed_status_data(settings, builds.index_probe(settings), builds.build_state(settings),
                                    builds.recorded_unreadable(settings))
        acts = [] if data["total_chunks"] else ["run `sheaf build`"]
        return Outcome(ok("embed status", data, count=data["total_chunks"], next_actions=acts))
    st = builds.status(settings)
    data = pf.memory_status_data(st.envelope["data"])
    return Outcome(ok("memory status", data, count=data["paper_count_db"], next_actions=st.envelope["next_actions"]))


def _memory_probe(settings: Settings, now: str) -> dict[str, Any]:
    try:
        st = _builds().status(settings)
    except SheafError as e:
        return pf.memory_envelope(None, now, home=settings.home, failure=pf.plugin_text(e.message))
    return pf.memory_envelope(st.envelope["data"], now, home=settings.home)


def _probe(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """The plugin's envelope (not Sheaf's): `probe memory`, `probe all` ({module: "all", modules})."""
    now = _now()
    if args.module == "all":
        return {"schema_version": pf.PROBE_SCHEMA_VERSION, "module": "all", "updated_at": now,
                "modules": {m: _memory_probe(settings, now) if m == "memory" else pf.not_provided_envelope(m, now)
                            for m in pf.PROBE_MODULES}}
    if args.module == "memory":
        return _memory_probe(settings, now)
    return pf.not_provided_envelope(args.module, now)


def _doctor(args: argparse.Namespace, settings: Settings) -> Outcome:
    builds = _builds()
    out = builds.doctor(settings)
    env = dict(out.envelope)
    if env.get("ok"):
        env["data"] = {**env["data"], "index": builds.index_probe(settings), "home": str(settings.home)}
    return Outcome(env, out.exit_code)


def _run(args: argparse.Namespace) -> Outcome:
    vault = pf.vault_of(args.vault, Path.cwd())
    settings = pf.vault_settings(vault)
    if args.command in ("search", "retrieve"):
        return _query(args, settings)
    if args.command == "doctor":
        return _doctor(args, settings)
    if args.command == "auth":
        data = {"target": "embedding", "credentials": [{
            "id": "local", "state": "available", "required": False,
            "detail": f"Sheaf embeds with {settings.embedding_model} on this machine: no API key is needed"}]}
        return Outcome(ok("auth status", data, count=1))
    if args.command == "memory" and args.sub == "build":
        return _memory_build(settings)
    return _status(args, settings)


def _home(args: argparse.Namespace) -> Path | None:
    """The vault's index home, for messages; None when there is no vault to name."""
    try:
        return pf.vault_settings(pf.vault_of(args.vault, Path.cwd())).home
    except SheafError:
        return None


def _doctor_text(env: dict[str, Any]) -> str:
    """`doctor`'s answer for a person (the plugin runs it with the terminal's stdio)."""
    if not env.get("ok"):
        return f"error [{env['error']['code']}]: {env['error']['message']}"
    data = env["data"]
    issues = data.get("issues") or []
    index = data.get("index") or {}
    lines = []
    if index and not index.get("exists"):  # an unbuilt vault: its papers are simply not built yet
        lines.append(f"no vector index yet in {data.get('home')}: build it in PaperForge's settings "
                     "(Smart Retrieval: Build vector index)")
        issues = [i for i in issues if i["kind"] != "unregistered_paper"]
    elif index.get("problem"):
        lines.append(f"the index in {data.get('home')} cannot be read ({index['problem']}): rebuild it in "
                     "PaperForge's settings (Smart Retrieval: Rebuild vector index)")
    lines += [f"{i.get('paper') + ': ' if i.get('paper') else ''}{i['kind']}: {i['detail']}" for i in issues]
    return "\n".join(lines or ["no problems found"] + [f"next: {a}" for a in env.get("next_actions") or []])


#: PaperForge's own commands (its library sync, OCR, configuration, dashboard, runtime), which
#: the plugin also sends: not an index's business, so Sheaf names them as such.
PAPERFORGE_OWN = ("sync", "config", "dashboard", "status", "ocr", "repair", "prune", "setup", "action",
                  "runtime-health", "paper-context", "auth set", "memory restore-backup", "embed migrate")
SERVED = ("search, retrieve, probe, embed build|status|stop, memory build|status, doctor, "
          "auth status embedding")


def _own_command(words: list[str]) -> str | None:
    """The PaperForge command `words` (the positional arguments) starts with, if it is one."""
    for own in PAPERFORGE_OWN:
        if words[:len(own.split())] == own.split():
            return own
    return None


def _parse_failure(argv: list[str], e: UsageError) -> int:
    streams = "embed" in argv and "build" in argv  # `embed build` always answers as events
    values = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--vault"}
    words = [a for a in argv if not a.startswith("-") and a not in values]
    command = words[0] if words else "paperforge"
    own = _own_command(words)
    if own is not None:
        e = UsageError(f"`{own}` is PaperForge's own command, not the memory layer's: Sheaf answers {SERVED}; "
                       f"run `python -m paperforge {own}` with PaperForge's own Python for it")
        command = own
    env = error(command, "BAD_QUERY", str(e), {"hint": "see `python -m sheaf.paperforge --help`"})
    if streams:
        pf.PluginStream(_write_event).finish(env, stopped=False)
        print(f"BAD_QUERY: {e}", file=sys.stderr)
    elif "--json" in argv or (argv and argv[0] != "doctor"):
        emit(env)
        if own is not None and "--json" not in argv:  # a terminal (the plugin's tool actions) reads this line
            print(f"error: {e}", file=sys.stderr)
    else:
        print(f"error: {e}", file=sys.stderr)
    return 2


#: Stands for the query while argparse reads the rest of the command line (it starts with no
#: dash, so argparse takes it for a positional argument; no one types a NUL).
_QUERY_MARK = "\x00query"


def _query_first(ap: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], str | None]:
    """(argv with a query that starts with a dash replaced by `_QUERY_MARK`, that query), or
    (argv, None). The plugin sends `search QUERY --json` and `retrieve QUERY --deep --json`,
    QUERY as typed in its search box (`-bone`, `--limit`, `@--paper` without its `@`): the word
    right after `search` / `retrieve` is the query when it is not one of the command's options
    (`-bone`), or when only flags that take no value follow it (`--limit --json`). `-h`/`--help`
    there and an option followed by its value (`search --limit 3 bone`) are read as options;
    `--` ends the options as usual (`search --limit 3 -- -bone`)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):  # the options before the command word
        i += 2 if argv[i] == "--vault" else 1
    if i + 1 >= len(argv) or argv[i] not in ("search", "retrieve"):
        return argv, None
    word, rest = argv[i + 1], argv[i + 2:]
    if not word.startswith("-") or word == "--":
        return argv, None
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction)).choices[argv[i]]
    options = sub._option_string_actions
    name = word.split("=", 1)[0]
    known = name in options or name.startswith("--") and any(o.startswith(name) for o in options)
    flags = {o for o, a in options.items() if a.nargs == 0 and o not in ("-h", "--help")}
    if known and (name in ("-h", "--help") or not rest or not all(r in flags for r in rest)):
        return argv, None
    return [*argv[:i + 1], _QUERY_MARK, *rest], word


def _parse(argv: list[str]) -> argparse.Namespace:
    """The command line read as the plugin means it: a query that starts with a dash is the
    query, never an option (`_query_first`)."""
    ap = build_parser()
    marked, query = _query_first(ap, argv)
    args = ap.parse_args(marked)
    if query is not None:
        args.query = [query if w == _QUERY_MARK else w for w in args.query]
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _parse(argv)
    except UsageError as e:
        return _parse_failure(argv, e)
    if args.command == "embed" and args.sub == "build":
        try:
            settings = pf.vault_settings(pf.vault_of(args.vault, Path.cwd()))
        except SheafError as e:
            pf.PluginStream(_write_event).finish(error("embed build", e.code, e.message, e.details), stopped=False)
            print(f"{e.code}: {e.message}", file=sys.stderr)
            return 2
        try:
            return _embed_build(args, settings)
        except BrokenPipeError:
            return 141
    if args.command == "probe":  # always exit 0 with the plugin's envelope: it reads no other answer
        try:
            settings = pf.vault_settings(pf.vault_of(args.vault, Path.cwd()))
            emit(_probe(args, settings))
        except SheafError as e:
            now = _now()
            home = Path(args.vault or ".") / pf.VAULT_HOME
            fail = pf.memory_envelope(None, now, home=home, failure=e.message)
            emit({"schema_version": pf.PROBE_SCHEMA_VERSION, "module": "all", "updated_at": now,
                  "modules": {"memory": fail}} if args.module == "all" else
                 fail if args.module == "memory" else pf.not_provided_envelope(args.module, now))
        return 0
    machine = args.json or args.json_first
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
    env = pf.for_plugin(out.envelope, _home(args))
    if machine:
        emit(env)
    elif args.command == "doctor":
        print(_doctor_text(env), flush=True)
    elif env.get("ok"):
        print(json.dumps(env["data"], ensure_ascii=False, indent=1, default=str))
    else:
        err = env["error"]
        print(f"error [{err['code']}]: {err['message']}", file=sys.stderr)
    return out.exit_code


#: The plugin's version check (views/dashboard.ts `_fetchVersion`, python-bridge.ts), run as `-c`.
VERSION_CHECK = "import paperforge; print(paperforge.__version__)"
#: Interpreter flags the plugin may put before `-m` / `-c` (`-I`: managed-runtime's version probe).
_FLAGS = ("-I", "-E", "-s", "-S", "-B", "-u", "-3")


def launcher(argv: list[str] | None = None) -> int:
    """`sheaf-paperforge-python`: what PaperForge's "Python path" setting points at to run Sheaf.
    The plugin runs `PY -m paperforge ARGS`: answered as `python -m sheaf.paperforge ARGS`; its
    version check (`PY -c "import paperforge; print(paperforge.__version__)"`): Sheaf's version,
    for the badge; anything else runs on this Python as sent (no `paperforge` package is
    installed: it would shadow PaperForge's own)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    rest = list(argv)
    while rest and rest[0] in _FLAGS:
        rest.pop(0)
    if rest[:2] == ["-m", "paperforge"]:
        return main(rest[2:])
    if rest[:2] == ["-c", VERSION_CHECK]:
        print(f"{__version__} (Sheaf)", flush=True)
        return 0
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, *argv])
    return 127  # pragma: no cover - execv does not return


def console_launcher() -> None:
    """The console script's entry (`sheaf-paperforge-python`)."""
    raise SystemExit(quick_exit(launcher()))
