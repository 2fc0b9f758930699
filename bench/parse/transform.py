"""Benchmark of the parse stage: raw OCR/layout output → blocks → render → tree → units.

Runs `sheaf.transform.chain.process_paper` (the full per-paper transform, file read included) over
every real sample in ../shared/data (PaddleOCR-VL, MinerU, GROBID TEI, DoclingDocument JSON,
PDFs: the two journal PDFs and MinerU's 14 source PDFs) and every paper of the bundled sample
library, on ONE core (the process is pinned to one CPU; OMP/MKL/BLAS threads set to 1).

Per format it reports papers, pages, papers/s, ms per page, the adapter's share of the time,
the estimated time of a 20-page paper, and peak memory: the tracemalloc peak of one paper's
transform (max over the format's papers) and ru_maxrss of a fresh process that parsed only
that format (its baseline after imports shown alongside). Each format runs in its own child
process so the RSS numbers do not leak into each other.

Then, for a few papers (`--embed-papers`), it compares parsing with the embedding stage on the
same core: `Embedder.build_passages` + `Embedder.encode` (all-MiniLM-L6-v2, no cache), the
model load excluded. Target: parsing under 5% of the embedding stage, and about 0.3 s or less
for a 20-page paper.

Run from the project root:
    .venv/bin/python -m bench.parse.transform                      # table on stdout
    .venv/bin/python -m bench.parse.transform --json out.json      # and the raw results
    .venv/bin/python -m bench.parse.transform --write-docs         # and the "Parse" section of docs/benchmarks.md
"""
from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.common import machine as _machine
from bench.common import splice_section

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "TOKENIZERS_PARALLELISM"):
    os.environ[_var] = "false" if _var == "TOKENIZERS_PARALLELISM" else "1"
ROOT = Path(__file__).resolve().parents[2]

DATA = ROOT.parent / "shared" / "data"
SAMPLE = ROOT / "data" / "sample-library" / "papers"
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:parse:begin -->", "<!-- bench:parse:end -->"
INDEX_BEGIN = "<!-- bench:index:begin -->"
DEFAULT_EMBED = "real/paddleocr-vl/37LK5T97,real/pdf/2024.emnlp-main.48"
TARGET_SHARE = 0.05  # parsing under 5% of the embedding stage
TARGET_20_PAGES_S = 0.3
MiB = 1024 * 1024


# --- corpus -------------------------------------------------------------------------------

def corpus() -> list[dict[str, Any]]:
    """Every paper to parse: corpus (real|sample), format, paper id, path, sibling PDF (pages)."""
    from sheaf.formats import find_input

    out: list[dict[str, Any]] = []

    def add(corp: str, fmt: str, pid: str, path: Path, pdf: Path | None = None) -> None:
        out.append({"corpus": corp, "format": fmt, "paper_id": pid, "path": str(path),
                    "pdf": str(pdf) if pdf and pdf.exists() else None, "key": f"{corp}/{fmt}/{pid}"})

    if DATA.is_dir():
        for p in sorted(DATA.glob("paddleocr_vl/*/result.json")):
            add("real", "paddleocr-vl", p.parent.name, p)
        for p in sorted(DATA.glob("mineru/*/content_list.json")):
            add("real", "mineru", p.parent.name, p, p.parent / "paper.pdf")
        for p in sorted(DATA.glob("formats/grobid_tei/*.tei.xml")):
            add("real", "grobid", p.name.removesuffix(".tei.xml"), p, p.with_name(p.name.removesuffix(".tei.xml") + ".pdf"))
        for p in sorted(DATA.glob("formats/docling/**/*.json")):
            add("real", "docling", p.name.removesuffix(".json").removesuffix(".docling"), p)
        for p in sorted(DATA.glob("pdfs/*.pdf")):
            add("real", "pdf", p.stem, p)
        for p in sorted(DATA.glob("mineru/*/paper.pdf")):
            add("real", "pdf", p.parent.name, p)
    if SAMPLE.is_dir():
        for d in sorted(SAMPLE.iterdir()):
            if d.is_dir():
                _, fmt = find_input(d.name, d)
                add("sample", fmt, d.name, d)
    return out


def pdf_pages(path: str) -> int | None:
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(path)
        try:
            return len(doc)
        finally:
            doc.close()
    except Exception:  # noqa: BLE001 - a PDF pdfium cannot open: no page count
        return None


# --- the child: one format in a fresh process ----------------------------------------------

