"""A user's first contact, side by side in one run: the first `sheaf build` of a real Zotero data
directory against the bare sentence-transformers process that embeds the same passages, against a
second home's first build on the same machine, and against zotero-mcp-server's `update-db
--fulltext` on the same copy of the library.

Each figure is a fresh process, run one after another: wall time, CPU seconds (the process and
everything it waited for) and peak RSS (the largest process: `wait4`). What each indexed is counted
the same way for both tools: the vectors, and the characters the model actually read (each text
cut at the model's 256-token window, as sentence-transformers cuts it).

- **sheaf, empty machine cache**: a fresh home and a fresh ``SHEAF_CACHE_DIR``: the ONNX export of the
  model, and where the CPU has bf16 the measurement of the backends, are paid here.
- **sheaf, a second home**: another fresh home, the same machine cache: none of that is paid again.
- **sheaf, fp32 only**: ``SHEAF_EMBED_PRECISION=fp32`` and a fresh cache, what a CPU without bf16
  gets (no reduced precision to measure: the ONNX export, unmeasured).
- **bare sentence-transformers**: one process that imports sentence-transformers, loads the same
  model and encodes the passages the first build embedded (batch 32, fp32): the floor a build of
  this text can be compared to.
- **zotero-mcp**, from an environment of its own (``--zotero-mcp ENV``: ``python -m venv ENV &&
  ENV/bin/pip install torch==2.13.0 'zotero-mcp-server[semantic,pdf]'``): its defaults (one vector per item: the
  first 256 tokens), its passage chunking (``semantic_search.chunking``, at most 20 passages per
  item), and chunking without the limit (every passage of every PDF, ``ZOTERO_PDF_MAXPAGES`` raised
  to match). The same local model (``embedding_model`` is its folder), ``ZOTERO_LOCAL=true``.

Sheaf runs with ``SHEAF_OCR=off`` by default (``--ocr auto`` to include it): zotero-mcp reads no
scanned page, so OCR would be work only one side does (`bench/parse/ocr.py` measures it).

    .venv/bin/python -m bench.build.first_build --write-docs            # ~10 min, needs ../shared
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, machine, write_docs_section

SHARED = ROOT.parent / "shared" / "data" / "zotero_dirs"
DEFAULT_LIBRARY = SHARED / "FranziZimm__Literaturedatabase"
RESULTS = ROOT / "bench" / "results" / "first-build.json"
BEGIN, END = "<!-- bench:first-build:begin -->", "<!-- bench:first-build:end -->"
BIN = Path(sys.executable).parent
SHEAF = str(BIN / "sheaf")
WINDOW = 256


def run_measured(cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> dict[str, Any]:
    """`cmd` in a fresh process, its output to `log`: wall, CPU (user + system, its waited-for
    children included) and peak RSS in MB (the largest of it and its children), the exit code."""
    load = os.getloadavg()[0]
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall_s": round(wall, 1), "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
            "peak_rss_mb": round(ru.ru_maxrss / 1024), "exit": proc.returncode, "load": round(load, 2)}


def sheaf_env(home: Path, library: Path, cache: Path, ocr: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHEAF_")}
    env.update(SHEAF_HOME=str(home), SHEAF_LIBRARY=str(library), DAGSTER_HOME=str(home / "dagster_home"),
               SHEAF_CACHE_DIR=str(cache), SHEAF_OCR=ocr, PYTHONWARNINGS="ignore", PYTHONPATH=str(ROOT),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    return env


def sheaf_first_build(work: Path, name: str, library: Path, cache: Path, ocr: str, **extra: str) -> dict[str, Any]:
    home = work / name
    r = run_measured([SHEAF, "build", "--json"], sheaf_env(home, library, cache, ocr, **extra), ROOT,
                     work / f"{name}.log")
    text = (work / f"{name}.log").read_text(encoding="utf-8", errors="replace")
    try:
        data = json.loads(text[text.index("{"):])["data"]
    except (ValueError, KeyError):
        raise SystemExit(f"sheaf build ({name}) failed ({r['exit']}):\n{text[-3000:]}") from None
    r.update(papers=len(data["papers"]), states=data["states"], embeddings_computed=data["embeddings_computed"],
             passages=sum(p.get("passages") or 0 for p in data["papers"]), home=str(home),
             backend=_backend_of(home))
    return r


def _backend_of(home: Path) -> str | None:
    """The embedding backend the home's build chose (its backend record), or the export alone."""
    for rec in sorted((home / "models").glob("*.json")):
        try:
            chosen = json.loads(rec.read_text(encoding="utf-8")).get("chosen")
        except (OSError, ValueError):
            continue
        if chosen:
            return str(chosen)
    return "onnx"


