"""The `sheaf` command line's grammar (argparse), and a parsed query command as its typed request."""
from __future__ import annotations

import argparse

from sheaf.cli.terminal import terminal_columns
from sheaf.core.defaults import DEFAULT_LIMIT, DEFAULT_PER_PAPER, DEFAULT_WINDOW, KIND_HELP, KINDS, MODES
from sheaf.service.requests import (
    SERVED_COMMANDS,
    GetRequest,
    GrepRequest,
    QueryRequest,
    RetrieveRequest,
    SearchRequest,
    TimelineRequest,
)

__all__ = ["STAGES", "FORMATS", "EXIT_CODES", "UsageError", "build_parser", "request_from_args"]

STAGES = ("blocks", "markdown", "render-map", "tree", "units")
FORMATS = ("auto", "paddleocr-vl", "mineru", "grobid", "docling", "pdf", "markdown")


#: Every exit status of `sheaf` (also in the README and `sheaf --help`).
EXIT_CODES = (
    (0, "success (status and doctor report what they found)"),
    (1, "build: a paper failed; doctor: issues remain; parse of a library: a paper failed"),
    (2, "an error, with its code: BAD_INPUT (a setting or an input file), BAD_QUERY (the command\n"
        "       line or query), INDEX_NOT_FOUND, NOT_FOUND, VECTOR_NOT_BUILT, MODEL_CHANGED, ..."),
    (3, "INTERNAL_ERROR: a bug in sheaf (please report it)"),
    (130, "interrupted (Ctrl-C)"),
    (141, "the output pipe was closed (`sheaf ... | head`)"),
)
EPILOG = "exit codes:\n" + "\n".join(f"  {c:<4} {m}" for c, m in EXIT_CODES) + \
    "\n\nsettings: SHEAF_* environment variables (see the README); every command checks them first."


class UsageError(Exception):
    """A command line argparse refused (exit 2; an envelope on stdout under --json). `parser`:
    the (sub)command's parser, whose usage line is printed."""

    def __init__(self, message: str, parser: argparse.ArgumentParser | None = None) -> None:
        super().__init__(message)
        self.parser = parser


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}", self)

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse's own default width, without its `import shutil` (every add_argument makes a
        # formatter; a cold `sheaf search` would pay ~3 ms for it)
        return self.formatter_class(prog=self.prog, width=terminal_columns(80) - 2)


def _int(text: str, minimum: int | None = None) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
    if minimum is not None and v < minimum:
        raise argparse.ArgumentTypeError(f"must be {minimum} or more, not {v}")
    return v


def _year(text: str) -> int:
    return _int(text)


def positive_int(text: str) -> int:
    return _int(text, 1)


def _nonnegative_int(text: str) -> int:
    return _int(text, 0)


