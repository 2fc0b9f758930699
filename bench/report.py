"""Plots of the benchmark results (PNG, docs/img/), regenerated from the JSON the benchmarks write.

Inputs (each optional; a plot whose data is missing is skipped with a message):

| plot | file | written by |
|---|---|---|
| `build_time.png`: full build time vs papers, against bare embedding | `bench/results/pipeline.json` | `bench/build/pipeline.py --json bench/results/pipeline.json` |
| `incremental.png`: full vs one changed paper vs no-op build | `bench/results/pipeline.json` | same |
| `query_latency.png`: query latency percentiles by corpus size | `bench/results/query.json`, else the Query table of docs/benchmarks.md | `bench/search/query.py --json bench/results/query.json` |
| `quality.png`: nDCG@10, recall@10/@100, MRR@10 by mode | `bench/results/eval-scifact-train.json` | `sheaf eval beir ... --out bench/results/eval-scifact-train.json` |
| `quality_levers.png`: hybrid nDCG@10 per lever | `bench/results/quality.json` | `bench/search/quality.py --json bench/results/quality.json` |

Run from the project root (matplotlib is in the `bench` extra: `pip install -e '.[bench]'`):
    .venv/bin/python -m bench.report
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
IMG = ROOT / "docs" / "img"

MODE_COLORS = {"lexical": "#4C72B0", "semantic": "#DD8452", "hybrid": "#55A868"}


def _load(path: Path, what: str) -> dict[str, Any] | None:
    if not path.exists():
        print(f"skipped {what}: no {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", file=sys.stderr)
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        print(f"skipped {what}: {path} is not JSON ({e})", file=sys.stderr)
        return None


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.grid": True, "grid.alpha": 0.3, "font.size": 10})
    return plt


def _save(fig: Any, name: str, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    p = out / name
    fig.tight_layout()
    fig.savefig(p)
    import matplotlib.pyplot as plt

    plt.close(fig)
    print(f"wrote {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}")
    return p


def _footnote(fig: Any, text: str) -> None:
    fig.text(0.01, 0.005, text, fontsize=7, color="#666")


# --- pipeline -----------------------------------------------------------------------------------

def _pipeline_sizes(r: dict[str, Any], png: str) -> list[int]:
    """The library sizes of the pipeline results, ascending; none: says that `png` is skipped."""
    sizes = sorted(int(n) for n in r.get("results", {}))
    if not sizes:
        print(f"skipped {png}: no sizes in the pipeline results", file=sys.stderr)
    return sizes


def plot_build_time(r: dict[str, Any], out: Path) -> Path | None:
    plt = _plt()
    sizes = _pipeline_sizes(r, "build_time.png")
    if not sizes:
        return None
    res = r["results"]
    full = [res[str(n)]["full"]["wall_s"] for n in sizes]
    # the full build embeds with sentence-transformers (a home's first build): its bare time, where measured
    b = [res[str(n)]["bare"] for n in sizes]
    bare = [x.get("st_bare_s", x["bare_s"]) for x in b]
    load = [x.get("st_bare_s", x["bare_s"]) + x.get("st_import_load_s", x.get("import_load_s", 0)) for x in b]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(sizes, full, "o-", color="#4C72B0", lw=2, label="sheaf build (full, fresh process)")
    ax.plot(sizes, load, "s--", color="#DD8452", label="bare embedding + model load")
    ax.plot(sizes, bare, "^:", color="#8C8C8C", label="bare embedding only (the floor)")
    for x, y in zip(sizes, full):
        ax.annotate(f"{y:.0f} s", (x, y), textcoords="offset points", xytext=(0, 8), ha="center")
    ax.set_xlabel("papers in the library")
    ax.set_ylabel("wall time (s)")
    ax.set_xticks(sizes)
    ax.set_ylim(0, max(full + load) * 1.2)
    ax.set_title("Full build time vs library size, against the embedding floor")
    ax.legend(loc="upper left", frameon=False)
    _footnote(fig, f"bench/build/pipeline.py, {r.get('date', '')}; 2 shared cores")
    return _save(fig, "build_time.png", out)


def plot_incremental(r: dict[str, Any], out: Path) -> Path | None:
    plt = _plt()
    sizes = _pipeline_sizes(r, "incremental.png")
    if not sizes:
        return None
    res = r["results"]
    kinds = [("full", "full build (every paper)", "#4C72B0"),
             ("changed", "one paper changed → searchable", "#55A868"),
             ("noop", "nothing changed (no-op)", "#8C8C8C")]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    width = 0.8 / len(kinds)
    for i, (key, label, color) in enumerate(kinds):
        xs = [j + (i - 1) * width for j in range(len(sizes))]
        ys = [res[str(n)][key]["wall_s"] for n in sizes]
        bars = ax.bar(xs, ys, width, label=label, color=color)
        ax.bar_label(bars, labels=[f"{y:.0f} s" if y >= 10 else f"{y:.1f} s" for y in ys], fontsize=8, padding=2)
    ax.set_xticks(range(len(sizes)), [f"{n} papers" for n in sizes])
    ax.set_ylabel("wall time of sheaf build (s)")
    ax.grid(axis="x", visible=False)
    ax.set_title("Incremental builds: only the changed paper is rebuilt")
    ax.legend(frameon=False)
    ax.set_ylim(0, max(res[str(n)]["full"]["wall_s"] for n in sizes) * 1.15)
    _footnote(fig, f"bench/build/pipeline.py, {r.get('date', '')}; 2 shared cores")
    return _save(fig, "incremental.png", out)


# --- query latency ------------------------------------------------------------------------------

#: The series worth showing: (result key, optional sub key, the row label's start in the
#: docs table, legend label).
QUERY_SERIES = [
    ("search_cold_keywords", None, "`sheaf search` cold process, keywords", "sheaf search, cold process (keywords)"),
    ("in_process", "retrieve_lexical_keywords", "lexical in-process: `retrieve --mode lexical`, keywords",
     "retrieve lexical, in process (keywords)"),
    ("server_hybrid_claims", None, "hybrid `retrieve` via the warm server, claims",
     "retrieve hybrid via warm sheaf serve (claims)"),
    ("hybrid_cold", None, "hybrid `retrieve` cold process", "retrieve hybrid, cold process (claims)"),
]


def query_from_docs(path: Path) -> dict[str, Any] | None:
    """The query benchmark's numbers parsed from its section of docs/benchmarks.md (its table
    of "p50 / p95" cells per corpus size), in the shape of bench/search/query.py's JSON."""
    import re

    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    m = re.search(r"<!-- bench:query:begin -->(.*?)<!-- bench:query:end -->", text, re.S)
    if not m:
        return None
    sec = m.group(1)
    date = re.search(r"measured (\d{4}-\d{2}-\d{2})", sec)
    sizes: list[str] = []
    out: dict[str, Any] = {"sizes": {}, "date": date.group(1) if date else "", "source": str(path)}
    for line in sec.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "command":
            sizes = [re.sub(r"\D", "", c) for c in cells[1:] if "units" in c]
            for n in sizes:
                out["sizes"].setdefault(n, {})
            continue
        if not sizes or len(cells) < len(sizes) + 1:
            continue
        label = cells[0].replace("**", "")
        for key, sub, start, _ in QUERY_SERIES:
            if label.startswith(start):
                for n, cell in zip(sizes, cells[1:]):
                    v = re.match(r"([\d.]+)\s*/\s*([\d.]+)", cell)
                    if v:
                        point = {"p50": float(v.group(1)), "p95": float(v.group(2))}
                        if sub:
                            out["sizes"][n].setdefault(key, {})[sub] = point
                        else:
                            out["sizes"][n][key] = point
        if line.strip() == "" and any(out["sizes"].values()):
            sizes = []
    return out if any(out["sizes"].values()) else None


