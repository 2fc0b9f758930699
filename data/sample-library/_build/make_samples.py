"""Build the bundled sample library: papers/<KEY>/<one OCR/layout output> and library.json.

Run from the project root:
    python data/sample-library/_build/make_samples.py [--check] [--out DIR]

Every paper is written once as a format-neutral `Paper` (content/pNN_*.py, our own
synthetic text) and rendered by the writer of the format it exercises. The output is
deterministic: running the script twice gives byte-identical files. `--check` also parses
every paper with `sheaf.formats.parse_paper` (when importable) and prints a summary. `--out DIR`
writes the library into DIR instead (a test compares that with the committed files).
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # keep _build/ free of __pycache__
HERE = Path(__file__).resolve().parent
LIB = HERE.parent
sys.path.insert(0, str(HERE))

import write_bbt  # noqa: E402
import write_docling  # noqa: E402
import write_grobid  # noqa: E402
import write_markdown  # noqa: E402
import write_mineru  # noqa: E402
import write_paddle  # noqa: E402
import write_pdf  # noqa: E402

CONTENT = ["p01_alumina", "p02_cough_trial", "p03_subword_clinical", "p04_alpine_pollinators",
           "p05_theta_gamma", "p06_soil_moisture", "p07_polymer_electrolyte", "p08_solid_fuel",
           "p09_shrinkage", "p10_lichenometry"]

WRITERS = {
    "paddleocr-vl": (write_paddle.write, "result.json"),
    "mineru": (write_mineru.write, "content_list.json"),
    "grobid": (write_grobid.write, "paper.tei.xml"),
    "docling": (write_docling.write, "paper.docling.json"),
    "pdf": (write_pdf.write, "paper.pdf"),
    "markdown": (write_markdown.write, "paper.md"),
}


def papers():
    return [importlib.import_module(f"content.{m}").PAPER for m in CONTENT]


def build() -> dict[Path, bytes]:
    out: dict[Path, bytes] = {}
    ps = papers()
    keys = [p.key for p in ps]
    assert len(set(keys)) == len(keys), "duplicate paper keys"
    for p in ps:
        write, name = WRITERS[p.fmt]
        out[LIB / "papers" / p.key / name] = write(p)
    out[LIB / "library.json"] = write_bbt.write(ps)
    return out


def main() -> None:
    files = build()
    again = build()
    assert files == again, "output is not deterministic"
    if "--out" in sys.argv:
        out = Path(sys.argv[sys.argv.index("--out") + 1])
        for path, data in sorted(files.items()):
            target = out / path.relative_to(LIB)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return
    papers_dir = LIB / "papers"
    expected = {path.parent.name for path in files if path.parent.parent == papers_dir}
    if papers_dir.exists():  # drop stale outputs (a paper whose format changed)
        for d in papers_dir.iterdir():
            for f in d.iterdir() if d.is_dir() else []:
                if LIB / "papers" / d.name / f.name not in files:
                    f.unlink()
            if d.is_dir() and d.name not in expected and not any(d.iterdir()):
                d.rmdir()
    total = 0
    for path, data in sorted(files.items()):
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        total += len(data)
        print(f"{len(data):>8}  {path.relative_to(LIB)}")
    print(f"{total:>8}  total bytes")
    if "--check" in sys.argv:
        check()


def check() -> None:
    root = LIB.parent.parent
    sys.path.insert(0, str(root))
    try:
        from sheaf.formats import parse_paper
    except Exception as e:  # the adapters may not exist yet
        print(f"sheaf.formats not importable: {e}")
        return
    for p in papers():
        try:
            pp = parse_paper(LIB / "papers" / p.key)
        except Exception as e:
            print(f"{p.key} {p.fmt:13} FAILED: {e}")
            continue
        roles: dict[str, int] = {}
        for b in pp.blocks:
            roles[b.role] = roles.get(b.role, 0) + 1
        print(f"{p.key} {p.fmt:13} {len(pp.blocks):4} blocks  {pp.warnings}")
        print("      " + ", ".join(f"{k}={v}" for k, v in sorted(roles.items())))


if __name__ == "__main__":
    main()
