"""Benchmark of a Zotero data directory as a library: discovery, the no-op build, one PDF added
until it is searchable, one item trashed until it is gone, at 1,000 and 10,000 items.

Corpus (needs `../shared/data/zotero_dirs/` and `../shared/data/scifact/corpus.jsonl`; skipped
with a message without them): a copy of a real Zotero 6 database
(`San7o__research-papers-collection`, its own 15 items kept) with N regular items added through
Zotero's schema by name (`tests/kits/zotero.py`): a title, two authors, a date in Zotero's stored
form, an abstract, a DOI, two tags, one of 20 collections (two levels), and one stored PDF
attachment each. One item in 200 gets a real PDF copied from that directory's `storage/`
(round robin); the others have their PDF missing, as in a library synced without its files,
with a `.zotero-ft-cache` holding one SciFact abstract (Zotero's extracted text, which Sheaf
then indexes): the database is real-sized, the embedding stays affordable.

Measured per size, each a fresh process, one at a time:
- discovery (`sheaf.library.discover.discover` with its mirror): cold (no mirror: the snapshot
  copy, the catalog read, every file hashed, every manifest written) and warm (nothing changed:
  3 times), timed inside the process and as the whole process;
- the library side of a no-op build (discovery + the source scan + the metadata export's hash,
  what `pipelines.planning.noop` reads besides Dagster's files and the index), warm, side by side with
  the same on a plain library of N papers (`bench/build/scale.py`'s corpus): their difference is what
  a Zotero library adds to the no-op `bench/build/scale.py` measured on a plain one;
- with `--build` sizes (default 1000): a full `sheaf build`, then the no-op `sheaf build` (5
  times), one new item with a stored PDF holding a unique word until `sheaf search` finds it,
  that item moved to the trash until `sheaf search` no longer does; last, discovery after a
  change (a tag added: the database is read again, no file hashed again), 3 times;
- with `--plain-edit` sizes: a plain library of N papers built in full, then one paper edited
  until `sheaf search` finds it: the one-edit time of a plain library, side by side.

Short texts (`--text-chars 250`: one or two passages a paper) and torch in bf16 make a full
build of 10,000 items affordable (about 6 minutes on 2 quiet cores); `SHEAF_EMBED_BACKEND` and
`SHEAF_EMBED_PRECISION` apply to the full builds only, every later command runs on the default. `--work DIR --until full`
keeps the built libraries and homes; `--resume` (same sizes and DIR) measures them again.

Run from the project root:
    SHEAF_EMBED_BACKEND=torch SHEAF_EMBED_PRECISION=bf16 .venv/bin/python -m bench.build.zotero \
        --sizes 1000 10000 --build 1000 10000 --plain-edit 1000 --text-chars 250 --write-docs
    .venv/bin/python -m bench.build.zotero --sizes 1000 --build            # discovery only, prints only
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import machine, write_docs_section
from sheaf.formats.pdf.pdfium import draw_text

ROOT = Path(__file__).resolve().parents[2]

SHARED = ROOT.parent / "shared" / "data"
SOURCE_DIR = SHARED / "zotero_dirs" / "San7o__research-papers-collection"
SCIFACT = SHARED / "scifact" / "corpus.jsonl"
RESULTS = ROOT / "bench" / "results"
BEGIN, END = "<!-- bench:zotero:begin -->", "<!-- bench:zotero:end -->"
SHEAF = str(Path(sys.executable).parent / "sheaf")
#: One item in this many has a real PDF (copied); the others a missing PDF with Zotero's ft-cache.
PDF_EVERY = 200
_KEY_CHARS = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"  # Zotero's key alphabet


def zkey(prefix: str, i: int) -> str:
    """An 8-character Zotero-style key, `prefix` then `i` in Zotero's alphabet."""
    out = ""
    for _ in range(8 - len(prefix)):
        i, r = divmod(i, len(_KEY_CHARS))
        out = _KEY_CHARS[r] + out
    return prefix + out


