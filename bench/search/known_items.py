"""Known items on real PDFs: does `retrieve` (hybrid, default options) put the passage a researcher
remembers first?

Libraries: the three real Zotero data directories of `../shared/data/zotero_dirs` and a folder of
the real PDFs of `../shared/data` (the 14 EMNLP papers beside their MinerU output, the two R
vignettes), each built into a home of its own under --work with `sheaf build` (skipped when the
home already has an index). Queries (`sheaf.eval.phrases`): up to 3 phrases of 5-10 words a paper,
read from body text (not titles, abstracts, captions or back matter), each held by one unit alone;
`exact`, `dropped` (one content word left out) and `synonym` (one word replaced). Measured: the
unit holding the phrase first (top-1) and in the first three (top-3), and its paper first.
Goals: top-1 >= 0.90 exact and >= 0.80 paraphrased (dropped, synonym), top-3 >= 0.97.

Run from the project root (the first run builds the four homes: 6 min on 2 cores):
    .venv/bin/python -m bench.search.known_items [--work /tmp/sheaf-known-items] [--write-docs]
Raw results: bench/results/known-items.json (ranks by unit id; the phrases only on the screen).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, machine, write_docs_section
from sheaf.core.settings import get_settings
from sheaf.eval.phrases import FORMS, phrase_queries
from sheaf.search.retriever import Retriever

DATA = ROOT.parent / "shared" / "data"
GOALS = {"exact": 0.90, "dropped": 0.80, "synonym": 0.80, "top3": 0.97}
BEGIN, END = "<!-- bench:known_items:begin -->", "<!-- bench:known_items:end -->"


def libraries(work: Path) -> dict[str, Path]:
    """Name → library folder: the Zotero data directories, and a folder of links to the PDFs."""
    libs = {d.name: d for d in sorted((DATA / "zotero_dirs").iterdir()) if (d / "zotero.sqlite").exists()}
    folder = work / "pdf-folder"
    folder.mkdir(parents=True, exist_ok=True)
    for pdf in [*sorted(DATA.glob("mineru/*/paper.pdf")), *sorted(DATA.glob("pdfs/*.pdf"))]:
        link = folder / (f"{pdf.parent.name}.pdf" if pdf.name == "paper.pdf" else pdf.name)
        if not link.exists():
            link.symlink_to(pdf)
    libs["pdf-folder"] = folder
    return libs


def home_of(name: str, library: Path, work: Path) -> Path:
    """The built home of `library` (built now unless its index exists)."""
    home = work / "homes" / name
    if not (home / "index" / "sheaf.db").exists():
        print(f"building {name} ...", flush=True)
        subprocess.run([str(Path(sys.executable).parent / "sheaf"), "build", "--library", str(library)], check=True,
                       env={**os.environ, "SHEAF_HOME": str(home)}, cwd=ROOT, stdout=subprocess.DEVNULL)
    return home


def measure(home: Path, library: Path, per_paper: int, seed: int = 0) -> dict[str, Any]:
    """Each phrase's result: the target unit's rank among the matches (None: not in them)."""
    settings = get_settings(home=home, library=library)
    rows = []
    with Retriever.open(settings) as r:
        items = phrase_queries(r.index, per_paper=per_paper, seed=seed)
        if items:
            r.retrieve(items[0].query)  # the model loaded before the clock runs
        for it in items:
            t = time.perf_counter()
            res = r.retrieve(it.query)
            ms = (time.perf_counter() - t) * 1000
            units = [m["unit_id"] for m in res.matches]
            rows.append({**it.to_dict(), "rank": units.index(it.target) + 1 if it.target in units else None,
                         "paper_first": bool(res.matches) and res.matches[0]["zotero_key"] == it.paper_id,
                         "ms": round(ms, 1)})
    return {"papers": len({x["paper_id"] for x in rows}), "rows": rows}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for form in (*FORMS, "all"):
        xs = [x for x in rows if form in ("all", x["form"])]
        if not xs:
            continue
        n = len(xs)
        out[form] = {"queries": n, "top1": round(sum(x["rank"] == 1 for x in xs) / n, 3),
                     "top3": round(sum(x["rank"] is not None and x["rank"] <= 3 for x in xs) / n, 3),
                     "paper_top1": round(sum(x["paper_first"] for x in xs) / n, 3)}
    out["ms_p50"] = round(statistics.median(x["ms"] for x in rows), 1) if rows else None
    return out


def report(r: dict[str, Any]) -> str:
    s = r["summary"]
    lines = ["| form | queries | unit top-1 | unit top-3 | paper top-1 |", "|---|---|---|---|---|"]
    for form in (*FORMS, "all"):
        if form in s:
            x = s[form]
            lines.append(f"| {form} | {x['queries']} | {x['top1']:.3f} | {x['top3']:.3f} | {x['paper_top1']:.3f} |")
    ok = (s.get("exact", {}).get("top1", 0) >= GOALS["exact"]
          and all(s.get(f, {}).get("top1", 1) >= GOALS[f] for f in ("dropped", "synonym"))
          and s.get("all", {}).get("top3", 0) >= GOALS["top3"])
    per = ", ".join(f"{k} {v['papers']} papers" for k, v in r["libraries"].items())
    held = "".join(f" Draw {seed} (held out): top-1 " + ", ".join(f"{f} {h[f]['top1']:.3f}" for f in FORMS if f in h)
                   + f"; top-3 {h['all']['top3']:.3f}." for seed, h in r.get("held_out", {}).items())
    return "\n".join(lines) + (f"\n\nLibraries: {per}. `retrieve` p50 {s['ms_p50']} ms.{held} Goals (top-1 exact "
                               f">= 0.90, paraphrased >= 0.80, top-3 >= 0.97): **{'met' if ok else 'not met'}**.")


def docs_section(r: dict[str, Any]) -> str:
    m = r["machine"]
    return f"""{BEGIN}
