"""Readable output of every command (the tables for people); `--json` prints the envelope instead.

Query commands render from their envelope alone, so a server's answer and a local one print
the same text; the other commands may use the in-memory `view` of their `Outcome`.
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from sheaf.cli.terminal import terminal_columns

__all__ = ["error", "query", "parse", "build", "status", "doctor", "eval_table", "build_state", "stop"]


# --- helpers -----------------------------------------------------------------------------------

def _width() -> int:
    return max(60, terminal_columns(110))


def _fit(s: str, n: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: max(0, n - 1)] + "…"


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _score(v: Any) -> str:
    return "" if v is None else (f"{v:.4f}" if abs(v) < 10 else f"{v:.2f}")


def _pages(m: dict[str, Any]) -> str:
    ps = m.get("page_span")
    if not ps:
        return ""
    return f"p.{ps[0]}" if ps[0] == ps[1] else f"p.{ps[0]}-{ps[1]}"


def _link(m: dict[str, Any], indent: int) -> None:
    """A Zotero item's `zotero://select/...` link on its own line (whole: a terminal opens it)."""
    if m.get("link"):
        print(" " * indent + m["link"])


def error(env: dict[str, Any]) -> None:
    """An error envelope for people: one line (and a hint) on stderr."""
    err = env["error"]
    hint = err["details"].get("hint")
    print(f"error [{err['code']}]: {err['message']}" + (f"\nhint: {hint}" if hint else ""), file=sys.stderr)


# --- query commands ------------------------------------------------------------------------------

_KIND = {"body": "body", "backmatter": "backmatter", "figure": "figure", "table": "table", "metadata": "metadata",
         "annotation": "annotation", "note": "note"}
_WEAK_LINE = "  ·· weaker matches below: {why} ··"


def _score_cell(m: dict[str, Any], kind: str) -> str:
    return f"{kind} {_score(m['score'])}" if m.get("score") is not None else ""


def _wrapped(text: str, indent: int, width: int) -> list[str]:
    """`text` on as many lines as it needs at `indent` (never cut: a hit stays whole)."""
    return [" " * indent + line for line in _wrap(" ".join(text.split()), max(30, width - indent))]


def _weak_separator(data: dict[str, Any], i: int, why: str) -> None:
    """The line where the strong matches end (only when some came before)."""
    ms = data["matches"]
    if 0 < i and ms[i - 1].get("strong", True) and not ms[i].get("strong", True):
        print(_WEAK_LINE.format(why=why))


def _retrieve_line(i: int, m: dict[str, Any], kind: str, width: int) -> None:
    """Two lines and more: rank, short id, paper, year, unit kind, labelled score, title; then
    the section and the summary, wrapped, never cut."""
    head = (f"{i:>2}. [{m['short_id'] or '-'}] {m['zotero_key']} {m['year'] or '----'} "
            f"{_KIND.get(m['source'], m['source']):<10} {_score_cell(m, kind):<12} ")
    print(head + _fit(m.get("title") or "(untitled)", max(20, width - len(head))))
    where = " > ".join(m["section_path"]) or m["heading"] or ""
    for line in _wrapped(f"{where}: {m['summary']}" if where else m["summary"], 6, width):
        print(line)
    _link(m, 6)


def _print_full(m: dict[str, Any], marker: str = "", link: bool = True) -> None:
    width = min(_width(), 100)
    where = " > ".join(m["section_path"]) or m["heading"]
    print(f"{marker}[{m['short_id']}] {m['zotero_key']} {m['year'] or ''} | {where} | {_pages(m)}"
          f"{'  ' + _score(m['score']) if m.get('score') is not None else ''}")
    if link:
        _link(m, 4)
    for para in m["text"].split("\n"):
        print(_fill(para, width) if para.strip() else "")
    print()