def stand_in_pdfs() -> list[Path]:
    """Small real PDFs of the source directory (under 400 KB), copied round robin."""
    return sorted(p for p in (SOURCE_DIR / "storage").glob("*/*.pdf") if p.stat().st_size < 400_000)


def short(text: str, chars: int) -> str:
    """`text` cut to at most `chars` characters at a word boundary (0: whole)."""
    if not chars or len(text) <= chars:
        return text
    return text[:chars].rsplit(" ", 1)[0]


def make_zotero_dir(dest: Path, n: int, text_chars: int = 0) -> dict[str, Any]:
    """A Zotero data directory of the source's items plus `n` synthetic ones (see the module doc);
    `text_chars`: each ft-cache's abstract cut to that many characters (one passage a paper)."""
    from tests.kits.zotero import ZoteroDb, copy_zotero_dir

    copy_zotero_dir(SHARED, SOURCE_DIR.name, dest)  # its database and storage/, writable
    docs = [json.loads(line) for line in SCIFACT.open(encoding="utf-8")]
    docs = [d for d in docs if d.get("text") and d.get("title")]
    pdfs = stand_in_pdfs()
    real = 0
    with ZoteroDb(dest) as z, z.transaction():
        top = [z.add_collection(zkey("C", i), f"Topic {i}") for i in range(4)]
        subs = [z.add_collection(zkey("D", i), f"Subtopic {i}", top[i % 4]) for i in range(16)]
        colls = top + subs
        for i in range(n):
            d = docs[i % len(docs)]
            title = d["title"] if i < len(docs) else f"{d['title']} ({i // len(docs) + 1})"
            year = 1990 + i % 35
            iid = z.add_item(zkey("Q", i), title, author=(f"Ann{i % 97}", f"Author{i % 1009}"),
                             date=f"{year}-{1 + i % 12:02d}-00 {year}-{1 + i % 12:02d}")
            z.set_field(iid, "abstractNote", short(d["text"], min(300, text_chars or 300)))
            z.set_field(iid, "DOI", f"10.5555/bench.{i}")
            z.set_field(iid, "publicationTitle", f"Journal {i % 40}")
            z.add_tag(iid, f"tag{i % 50}")
            z.add_tag(iid, f"field{i % 7}")
            z.add_to_collection(colls[i % len(colls)], iid)
            if i % PDF_EVERY == 0 and pdfs:
                pdf = pdfs[(i // PDF_EVERY) % len(pdfs)]
                z.add_stored_file(iid, zkey("R", i), pdf.name, pdf=pdf)
                real += 1
            else:
                z.add_stored_file(iid, zkey("R", i), f"Author{i % 1009} - {year} - paper.pdf",
                                  ft_cache=f"{d['title']}\n\n{short(d['text'], text_chars)}\n")
    return {"items": n, "real_pdfs": real, "ft_cache_only": n - real, "text_chars": text_chars,
            "stand_in_pdfs": [p.name for p in pdfs]}


def make_pdf(path: Path, lines: list[str]) -> Path:
    """A one-page PDF with a text layer holding `lines` (pypdfium2, as the PDF adapter reads)."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    doc = pdfium.PdfDocument.new()
    page = doc.new_page(595, 842)
    fonts: dict = {}
    for k, text in enumerate(lines):
        draw_text(doc, page, fonts, b"Helvetica", 14 if k == 0 else 10, 60, 780 - 16 * k, text)
    raw.FPDFPage_GenerateContent(page.raw)
    page.close()
    doc.save(str(path))
    doc.close()
    return path


# --- measuring --------------------------------------------------------------------------------------

#: The settings this script's environment may give the full build only (torch bf16 makes 10,000 items
#: affordable); every other command runs on the default backend, as a user's edits do.
FULL_BUILD_ONLY = ("SHEAF_EMBED_BACKEND", "SHEAF_EMBED_PRECISION")


def _env(home: Path, lib: Path, full_build: bool = False) -> dict[str, str]:
    drop = ("SHEAF_INDEX_FILE", "PYTHONDONTWRITEBYTECODE") + (() if full_build else FULL_BUILD_ONLY)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(SHEAF_HOME=str(home), SHEAF_LIBRARY=str(lib), DAGSTER_HOME=str(home / "dagster_home"),
               PYTHONWARNINGS="ignore", PYTHONPATH=str(ROOT))
    return env


def child(home: Path, lib: Path, what: str) -> dict[str, Any]:
    """This script's `_<what>` in a fresh process: its own timings, and the whole process's wall."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", __spec__.name, f"_{what}"], env=_env(home, lib), capture_output=True,
                          text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"_{what} failed:\n{proc.stderr[-3000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_s": round(wall, 3),
            "load": round(os.getloadavg()[0], 2)}