def passages_main(out: Path) -> None:
    """Child (the home in the environment): the distinct passage texts the build embedded, to `out`."""
    from bench.build.pipeline import _passage_texts

    texts, total = _passage_texts(Path(os.environ["SHEAF_HOME"]))
    out.write_text(json.dumps({"texts": texts, "total": total}), encoding="utf-8")


def bare_main(texts_file: Path) -> None:
    """Child: import sentence-transformers, load the model, encode the texts (what a script that
    embeds this text with the library would do)."""
    t0 = time.perf_counter()
    from sentence_transformers import SentenceTransformer

    from sheaf.vectors.identity import resolve_model_path

    texts = json.loads(texts_file.read_text(encoding="utf-8"))["texts"]
    model = SentenceTransformer(resolve_model_path("all-MiniLM-L6-v2")[1], device="cpu")
    t1 = time.perf_counter()
    model.encode(texts, batch_size=32, normalize_embeddings=True)
    t2 = time.perf_counter()
    print(json.dumps({"import_load_s": round(t1 - t0, 1), "encode_s": round(t2 - t1, 1), "texts": len(texts)}))


def embedded_chars(texts: list[str]) -> int:
    """Characters the model reads of `texts`: each cut at the 256-token window (special tokens
    counted), as sentence-transformers truncates."""
    import tokenizers

    from sheaf.vectors.identity import resolve_model_path

    tok = tokenizers.Tokenizer.from_file(str(Path(resolve_model_path("all-MiniLM-L6-v2")[1]) / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=WINDOW)
    total = 0
    for enc, text in zip(tok.encode_batch(texts), texts):
        ends = [b for (a, b), special in zip(enc.offsets, enc.special_tokens_mask) if not special]
        total += len(text[:max(ends)]) if ends else 0
    return total


# --- zotero-mcp ----------------------------------------------------------------------------------

_ZMCP_COUNT = """
import chromadb, json, sys
c = chromadb.PersistentClient(path=sys.argv[1])
docs = []
for col in c.list_collections():
    col = c.get_collection(col.name if hasattr(col, "name") else col)
    docs += col.get(include=["documents"])["documents"] or []
json.dump(docs, open(sys.argv[2], "w"))
"""


def zotero_mcp(work: Path, name: str, zmcp: Path, library: Path, chunking: dict[str, Any] | None) -> dict[str, Any]:
    """`zotero-mcp update-db --fulltext` in a fresh home of its own; what it indexed, read back from
    its Chroma store."""
    from sheaf.vectors.identity import resolve_model_path

    home = work / name
    cfg = home / ".config" / "zotero-mcp"
    cfg.mkdir(parents=True)
    sem: dict[str, Any] = {"embedding_model": resolve_model_path("all-MiniLM-L6-v2")[1]}
    if chunking is not None:
        sem["chunking"] = {"enabled": True, **chunking}
    (cfg / "config.json").write_text(json.dumps({"semantic_search": sem}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "ZOTERO_"))}
    env.update(HOME=str(home), ZOTERO_LOCAL="true", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONWARNINGS="ignore")
    if chunking is not None and chunking.get("max_chunks_per_item", 0) >= 10**6:
        env["ZOTERO_PDF_MAXPAGES"] = "100000"
    r = run_measured([str(zmcp / "bin" / "zotero-mcp"), "update-db", "--fulltext", "--db-path",
                      str(library / "zotero.sqlite")], env, work, work / f"{name}.log")
    if r["exit"] != 0:
        raise SystemExit(f"zotero-mcp ({name}) failed:\n{(work / f'{name}.log').read_text()[-3000:]}")
    out = work / f"{name}-docs.json"
    subprocess.run([str(zmcp / "bin" / "python"), "-c", _ZMCP_COUNT, str(cfg / "chroma_db"), str(out)],
                   check=True, env=env, capture_output=True)
    docs = [d for d in json.loads(out.read_text(encoding="utf-8")) if d]
    r.update(vectors=len(docs), chars=embedded_chars(docs), settings=sem.get("chunking", "defaults"))
    return r


