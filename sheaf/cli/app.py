"""The `sheaf` command line: a thin layer over the library (JSON for programs, tables for people).

Imports stay lazy: `sheaf search` must start fast and never import dagster or torch.
"""
from __future__ import annotations

import argparse
import json
import sys
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from sheaf.core.defaults import DEFAULT_LIMIT, DEFAULT_PER_PAPER, DEFAULT_WINDOW, KINDS, MODES
from sheaf.core.envelope import SheafError, emit, error, ok

STAGES = ("blocks", "markdown", "render-map", "tree", "units")
FORMATS = ("auto", "paddleocr-vl", "mineru", "grobid", "docling", "pdf", "markdown")


# --- parse -----------------------------------------------------------------------------

def _paper_summary(out: Any) -> dict[str, Any]:
    nodes = [n for n in out.tree.walk() if n.node_id != "root"]
    return {
        "paper_id": out.paper.paper_id,
        "source_format": out.paper.source_format,
        "source_path": out.paper.source_path,
        "ocr_result_hash": out.paper.ocr_result_hash,
        "blocks": len(out.paper.blocks),
        "sections": len(nodes),
        "body_units": len(out.body_units),
        "object_units": len(out.object_units),
        "tokens": sum(u.token_count for u in out.body_units),
        "warnings": list(out.paper.warnings),
    }


def _stage_data(out: Any, stage: str) -> dict[str, Any]:
    if stage == "blocks":
        return {"blocks": [b.to_dict() for b in out.paper.blocks]}
    if stage == "markdown":
        return {"markdown": out.render.markdown}
    if stage == "render-map":
        return {"render_map": out.render.render_map.to_dict()}
    if stage == "tree":
        return {"tree": out.tree.to_dict()}
    return {"body_units": [u.to_dict() for u in out.body_units],
            "object_units": [u.to_dict() for u in out.object_units]}


def _print_blocks(out: Any) -> None:
    """One line per block: id, role (heading level), why it got that role, a text excerpt."""
    blocks = out.paper.blocks
    print(f"{out.paper.paper_id}  [{out.paper.source_format}]  {out.paper.title or ''}")
    print(f"  {len(blocks)} blocks; role (label) [why] text")
    width = max((len(b.block_id) for b in blocks), default=5)
    for b in blocks:
        role = b.role + (f" L{b.heading_level}" if b.heading_level else "")
        why = f"  [{b.role_reason}]" if b.role_reason else ""
        text = " ".join(b.text.split())
        text = text[:70] + "..." if len(text) > 73 else text
        print(f"  {b.block_id.ljust(width)}  {role} ({b.raw_label}){why}  {text}".rstrip())


def _print_tree(out: Any) -> None:
    per_node: dict[str, int] = {}
    for u in out.body_units:
        per_node[u.node_id] = per_node.get(u.node_id, 0) + 1
    objs: dict[str, int] = {}
    for o in out.object_units:
        objs[o.node_id] = objs.get(o.node_id, 0) + 1
    s = _paper_summary(out)
    print(f"{s['paper_id']}  [{s['source_format']}]  {out.paper.title or ''}")
    print(f"  {s['blocks']} blocks, {s['sections']} sections, {s['body_units']} body units, "
          f"{s['object_units']} objects, {s['tokens']} tokens")
    for node in out.tree.walk():
        if node.node_id == "root":
            continue
        extra = f"  [{per_node.get(node.node_id, 0)} units" + (
            f", {objs[node.node_id]} objects]" if node.node_id in objs else "]")
        print(f"  {'  ' * (node.level - 1)}- {node.title}{extra}")
    for w in out.paper.warnings:
        print(f"  warning: {w}")


def _library_table(rows: list[dict[str, Any]]) -> None:
    cols = ("paper_id", "source_format", "blocks", "sections", "body_units", "object_units", "tokens")
    heads = ("paper", "format", "blocks", "sections", "units", "objects", "tokens")
    table = [heads] + [tuple(str(r.get(c, "")) for c in cols) if "error" not in r
                       else (r["paper_id"], "ERROR", r["error"]["message"][:60], "", "", "", "")
                       for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(heads))]
    for i, t in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    bad = [r for r in rows if "error" in r]
    warned = [r for r in rows if r.get("warnings")]
    print(f"\n{len(rows) - len(bad)} parsed, {len(bad)} failed, {len(warned)} with warnings")