def pin_one_core(cpu: int | None) -> int | None:
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if cpu is None:
        cpu = allowed[-1]
    os.sched_setaffinity(0, {cpu})
    return cpu


def maxrss_mib() -> float:
    # Linux: kilobytes
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_group(papers: list[dict[str, Any]], repeat: int) -> dict[str, Any]:
    """Time and measure every paper of one group in this process."""
    import sheaf.formats as ingest
    from sheaf.formats import parse_paper
    from sheaf.transform.chain import units_from_paper

    for name in ingest.FORMATS:  # import every adapter (pypdfium2 included) before the baseline
        ingest.adapter(name)
    baseline = maxrss_mib()
    results: list[dict[str, Any]] = []
    for p in papers:  # warm-up: first-call costs (regex compilation, PDFium init) are not per paper
        units_from_paper(parse_paper(p["path"], p["paper_id"]))
    for p in papers:
        totals, adapters = [], []
        for _ in range(repeat):
            gc.collect()
            t0 = time.perf_counter()
            paper = parse_paper(p["path"], p["paper_id"])
            t1 = time.perf_counter()
            out = units_from_paper(paper)
            t2 = time.perf_counter()
            totals.append(t2 - t0)
            adapters.append(t1 - t0)
        blocks = out.paper.blocks
        max_page = max(b.page for b in blocks)
        paged = max_page > 1 or any(b.bbox is not None for b in blocks)
        gc.collect()
        tracemalloc.start()
        units_from_paper(parse_paper(p["path"], p["paper_id"]))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        results.append({
            **p, "seconds": statistics.median(totals), "adapter_seconds": statistics.median(adapters),
            "all_seconds": [round(t, 5) for t in totals], "blocks": len(blocks), "max_page": max_page,
            "paged": paged, "body_units": len(out.body_units), "object_units": len(out.object_units),
            "tokens": sum(u.token_count for u in out.body_units), "tracemalloc_peak_mib": peak / MiB,
            "bytes": Path(out.paper.source_path).stat().st_size
        })
    return {"baseline_rss_mib": baseline, "maxrss_mib": maxrss_mib(), "papers": results}


def run_embed(papers: list[dict[str, Any]], repeat: int) -> dict[str, Any]:
    """Parse vs embedding (passages + encode) for `papers`, on this process's one core."""
    try:
        import torch

        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
        from sheaf.vectors.embedder import Embedder
    except Exception as e:  # noqa: BLE001 - torch or the model not installed: no comparison
        return {"error": f"{type(e).__name__}: {e}"}
    from sheaf.formats import parse_paper
    from sheaf.transform.chain import units_from_paper

    t0 = time.perf_counter()
    emb = Embedder(batch_size=32)
    try:
        emb.load()
    except Exception as e:  # noqa: BLE001 - the model cannot load: reported, not raised
        return {"error": f"{type(e).__name__}: {e}"}
    load_s = time.perf_counter() - t0
    emb.encode(["warm up the model"])
    rows = []
    for p in papers:
        units_from_paper(parse_paper(p["path"], p["paper_id"]))  # warm-up
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            out = units_from_paper(parse_paper(p["path"], p["paper_id"]))
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        passages = emb.build_passages(out.body_units, out.object_units, out.paper.title)
        t1 = time.perf_counter()
        emb.encode([x.text for x in passages])
        t2 = time.perf_counter()
        rows.append({"key": p["key"], "pages": max(b.page for b in out.paper.blocks),
                     "units": len(out.body_units) + len(out.object_units), "passages": len(passages),
                     "parse_s": statistics.median(times), "passages_s": t1 - t, "encode_s": t2 - t1})
    return {"model": emb.identity.name, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "model_load_s": load_s, "papers": rows}


def child_main(args: argparse.Namespace) -> None:
    cpu = pin_one_core(args.cpu)
    papers = json.loads(Path(args.child).read_text())
    if args.embed_child:
        res = run_embed(papers, args.repeat)
    else:
        res = run_group(papers, args.repeat)
    res["cpu"] = cpu
    sys.stdout.write(json.dumps(res) + "\n")


def spawn(papers: list[dict[str, Any]], args: argparse.Namespace, tmp: Path, embed: bool = False) -> dict[str, Any]:
    tmp.write_text(json.dumps(papers))
    cmd = [sys.executable, "-m", __spec__.name, "--child", str(tmp), "--repeat", str(args.repeat)]
    if args.cpu is not None:
        cmd += ["--cpu", str(args.cpu)]
    if embed:
        cmd.append("--embed-child")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the parent: groups, summary, report ---------------------------------------------------