def plot_query_latency(r: dict[str, Any], out: Path) -> Path | None:
    plt = _plt()
    S = r.get("sizes") or {}
    sizes = sorted(S, key=int)
    series = []
    for key, sub, _, label in QUERY_SERIES:
        pts = []
        for n in sizes:
            v = S[n].get(key)
            v = v.get(sub) if (isinstance(v, dict) and sub) else v
            if isinstance(v, dict) and "p50" in v:
                pts.append((int(n), v["p50"], v.get("p95", v["p50"])))
        if pts:
            series.append((label, pts))
    if not series:
        print("skipped query_latency.png: no p50/p95 series in the query results", file=sys.stderr)
        return None
    fig, ax = plt.subplots(figsize=(7.2, 5.2))
    colors = ["#4C72B0", "#8172B3", "#55A868", "#DD8452", "#C44E52"]
    for (label, pts), c in zip(series, colors):
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], "o-", color=c, lw=2, label=label)
        ax.fill_between(xs, [p[1] for p in pts], [p[2] for p in pts], color=c, alpha=0.15, lw=0)
        ax.plot(xs, [p[2] for p in pts], "-", color=c, lw=0.8, alpha=0.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([int(n) for n in sizes], [f"{int(n) // 1000}k" if int(n) >= 1000 else n for n in sizes])
    ax.set_yticks([10, 30, 100, 300, 1000], ["10", "30", "100", "300", "1000"])
    ax.minorticks_off()
    ax.set_xlabel("body units in the index (log scale)")
    ax.set_ylabel("latency per query, ms (log scale)")
    ax.set_title("Query latency by corpus size\n(line: median; shaded up to the 95th percentile)", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    src = "bench/search/query.py" + (" (parsed from docs/benchmarks.md)" if r.get("source") else "")
    _footnote(fig, f"{src}, {r.get('date', '')}; 2 shared cores")
    return _save(fig, "query_latency.png", out)


# --- quality --------------------------------------------------------------------------------------

def plot_quality(env: dict[str, Any], out: Path) -> Path | None:
    plt = _plt()
    data = env.get("data", env)
    metrics = data.get("metrics") or {}
    if not metrics:
        print("skipped quality.png: no metrics in the eval results", file=sys.stderr)
        return None
    modes = [m for m in ("lexical", "semantic", "hybrid") if m in metrics]
    names = list(next(iter(metrics.values())))
    labels = {"ndcg@10": "nDCG@10", "recall@10": "recall@10", "recall@100": "recall@100", "mrr@10": "MRR@10"}
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        xs = [j + (i - (len(modes) - 1) / 2) * width for j in range(len(names))]
        ys = [metrics[mode][n] for n in names]
        bars = ax.bar(xs, ys, width, label=mode, color=MODE_COLORS.get(mode))
        ax.bar_label(bars, labels=[f"{y:.3f}" for y in ys], fontsize=7, padding=2)
    ax.set_xticks(range(len(names)), [labels.get(n, n) for n in names])
    lo = max(0.0, math.floor((min(metrics[m][n] for m in modes for n in names) - 0.1) * 10) / 10)
    ax.set_ylim(lo, 1.04)
    ax.set_ylabel("score (higher is better)" + (f"; axis starts at {lo:.1f}" if lo else ""))
    ax.grid(axis="x", visible=False)
    if "ndcg@10" in names:
        j = names.index("ndcg@10")
        ax.hlines(0.72, j - 0.45, j + 0.45, colors="#C44E52", linestyles="--", lw=1, zorder=3)
        ax.text(j - 0.44, 0.724, "goal 0.72", color="#C44E52", fontsize=7, va="bottom", ha="left", zorder=3)
    ds = data.get("dataset", {})
    n_q = ds.get("queries_evaluated")
    ax.set_title(f"Retrieval quality by mode: SciFact train ({n_q} queries, {ds.get('documents', '?')} abstracts)"
                 if n_q else "Retrieval quality by mode")
    ax.legend(frameon=False, ncol=3, loc="upper left")
    run = data.get("run", {})
    _footnote(fig, f"sheaf eval beir, {run.get('date', '')[:10]}; published test-split nDCG@10: "
              "BM25 0.665, all-MiniLM-L6-v2 0.645")
    return _save(fig, "quality.png", out)


#: Lexical rows left out of the lever plot: equal to a row shown (OR-only is identical to the
#: default AND-then-OR on claims; heading weight does not matter on SciFact) or combinations of
#: levers that did not help. The tables in docs/benchmarks.md keep every row.
_LEVER_PLOT_SKIP = ("title weight 2, heading 0", "stopwords dropped, OR only", "porter + OR only",
                    "porter + stopwords + OR only", "porter + title 2 + stopwords + OR only")


def plot_quality_levers(r: dict[str, Any], out: Path) -> Path | None:
    plt = _plt()
    from matplotlib.patches import Patch

    T = r.get("tables") or {}
    rows: list[tuple[str, float, str]] = []  # label, hybrid ndcg, group
    base = (T.get("baseline") or [{}])[0]
    if base.get("hybrid"):
        rows.append(("before this study", base["hybrid"]["ndcg@10"], "baseline"))
    for x in T.get("lexical", [])[1:]:
        if x["lever"] in _LEVER_PLOT_SKIP:
            continue
        rows.append((x["lever"].replace(" + OR only", "").replace(" (no AND stage)", " (no AND-first stage)"),
                     x["hybrid"]["ndcg@10"], "lexical"))
    for x in T.get("semantic", []):
        if x.get("prefix") != "title > section":
            rows.append((f"passage prefix: {x['prefix']} (not title > section)", x["hybrid"]["ndcg@10"], "semantic"))
    fus = {(f["k"], f["depth"]): f["hybrid"]["ndcg@10"] for f in T.get("fusion") or []}
    for k in (10, 1):
        if (k, 300) in fus:
            rows.append((f"RRF k {k} instead of 60", fus[(k, 300)], "fusion"))
    for x in T.get("combined", []):
        if x.get("kept"):
            rows.append(("kept: porter + title 2 + RRF k 10", x["hybrid"]["ndcg@10"], "kept"))
    if len(rows) < 2:
        print("skipped quality_levers.png: no lever tables in the quality results", file=sys.stderr)
        return None
    colors = {"baseline": "#8C8C8C", "lexical": MODE_COLORS["lexical"], "semantic": MODE_COLORS["semantic"],
              "fusion": "#8172B3", "kept": MODE_COLORS["hybrid"]}
    fig, ax = plt.subplots(figsize=(8.2, 0.36 * len(rows) + 2.0))
    ys = list(range(len(rows)))[::-1]
    vals = [v for _, v, _ in rows]
    ax.barh(ys, vals, color=[colors[g] for _, _, g in rows], height=0.7)
    for y, v in zip(ys, vals):
        ax.text(v + 0.001, y, f"{v:.3f}", va="center", fontsize=8)
    ax.set_yticks(ys, [label for label, _, _ in rows], fontsize=8)
    ax.grid(axis="y", visible=False)
    b = rows[0][1]
    ax.axvline(b, color="#8C8C8C", ls=":", lw=1)
    ax.axvline(0.72, color="#C44E52", ls="--", lw=1)
    ax.text(0.7202, len(rows) - 0.55, "goal 0.72", color="#C44E52", fontsize=8, va="bottom")
    lo = min(vals) - 0.01
    ax.set_xlim(lo, max(vals + [0.72]) + 0.012)
    ax.set_xlabel("hybrid nDCG@10 on SciFact train (higher is better)")
    ax.set_title("Each bar changes one lever of hybrid retrieval", fontsize=11)
    ax.legend(handles=[Patch(color=colors[g], label=lab) for g, lab in (
        ("baseline", "before"), ("lexical", "lexical leg"), ("semantic", "passage prefix (semantic leg)"),
        ("fusion", "fusion"), ("kept", "kept in the product"))], fontsize=7, frameon=False,
        loc="center right", bbox_to_anchor=(1.0, 0.31))
    _footnote(fig, f"bench/search/quality.py, {r.get('date', '')}; 809 train claims")
    return _save(fig, "quality_levers.png", out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of the JSON results")
    ap.add_argument("--out", type=Path, default=IMG, help="where the PNGs go")
    ap.add_argument("--pipeline", type=Path, help="default: RESULTS/pipeline.json")
    ap.add_argument("--query", type=Path, help="default: RESULTS/query.json")
    ap.add_argument("--eval", type=Path, help="default: RESULTS/eval-scifact-train.json")
    ap.add_argument("--quality", type=Path, help="default: RESULTS/quality.json")
    a = ap.parse_args()
    try:
        _plt()
    except ImportError:
        sys.exit("matplotlib is missing: pip install -e '.[bench]'")
    made = []
    if (r := _load(a.pipeline or a.results / "pipeline.json", "build_time.png and incremental.png")):
        made += [plot_build_time(r, a.out), plot_incremental(r, a.out)]
    qpath = a.query or a.results / "query.json"
    r = _load(qpath, "query_latency.png from JSON") if (a.query or qpath.exists()) else None
    if r is None and (r := query_from_docs(ROOT / "docs" / "benchmarks.md")):
        print("query latency: parsed from the Query section of docs/benchmarks.md", file=sys.stderr)
    if r:
        made.append(plot_query_latency(r, a.out))
    else:
        print("skipped query_latency.png: no bench/results/query.json and no Query table in "
              "docs/benchmarks.md", file=sys.stderr)
    if (r := _load(a.eval or a.results / "eval-scifact-train.json", "quality.png")):
        made.append(plot_quality(r, a.out))
    if (r := _load(a.quality or a.results / "quality.json", "quality_levers.png")):
        made.append(plot_quality_levers(r, a.out))
    print(f"{sum(1 for m in made if m)} plots written to {a.out}")


if __name__ == "__main__":
    main()
