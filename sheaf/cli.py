"""The `sheaf` command line: a thin layer over the library (JSON for programs, tables for people).

Imports stay lazy: `sheaf search` must start fast and never import dagster or torch.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sheaf.envelope import SheafError, emit, error, ok

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
    from sheaf.library import discover
    from sheaf.models import IngestError
    from sheaf.settings import get_settings
    from sheaf.transform import process_paper

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
        else:
            _print_tree(out)
    data = {"paper_id": out.paper.paper_id, "stage": args.stage, "summary": _paper_summary(out)}
    data.update(_stage_data(out, args.stage))
    return ok("parse", data, count=1, warnings=list(out.paper.warnings))


# --- main ------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="sheaf", description="Index and search a paper library.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("parse", help="run the transforms on one paper (or every paper of a library), no Dagster")
    p.add_argument("path", help="a paper's folder or file, or a library folder")
    p.add_argument("--format", default="auto", choices=FORMATS)
    p.add_argument("--stage", default="units", choices=STAGES)
    p.add_argument("--paper-id", default=None, help="paper key (default: from the path)")
    p.add_argument("--json", action="store_true", help="print the JSON envelope")
    p.set_defaults(func=cmd_parse)
    return ap



def main(argv: list[str] | None = None) -> int:
    """Entry point of the `sheaf` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        env = args.func(args)
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
