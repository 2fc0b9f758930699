"""Benchmark of the query commands (results: docs/benchmarks.md, "Retrieval").

Corpus: SciFact abstracts (../shared/data/scifact/corpus.jsonl) as ~10,000 body units: each
abstract split into two units, five abstracts to a paper, with library metadata (title,
authors, year, journal, domain) for every paper, a drug code planted in three spellings in a
few units, and one random unit vector per unit under a stand-in model identity (so the
semantic leg and the fusion are timed without the encoder, which is benchmarked apart).

Measures
- cold process: `sheaf search`, `sheaf retrieve --mode lexical`, `sheaf grep`, `sheaf get`,
  `sheaf timeline` as fresh processes (the console script), p50/p90 over --runs, with the
  bytecode cache warm (an installed package) and without one (PYTHONDONTWRITEBYTECODE=1, as
  in this repository's dev shell); `python -c pass` as the floor;
- warm, in process: the same calls through `sheaf.search.retriever.Retriever`, plus semantic and
  hybrid retrieval (stand-in query vectors: KNN + dedupe + RRF + snippets, no encoder).

Run from the project root:
    .venv/bin/python -m bench.search.retrieve --write-docs
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import write_docs_section

ROOT = Path(__file__).resolve().parents[2]

SCIFACT = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:retrieve:begin -->", "<!-- bench:retrieve:end -->"
SHEAF = Path(sys.executable).with_name("sheaf")
FAKE_MODEL = "bench/random-384"
DOMAINS = ("Neuroscience", "Oncology", "Immunology", "Cardiology")


def build(path: Path, n_abstracts: int, per_paper: int, seed: int = 7) -> dict:
    import numpy as np

    from sheaf.core.models import BodyUnit, PaperMeta
    from sheaf.store.sqlite import schema as ix
    from sheaf.store.sqlite import writer as wr
    from sheaf.vectors.identity import EmbeddedPassages, ModelIdentity, Passage

    ident = ModelIdentity(FAKE_MODEL, "0" * 64, 384, True, 256, "bench")
    rng = np.random.default_rng(seed)
    with open(SCIFACT, encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(n_abstracts), f)]
    conn = ix.open_index(path)
    metas, n_units = [], 0
    codes = ["QLN-482", "QLN482", "QLN 482"]
    t0 = time.perf_counter()
    for k in range(0, len(rows), per_paper):
        pid = f"SF{k // per_paper:06d}"
        units = []
        for j, d in enumerate(rows[k:k + per_paper]):
            sents = d["text"].split(". ")
            halves = [". ".join(sents[: max(1, len(sents) // 2)]), ". ".join(sents[max(1, len(sents) // 2):])]
            for h, text in enumerate(t for t in halves if t.strip()):
                if (k // per_paper) % 97 == 0 and j == 0:
                    text += f" The compound {codes[h % 3]} was tested."
                uid = f"{pid}:body:s{j}_{h}"
                units.append(BodyUnit(uid, hashlib.sha1(uid.encode()).hexdigest()[:8], pid, f"s{j}_{h}",
                                      (d["title"][:80],), 1, (j + 1, j + 1), (f"p{j + 1}:{h}",), text,
                                      len(text.split()), "body", 0))
        vecs = rng.standard_normal((len(units), 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        passages = tuple(Passage(f"{u.unit_id}#0", u.unit_id, pid, "body", 0, 0, len(u.text), u.text,
                                 hashlib.sha256(u.text.encode()).hexdigest(), 1) for u in units)
        wr.replace_paper(conn, pid, units, [], EmbeddedPassages(ident, passages, vecs))
        n_units += len(units)
        first = rows[k]
        metas.append(PaperMeta(key=pid, citation_key=None, title=first["title"], authors=(f"Author {k}", "B. Coauthor"),
                               first_author=f"Author {k}", year=1990 + (k // per_paper) % 35,
                               journal=f"Journal {k % 13}", doi=None, pmid=None, abstract=first["text"][:400],
                               collections=(), domain=DOMAINS[(k // per_paper) % 4]))
    wr.upsert_papers(conn, metas)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"papers": len(metas), "units": n_units, "build_s": round(time.perf_counter() - t0, 1),
            "bytes": path.stat().st_size, "identity": ident}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def cold(cmd: list[str], env: dict[str, str], runs: int) -> dict:
    """Wall time and CPU time (user + system, from wait4) of fresh processes. On a shared
    machine the wall time includes waiting for a core; the CPU time of this single-threaded
    process is what it costs on an idle one."""
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # warm the page cache
    ts, cpu = [], []
    for _ in range(runs):
        t = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        ts.append((time.perf_counter() - t) * 1000)
        cpu.append((ru.ru_utime + ru.ru_stime) * 1000)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise SystemExit(f"{cmd} failed with {p.returncode}")
    return {"p50": round(statistics.median(ts), 1), "p90": round(pct(ts, 90), 1), "min": round(min(ts), 1),
            "cpu_p50": round(statistics.median(cpu), 1)}


def warm(fn, runs: int) -> dict:
    fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1000)
    return {"p50": round(statistics.median(ts), 2), "p90": round(pct(ts, 90), 2)}


def run(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="sheaf-bench-retrieve-"))
    index = work / "sheaf.db"
    info = build(index, args.abstracts, args.per_paper)
    ident = info.pop("identity")
    from sheaf.store.sqlite import schema as ix

    conn = ix.open_index(index, readonly=True)
    sid = conn.execute("SELECT short_id FROM body_units ORDER BY unit_rowid LIMIT 1 OFFSET 5000").fetchone()[0]
    conn.close()
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHEAF_")}
    base.update({"SHEAF_INDEX_FILE": str(index), "SHEAF_HOME": str(work / "home")})
    commands = {
        "sheaf search hippocampus": [str(SHEAF), "search", "hippocampus", "--json"],
        "sheaf search \"white matter development\"": [str(SHEAF), "search", "white matter development", "--json"],
        "sheaf retrieve --mode lexical (3 words)": [str(SHEAF), "retrieve", "tumor suppressor expression",
                                                    "--mode", "lexical", "--json"],
        "sheaf grep QLN-482": [str(SHEAF), "grep", "QLN-482", "--json"],
        "sheaf get SHORT_ID": [str(SHEAF), "get", sid, "--json"],
        "sheaf timeline SHORT_ID": [str(SHEAF), "timeline", sid, "--json"],
    }
    pyc = {**base, "PYTHONPYCACHEPREFIX": str(work / "pycache")}
    pyc.pop("PYTHONDONTWRITEBYTECODE", None)
    nopyc = {**base, "PYTHONDONTWRITEBYTECODE": "1"}  # the stdlib's own bytecode is still read
    nopyc.pop("PYTHONPYCACHEPREFIX", None)
    res_cold = {"python -c pass": {"bytecode cached": cold([sys.executable, "-c", "pass"], pyc, args.runs),
                                   "no bytecode cache": cold([sys.executable, "-c", "pass"], nopyc, args.runs)}}
    for name, cmd in commands.items():
        res_cold[name] = {"bytecode cached": cold(cmd, pyc, args.runs), "no bytecode cache": cold(cmd, nopyc, args.runs)}

    import numpy as np

    from sheaf.core.settings import get_settings
    from sheaf.search.retriever import Retriever, register_query_embedder
    from sheaf.vectors.identity import QueryVector

    class StandIn:  # query vectors of the stand-in model (no encoder in the timing)
        model_name = FAKE_MODEL

        def embed_query(self, text: str) -> QueryVector:
            v = np.random.default_rng(len(text)).standard_normal(384).astype(np.float32)
            return QueryVector(ident, v / np.linalg.norm(v), text)

    register_query_embedder(StandIn())
    r = Retriever.open(get_settings(index_file=index, home=work / "home", embedding_model=FAKE_MODEL))
    r._full_settings = lambda: r.settings  # the stand-in needs no other setting
    calls = {
        "search (1 word)": lambda: r.search("hippocampus"),
        "search (3 words)": lambda: r.search("white matter development"),
        "search, --year-from + --domain": lambda: r.search("cancer", year_from=2010, domains=["Oncology"]),
        "retrieve lexical (3 words)": lambda: r.retrieve("tumor suppressor expression", mode="lexical"),
        "retrieve lexical, --per-paper 1 --limit 20": lambda: r.retrieve("cell", mode="lexical", per_paper=1, limit=20),
        "retrieve semantic (stand-in vector)": lambda: r.retrieve("tumor suppressor expression", mode="semantic"),
        "retrieve hybrid (stand-in vector)": lambda: r.retrieve("tumor suppressor expression", mode="hybrid"),
        "grep QLN-482": lambda: r.grep("QLN-482"),
        "get 1 unit": lambda: r.get([sid]),
        "timeline --window 2": lambda: r.timeline(sid),
    }
    res_warm = {name: warm(fn, args.warm_runs) for name, fn in calls.items()}
    grep_hits = len(r.grep("QLN-482").matches)
    r.close()
    import pysqlite3.dbapi2 as sqlite3

    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return {"date": dt.datetime.now().strftime("%Y-%m-%d"), "python": platform.python_version(), "load": load,
            "sqlite": sqlite3.sqlite_version, "cores": os.cpu_count(), "runs": args.runs,
            "warm_runs": args.warm_runs, "corpus": info, "grep_hits": grep_hits,
            "cold": res_cold, "warm": res_warm}


def markdown(r: dict) -> str:
    c = r["corpus"]
    lines = [BEGIN, "## Retrieval", "",
             f"`bench/search/retrieve.py`, measured {r['date']} ({r['cores']} cores, Python {r['python']}, SQLite "
             f"{r['sqlite']}). Index: {c['units']:,} body units in {c['papers']:,} papers (SciFact abstracts, "
             f"two units each, five to a paper) with metadata and one 384-d vector per unit; "
             f"{c['bytes'] / 1e6:.0f} MB. Built in {c['build_s']} s.", "",
             "Rerun from the project root (about a minute):", "",
             "```", ".venv/bin/python -m bench.search.retrieve --write-docs", "```", "",
             f"**Cold process** (the `sheaf` console script, `--json`, p50 / p90 of {r['runs']} runs, ms). "
             "*bytecode cached* is an installed package; *no bytecode cache* is this repository's dev "
             "shell (`PYTHONDONTWRITEBYTECODE=1`: every module is compiled at each start).", "",
             "*CPU* is the process's user + system time (wait4): on this shared 2-core machine the wall "
             "time also holds the wait for a free core (load average "
             f"{r.get('load', '?')} during the run).", "",
             "| command | bytecode cached: wall p50 | p90 | CPU p50 | no bytecode cache: wall p50 | p90 | CPU p50 |",
             "|---|---|---|---|---|---|---|"]
    for name, v in r["cold"].items():
        a, b = v["bytecode cached"], v["no bytecode cache"]
        lines.append(f"| `{name}` | {a['p50']} | {a['p90']} | {a['cpu_p50']} | {b['p50']} | {b['p90']} | "
                     f"{b['cpu_p50']} |")
    lines += ["", f"**Warm, in process** (`sheaf.search.retriever.Retriever`, p50 / p90 of {r['warm_runs']} calls, ms; "
              "semantic and hybrid with a stand-in query vector: KNN over every vector, dedupe, RRF and "
              f"snippets, no encoder). grep found {r['grep_hits']} planted occurrences.", "",
              "| call | p50 | p90 |", "|---|---|---|"]
    for name, v in r["warm"].items():
        lines.append(f"| {name} | {v['p50']} | {v['p90']} |")
    lines += ["", "The light commands import neither numpy, torch, pydantic nor dagster "
              "(`tests/test_cli_retrieval.py` checks `sys.modules` in a fresh process).", END, ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--abstracts", type=int, default=5183, help="SciFact abstracts (2 units each)")
    ap.add_argument("--per-paper", type=int, default=5)
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--warm-runs", type=int, default=30)
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not SCIFACT.exists():
        sys.exit(f"SciFact corpus not found at {SCIFACT}")
    r = run(args)
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
    section = markdown(r)
    print(section)
    if args.write_docs:
        write_docs_section(section, BEGIN, END, DOCS)


if __name__ == "__main__":
    main()