## Known items on real PDFs

`bench/search/known_items.py` **measures** whether hybrid `retrieve` (default options) puts first the
unit holding a phrase a researcher remembers. **Data**: the three real Zotero data directories and
the real PDFs of the project's test data, each library built into its own home; up to 3 phrases of
5-10 words a paper from body text (not titles, abstracts, captions or back matter), with 4 content
words or more, each held by one unit alone; exact and paraphrased (one content word dropped; one
word replaced by a synonym). The ranking's levers were chosen on the first draw of phrases (seed
0); the second draw (seed 7) was not looked at while choosing them. Rerun: `.venv/bin/python -m bench.search.known_items
--write-docs` (the first run builds the homes: 6 min on 2 cores). {r['date']}, {m['cpu']}, {m['cores']} cores.

{report(r)}
{END}"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/sheaf-known-items"))
    ap.add_argument("--per-paper", type=int, default=3)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 7],
                    help="the draws of phrases: the first is tabled, the others summed up (held out)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "known-items.json"))
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit(f"no test data at {DATA}: this benchmark needs the project's shared data folder")
    libs = libraries(args.work)
    homes = {name: home_of(name, lib, args.work) for name, lib in libs.items()}
    draws: dict[int, Any] = {}
    for seed in args.seeds:
        per: dict[str, Any] = {}
        rows: list[dict[str, Any]] = []
        for name, lib in libs.items():
            got = measure(homes[name], lib, args.per_paper, seed)
            per[name] = {"papers": got["papers"], "summary": summary(got["rows"])}
            rows += [{**x, "library": name} for x in got["rows"]]
        draws[seed] = {"libraries": per, "summary": summary(rows), "rows": rows}
    first = draws[args.seeds[0]]
    r = {"date": dt.datetime.now().strftime("%Y-%m-%d"), "machine": machine(), **first,
         "held_out": {seed: d["summary"] for seed, d in draws.items() if seed != args.seeds[0]}}
    print(report(r))
    for x in [x for x in first["rows"] if x["rank"] != 1][:40]:
        print(f"  miss ({x['form']}, rank {x['rank']}): {x['query']}  [{x['target']}]")
    if args.json:  # the phrases stay out: their text belongs to the papers' publishers
        r["rows"] = [{k: v for k, v in x.items() if k not in ("query", "phrase")} for x in r["rows"]]
        Path(args.json).write_text(json.dumps(r, indent=1, ensure_ascii=False) + "\n")
    if args.write_docs:
        write_docs_section(docs_section(r), BEGIN, END)


if __name__ == "__main__":
    main()