# --- the run -------------------------------------------------------------------------------------

def say(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work or tempfile.mkdtemp(prefix="sheaf-first-build-"))
    work.mkdir(parents=True, exist_ok=True)
    library = work / "zotero"
    if not library.exists():
        shutil.copytree(args.library, library)
    r: dict[str, Any] = {"date": dt.date.today().isoformat(), "machine": machine(
        ["torch", "onnxruntime", "sentence-transformers", "dagster", "zotero-mcp-server"]),
        "library": args.library.name, "ocr": args.ocr, "runs": {}}
    flags = Path("/proc/cpuinfo").read_text(encoding="utf-8") if Path("/proc/cpuinfo").exists() else ""
    r["machine"]["bf16"] = "avx512_bf16" in flags or "amx_bf16" in flags
    runs = r["runs"]
    say("sheaf, empty machine cache")
    runs["sheaf_cold"] = sheaf_first_build(work, "sheaf-cold", library, work / "cache-a", args.ocr)
    say(f"  {runs['sheaf_cold']}")
    say("sheaf, a second home")
    runs["sheaf_second_home"] = sheaf_first_build(work, "sheaf-second", library, work / "cache-a", args.ocr)
    say(f"  {runs['sheaf_second_home']}")
    say("sheaf, fp32 only (a CPU without bf16)")
    runs["sheaf_fp32"] = sheaf_first_build(work, "sheaf-fp32", library, work / "cache-b", args.ocr,
                                           SHEAF_EMBED_PRECISION="fp32")
    say(f"  {runs['sheaf_fp32']}")
    texts = work / "passages.json"
    env = sheaf_env(Path(runs["sheaf_cold"]["home"]), library, work / "cache-a", args.ocr)
    subprocess.run([sys.executable, "-m", __spec__.name, "_passages", str(texts)], env=env, cwd=ROOT, check=True)
    passages = json.loads(texts.read_text(encoding="utf-8"))["texts"]
    r["sheaf_chars"] = embedded_chars(passages)
    say("bare sentence-transformers")
    runs["bare"] = run_measured([sys.executable, "-m", __spec__.name, "_bare", str(texts)],
                                {**env, "PYTHONPATH": str(ROOT)}, ROOT, work / "bare.log")
    runs["bare"].update(json.loads((work / "bare.log").read_text().strip().splitlines()[-1]))
    say(f"  {runs['bare']}")
    if args.zotero_mcp is not None:
        r["machine"]["zotero-mcp-server"] = subprocess.run(
            [str(args.zotero_mcp / "bin" / "python"), "-c",
             "import importlib.metadata as m; print(m.version('zotero-mcp-server'))"],
            capture_output=True, text=True).stdout.strip() or "?"
        for name, chunking in (("zotero_mcp_default", None), ("zotero_mcp_chunked", {"max_chunks_per_item": 20}),
                               ("zotero_mcp_full", {"max_chunks_per_item": 10**9})):
            say(name)
            runs[name] = zotero_mcp(work, name.replace("_", "-"), args.zotero_mcp, library, chunking)
            say(f"  {runs[name]}")
    RESULTS.write_text(json.dumps(r, indent=1), encoding="utf-8")
    return r


