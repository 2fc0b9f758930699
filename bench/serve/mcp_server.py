"""Benchmark of `sheaf mcp` (results: docs/benchmarks.md, "MCP server").

Library: the query bench's synthetic SciFact library (`bench/search/query.py`: SciFact abstracts as body
units, 30 a paper, real all-MiniLM-L6-v2 vectors, repeats of an abstract rotated and noised),
made from the first --abstracts abstracts only so that it builds in minutes on a small machine
(the vectors are cached in bench/.cache; the built home too, until its size changes).
Questions: the SciFact claims (queries.jsonl).

Measures, all through the SDK's own client talking to `sheaf mcp` over stdio (a real
subprocess), side by side in one run:
- tokens an agent reads per question: layer 1 (`retrieve`, 10 units, defaults) + `get` of its
  top 3, against the top 10 units in full (`retrieve` with full); JSON (structured content) and
  the text rendering, estimated as characters / 4; whether the top 3 are the same units;
- latency per tool call, p50 / p95, at the client: `retrieve` (hybrid, layer 1), `get` (3 units),
  `timeline`, `search`, `grep` (a keyword of the claim);
- the same hybrid `retrieve` through a warm `sheaf serve` (its client's HTTP round trip) and as a
  cold CLI process (`sheaf retrieve --no-server`), for comparison.

Run from the project root (first run: embedding the abstracts, the ONNX export, the index):
    .venv/bin/python -m bench.serve.mcp_server --write-docs
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from bench.common import write_docs_section
from bench.search import query as qb  # the query bench's library builder and helpers

ROOT = Path(__file__).resolve().parents[2]

BEGIN, END = "<!-- bench:mcp:begin -->", "<!-- bench:mcp:end -->"


def tok(text: str) -> int:
    return -(-len(text) // 4)


def home_for(n_units: int, n_abstracts: int, batch_size: int) -> tuple[Path, dict[str, Any]]:
    """The built home (reused while its stamp matches)."""
    home = qb.CACHE / f"mcp-home-{n_units}-{n_abstracts}"
    stamp = home / "bench-stamp.json"
    if stamp.exists():
        return home, json.loads(stamp.read_text())
    from sheaf.core.settings import get_settings
    from sheaf.vectors.embedder import Embedder
    from sheaf.vectors.onnx_export import ensure_onnx_export, link_export

    shutil.rmtree(home, ignore_errors=True)
    docs = qb.load_docs()[:n_abstracts]
    embedder = Embedder(batch_size=batch_size)
    embedder.load()
    t0 = time.perf_counter()
    passages, vectors = qb.base_vectors(embedder, docs)
    embed_s = time.perf_counter() - t0
    export, _ = ensure_onnx_export(embedder, get_settings(home=qb.CACHE / "onnx-home"))
    built = qb.build_index(home / "index" / "sheaf.db", n_units, docs, passages, vectors, embedder.identity)
    link_export(export, home)
    info = {**built, "abstracts": n_abstracts, "embed_seconds": round(embed_s, 1)}
    stamp.write_text(json.dumps(info))
    return home, info


async def through_mcp(home: Path, claims: list[str], kws: list[str], grep_queries: int) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "sheaf", "mcp"], env=qb.env_for(home),
                                   cwd=str(ROOT))
    lat: dict[str, list[float]] = {k: [] for k in ("retrieve", "get", "timeline", "search", "grep", "retrieve_full")}
    tokens = {"layered_json": [], "layered_text": [], "full_json": [], "full_text": [],
              "layer1_json": [], "get3_json": []}
    same_top3 = 0
    left_out = 0
    t0 = time.perf_counter()
    async with Client(params) as c:
        start_s = time.perf_counter() - t0

        async def call(name: str, args: dict[str, Any], key: str | None = None) -> Any:
            t = time.perf_counter()
            r = await c.call_tool(name, args)
            lat[key or name].append(time.perf_counter() - t)
            if r.is_error:
                raise SystemExit(f"{name} {args}: {r.content[0].text}")
            return r

        for q in claims[:3]:  # warm: the first calls load what warming left
            await c.call_tool("retrieve", {"query": q})
        for i, (q, kw) in enumerate(zip(claims, kws)):
            r1 = await call("retrieve", {"query": q, "limit": 10})
            ids = [u["short_id"] for u in r1.structured_content["matches"]]
            left_out += bool(r1.structured_content.get("left_out"))
            g = await call("get", {"ids": ids[:3], "max_tokens": 1_000_000})  # the three asked for, whole
            left_out += bool(g.structured_content.get("left_out"))
            f = await call("retrieve", {"query": q, "limit": 10, "full": True, "max_tokens": 1_000_000}, "retrieve_full")
            same_top3 += [u["short_id"] for u in f.structured_content["matches"][:3]] == ids[:3]
            j1 = r1.structured_content["tokens"]
            jg = g.structured_content["tokens"]
            tokens["layer1_json"].append(j1)
            tokens["get3_json"].append(jg)
            tokens["layered_json"].append(tok(json.dumps(r1.structured_content, ensure_ascii=False, separators=(",", ":")))
                                          + tok(json.dumps(g.structured_content, ensure_ascii=False,
                                                           separators=(",", ":"))))
            tokens["layered_text"].append(tok(r1.content[0].text) + tok(g.content[0].text))
            tokens["full_json"].append(tok(json.dumps(f.structured_content, ensure_ascii=False, separators=(",", ":"))))
            tokens["full_text"].append(tok(f.content[0].text))
            await call("timeline", {"id": ids[0]})
            await call("search", {"query": kw})
            if i < grep_queries:  # grep reads every unit holding the word: slow on common words
                await call("grep", {"term": kw.split()[0]})
    n = len(claims)
    mean = {k: round(sum(v) / n) for k, v in tokens.items()}
    return {"start_s": round(start_s, 2), "latency_ms": {k: qb.stats_ms(v) for k, v in lat.items()},
            "tokens_per_question": mean, "same_top3": same_top3, "questions": n, "answers_trimmed": left_out,
            "layered_over_full_json": round(sum(tokens["layered_json"]) / sum(tokens["full_json"]), 3),
            "layered_over_full_text": round(sum(tokens["layered_text"]) / sum(tokens["full_text"]), 3)}


def through_serve(home: Path, claims: list[str]) -> dict[str, Any]:
    server = qb.Server(home)
    try:
        for q in claims[:3]:
            server.ask(["retrieve", "--json", *qb.words(q)])
        ts = []
        for q in claims:
            t, e = server.ask(["retrieve", "--json", *qb.words(q)])
            assert e["ok"], e
            ts.append(t)
        return {"start_s": round(server.start_s, 2), "retrieve": qb.stats_ms(ts)}
    finally:
        server.stop()
        (home / "serve.json").unlink(missing_ok=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    claims = qb.load_queries(args.queries)
    kws = [qb.keywords(q) for q in claims]
    out: dict[str, Any] = {"sizes": {}}
    for n in [int(x) for x in args.units.split(",")]:
        home, info = home_for(n, args.abstracts, args.batch_size)
        print(f"library: {info}", flush=True)
        r: dict[str, Any] = {"library": info, "load_before": os.getloadavg()[0]}
        r["mcp"] = anyio.run(through_mcp, home, claims, kws, args.grep_queries)
        print(f"mcp: {r['mcp']}", flush=True)
        r["serve"] = through_serve(home, claims)
        print(f"serve: {r['serve']}", flush=True)
        t, envs = qb.cold_runs([["retrieve", "--mode", "hybrid", "--json", "--no-server", *qb.words(q)]
                                for q in claims[:args.cold_runs]], qb.env_for(home))
        assert all(e["ok"] for e in envs)
        r["cold_cli"] = qb.stats_ms(t)
        r["load_after"] = os.getloadavg()[0]
        print(f"cold CLI: {r['cold_cli']}", flush=True)
        out["sizes"][str(n)] = r
    out.update({"machine": qb.machine(), "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
                "total_seconds": round(time.perf_counter() - t0, 1), "args": vars(args)})
    return out


def section(r: dict[str, Any]) -> str:
    sizes = r["sizes"]
    first = next(iter(sizes.values()))
    m, lib = first["mcp"], first["library"]
    tq = m["tokens_per_question"]
    tools = list(m["latency_ms"])
    head = "| units | " + " | ".join(f"`{t}`" for t in tools) + " | `sheaf serve` retrieve | cold CLI retrieve | " \
        "MCP / serve retrieve p95 |"
    rows = []
    for n, x in sizes.items():
        L, sv = x["mcp"]["latency_ms"], x["serve"]["retrieve"]
        cells = " | ".join(f"{L[t]['p50']} / {L[t]['p95']}" for t in tools)
        rows.append(f"| {int(n):,} | {cells} | {sv['p50']} / {sv['p95']} | {x['cold_cli']['p50']} / "
                    f"{x['cold_cli']['p95']} | {L['retrieve']['p95'] / sv['p95']:.2f}x |")
    loads = ", ".join(f"{x['load_before']:.1f} → {x['load_after']:.1f}" for x in sizes.values())
    return f"""{BEGIN}