def discover_main() -> dict[str, Any]:
    """Child: discovery of the settings' library through its mirror, timed in the process."""
    from sheaf.core.settings import get_settings
    from sheaf.library.discover import discover_library

    settings = get_settings()
    t0 = time.perf_counter()
    d = discover_library(settings)
    s = time.perf_counter() - t0
    return {"s": round(s, 3), "papers": len(d.papers), "metadata_only": len(d.metadata_only), "layout": d.layout}


def library_side_main() -> dict[str, Any]:
    """Child: what a no-op build reads of the library before the index (pipelines.planning.noop): the
    source scan (discovery + each manifest's stat) and the metadata export's hash."""
    from sheaf.core.settings import get_settings
    from sheaf.library.metadata import export_hash
    from sheaf.library.sources import scan_sources

    settings = get_settings()
    t0 = time.perf_counter()
    scan = scan_sources(settings, settings.artifacts_dir / "_source_stats.json")
    t1 = time.perf_counter()
    export_hash(scan.discovery.metadata_files)
    t2 = time.perf_counter()
    return {"s": round(t2 - t0, 3), "scan_s": round(t1 - t0, 3), "export_hash_s": round(t2 - t1, 3),
            "papers": len(scan.discovery.papers)}


def sheaf(home: Path, lib: Path, *argv: str, full_build: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run([SHEAF, *argv, "--json"], env=_env(home, lib, full_build), capture_output=True,
                          text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    try:
        env = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"sheaf {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}") from None
    if not env.get("ok"):
        raise SystemExit(f"sheaf {' '.join(argv)}: {env.get('error')}")
    return {"wall_s": round(wall, 2), "env": env, "load": round(os.getloadavg()[0], 2)}


def build(home: Path, lib: Path, full_build: bool = False) -> dict[str, Any]:
    r = sheaf(home, lib, "build", full_build=full_build)
    d = r.pop("env")["data"]
    r.update(runs=len(d["runs"]), planned=len(d["planned"]), embeddings_computed=d["embeddings_computed"],
             states=d["states"], plan=d.get("plan"))
    return r


def found(home: Path, lib: Path, word: str) -> list[str]:
    return [m["zotero_key"] for m in sheaf(home, lib, "search", word)["env"]["data"]["matches"]]


def add_pdf_until_searchable(home: Path, lib: Path, work: Path) -> dict[str, Any]:
    from tests.kits.zotero import ZoteroDb

    word = f"zqx{int(time.time())}zotero"
    pdf = make_pdf(work / "added.pdf", [
        "A paper attached while the library was indexed",
        f"This stand-in paper names {word} once, in its only paragraph of body text.",
        "Its other sentences are ordinary: the method, the data and the results are described",
        "in enough words for a text layer that reads as a real page of a short paper.",
    ])
    with ZoteroDb(lib) as z, z.transaction():
        iid = z.add_item("ADDED234", "A paper attached later")
        z.add_stored_file(iid, "ADDEDPDF", "added.pdf", pdf=pdf)
    t0 = time.perf_counter()
    r = build(home, lib)
    keys = found(home, lib, word)
    r["searchable_s"] = round(time.perf_counter() - t0, 2)
    r["searchable"] = keys[:1] == ["ADDED234"]
    r["word"] = word
    return r


def trash_until_gone(home: Path, lib: Path, word: str) -> dict[str, Any]:
    from tests.kits.zotero import ZoteroDb

    with ZoteroDb(lib) as z:
        z.trash(z.item_id("ADDED234"))
    t0 = time.perf_counter()
    r = build(home, lib)
    keys = found(home, lib, word)
    r["gone_s"] = round(time.perf_counter() - t0, 2)
    r["gone"] = "ADDED234" not in keys
    return r


def load() -> str:
    """The machine's load averages (1, 5, 15 min): other jobs share its cores."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_size(work: Path, n: int, full: bool, say, s: dict[str, Any], save, *, text_chars: int = 0,
             repeats: int = 5, until: str = "", plain_edit: bool = False) -> dict[str, Any]:
    """Measure one size. With `s` holding a finished full build of this size whose library and
    home are still in `work` (`--resume`), go on from the no-op."""
    lib, home = work / f"zotero-{n}", work / f"home-{n}"
    resume = bool(s.get("full")) and (lib / "zotero.sqlite").is_file() and home.is_dir()
    if not resume:
        s.clear()
        for p in (lib, home):
            shutil.rmtree(p, ignore_errors=True)
        t0 = time.perf_counter()
        s["corpus"] = make_zotero_dir(lib, n, text_chars)
        s["corpus"]["generate_s"] = round(time.perf_counter() - t0, 1)
        s["corpus"]["db_mb"] = round((lib / "zotero.sqlite").stat().st_size / 1e6, 1)
        s["date"] = dt.date.today().isoformat()
        say(f"{n}: corpus {s['corpus']}")
        cold = work / f"cold-home-{n}"  # an empty mirror: the snapshot, the catalog, every hash
        s["discovery_cold"] = child(cold, lib, "discover")
        shutil.rmtree(cold, ignore_errors=True)
        say(f"{n}: discovery cold {s['discovery_cold']}")
        if full:  # built first: the discovery figures below are then those of a built home
            s["full"] = build(home, lib, full_build=True)
            s["full"]["uptime"] = load()
            say(f"{n}: full build {s['full']}")
            save()
    if until == "full":
        return s
    s["discovery_warm"] = [child(home, lib, "discover") for _ in range(3)]
    s["library_side_noop"] = [child(home, lib, "library_side") for _ in range(3)]
    # side by side: the same library side of a no-op on a plain library of N papers (bench/build/scale.py's)
    from bench.build import scale

    plain, plain_home = work / f"plain-{n}", work / f"plain-home-{n}"
    shutil.rmtree(plain, ignore_errors=True)
    shutil.rmtree(plain_home, ignore_errors=True)
    scale.make_library(plain, n)
    s["plain_library_side_noop"] = [child(plain_home, plain, "library_side") for _ in range(3)][1:]
    shutil.rmtree(plain, ignore_errors=True)
    shutil.rmtree(plain_home, ignore_errors=True)
    s["mirror_mb"] = {"state_json": round((home / "library-mirror" / "zotero" / "state.json").stat().st_size / 1e6, 2),
                      "library_json": round((home / "library-mirror" / "zotero" / "library.json").stat().st_size / 1e6, 2)}
    say(f"{n}: discovery warm {[r['s'] for r in s['discovery_warm']]}, "
        f"library side of a no-op {[r['s'] for r in s['library_side_noop']]} "
        f"(plain library {[r['s'] for r in s['plain_library_side_noop']]}), mirror {s['mirror_mb']}")
    save()
    if not full:
        return s
    s["noop"] = [build(home, lib) for _ in range(repeats)]
    s["noop_uptime"] = load()
    say(f"{n}: no-op {[r['wall_s'] for r in s['noop']]} ({s['noop'][0]['plan']}), load {s['noop_uptime']}")
    save()
    s["add_pdf"] = add_pdf_until_searchable(home, lib, work)
    say(f"{n}: one PDF added {s['add_pdf']}")
    save()
    s["trash"] = trash_until_gone(home, lib, s["add_pdf"]["word"])
    say(f"{n}: one item trashed {s['trash']}")
    s["noop_after"] = build(home, lib)
    s["uptime"] = load()
    save()
    # last, as they leave the index behind the database: one tag added, then discovery reads it again
    from tests.kits.zotero import ZoteroDb

    s["discovery_changed"] = []
    for i in range(3):
        with ZoteroDb(lib) as z, z.transaction():
            z.add_tag(z.item_id(zkey("Q", i)), f"changed{i}")
        s["discovery_changed"].append(child(home, lib, "discover"))
    say(f"{n}: discovery after a change {[r['s'] for r in s['discovery_changed']]}")
    save()
    if plain_edit:
        s["plain_edit"] = plain_edit_until_searchable(work, n)
        say(f"{n}: plain library, one paper edited {s['plain_edit']}")
        save()
    return s


def plain_edit_until_searchable(work: Path, n: int) -> dict[str, Any]:
    """Side by side with the Zotero rows: a plain library of `n` papers (`bench/build/scale.py`'s) built
    in full, then one paper edited until `sheaf search` finds its new word."""
    from bench.build import scale

    lib, home = work / f"plain-edit-{n}", work / f"plain-edit-home-{n}"
    for p in (lib, home):
        shutil.rmtree(p, ignore_errors=True)
    scale.make_library(lib, n)
    full = build(home, lib, full_build=True)
    key = sorted(p.name for p in (lib / "papers").iterdir())[n // 2]
    word = f"zqx{int(time.time())}plain"
    f = lib / "papers" / key / "paper.md"
    f.write_text(f.read_text(encoding="utf-8") + f"\nAn added sentence names {word} once.\n", encoding="utf-8")
    t0 = time.perf_counter()
    r = build(home, lib)
    keys = found(home, lib, word)
    out = {"full_s": full["wall_s"], "wall_s": r["wall_s"], "searchable_s": round(time.perf_counter() - t0, 2),
           "searchable": keys[:1] == [key], "load": r["load"]}
    for p in (lib, home):
        shutil.rmtree(p, ignore_errors=True)
    return out


# --- report -----------------------------------------------------------------------------------------

def render(r: dict[str, Any], out_name: str) -> str:
    sizes = r["sizes"]
    chars = next((s["corpus"].get("text_chars") for s in r["results"].values() if s.get("corpus")), 0)
    embed = " ".join(f"{k}={v}" for k, v in sorted(r.get("embed", {}).items()))

    def cell(fn, s):
        try:
            return fn(s)
        except (KeyError, TypeError, IndexError, ValueError):
            return "not measured"

    def walls(xs):
        w = sorted(x["wall_s"] for x in xs)
        return f"{w[0]} / {statistics.median(w)} s"

    lines = [BEGIN, "## Zotero library", "",
             "`bench/build/zotero.py`: the real Zotero 6 database of `../shared` plus N items made through its schema "
             f"(one in {PDF_EVERY} with a real PDF, the others a `.zotero-ft-cache` of one SciFact abstract"
             + (f", {chars} characters" if chars else "") + "); each figure a fresh process. Rerun: "
             + (f"`{embed} " if embed else "`")
             + f"python -m bench.build.zotero --sizes {' '.join(map(str, sizes))} --build {' '.join(map(str, r['build']))}"
             + (f" --plain-edit {' '.join(map(str, r['plain_edit']))}" if r.get("plain_edit") else "")
             + (f" --text-chars {chars}" if chars else "") + " --write-docs` (`--work W --until full`, then "
             f"`--resume`: build once, measure again; raw: `bench/results/{out_name}`).", "",
             "| | " + " | ".join(f"{n:,} items" for n in sizes) + " | goal |", "|---|" + "---|" * (len(sizes) + 1)]

    def row(label, fn, goal=""):
        lines.append(f"| {label} | " + " | ".join(cell(fn, r["results"].get(str(n), {})) for n in sizes) + f" | {goal} |")

    row("zotero.sqlite", lambda s: f"{s['corpus']['db_mb']} MB")
    row("discovery, cold", lambda s: f"{s['discovery_cold']['s']} s")
    row("discovery, warm, in process", lambda s: f"{min(x['s'] for x in s['discovery_warm'])} s",
        "≤ 1 s at 10,000")
    row("discovery after a change (the database read again), in process, min of 3",
        lambda s: f"{min(x['s'] for x in s['discovery_changed'])} s", "≤ 1 s at 10,000")
    row("library side of a no-op build (scan + export hash)",
        lambda s: f"{min(x['s'] for x in s['library_side_noop'])} s")
    row("the same, plain library of N papers",
        lambda s: f"{min(x['s'] for x in s['plain_library_side_noop'])} s")
    row("full `sheaf build`", lambda s: f"{round(s['full']['wall_s'])} s ({s['full']['embeddings_computed']} passages)")
    row("**no-op `sheaf build`**, min / median of 5",
        lambda s: f"**{walls(s['noop'])}**", "≤ 1 s at 10,000")
    row("one PDF added → `sheaf search` finds it",
        lambda s: f"{s['add_pdf']['searchable_s']} s" + ("" if s["add_pdf"]["searchable"] else " (NOT found)"),
        "the plain library's one edit")
    row("one paper edited → searchable, plain library of N papers, same run",
        lambda s: f"{s['plain_edit']['searchable_s']} s" + ("" if s["plain_edit"]["searchable"] else " (NOT found)"))
    row("one item trashed → `sheaf search` no longer finds it",
        lambda s: f"{s['trash']['gone_s']} s" + ("" if s["trash"]["gone"] else " (still found)"))
    row("load average (2 cores) at the no-ops", lambda s: s["noop_uptime"].split()[0])
    lines += ["", r.get("note", ""), END]
    return "\n".join(x for x in lines if x is not None) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--build", type=int, nargs="*", default=[1000],
                    help="sizes that also get the full build, no-op, add and trash (none: discovery only)")
    ap.add_argument("--work", type=Path, default=None, help="keep the corpora and homes here (default: a temp dir)")
    ap.add_argument("--text-chars", type=int, default=0,
                    help="cut each ft-cache's abstract to this many characters (0: whole; 250: one passage a paper)")
    ap.add_argument("--repeats", type=int, default=5, help="no-op builds measured")
    ap.add_argument("--until", choices=["full"], default=None, help="stop after the full builds (go on with --resume)")
    ap.add_argument("--resume", action="store_true",
                    help="with --work: go on from the full builds the results file records as done there")
    ap.add_argument("--plain-edit", type=int, nargs="*", default=[],
                    help="sizes that also get a plain library of N papers built, then one paper edited (side by side)")
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    if not (SOURCE_DIR / "zotero.sqlite").is_file() or not SCIFACT.is_file():
        print(f"skipped: needs {SOURCE_DIR} and {SCIFACT}")
        return
    out_name = "zotero-" + "-".join(map(str, a.sizes)) + ".json"
    out = RESULTS / out_name
    if a.resume and (a.work is None or not out.is_file()):
        raise SystemExit(f"--resume needs --work and {out}")
    r = json.loads(out.read_text()) if a.resume else {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "sizes": a.sizes, "build": a.build,
        "machine": machine(("dagster",)), "note": a.note, "results": {},
        "plain_edit": a.plain_edit,
        "embed": {k: os.environ[k] for k in ("SHEAF_EMBED_BACKEND", "SHEAF_EMBED_PRECISION") if k in os.environ}}
    r["note"] = a.note or r.get("note", "")

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(r, indent=1) + "\n", encoding="utf-8")

    work = a.work or Path(tempfile.mkdtemp(prefix="sheaf-zbench-"))
    try:
        for n in a.sizes:
            run_size(work, n, n in a.build, lambda m: print(m, flush=True), r["results"].setdefault(str(n), {}), save,
                     text_chars=a.text_chars, repeats=a.repeats, until=a.until or "", plain_edit=n in a.plain_edit)
            save()
        if a.until:
            return
        if a.work is not None:  # done: the scratch libraries and homes, not the folder given
            for n in a.sizes:
                for p in (work / f"zotero-{n}", work / f"home-{n}", work / "added.pdf"):
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(render(r, out_name))
    if a.write_docs:
        write_docs_section(render(r, out_name), BEGIN, END)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        fn = {"_discover": discover_main, "_library_side": library_side_main}[sys.argv[1]]
        print(json.dumps(fn()))
    else:
        main()