def _search(data: dict[str, Any]) -> None:
    width = _width()
    kind = data.get("score_kind", "rrf")
    print(f" #  paper     year  first author     {kind + ' score':<12} title")
    print("    " + "evidence: the field or section that matched, and its words")
    for i, m in enumerate(data["matches"], start=1):
        _weak_separator(data, i - 1, "they hold only some of the words")
        who = (m["first_author"] or "").split(" ")[-1]
        head = f"{i:>2}. {m['zotero_key']}  {m['year'] or '----'}  {_fit(who, 15):<15}  {_score_cell(m, kind):<12} "
        print(head + _fit(m["title"] or "(untitled)", max(20, width - len(head))))
        where = m["heading"] + (f" [{m['short_id']}]" if m["short_id"] else "")
        for line in _wrapped(f"{where}: {m['text']}", 6, width):
            print(line)
        _link(m, 6)


def _retrieve(data: dict[str, Any]) -> None:
    width = _width()
    kind = data.get("score_kind") or "score"
    if data.get("full"):
        for m in data["matches"]:
            _print_full(m)
        return
    print(f" #  short id   paper    year kind       {kind + ' score':<12} title")
    print("      section: summary")
    why = {"lexical": "their units hold only some of the words"}.get(
        data.get("mode"), "a word of the query missing, or further in meaning than the first")
    for i, m in enumerate(data["matches"], start=1):
        _weak_separator(data, i - 1, why)
        _retrieve_line(i, m, kind, width)


def _get(data: dict[str, Any]) -> None:
    for m in data["matches"]:
        _print_full(m)


def _timeline(data: dict[str, Any]) -> None:
    p = data["paper"]
    print(f"{p['zotero_key']} {p['year'] or ''} {p['title'] or ''}")
    _link(p, 0)
    print()
    for m in data["matches"]:
        _print_full(m, marker=">> " if m["offset"] == 0 else f"{m['offset']:+d} ", link=False)  # the paper's, above


def _grep(data: dict[str, Any]) -> None:
    width = _width()
    for m in data["matches"]:
        if m["page"] is not None:
            page = f"p.{m['page']}"
        elif m.get("source") in ("note", "annotation"):  # no page (Zotero gave none): its kind instead
            page = m["source"]
        else:
            page = _pages(m) or "p.?"
        head = (f"[{m['short_id']}] {m['zotero_key']} {page} {m['field']}:{m['char_start']}-{m['char_end']}"
                f"  {m['span']!r}  ")
        if len(head) + len(m["text"]) <= width:
            print(head + m["text"])
        else:  # the context on its own lines: the hit is never cut
            print(head.rstrip())
            for line in _wrapped(m["text"], 4, width):
                print(line)
    n, p = len(data["matches"]), data["papers_with_hits"]
    print(f"\n{_n(n, 'occurrence')} in {_n(p, 'paper')}; spellings: "
          + ", ".join(f"{k!r} x{v}" for k, v in data["variants"].items()))


_QUERY_VIEWS = {"search": _search, "retrieve": _retrieve, "get": _get, "timeline": _timeline, "grep": _grep}


def query(env: dict[str, Any]) -> None:
    """A query command's success envelope: its matches (or "no matches" and the coverage),
    then its warnings and next actions."""
    data = env["data"]
    if data.get("matches"):
        _QUERY_VIEWS[env["command"]](data)
    else:
        print("no matches")
        cov = data.get("coverage")
        if cov:
            print("coverage: " + ", ".join(f"{k} {v}" for k, v in cov.items() if v is not None))
    for w in env["warnings"]:
        print(f"warning: {w}")
    for a in env["next_actions"]:
        print(f"next: {a}")


# --- parse -----------------------------------------------------------------------------------------