## MCP server

What `sheaf mcp` costs an agent, through the SDK's own client over stdio (a real subprocess):
tokens read per question with the three layers against the top units in full, and the latency
of each tool call next to a warm `sheaf serve` and a cold CLI process, side by side in one run.
Library: the query bench's synthetic SciFact library (`bench/search/query.py`: 30 units a paper, real
MiniLM vectors, repeats of an abstract rotated and noised) made from the first {lib['abstracts']:,}
abstracts; questions: the first {m['questions']} SciFact claims. Rerun: `python -m bench.serve.mcp_server
--write-docs` (`--units`, `--abstracts`, `--queries`; the first run embeds the
abstracts, ~4 min here). Measured {r['date']} on {r['machine'].get('cpu', '?')}, a shared 2-core
machine (load {loads}).

**Tokens per question** ({int(next(iter(sizes))):,} units; characters / 4, mean): layer 1 (`retrieve`,
10 units, default `max_tokens` 2,000) + `get` of its top 3 in full = **{tq['layered_json']:,}** tokens
of JSON ({tq['layer1_json']:,} + {tq['get3_json']:,}), {tq['layered_text']:,} of text rendering; the top
10 units in full (`retrieve` with `full`) = {tq['full_json']:,} JSON, {tq['full_text']:,} text:
**{m['layered_over_full_json']:.0%}** of the full answer in JSON, {m['layered_over_full_text']:.0%} in
text. Same top 3 units in {m['same_top3']} of {m['questions']} questions; {m['answers_trimmed']} layer-1
answers trimmed by `max_tokens`. The goal of ≤ 30% is not met, and cannot be with the same top 3
read whole: the units being of similar length, the `get` of 3 of the 10 is already
{tq['get3_json'] / tq['full_json']:.0%} of the full answer; layer 1 adds {tq['layer1_json'] / tq['full_json']:.0%}
(~{tq['layer1_json'] / 10:.0f} tokens a unit: short id, paper, section path, pages, kind, a 110-character
summary, score, plus the answer's query, warnings and next actions).

**Latency per tool call** at the client, p50 / p95 ms (warm engines; `grep` on the first
{r['args']['grep_queries']} questions' first keyword, which it reads in every unit holding it):

{head}
|{"---|" * (len(tools) + 4)}
{chr(10).join(rows)}

A tool call through MCP costs a few ms over `sheaf serve`'s HTTP (JSON-RPC over the pipes, the
output schema checked on both sides); both are ~20x under a cold CLI process. `grep` reads every
unit that holds its term: it is for codes and identifiers, slow on a common word in a large library.
Raw results: `bench/results/mcp.json`.
{END}"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--units", default="10000,100000", help="library sizes in units, comma-separated")
    ap.add_argument("--grep-queries", type=int, default=10)
    ap.add_argument("--abstracts", type=int, default=1_000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--cold-runs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--from-json", default=None, help="re-render results saved by --json (no run)")
    args = ap.parse_args()
    r = json.loads(Path(args.from_json).read_text()) if args.from_json else run(args)
    if args.json and not args.from_json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    if args.write_docs:
        write_docs_section(section(r) + "\n", BEGIN, END)
        print("wrote docs/benchmarks.md")
    else:
        print(section(r))


if __name__ == "__main__":
    main()