def render(r: dict[str, Any]) -> str:
    m, runs = r["machine"], r["runs"]
    bare = runs["bare"]["wall_s"]
    cold = runs["sheaf_cold"]

    def row(label: str, x: dict[str, Any], vectors: Any, chars: Any) -> str:
        return (f"| {label} | {x['wall_s']} | {x['wall_s'] / bare:.2f}x | {x['cpu_s']} | {x['peak_rss_mb']} | "
                f"{vectors} | {chars:,} | {chars / x['wall_s'] / 1000:.1f} |")

    lines = [BEGIN, "## First build (`bench/build/first_build.py`)", "",
             f"**Measures** a user's first contact, each figure a fresh process, one after another in one run "
             f"({r['date']}, {m['cpu']}, {m['cores']} cores, bf16 {'present' if m['bf16'] else 'absent'}; "
             f"torch {m['torch']}, onnxruntime {m['onnxruntime']}, zotero-mcp-server {m['zotero-mcp-server']}). "
             f"**Data**: a copy of the real Zotero data directory `{r['library']}` of `../shared` ({cold['papers']} "
             f"papers with a file; OCR {r['ocr']}: scanned PDFs are OCR's work, measured in its own section). "
             "Characters: what the model reads of every vector's text (each cut at its 256-token window).", "",
             "```", "python -m venv ENV && ENV/bin/pip install torch==2.13.0 'zotero-mcp-server[semantic,pdf]'",
             ".venv/bin/python -m bench.build.first_build --zotero-mcp ENV --write-docs   # ~10 min", "```",
             "",
             "| | wall (s) | ÷ bare | CPU (s) | peak RSS (MB) | vectors | characters embedded | thousand characters/s |",
             "|---|---|---|---|---|---|---|---|",
             row(f"Sheaf, empty machine cache ({cold['backend']})", cold, cold["embeddings_computed"], r["sheaf_chars"]),
             row(f"Sheaf, a second home ({runs['sheaf_second_home']['backend']})", runs["sheaf_second_home"],
                 runs["sheaf_second_home"]["embeddings_computed"], r["sheaf_chars"]),
             row(f"Sheaf, fp32 only, empty cache ({runs['sheaf_fp32']['backend']})", runs["sheaf_fp32"],
                 runs["sheaf_fp32"]["embeddings_computed"], r["sheaf_chars"]),
             row("bare sentence-transformers: import, load, encode Sheaf's passages", runs["bare"],
                 runs["bare"]["texts"], r["sheaf_chars"])]
    for key, label in (("zotero_mcp_default", "zotero-mcp, its defaults (a vector per item)"),
                       ("zotero_mcp_chunked", "zotero-mcp, chunking on (≤ 20 passages per item)"),
                       ("zotero_mcp_full", "zotero-mcp, chunking without a limit")):
        if key in runs:
            lines.append(row(label, runs[key], runs[key]["vectors"], runs[key]["chars"]))
    lines.append("")
    goals = [f"fp32 only ÷ bare {runs['sheaf_fp32']['wall_s'] / bare:.2f}x (goal ≤ 1.15x without bf16)"]
    if m.get("bf16"):
        goals.append(f"with bf16 ÷ bare {cold['wall_s'] / bare:.2f}x, a second home "
                     f"{runs['sheaf_second_home']['wall_s'] / bare:.2f}x (goal ≤ 0.5x)")
    if "zotero_mcp_full" in runs:
        goals.append(f"Sheaf ÷ zotero-mcp at full coverage {cold['wall_s'] / runs['zotero_mcp_full']['wall_s']:.2f}x "
                     "(goal ≤ 0.7x)")
    if "zotero_mcp_default" in runs:
        goals.append(f"Sheaf ÷ zotero-mcp's defaults {cold['wall_s'] / runs['zotero_mcp_default']['wall_s']:.1f}x, "
                     f"for {r['sheaf_chars'] / max(1, runs['zotero_mcp_default']['chars']):.0f}x the characters "
                     "(goal ≤ 1x)")
    lines += ["Against the goals: " + "; ".join(goals) + ".", "", "Raw: `bench/results/first-build.json`.", END]
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_passages":
        passages_main(Path(sys.argv[2]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_bare":
        bare_main(Path(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(prog="python -m bench.build.first_build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--library", type=Path, default=DEFAULT_LIBRARY, help="a Zotero data directory (copied)")
    ap.add_argument("--zotero-mcp", type=Path, default=None,
                    help="the Python environment with zotero-mcp-server installed (its bin/zotero-mcp)")
    ap.add_argument("--ocr", default="off", choices=("off", "auto"))
    ap.add_argument("--work", default=None)
    ap.add_argument("--from-json", type=Path, default=None, help="render a saved run")
    ap.add_argument("--write-docs", action="store_true")
    a = ap.parse_args()
    if a.from_json is None and not a.library.exists():
        print(f"no Zotero data directory at {a.library} (../shared is absent): nothing to measure")
        return
    r = json.loads(a.from_json.read_text()) if a.from_json else run(a)
    text = render(r)
    print(text)
    if a.write_docs:
        write_docs_section(text, BEGIN, END)


if __name__ == "__main__":
    main()