def _score(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None


def _filters(p: argparse.ArgumentParser) -> None:
    """The metadata filters of search and retrieve (from the library's Zotero export)."""
    p.add_argument("--year-from", type=_year, default=None, metavar="Y", help="only papers of year Y or later")
    p.add_argument("--year-to", type=_year, default=None, metavar="Y", help="only papers of year Y or earlier")
    p.add_argument("--domain", action="append", default=[], metavar="D",
                   help="only this domain: a PaperForge export's file name (repeatable)")
    p.add_argument("--collection", action="append", default=[], metavar="C",
                   help="only papers in this Zotero collection or below it, e.g. Ecology (repeatable)")
    p.add_argument("--tag", action="append", default=[], metavar="T",
                   help="only papers with this Zotero tag or keyword, any case (repeatable)")
    p.add_argument("--author", action="append", default=[], metavar="NAME",
                   help="only papers with an author of this name, any case or accents: muller finds Müller "
                        "(repeatable)")


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="sheaf", description="Index and search a paper library.", epilog=EPILOG,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("parse", help="run the transforms on one paper (or every paper of a library), no Dagster")
    p.add_argument("path", help="a paper's folder or file, or a library folder")
    p.add_argument("--format", default="auto", choices=FORMATS)
    p.add_argument("--stage", default="units", choices=STAGES)
    p.add_argument("--paper-id", default=None, help="paper key (default: from the path)")
    p.add_argument("--json", action="store_true", help="print the JSON envelope")

    b = sub.add_parser("build", help="discover papers, then build every missing or stale one (Dagster)",
                       epilog="exit 0: built; 1: a paper failed (`sheaf status` says why); 2: an error; 130: interrupted")
    b.add_argument("--library", default=None, help="library folder (default: SHEAF_LIBRARY, else the library "
                   "the home recorded on its first build)")
    b.add_argument("--switch-library", action="store_true", help="give a built home another library: the new "
                   "library is recorded and the old one's papers are dropped from the index")
    b.add_argument("--paper", action="append", default=[], metavar="KEY", help="only these papers (repeatable)")
    b.add_argument("--full", action="store_true", help="rebuild every paper, changed or not")
    b.add_argument("--workers", type=int, default=None, metavar="N", help="build in N worker processes "
                   "(default: SHEAF_BUILD_WORKERS, 1); above 1 needs the index on Postgres (SHEAF_INDEX_URL)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--events", action="store_true", help="stream NDJSON events on stdout (start, progress per "
                   "paper, warning, then result or error with the envelope); human lines go to stderr")

    sp = sub.add_parser("stop", help="ask the running build to stop at the next paper boundary; wait until it has")
    sp.add_argument("--timeout", type=float, default=300.0, metavar="S",
                    help="give up (TIMEOUT) after S seconds (default 300)")
    sp.add_argument("--json", action="store_true")

    st = sub.add_parser("status", help="per paper: built / stale (why) / missing / failed / removed, skipped "
                        "folders, coverage and the next action; writes nothing",
                        epilog="exit 0 whatever the papers' states; 2: an error (e.g. NOT_FOUND: no library folder)")
    st.add_argument("--library", default=None)
    st.add_argument("--json", action="store_true")

    r = sub.add_parser("report", help="library-wide report over the built artifacts (DuckDB)")
    r.add_argument("--json", action="store_true")

    dr = sub.add_parser("doctor", help="cross-check library, Dagster, artifacts and index; --repair fixes drift",
                        epilog="exit 0: no issue (or only skipped folders); 1: issues remain; 2: an error")
    dr.add_argument("--library", default=None)
    dr.add_argument("--repair", action="store_true", help="rebuild only the affected papers and remove orphans")
    dr.add_argument("--json", action="store_true")

    se = sub.add_parser("search", help="papers matching words in their metadata or full text (lexical)")
    se.add_argument("query", nargs="+", help="words, a phrase in quotes, or a code (SPG-302)")
    se.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT,
                    help=f"papers to return (default {DEFAULT_LIMIT})")
    se.add_argument("--kind", choices=KINDS, default="all", help="only papers whose units of this kind hold the "
                    "words (metadata not searched): " + KIND_HELP)
    _filters(se)
    se.add_argument("--json", action="store_true")

    rt = sub.add_parser("retrieve", help="the best passages (units) for a question: lexical, semantic or hybrid")
    rt.add_argument("query", nargs="+")
    rt.add_argument("--mode", choices=MODES, default="hybrid",
                    help="bm25, vectors, or both fused by reciprocal rank (default)")
    rt.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT,
                    help=f"units to return (default {DEFAULT_LIMIT})")
    rt.add_argument("--per-paper", type=_nonnegative_int, default=DEFAULT_PER_PAPER, metavar="K",
                    help=f"at most K units of one paper (default {DEFAULT_PER_PAPER}; 0: no cap)")
    rt.add_argument("--paper", action="append", default=[], metavar="KEY", help="only this paper (repeatable)")
    rt.add_argument("--kind", choices=KINDS, default="all", help=KIND_HELP)
    _filters(rt)
    rt.add_argument("--min-score", type=_score, default=None, metavar="S",
                    help="only matches scoring S or more (bm25 with --mode lexical, cosine with semantic, "
                         "rrf with hybrid)")
    rt.add_argument("--full", action="store_true", help="whole unit text instead of a snippet")
    rt.add_argument("--json", action="store_true")

    g = sub.add_parser("get", help="whole units by short id")
    g.add_argument("ids", nargs="+", metavar="SHORT_ID")
    g.add_argument("--json", action="store_true")

    tl = sub.add_parser("timeline", help="the units before and after one, in the paper's reading order")
    tl.add_argument("id", metavar="SHORT_ID")
    tl.add_argument("--window", type=_nonnegative_int, default=DEFAULT_WINDOW, metavar="N",
                    help=f"units each side (default {DEFAULT_WINDOW})")
    tl.add_argument("--json", action="store_true")

    gr = sub.add_parser("grep", help="every occurrence of a term or code (all spellings), verbatim, with offsets")
    gr.add_argument("term", nargs="+")
    gr.add_argument("--paper", action="append", default=[], metavar="KEY", help="only this paper (repeatable)")
    gr.add_argument("--kind", choices=KINDS, default="all", help=KIND_HELP)
    gr.add_argument("--json", action="store_true")

    ev = sub.add_parser("eval", help="retrieval quality: a BEIR dataset, or known items of your own library")
    evs = ev.add_subparsers(dest="eval_command", required=True)
    eb = evs.add_parser("beir", help="nDCG@10, recall@10/@100, MRR@10 per mode on a BEIR dataset "
                        "(a temporary, cached index built from it)")
    eb.add_argument("--corpus", required=True, help="corpus.jsonl (_id, title, text)")
    eb.add_argument("--queries", required=True, help="queries.jsonl (_id, text)")
    eb.add_argument("--qrels", required=True, help="qrels .tsv (query-id, corpus-id, score)")
    eb.add_argument("--cache-dir", default=None, help="where the eval index is kept (default "
                    "SHEAF_HOME/eval-cache; one folder per corpus hash)")
    eb.add_argument("--rebuild", action="store_true", help="rebuild the eval index (cached vectors are kept)")
    eb.add_argument("--max-queries", type=positive_int, default=None, metavar="N",
                    help="only the first N judged queries")
    el = evs.add_parser("library", help="known-item recall@1/@10 and MRR per query type and mode on "
                        "the configured index (titles, quoted sentences, unique codes)")
    el.add_argument("--sample", type=_nonnegative_int, default=50, metavar="N",
                    help="papers to make queries from (default 50; 0: all)")
    el.add_argument("--seed", type=int, default=0)
    for e in (eb, el):
        e.add_argument("--modes", default=",".join(MODES), help="comma-separated (default: all three)")
        e.add_argument("--out", default=None, metavar="FILE", help="also write the JSON envelope to FILE")
        e.add_argument("--per-query", action="store_true", help="include every query's result")
        e.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
        e.add_argument("--json", action="store_true")

    for name in SERVED_COMMANDS:
        sub.choices[name].add_argument("--no-server", action="store_true",
                                       help="run here even when `sheaf serve` is running")
        sub.choices[name].add_argument("--library", default=None, help="query the index of this library: a "
                                       "PaperForge vault's own home, else the home's (LIBRARY_MISMATCH when the "
                                       "home records another library)")
    ix = sub.add_parser("index", help="index administration: copy the index to another backend")
    ixs = ix.add_subparsers(dest="index_command", required=True)
    ic = ixs.add_parser("copy", help="copy the index (units, vectors, embedding cache) into Postgres or a "
                        "SQLite file; idempotent; nothing is re-embedded",
                        epilog="then compare both (bench/index/parity.py) and set SHEAF_INDEX_URL to switch; copy back "
                               "with --to sqlite:PATH to switch back")
    ic.add_argument("--to", required=True, metavar="URL", help="postgresql://user@host:port/db or sqlite:PATH")
    ic.add_argument("--from", dest="source", default=None, metavar="URL",
                    help="the index to copy (default: the configured one, SHEAF_INDEX_URL or the SQLite file)")
    ic.add_argument("--json", action="store_true")
    sv = sub.add_parser("serve", help="keep the query encoder and index warm on 127.0.0.1; the query "
                        "commands use it automatically while it runs")
    sv.add_argument("--port", type=int, default=0, help="TCP port (default 0: any free port; the "
                    "CLI finds it in <SHEAF_HOME>/serve.json)")
    sv.add_argument("--host", default="127.0.0.1", help="loopback address only (127.0.0.1 or ::1)")
    sv.add_argument("--json", action="store_true", help="print a summary envelope when it stops")
    mc = sub.add_parser("mcp", help="serve the library to an agent over the Model Context Protocol (stdio; "
                        "--http: streamable HTTP on 127.0.0.1): search, retrieve, get, timeline, grep, status",
                        epilog="agent configuration: {\"mcpServers\": {\"sheaf\": {\"command\": \"sheaf\", "
                               "\"args\": [\"mcp\"]}}} (see the README)")
    mc.add_argument("--http", action="store_true", help="streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    mc.add_argument("--host", default="127.0.0.1", help="with --http: a loopback address only (127.0.0.1 or ::1)")
    mc.add_argument("--port", type=positive_int, default=8765, help="with --http: TCP port (default 8765)")
    mc.add_argument("--allow-build", action="store_true",
                    help="allow the build and stop tools (they write the index; refused by default)")
    return ap


def request_from_args(args: argparse.Namespace) -> QueryRequest:
    """The typed request of a parsed query command (words joined by spaces, as typed)."""
    c = args.command
    if c == "search":
        return SearchRequest(" ".join(args.query), limit=args.limit, year_from=args.year_from,
                             year_to=args.year_to, domain=tuple(args.domain), author=tuple(args.author),
                             collection=tuple(args.collection), tag=tuple(args.tag), kind=args.kind)
    if c == "retrieve":
        return RetrieveRequest(" ".join(args.query), mode=args.mode, limit=args.limit, per_paper=args.per_paper,
                               paper=tuple(args.paper), kind=args.kind, full=args.full, year_from=args.year_from,
                               year_to=args.year_to, domain=tuple(args.domain), author=tuple(args.author),
                               collection=tuple(args.collection), tag=tuple(args.tag), min_score=args.min_score)
    if c == "get":
        return GetRequest(tuple(args.ids))
    if c == "timeline":
        return TimelineRequest(args.id, window=args.window)
    if c == "grep":
        return GrepRequest(" ".join(args.term), paper=tuple(args.paper), kind=args.kind)
    raise ValueError(f"not a query command: {c}")