def cmd_parse(args: argparse.Namespace) -> dict[str, Any]:
    from sheaf.ingest.library import discover
    from sheaf.core.models import IngestError
    from sheaf.core.settings import get_settings
    from sheaf.transform.chain import process_paper

    path = Path(args.path)
    if not path.exists():
        raise SheafError("NOT_FOUND", f"no such file or folder: {path}",
                         {"path": str(path)}, hint="give a paper's folder or file, or a library folder")
    cap = get_settings().unit_token_cap
    lib = discover(path) if path.is_dir() else None
    if lib is not None and lib.papers:  # a whole library: one summary row per paper
        rows: list[dict[str, Any]] = []
        for p in lib.papers:
            try:
                rows.append(_paper_summary(process_paper(p.path, p.key, args.format, cap)))
            except IngestError as e:
                rows.append({"paper_id": p.key, "error": e.to_dict()})
        warnings = [f"invalid paper key refused: {k!r}" for k in lib.invalid_keys]
        if not args.json:
            _library_table(rows)
            for w in warnings:
                print(f"warning: {w}")
        failed = sum(1 for r in rows if "error" in r)
        env = ok("parse", {"library": str(path), "layout": lib.layout, "papers": rows}, count=len(rows),
                 warnings=warnings + [f"{r['paper_id']}: {r['error']['message']}" for r in rows if "error" in r])
        env["_exit"] = 1 if failed else 0
        return env
    try:
        out = process_paper(path, args.paper_id, args.format, cap)
    except IngestError as e:
        raise SheafError("BAD_INPUT", str(e), e.to_dict(),
                         hint="check the file, or force a format with --format") from None
    except ValueError as e:
        raise SheafError("BAD_INPUT", str(e), {"path": str(path)}) from None
    if not args.json:
        if args.stage == "markdown":
            sys.stdout.write(out.render.markdown)
        elif args.stage == "blocks":
            _print_blocks(out)
        else:
            _print_tree(out)
    data = {"paper_id": out.paper.paper_id, "stage": args.stage, "summary": _paper_summary(out)}
    data.update(_stage_data(out, args.stage))
    return ok("parse", data, count=1, warnings=list(out.paper.warnings))


# --- build / status / report (the Dagster side, imported lazily) ----------------------

def _dagster_side(args: argparse.Namespace):
    """Settings and Definitions for the build commands; Dagster is imported only here."""
    import warnings

    from sheaf.core.settings import get_settings

    overrides = {"library": args.library} if getattr(args, "library", None) else {}
    settings = get_settings(**overrides)
    warnings.filterwarnings("ignore", module="dagster")
    try:
        from dagster._utils.warnings import BetaWarning, PreviewWarning

        warnings.filterwarnings("ignore", category=BetaWarning)
        warnings.filterwarnings("ignore", category=PreviewWarning)
    except ImportError:  # pragma: no cover
        pass
    from pipelines.build import ensure_dagster_home

    ensure_dagster_home(settings)
    from pipelines.definitions import build_definitions

    return settings, build_definitions(home=str(settings.home), library=str(settings.library))


def _status_dict(st: Any) -> dict[str, Any]:
    return {"paper_id": st.key, "state": st.state, "reasons": st.reasons, "error": st.error, **st.metadata}