def machine() -> dict[str, Any]:
    return {**_machine(["pypdfium2"]), "platform": platform.platform()}


def summarize(name: str, rows: list[dict[str, Any]], group: dict[str, Any] | None) -> dict[str, Any]:
    total = sum(r["seconds"] for r in rows)
    paged = [r for r in rows if r["pages"]]
    pages = sum(r["pages"] for r in paged)
    paged_s = sum(r["seconds"] for r in paged)
    per_page = [r["seconds"] / r["pages"] for r in paged]
    return {
        "group": name, "papers": len(rows), "pages": pages, "unpaged": len(rows) - len(paged),
        "seconds": total, "papers_per_s": len(rows) / total if total else None,
        "ms_per_page": paged_s / pages * 1000 if pages else None,
        "worst_ms_per_page": max(per_page) * 1000 if per_page else None,
        "est_20_pages_s": paged_s / pages * 20 if pages else None,
        "adapter_share": sum(r["adapter_seconds"] for r in rows) / total if total else None,
        "ms_per_paper": total / len(rows) * 1000 if rows else None,
        "tracemalloc_peak_mib": max(r["tracemalloc_peak_mib"] for r in rows),
        "maxrss_mib": group["maxrss_mib"] if group else None,
        "baseline_rss_mib": group["baseline_rss_mib"] if group else None,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    papers = corpus()
    if args.only:
        papers = [p for p in papers if any(s in p["key"] for s in args.only.split(","))]
    if not papers:
        raise SystemExit("nothing to parse (no ../shared/data and no sample library?)")
    for p in papers:  # page counts from the source PDF where the format carries no pages
        p["pdf_pages"] = pdf_pages(p["pdf"]) if p["pdf"] else None
    from sheaf.formats import FORMATS

    order = {f: i for i, f in enumerate(FORMATS)}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in sorted(papers, key=lambda p: (p["corpus"] != "real", order.get(p["format"], 99))):
        groups.setdefault((p["corpus"], p["format"]), []).append(p)
    per_paper: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as td:
        for (corp, fmt), ps in groups.items():
            print(f"  parsing {corp}/{fmt}: {len(ps)} papers ...", file=sys.stderr, flush=True)
            res = spawn(ps, args, Path(td) / "papers.json")
            rows = res["papers"]
            for r in rows:
                # pages: what the output says, or the source PDF's count for page-less formats
                r["pages"] = r["max_page"] if r["paged"] else r["pdf_pages"]
                r["cpu"] = res["cpu"]
            per_paper += rows
            summaries.append(summarize(f"{corp} · {fmt}", rows, res))
        for corp in ("real", "sample"):
            rows = [r for r in per_paper if r["corpus"] == corp]
            if rows:
                s = summarize(f"{corp} · all", rows, None)
                s["maxrss_mib"] = max(x["maxrss_mib"] for x in summaries if x["group"].startswith(corp))
                s["baseline_rss_mib"] = min(x["baseline_rss_mib"] for x in summaries if x["group"].startswith(corp))
                summaries.append(s)
        embed: dict[str, Any] | None = None
        if not args.no_embed:
            want = [k for k in args.embed_papers.split(",") if k]
            eps = [p for p in papers if p["key"] in want]
            if eps:
                print(f"  embedding comparison: {len(eps)} papers (loads the model) ...", file=sys.stderr, flush=True)
                embed = spawn(eps, args, Path(td) / "embed.json", embed=True)
    return {"date": dt.date.today().isoformat(), "machine": machine(), "repeat": args.repeat,
            "cpu_pinned": per_paper[0]["cpu"] if per_paper else None,
            "summaries": summaries, "papers": per_paper, "embed": embed}


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def table(r: dict[str, Any]) -> str:
    head = ("| corpus · format | papers | pages | papers/s | ms/paper | ms/page | worst ms/page "
            "| 20-page paper (s) | adapter share | tracemalloc peak (MiB) | ru_maxrss (MiB) |")
    lines = [head, "|" + "---|" * 11]
    for s in r["summaries"]:
        pages = f"{s['pages']}" + (f" (+{s['unpaged']} unpaged)" if s["unpaged"] else "")
        rss = (f"{s['maxrss_mib']:.0f} (base {s['baseline_rss_mib']:.0f})"
               if s["maxrss_mib"] is not None else "–")
        bold = "**" if s["group"].endswith("· all") else ""
        lines.append(
            f"| {bold}{s['group']}{bold} | {s['papers']} | {pages} | {_f(s['papers_per_s'])} | "
            f"{_f(s['ms_per_paper'])} | {_f(s['ms_per_page'], '{:.2f}')} | {_f(s['worst_ms_per_page'], '{:.1f}')} | "
            f"{_f(s['est_20_pages_s'], '{:.3f}')} | {_f(s['adapter_share'] and s['adapter_share'] * 100, '{:.0f}%')} | "
            f"{s['tracemalloc_peak_mib']:.1f} | {rss} |")
    return "\n".join(lines)


def embed_table(e: dict[str, Any]) -> str:
    lines = ["| paper | pages | units | passages | parse (s) | passages (s) | encode (s) | parse / embedding |",
             "|" + "---|" * 8]
    tp = te = 0.0
    for row in e["papers"]:
        emb = row["passages_s"] + row["encode_s"]
        tp += row["parse_s"]
        te += emb
    tpass = sum(x["passages_s"] for x in e["papers"])
    tenc = sum(x["encode_s"] for x in e["papers"])
    for row in e["papers"]:
        emb = row["passages_s"] + row["encode_s"]
        lines.append(f"| {row['key']} | {row['pages']} | {row['units']} | {row['passages']} | {row['parse_s']:.3f} | "
                     f"{row['passages_s']:.3f} | {row['encode_s']:.2f} | {row['parse_s'] / emb * 100:.2f}% |")
    lines.append(f"| **total** | {sum(x['pages'] for x in e['papers'])} | {sum(x['units'] for x in e['papers'])} | "
                 f"{sum(x['passages'] for x in e['papers'])} | {tp:.3f} | {tpass:.3f} | {tenc:.2f} | "
                 f"**{tp / te * 100:.2f}%** |")
    return "\n".join(lines)


def verdict(r: dict[str, Any]) -> list[str]:
    out: list[str] = []
    real = [s for s in r["summaries"] if s["group"].startswith("real · ") and not s["group"].endswith("all")]
    paged = [s for s in real if s["est_20_pages_s"] is not None]
    if paged:
        worst = max(paged, key=lambda s: s["est_20_pages_s"])
        ok = worst["est_20_pages_s"] <= TARGET_20_PAGES_S
        out.append(f"- 20-page paper on one core: at most {worst['est_20_pages_s']:.3f} s (slowest format: "
                   f"{worst['group'].split(' · ')[1]}, {worst['ms_per_page']:.1f} ms/page; even at the slowest single "
                   f"paper's rate, {worst['worst_ms_per_page']:.1f} ms/page, 20 pages take "
                   f"{worst['worst_ms_per_page'] * 20 / 1000:.3f} s) against the target of {TARGET_20_PAGES_S} s: "
                   f"**{'met' if ok else 'NOT met'}**.")
    e = r.get("embed")
    if e and not e.get("error") and e.get("papers"):
        tp = sum(x["parse_s"] for x in e["papers"])
        te = sum(x["passages_s"] + x["encode_s"] for x in e["papers"])
        rate = sum(x["passages"] for x in e["papers"]) / sum(x["encode_s"] for x in e["papers"])
        ok = tp / te < TARGET_SHARE
        out.append(f"- Parsing vs the embedding stage on the same core ({e['model']}, {rate:.1f} passages/s, "
                   f"model load {e['model_load_s']:.1f} s not counted): parsing is **{tp / te * 100:.2f}%** of "
                   f"embedding against the target of under {TARGET_SHARE:.0%}: **{'met' if ok else 'NOT met'}**.")
    elif e and e.get("error"):
        out.append(f"- Embedding comparison not measured: {e['error']}.")
    return out


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    real = next((s for s in r["summaries"] if s["group"] == "real · all"), None)
    lines = [
        BEGIN,
        "## Parse",
        "",
        f"`bench/parse/transform.py`, measured {r['date']} on {m['cpu']} ({m['cores']} cores, {m['memory']}), "
        f"Python {m['python']}, pypdfium2 {m['pypdfium2']}; **one core**: each format in a fresh process "
        f"pinned to CPU {r['cpu_pinned']}, OMP/MKL/BLAS threads 1. Each paper is parsed once to warm up, then "
        f"timed {r['repeat']}x; times are per-paper medians of `process_paper` (file read, adapter, render, "
        "tree, body and object units).",
        "",
        "Rerun from the project root (about a minute; `--no-embed` skips the model):",
        "",
        "```",
        "scripts/dev python -m bench.parse.transform --write-docs      # or: .venv/bin/python -m bench.parse.transform --write-docs",
        "```",
        "",
        "Corpus: every real sample of `../shared/data` (4 PaddleOCR-VL, 14 MinerU, 3 GROBID TEI, 7 DoclingDocument "
        "JSON incl. 3 JATS, 2 journal PDFs + the 14 MinerU source PDFs) and the 10 papers of "
        "`data/sample-library`. Pages are the pages the output spans; GROBID TEI without coordinates "
        "counts its source PDF's pages; papers with no page information at all (JATS-derived Docling, "
        "page-less Markdown/TEI) are counted as papers but left out of the per-page columns (\"unpaged\").",
        "",
        table(r),
        "",
        "Columns: *adapter share* = time in the format adapter (`parse_paper`) vs render + tree + units; "
        "*20-page paper* = ms/page × 20; *tracemalloc peak* = the largest Python-heap peak of one paper's "
        "transform in the group; *ru_maxrss* = the peak RSS of the process that parsed the group "
        "(*base* = after importing every adapter, before parsing).",
        "",
    ]
    e = r.get("embed")
    if e and not e.get("error") and e.get("papers"):
        lines += [
            f"Parse vs embedding, same core ({e['model']}, torch {e['torch']}, {e['torch_threads']} thread, "
            "batch 32, no cache; *passages* = `Embedder.build_passages`, *encode* = `Embedder.encode`):",
            "",
            embed_table(e),
            "",
        ]
    lines += ["Verdict:", ""] + verdict(r)
    if real:
        lines += [f"- Throughput of the whole real corpus on one core: {real['papers_per_s']:.1f} papers/s "
                  f"({real['ms_per_page']:.2f} ms/page); peak RSS of any format's process "
                  f"{real['maxrss_mib']:.0f} MiB."]
    lines += ["", END]
    return "\n".join(lines) + "\n"


HEADER = """# Benchmarks

Every number here is measured on the project's reference machine by a script in `bench/`;
rerun a script to refresh its section (each script rewrites only its own section, between
its `<!-- bench:... -->` markers). From the project root:

```
scripts/dev python -m bench.parse.transform --write-docs     # Parse: adapters → units, one core
scripts/dev python -m bench.index.throughput --write-docs     # Index and embeddings
```

(`scripts/dev` creates/updates `.venv`; with an existing venv use `.venv/bin/python -m bench...`.)

Machine: {cores} cores, {memory} RAM, {cpu} (`lscpu` model name), Python {python}; header written {date}.
"""


def write_docs(section: str, r: dict[str, Any]) -> None:
    m = r["machine"]
    header = HEADER.format(cores=m["cores"], memory=m["memory"], cpu=m["cpu"], python=m["python"], date=r["date"])
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else header
    if "## Parse" not in text and "Machine:" not in text:  # created bare by another script: add the header
        body = text.split("\n", 1)[1] if text.startswith("# Benchmarks") else text
        text = header + body
    # without its markers the section goes before the index's (the pipeline's order: parse, then index)
    text = splice_section(text, section, BEGIN, END, before=INDEX_BEGIN)
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per paper (median)")
    ap.add_argument("--only", help="comma-separated substrings of paper keys (corpus/format/id) to run")
    ap.add_argument("--cpu", type=int, help="the CPU to pin to (default: the last allowed one)")
    ap.add_argument("--embed-papers", default=DEFAULT_EMBED, help="paper keys for the parse-vs-embedding comparison")
    ap.add_argument("--no-embed", action="store_true", help="skip the comparison with the embedding stage")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--write-docs", action="store_true", help="update the Parse section of docs/benchmarks.md")
    ap.add_argument("--from-json", type=Path, help="re-render the report from a --json file, no parsing")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--embed-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(args)
        return
    r = json.loads(args.from_json.read_text()) if args.from_json else run(args)
    if args.json and not args.from_json:
        args.json.write_text(json.dumps(r, indent=2, default=str))
    section = markdown(r)
    print(section)
    if args.write_docs:
        write_docs(section, r)
        print(f"wrote {DOCS.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