def _print_tree(out: Any, s: dict[str, Any]) -> None:
    per_node: dict[str, int] = {}
    for u in out.body_units:
        per_node[u.node_id] = per_node.get(u.node_id, 0) + 1
    objs: dict[str, int] = {}
    for o in out.object_units:
        objs[o.node_id] = objs.get(o.node_id, 0) + 1
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
                       else (r["paper_id"], "FAILED", "(below)", "", "", "", "")
                       for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(heads))]
    for i, t in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    bad = [r for r in rows if "error" in r]
    warned = [r for r in rows if r.get("warnings")]
    print(f"\n{len(rows) - len(bad)} parsed, {len(bad)} failed, {len(warned)} with warnings")
    for r in bad:  # whole: the message is the diagnosis
        print(f"failed: {r['paper_id']}: {r['error']['message']}")


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


def parse(env: dict[str, Any], view: Any) -> None:
    """A library: its table, then the warnings the table does not show; one paper: its tree
    (`view`: the paper's outputs), its blocks with why each got its role (``--stage blocks``),
    or its Markdown (``--stage markdown``)."""
    data = env["data"]
    if "papers" in data:
        rows = data["papers"]
        _library_table(rows)
        shown = {f"{r['paper_id']}: {r['error']['message']}" for r in rows if "error" in r}
        for w in env["warnings"]:
            if w not in shown:
                print(f"warning: {w}")
    elif data["stage"] == "markdown":
        sys.stdout.write(data["markdown"])
    elif data["stage"] == "blocks":
        _print_blocks(view)
    else:
        _print_tree(view, data["summary"])


# --- build / status / doctor ---------------------------------------------------------------------

def build(env: dict[str, Any], rep: Any) -> None:
    built = env["data"]["states"].get("built", 0)
    print(f"\n{built} of {len(rep.statuses)} papers built; {len(rep.planned)} rebuilt this time in "
          f"{rep.seconds:.1f} s; {rep.embeddings_computed} embeddings computed")
    for st in rep.statuses.values():
        if st.state != "built":
            print(f"  {st.key}: {st.state}" + (f" ({st.error})" if st.error else f" ({'; '.join(st.reasons)})"))


def _table(rows: list[tuple[str, ...]], heads: tuple[str, ...], wrap_last: bool = True) -> None:
    """Rows under a header line, columns padded; the last column is never cut (wrapped under
    itself when the terminal is narrow)."""
    table = [heads] + rows
    widths = [max(len(t[i]) for t in table) for i in range(len(heads) - 1)]
    indent = sum(widths) + 2 * len(widths)
    room = max(30, _width() - indent)
    for i, t in enumerate(table):
        lead = "  ".join(c.ljust(w) for c, w in zip(t, widths))
        last = t[-1]
        parts = _wrap(last, room) if wrap_last else [last]
        print(f"{lead}  {parts[0]}".rstrip())
        for more in parts[1:]:
            print(" " * indent + more)
        if i == 0:
            print("  ".join("-" * w for w in widths) + "  " + "-" * min(room, max(len(heads[-1]), 6)))


def _wrap(text: str, width: int) -> list[str]:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return lines + [cur] if cur or not lines else lines


def status(env: dict[str, Any], statuses: dict[str, Any]) -> None:
    """One line per paper (state and why, errors whole), the skipped folders, coverage, the
    index, the running build, then what to do next."""
    data = env["data"]
    if data.get("message"):
        print(data["message"] + "\n")
    rows = [(st.key, st.state, st.error or "; ".join(st.reasons) or "-") for st in statuses.values()]
    rows += [(s["folder"], "skipped", s["reason"]) for s in data.get("skipped", [])]
    rows += [(m["paper"], "metadata only", m["reason"]) for m in data.get("metadata_only", [])]
    if rows:
        _table(rows, ("paper", "state", "why"))
    else:
        print("the library holds no papers")
    states = data.get("states", {})
    print("\npapers: " + (", ".join(f"{n} {k}" for k, n in states.items()) or "none")
          + (f"; {len(data['skipped'])} folder(s) skipped" if data.get("skipped") else "")
          + (f"; {len(data['metadata_only'])} item(s) metadata only (searchable by their metadata)"
             if data.get("metadata_only") else ""))
    coverage, probe = data["coverage"], data["index"]
    print("coverage: " + ", ".join(f"{k} {v}" for k, v in coverage.items()))
    print("index: " + ("vectors queryable" if probe.get("vectors_queryable") else probe.get("problem", "no vectors"))
          + f" ({probe['path']})")
    if data.get("build_state"):
        build_state(data["build_state"])
    for a in env["next_actions"] or ["nothing to do: every paper is built (`sheaf search WORDS` to search)"]:
        print(f"next: {a}")