def cmd_build(args: argparse.Namespace) -> dict[str, Any]:
    from pipelines.build import build

    settings, defs = _dagster_side(args)
    if not settings.library.is_dir():
        raise SheafError("NOT_FOUND", f"library folder not found: {settings.library}",
                         {"library": str(settings.library)}, hint="pass --library PATH or set SHEAF_LIBRARY")
    say = (lambda m: None) if args.json else (lambda m: print(m, flush=True))
    rep = build(settings, defs, papers=args.paper or None, full=args.full, progress=say)
    counts: dict[str, int] = {}
    for st in rep.statuses.values():
        counts[st.state] = counts.get(st.state, 0) + 1
    if not args.json:
        built = counts.get("built", 0)
        print(f"\n{built} of {len(rep.statuses)} papers built; {len(rep.planned)} rebuilt this time in "
              f"{rep.seconds:.1f} s; {rep.embeddings_computed} embeddings computed")
        for st in rep.statuses.values():
            if st.state != "built":
                print(f"  {st.key}: {st.state}" + (f" ({st.error})" if st.error else f" ({'; '.join(st.reasons)})"))
    data = {"library": str(settings.library), "sync": rep.sync, "planned": rep.planned, "runs": rep.runs,
            "papers": [_status_dict(s) for s in rep.statuses.values()], "states": counts,
            "embeddings_computed": rep.embeddings_computed, "seconds": rep.seconds, "interrupted": rep.interrupted}
    failed = [k for k, s in rep.statuses.items() if s.state == "failed"]
    env = ok("build", data, count=len(rep.planned),
             warnings=[f"{k}: {rep.statuses[k].error}" for k in failed],
             next_actions=["fix the failed papers' OCR output and run `sheaf build` again"] if failed else [])
    env["_exit"] = 130 if rep.interrupted else (1 if failed else 0)
    return env


def cmd_status(args: argparse.Namespace) -> dict[str, Any]:
    from pipelines.build import get_instance, paper_statuses
    from pipelines.state import latest_observed_versions
    from sheaf.ingest.library import discover

    settings, defs = _dagster_side(args)
    instance = get_instance(settings)
    statuses = paper_statuses(instance, defs, settings, observed=latest_observed_versions(instance))
    library = discover(settings.library).papers if settings.library.is_dir() else ()
    coverage = {"library": len(library), "partitions": len(statuses),
                "parsed": sum(1 for s in statuses.values() if s.metadata.get("body_units") is not None),
                "built": sum(1 for s in statuses.values() if s.state == "built")}
    probe = _index_probe(settings)
    coverage.update({k: probe[k] for k in ("indexed", "embedded") if k in probe})
    if not args.json:
        for st in statuses.values():
            why = st.error or "; ".join(st.reasons)
            print(f"{st.key:<20} {st.state:<8} {why}")
        print("\ncoverage: " + ", ".join(f"{k} {v}" for k, v in coverage.items()))
        print("index: " + ("vectors queryable" if probe.get("vectors_queryable") else probe.get("problem", "no vectors")))
    actions = ["run `sheaf build`"] if any(s.state != "built" for s in statuses.values()) or \
        coverage["library"] > coverage["partitions"] else []
    return ok("status", {"papers": [_status_dict(s) for s in statuses.values()], "coverage": coverage,
                         "index": probe}, count=len(statuses), next_actions=actions)


def _index_probe(settings: Any) -> dict[str, Any]:
    """Can the index be opened, and can a vector query run against the current model's collection?"""
    from sheaf.store.sqlite.index import collections, counts, open_index

    if not settings.index_path.exists():
        return {"path": str(settings.index_path), "exists": False, "problem": "no index yet"}
    try:
        conn = open_index(settings=settings, readonly=True)
    except SheafError as e:
        return {"path": str(settings.index_path), "exists": True, "problem": f"{e.code}: {e.message}"}
    except Exception as e:  # noqa: BLE001 - a file SQLite cannot read: what the probe reports
        return {"path": str(settings.index_path), "exists": True, "problem": f"unreadable index: {e}",
                "hint": "run `sheaf build --full` (it moves a damaged file aside) or `sheaf doctor`"}
    try:
        try:
            c = counts(conn)
        except Exception as e:  # noqa: BLE001 - a damaged or missing table: reported, not raised
            return {"path": str(settings.index_path), "exists": True, "problem": f"index damaged: {e}",
                    "vectors_queryable": False, "hint": "run `sheaf doctor --repair` or `sheaf build --full`"}
        out: dict[str, Any] = {"path": str(settings.index_path), "exists": True,
                               "indexed": conn.execute("SELECT count(DISTINCT paper_id) FROM body_units").fetchone()[0]}
        cols = collections(conn)
        out["collections"] = {k: v.name for k, v in cols.items()}
        embedded = 0
        for ident in cols.values():
            try:
                probe = json.dumps([1.0] + [0.0] * (ident.dimension - 1))
                conn.execute(f"SELECT passage_rowid, distance FROM {ident.vec_table} "
                             "WHERE embedding MATCH ? AND k = 1", (probe,)).fetchall()
                embedded = max(embedded, conn.execute(
                    f"SELECT count(DISTINCT paper_id) FROM {ident.passages_table}").fetchone()[0])
                out["vectors_queryable"] = True
            except Exception as e:  # noqa: BLE001 - a damaged vec table is what the probe reports
                out["problem"] = f"vector table {ident.vec_table} unreadable: {e}"
                out["vectors_queryable"] = False
        out["embedded"] = embedded
        out["rows"] = c
        return out
    finally:
        conn.close()


