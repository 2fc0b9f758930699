"""What `sheaf mcp`'s layers cost an agent in tokens, over the SciFact claims.

Per claim, through the SDK's own client talking to `sheaf mcp` over stdio (a real subprocess):
layer 1 (`retrieve`, 10 units, default `max_tokens`), `get` of its top 3 whole, and the same 10
units in full (`retrieve` with full). Sizes are measured on both forms an agent may read: the
structured content (JSON, compact separators) and the text rendering, in characters and in
tokens (ceil(characters / 4), as the server counts them). Reported: per-claim means and the
ratios over all claims, layer 1 / full and (layer 1 + get of 3) / full; goals ≤ 15% and ≤ 45%.

Library: `bench/serve/mcp_server.py`'s synthetic SciFact library (`bench/search/query.py`: the SciFact abstracts as
body units, 30 a paper, real all-MiniLM-L6-v2 vectors), built from the first --abstracts
abstracts (their vectors cached in bench/.cache, the built home too). The ratio depends on the
units' length, not on the library's size: a few hundred abstracts measure it.

Run from the project root (first run: embedding the abstracts and the ONNX export, minutes):
    .venv/bin/python -m bench.serve.mcp_layers [--abstracts 300] [--units 3000] [--queries 300]
Raw results: bench/results/mcp-layers.json (--json PATH to write elsewhere).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from bench.search import query as qb  # SciFact, the environment of a home
from bench.serve import mcp_server as bm  # its library builder

ROOT = Path(__file__).resolve().parents[2]

GOAL_LAYER1, GOAL_LAYERED = 0.15, 0.45


def _json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def tok(n_chars: int) -> int:
    return -(-n_chars // 4)


def sizes(res: Any) -> dict[str, int]:
    """Characters and tokens of an answer's JSON and text."""
    j, t = len(_json(res.structured_content)), len(res.content[0].text)
    return {"json_chars": j, "text_chars": t, "json_tokens": tok(j), "text_tokens": tok(t)}


async def measure(home: Path, claims: list[str]) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "sheaf", "mcp"], env=qb.env_for(home),
                                   cwd=str(ROOT))
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    summaries: list[int] = []
    async with Client(params) as c:
        async def call(name: str, args: dict[str, Any]) -> Any:
            r = await c.call_tool(name, args)
            if r.is_error:
                raise SystemExit(f"{name} {args}: {r.content[0].text}")
            return r

        for q in claims:
            r1 = await call("retrieve", {"query": q, "limit": 10})
            units = r1.structured_content["matches"]
            ids = [u["short_id"] for u in units]
            g = await call("get", {"ids": ids[:3], "max_tokens": 1_000_000})
            f = await call("retrieve", {"query": q, "limit": 10, "full": True, "max_tokens": 1_000_000})
            rows.append({"layer1": sizes(r1), "get3": sizes(g), "full": sizes(f), "units": len(units),
                         "left_out": bool(r1.structured_content.get("left_out")),
                         "same_units": [u["short_id"] for u in f.structured_content["matches"]] == ids})
            lines += [len(line) for line in r1.content[0].text.splitlines()[1:1 + len(units)]]
            summaries += [len(u["summary"]) for u in units]
    out: dict[str, Any] = {"questions": len(rows), "units_per_answer": statistics.fmean(r["units"] for r in rows),
                           "layer1_trimmed": sum(r["left_out"] for r in rows),
                           "same_units": sum(r["same_units"] for r in rows),
                           "layer1_line_chars": {"mean": round(statistics.fmean(lines), 1), "max": max(lines)},
                           "summary_chars": {"mean": round(statistics.fmean(summaries), 1), "max": max(summaries)}}
    for form in ("json", "text"):
        total = {k: sum(r[k][f"{form}_tokens"] for r in rows) for k in ("layer1", "get3", "full")}
        out[form] = {
            "mean_tokens": {k: round(v / len(rows)) for k, v in total.items()},
            "mean_chars": {k: round(sum(r[k][f"{form}_chars"] for r in rows) / len(rows))
                           for k in ("layer1", "get3", "full")},
            "layer1_over_full": round(total["layer1"] / total["full"], 4),
            "layered_over_full": round((total["layer1"] + total["get3"]) / total["full"], 4),
        }
    out["goals_met"] = all(out[f]["layer1_over_full"] <= GOAL_LAYER1 and out[f]["layered_over_full"] <= GOAL_LAYERED
                           for f in ("json", "text"))
    return out


def report(r: dict[str, Any]) -> str:
    m = r["mcp"]
    out = [f"library: {r['library']['units']:,} units ({r['library']['abstracts']} SciFact abstracts); "
           f"{m['questions']} claims; {m['units_per_answer']:.1f} units per layer-1 answer, "
           f"{m['layer1_trimmed']} trimmed by max_tokens; same 10 units in full: {m['same_units']}/{m['questions']}",
           f"layer-1 line: mean {m['layer1_line_chars']['mean']} chars, max {m['layer1_line_chars']['max']}; "
           f"summary: mean {m['summary_chars']['mean']}, max {m['summary_chars']['max']}",
           "form  layer1  get3  full   (mean tokens per claim; chars/4)   layer1/full  (layer1+get3)/full"]
    for form in ("json", "text"):
        x = m[form]
        t = x["mean_tokens"]
        out.append(f"{form:5} {t['layer1']:6} {t['get3']:5} {t['full']:5}   (chars {x['mean_chars']['layer1']:,} / "
                   f"{x['mean_chars']['get3']:,} / {x['mean_chars']['full']:,})   {x['layer1_over_full']:.1%}"
                   f"        {x['layered_over_full']:.1%}")
    out.append(f"goals (layer 1 <= {GOAL_LAYER1:.0%}, layered <= {GOAL_LAYERED:.0%}, JSON and text): "
               f"{'met' if m['goals_met'] else 'NOT met'}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--abstracts", type=int, default=300)
    ap.add_argument("--units", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=300, help="the first N SciFact claims")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "mcp-layers.json"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    home, info = bm.home_for(args.units, args.abstracts, args.batch_size)
    claims = qb.load_queries(args.queries)
    r = {"library": info, "mcp": anyio.run(measure, home, claims), "machine": qb.machine(),
         "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
         "args": {k: v for k, v in vars(args).items() if k != "json"}}
    r["seconds"] = round(time.perf_counter() - t0, 1)
    print(report(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1) + "\n")
        print(f"raw results: {args.json}")


if __name__ == "__main__":
    main()