def build_state(bs: dict[str, Any]) -> None:
    """The live build line of `sheaf status`."""
    if bs["status"] == "idle":
        print("build: idle")
    else:
        where = f", {bs['paper_id']}" if bs.get("paper_id") else ""
        print(f"build: {bs['status']} (pid {bs['pid']}, since {bs['started_at']}): {bs['current']}/{bs['total']} "
              f"papers, {bs.get('stage') or 'planning'}{where}")
    for d in bs.get("dead_runs", []):
        print(f"  run {d['run_id'][:8]} of a build that died (pid {d['pid']}): the next `sheaf build` marks it failed")


def stop(env: dict[str, Any]) -> None:
    d = env["data"]
    print(d["message"] + (f" after {d['waited_s']:.1f} s" if d.get("stopped") else ""))
    for r in d.get("runs", []):
        print(f"  run {r['run_id'][:8]} ({r['job']}): {r['status']}")
    for a in env.get("next_actions", []):
        print(f"next: {a}")


def doctor(found: Any, final: Any) -> None:
    for title, dg in (("found", found), *((("after repair", final),) if final is not found else ())):
        print(f"{title}: {len(dg.issues)} issue(s) in {dg.checked.get('partitions', 0)} papers "
              f"({dg.seconds:.1f} s)")
        for i in dg.issues:
            print(f"  {i.paper or '-':<14} {i.kind:<22} {i.detail}\n  {'':<14} {'':<22} cause: {i.cause}; "
                  f"repair: {i.repair}")


# --- eval ------------------------------------------------------------------------------------------

def eval_table(env: dict[str, Any], metrics: Sequence[str]) -> None:
    """Per mode (and query type, for the library suite) the metrics; `metrics`: the BEIR columns."""
    data = env["data"]
    lat = data.get("latency_ms", {})
    if data["suite"] == "library":
        print(f"{'mode':<9} {'type':<9} {'queries':>7} {'R@1':>6} {'R@10':>6} {'MRR@10':>7}")
        for mode, per in data["metrics"].items():
            for qtype, m in per.items():
                print(f"{mode:<9} {qtype:<9} {m['queries']:>7} {m['recall@1']:>6.3f} {m['recall@10']:>6.3f} "
                      f"{m['mrr@10']:>7.3f}")
    else:
        print(f"{'mode':<9} " + " ".join(f"{m:>10}" for m in metrics) + f" {'p50 ms':>8} {'p95 ms':>8}")
        for mode, m in data["metrics"].items():
            print(f"{mode:<9} " + " ".join(f"{m[k]:>10.4f}" for k in metrics)
                  + f" {lat.get(mode, {}).get('p50', 0):>8.1f} {lat.get(mode, {}).get('p95', 0):>8.1f}")
    if data.get("query_encode_ms"):
        print(f"query encoding: p50 {data['query_encode_ms']['p50']:.1f} ms (not in the latencies above)")
    for w in env["warnings"]:
        print(f"warning: {w}")


def _fill(text: str, width: int) -> str:
    """`textwrap.fill` with a four-space indent (textwrap is imported only when a whole unit is
    printed: ~1 ms of every cold command otherwise)."""
    import textwrap

    return textwrap.fill(text, width, initial_indent="    ", subsequent_indent="    ")