def cmd_report(args: argparse.Namespace) -> dict[str, Any]:
    from sheaf.store.report import library_report_data, report_markdown
    from sheaf.core.settings import get_settings

    settings = get_settings()
    data = library_report_data(settings.artifacts_dir)
    if not args.json:
        print(report_markdown(data), end="")
    return ok("report", data, count=data["papers"],
              next_actions=[] if data["papers"] else ["run `sheaf build` first"])


# --- doctor (the Dagster side, imported lazily) ------------------------------------------

def cmd_doctor(args: argparse.Namespace) -> dict[str, Any]:
    """Cross-check library ↔ partitions ↔ artifacts ↔ index ↔ materialization metadata."""
    from pipelines.build import get_instance
    from pipelines.doctor import diagnose, repair

    settings, defs = _dagster_side(args)
    instance = get_instance(settings)
    say = (lambda m: None) if args.json else (lambda m: print(m, flush=True))
    found = diagnose(settings, defs, instance)
    data: dict[str, Any] = {"library": str(settings.library), "before": found.to_dict()}
    final = found
    if args.repair and found.issues:
        data["repaired"] = repair(settings, defs, instance, found, progress=say)
        final = diagnose(settings, defs, instance)
        data["after"] = final.to_dict()
    if not args.json:
        for title, dg in (("found", found), *((("after repair", final),) if final is not found else ())):
            print(f"{title}: {len(dg.issues)} issue(s) in {dg.checked.get('partitions', 0)} papers "
                  f"({dg.seconds:.1f} s)")
            for i in dg.issues:
                print(f"  {i.paper or '-':<14} {i.kind:<22} {i.detail}\n  {'':<14} {'':<22} cause: {i.cause}; "
                      f"repair: {i.repair}")
    remaining = [i for i in final.issues if i.kind not in ("invalid_key", "build_running")]
    env = ok("doctor", {**data, "issues": [i.to_dict() for i in final.issues]}, count=len(final.issues),
             warnings=[f"{i.paper + ': ' if i.paper else ''}{i.kind}: {i.detail}" for i in remaining],
             next_actions=["run `sheaf doctor --repair`"] if remaining and not args.repair else [])
    env["_exit"] = 1 if remaining else 0
    return env


# --- retrieval: search, retrieve, get, timeline, grep (light: no pydantic, numpy, torch, dagster)

#: The envelope a running `sheaf serve` answered for this command (see `_ask_server`); the
#: command function then renders it instead of querying the index itself.
_SERVED: dict[str, Any] | None = None
#: In a warm server (`sheaf.service.server.run_command`): a callable returning a context manager that
#: lends an open Retriever kept between queries (`sheaf.service.server.RetrieverPool.lease`).
_LEASE: ContextVar[Any] = ContextVar("sheaf_retriever_lease", default=None)


class _Replay:
    """Stands in for a Retriever when the server answered: every query method returns the
    server's result, so each command renders (table or envelope) exactly as it would its own."""

    def __init__(self, env: dict[str, Any]) -> None:
        self.data, self.warnings, self.next_actions = env["data"], env["warnings"], env["next_actions"]

    @property
    def matches(self) -> list[dict[str, Any]]:
        return self.data.get("matches", [])

    def __enter__(self) -> "_Replay":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: self


def _retriever():
    if _SERVED is not None:
        return _Replay(_SERVED)
    lease = _LEASE.get()
    if lease is not None:
        return lease()
    from sheaf.search.retrieve import Retriever

    return Retriever.open()


def _ask_server(args: argparse.Namespace) -> None:
    """The query commands ask a running `sheaf serve` first (warm encoder and index; the very
    envelope the command would print) and run locally when none answers within ~50 ms, or
    with --no-server."""
    global _SERVED
    _SERVED = None
    from sheaf.service.server import SERVED_COMMANDS

    if args.command not in SERVED_COMMANDS or getattr(args, "no_server", False):
        return
    from sheaf.service.server import cli_args, try_server
    from sheaf.core.settings import query_settings

    env = try_server(args.command, cli_args(args), query_settings())
    if env is None:
        return
    if not env.get("ok"):
        err = env.get("error") or {}
        raise SheafError(err.get("code", "INTERNAL_ERROR"), err.get("message", ""), err.get("details"))
    _SERVED = env


def cmd_serve(args: argparse.Namespace) -> dict[str, Any]:
    from sheaf.service.server import serve
    from sheaf.core.settings import query_settings

    summary = serve(query_settings(), host=args.host, port=args.port,
                    announce=lambda m: print(m, file=sys.stderr, flush=True))
    return ok("serve", summary, count=0)


def _query_text(words: list[str]) -> str:
    return " ".join(words)


def _terminal_columns(fallback: int) -> int:
    """`shutil.get_terminal_size((fallback, 24)).columns`, without importing shutil (with the
    bz2/lzma/zlib it pulls in: ~3 ms of a cold `sheaf search`)."""
    import os

    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = fallback
        columns = columns or fallback
    return columns


def _width() -> int:
    return max(60, _terminal_columns(110))


def _fit(s: str, n: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: max(0, n - 1)] + "…"


def _score(v: Any) -> str:
    return "" if v is None else (f"{v:.4f}" if abs(v) < 10 else f"{v:.2f}")


def _pages(m: dict[str, Any]) -> str:
    ps = m.get("page_span")
    if not ps:
        return ""
    return f"p.{ps[0]}" if ps[0] == ps[1] else f"p.{ps[0]}-{ps[1]}"


def _compact_line(m: dict[str, Any], width: int) -> str:
    head = f"[{m['short_id'] or '-'}] {m['zotero_key']} {m['year'] or '----'} | "
    path = _fit(" > ".join(m["section_path"]) or m["heading"] or "", 38)
    tail = f"  {_score(m['score'])}"
    room = max(20, width - len(head) - len(path) - len(tail) - 3)
    return f"{head}{path} | {_fit(m['summary'], room)}{tail}"


def _print_footer(env: dict[str, Any]) -> None:
    for w in env["warnings"]:
        print(f"warning: {w}")
    for a in env["next_actions"]:
        print(f"next: {a}")


def _print_full(m: dict[str, Any], marker: str = "") -> None:
    import textwrap

    width = min(_width(), 100)
    where = " > ".join(m["section_path"]) or m["heading"]
    print(f"{marker}[{m['short_id']}] {m['zotero_key']} {m['year'] or ''} | {where} | {_pages(m)}"
          f"{'  ' + _score(m['score']) if m.get('score') is not None else ''}")
    for para in m["text"].split("\n"):
        print(textwrap.fill(para, width, initial_indent="    ", subsequent_indent="    ") if para.strip() else "")
    print()


def _finish(command: str, res: Any, args: argparse.Namespace, show) -> dict[str, Any]:
    env = ok(command, res.data, warnings=res.warnings, next_actions=res.next_actions)
    if not args.json:
        if res.matches:
            show(res)
        else:
            print("no matches")
            cov = res.data.get("coverage")
            if cov:
                print("coverage: " + ", ".join(f"{k} {v}" for k, v in cov.items() if v is not None))
        _print_footer(env)
    return env


def cmd_search(args: argparse.Namespace) -> dict[str, Any]:
    query = _query_text(args.query)

    def show(res: Any) -> None:
        width = _width()
        for i, m in enumerate(res.matches, start=1):
            who = (m["first_author"] or "").split(" ")[-1]
            head = f"{i:>2}. {m['zotero_key']}  {m['year'] or '----'}  {who}  "
            tail = f"  {_score(m['score'])}"
            print(head + _fit(m["title"] or "(untitled)", width - len(head) - len(tail)) + tail)
            where = m["heading"] + (f" [{m['short_id']}]" if m["short_id"] else "")
            print("      " + _fit(f"{where}: {m['text']}", width - 6))

    with _retriever() as r:
        res = r.search(query, limit=args.limit, year_from=args.year_from, year_to=args.year_to,
                       domains=args.domain or None)
    return _finish("search", res, args, show)


def cmd_retrieve(args: argparse.Namespace) -> dict[str, Any]:
    query = _query_text(args.query)

    def show(res: Any) -> None:
        width = _width()
        for m in res.matches:
            if args.full:
                _print_full(m)
            else:
                print(_compact_line(m, width))

    with _retriever() as r:
        res = r.retrieve(query, mode=args.mode, limit=args.limit, per_paper=args.per_paper,
                         papers=args.paper or None, kind=args.kind, full=args.full)
    return _finish("retrieve", res, args, show)


def cmd_get(args: argparse.Namespace) -> dict[str, Any]:
    with _retriever() as r:
        res = r.get(args.ids)
    return _finish("get", res, args, lambda res: [_print_full(m) for m in res.matches])


def cmd_timeline(args: argparse.Namespace) -> dict[str, Any]:
    with _retriever() as r:
        res = r.timeline(args.id, window=args.window)

    def show(res: Any) -> None:
        p = res.data["paper"]
        print(f"{p['zotero_key']} {p['year'] or ''} {p['title'] or ''}\n")
        for m in res.matches:
            _print_full(m, marker=">> " if m["offset"] == 0 else f"{m['offset']:+d} ")

    return _finish("timeline", res, args, show)


def cmd_grep(args: argparse.Namespace) -> dict[str, Any]:
    term = _query_text(args.term)

    def show(res: Any) -> None:
        width = _width()
        for m in res.matches:
            page = f"p.{m['page']}" if m["page"] is not None else _pages(m) or "p.?"
            head = (f"[{m['short_id']}] {m['zotero_key']} {page} {m['field']}:{m['char_start']}-{m['char_end']}"
                    f"  {m['span']!r}  ")
            print(head + _fit(m["text"], width - len(head)))
        print(f"\n{len(res.matches)} occurrences in {res.data['papers_with_hits']} papers; spellings: "
              + ", ".join(f"{k!r} x{v}" for k, v in res.data["variants"].items()))

    with _retriever() as r:
        res = r.grep(term, papers=args.paper or None)
    return _finish("grep", res, args, show)


# --- eval: retrieval quality (sheaf.eval.evaluate) -------------------------------------------

def _eval_table(data: dict[str, Any], library: bool) -> None:
    lat = data.get("latency_ms", {})
    if library:
        print(f"{'mode':<9} {'type':<9} {'queries':>7} {'R@1':>6} {'R@10':>6} {'MRR@10':>7}")
        for mode, per in data["metrics"].items():
            for qtype, m in per.items():
                print(f"{mode:<9} {qtype:<9} {m['queries']:>7} {m['recall@1']:>6.3f} {m['recall@10']:>6.3f} "
                      f"{m['mrr@10']:>7.3f}")
    else:
        from sheaf.eval.evaluate import METRICS

        print(f"{'mode':<9} " + " ".join(f"{m:>10}" for m in METRICS) + f" {'p50 ms':>8} {'p95 ms':>8}")
        for mode, m in data["metrics"].items():
            print(f"{mode:<9} " + " ".join(f"{m[k]:>10.4f}" for k in METRICS)
                  + f" {lat.get(mode, {}).get('p50', 0):>8.1f} {lat.get(mode, {}).get('p95', 0):>8.1f}")
    if data.get("query_encode_ms"):
        print(f"query encoding: p50 {data['query_encode_ms']['p50']:.1f} ms (not in the latencies above)")


def cmd_eval(args: argparse.Namespace) -> dict[str, Any]:
    """`sheaf eval beir|library`: retrieval quality; progress on stderr, results as the envelope
    (and in --out FILE)."""
    import time

    from sheaf.eval import evaluate
    from sheaf.core.settings import get_settings

    say = (lambda m: None) if args.quiet else (lambda m: print(f"[eval] {m}", file=sys.stderr, flush=True))
    modes = [m for m in args.modes.split(",") if m.strip()]
    t0 = time.perf_counter()
    if args.eval_command == "beir":
        settings = get_settings()
        ds = evaluate.load_beir(args.corpus, args.queries, args.qrels)
        cache = Path(args.cache_dir) if args.cache_dir else settings.home / "eval-cache"
        res = evaluate.run_beir(ds, modes=modes, cache_dir=cache, settings=settings, rebuild=args.rebuild,
                                max_queries=args.max_queries, per_query=args.per_query, progress=say)
        count = res["data"]["dataset"]["queries_evaluated"]
        actions = [] if res["data"]["index"]["reused"] else \
            [f"the eval index is cached in {cache}: reruns reuse it"]
    else:
        res = evaluate.run_library(sample=args.sample, seed=args.seed, modes=modes,
                                   per_query=args.per_query, progress=say)
        count = sum(res["data"]["queries"].values())
        actions = []
    import datetime as dt
    import platform

    res["data"]["run"] = {"date": dt.datetime.now().isoformat(timespec="seconds"),
                          "seconds": round(time.perf_counter() - t0, 1), "python": platform.python_version(),
                          "machine": platform.machine()}
    res["data"] = {"suite": args.eval_command, **res["data"]}
    env = ok("eval", res["data"], count=count, warnings=res["warnings"],
             next_actions=actions)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(env, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        say(f"results written to {out}")
    if not args.json:
        _eval_table(res["data"], args.eval_command == "library")
        for w in res["warnings"]:
            print(f"warning: {w}")
    return env


# --- main ------------------------------------------------------------------------------

class UsageError(Exception):
    """A command line argparse refused (exit 2; an envelope on stdout under --json)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse's own default width, without its `import shutil` (every add_argument makes a
        # formatter; a cold `sheaf search` would pay ~3 ms for it)
        return self.formatter_class(prog=self.prog, width=_terminal_columns(80) - 2)


def _positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {v}")
    return v


def _nonnegative_int(text: str) -> int:
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {v}")
    return v


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="sheaf", description="Index and search a paper library.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("parse", help="run the transforms on one paper (or every paper of a library), no Dagster")
    p.add_argument("path", help="a paper's folder or file, or a library folder")
    p.add_argument("--format", default="auto", choices=FORMATS)
    p.add_argument("--stage", default="units", choices=STAGES)
    p.add_argument("--paper-id", default=None, help="paper key (default: from the path)")
    p.add_argument("--json", action="store_true", help="print the JSON envelope")
    p.set_defaults(func=cmd_parse)

    b = sub.add_parser("build", help="discover papers, then build every missing or stale one (Dagster)")
    b.add_argument("--library", default=None, help="library folder (default: SHEAF_LIBRARY)")
    b.add_argument("--paper", action="append", default=[], metavar="KEY", help="only these papers (repeatable)")
    b.add_argument("--full", action="store_true", help="rebuild every paper, changed or not")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_build)

    st = sub.add_parser("status", help="per paper: built / stale (why) / missing / failed, and coverage")
    st.add_argument("--library", default=None)
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)

    r = sub.add_parser("report", help="library-wide report over the built artifacts (DuckDB)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_report)

    dr = sub.add_parser("doctor", help="cross-check library, Dagster, artifacts and index; --repair fixes drift")
    dr.add_argument("--library", default=None)
    dr.add_argument("--repair", action="store_true", help="rebuild only the affected papers and remove orphans")
    dr.add_argument("--json", action="store_true")
    dr.set_defaults(func=cmd_doctor)

    se = sub.add_parser("search", help="papers matching words in their metadata or full text (lexical)")
    se.add_argument("query", nargs="+", help="words, a phrase in quotes, or a code (SPG-302)")
    se.add_argument("--limit", type=_positive_int, default=DEFAULT_LIMIT,
                    help=f"papers to return (default {DEFAULT_LIMIT})")
    se.add_argument("--year-from", type=int, default=None, metavar="Y")
    se.add_argument("--year-to", type=int, default=None, metavar="Y")
    se.add_argument("--domain", action="append", default=[], metavar="D", help="only this domain (repeatable)")
    se.add_argument("--json", action="store_true")
    se.set_defaults(func=cmd_search)

    rt = sub.add_parser("retrieve", help="the best passages (units) for a question: lexical, semantic or hybrid")
    rt.add_argument("query", nargs="+")
    rt.add_argument("--mode", choices=MODES, default="hybrid",
                    help="bm25, vectors, or both fused by reciprocal rank (default)")
    rt.add_argument("--limit", type=_positive_int, default=DEFAULT_LIMIT,
                    help=f"units to return (default {DEFAULT_LIMIT})")
    rt.add_argument("--per-paper", type=_nonnegative_int, default=DEFAULT_PER_PAPER, metavar="K",
                    help=f"at most K units of one paper (default {DEFAULT_PER_PAPER}; 0: no cap)")
    rt.add_argument("--paper", action="append", default=[], metavar="KEY", help="only this paper (repeatable)")
    rt.add_argument("--kind", choices=KINDS, default="all",
                    help="body text, figures/tables, or both (default)")
    rt.add_argument("--full", action="store_true", help="whole unit text instead of a snippet")
    rt.add_argument("--json", action="store_true")
    rt.set_defaults(func=cmd_retrieve)

    g = sub.add_parser("get", help="whole units by short id")
    g.add_argument("ids", nargs="+", metavar="SHORT_ID")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_get)

    tl = sub.add_parser("timeline", help="the units before and after one, in the paper's reading order")
    tl.add_argument("id", metavar="SHORT_ID")
    tl.add_argument("--window", type=_nonnegative_int, default=DEFAULT_WINDOW, metavar="N",
                    help=f"units each side (default {DEFAULT_WINDOW})")
    tl.add_argument("--json", action="store_true")
    tl.set_defaults(func=cmd_timeline)

    gr = sub.add_parser("grep", help="every occurrence of a term or code (all spellings), verbatim, with offsets")
    gr.add_argument("term", nargs="+")
    gr.add_argument("--paper", action="append", default=[], metavar="KEY", help="only this paper (repeatable)")
    gr.add_argument("--json", action="store_true")
    gr.set_defaults(func=cmd_grep)

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
    eb.add_argument("--max-queries", type=_positive_int, default=None, metavar="N",
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
        e.set_defaults(func=cmd_eval)

    from sheaf.service.server import SERVED_COMMANDS

    for name in SERVED_COMMANDS:
        sub.choices[name].add_argument("--no-server", action="store_true",
                                       help="run here even when `sheaf serve` is running")
    sv = sub.add_parser("serve", help="keep the query encoder and index warm on 127.0.0.1; the query "
                        "commands use it automatically while it runs")
    sv.add_argument("--port", type=int, default=0, help="TCP port (default 0: any free port; the "
                    "CLI finds it in <SHEAF_HOME>/serve.json)")
    sv.add_argument("--host", default="127.0.0.1", help="loopback address only (127.0.0.1 or ::1)")
    sv.add_argument("--json", action="store_true", help="print a summary envelope when it stops")
    sv.set_defaults(func=cmd_serve)
    return ap



def main(argv: list[str] | None = None) -> int:
    """Entry point of the `sheaf` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        argv = sys.argv[1:] if argv is None else list(argv)
        command = next((a for a in argv if not a.startswith("-")), "sheaf")
        if "--json" in argv:
            emit(error(command, "BAD_QUERY", str(e), {"hint": f"see `sheaf {command} --help`"
                                                        if command != "sheaf" else "see `sheaf --help`"}))
        else:
            parser.print_usage(sys.stderr)
            print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        _ask_server(args)
        env = args.func(args)
        if _SERVED is not None and _SERVED.get("_exit"):
            env["_exit"] = _SERVED["_exit"]
    except SheafError as e:
        env = error(args.command, e.code, e.message, e.details)
        if args.json:
            emit(env)
        else:
            hint = e.details.get("hint")
            print(f"error [{e.code}]: {e.message}" + (f"\nhint: {hint}" if hint else ""), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `sheaf ... | head`: the reader left; no traceback, no error line
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:  # never a traceback for the caller; the envelope names the failure
        env = error(args.command, "INTERNAL_ERROR", f"{type(e).__name__}: {e}",
                    {"hint": "this is a bug in sheaf; please report it with the command you ran"})
        if args.json:
            emit(env)
        else:
            print(f"error [INTERNAL_ERROR]: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    code = env.pop("_exit", 0)
    if args.json:
        emit(env)
    return code


if __name__ == "__main__":
    sys.exit(main())
