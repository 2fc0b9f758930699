"""The whole transform (blocks → render → tree → units) on every real sample and every
paper of the bundled sample library.

For each paper, end to end through `process_paper` (paper id given explicitly):
(a) no body unit holds a running header/footer or page number of that paper;
(b) every figure/table caption ends up in exactly one object unit, under a real section;
(c) every emitted body-role block (BODY_ROLES | BACKMATTER_ROLES) is in a body unit;
(d) the output is deterministic: two runs give identical dicts, and a run in another
    process with another PYTHONHASHSEED gives the same digest (no set-order dependence).

Real samples come from ../shared/data (skipped, with the reason, when it is absent); the
sample library ships with the project and always runs.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sheaf.core.models import BACKMATTER_ROLES, BODY_ROLES, CAPTION_ROLES
from sheaf.transform.chain import PaperOutputs, process_paper
from tests.kits.papers import squashed

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SAMPLE_LIBRARY = Path(__file__).resolve().parents[2] / "data" / "sample-library" / "papers"
NO_DATA = f"real test data not found at {DATA} (a clone without ../shared)"

FURNITURE = frozenset({"page_header", "page_footer", "page_number"})
SAMPLE_FORMATS = {  # the sample library's papers, by the file they hold
    "result.json": "paddleocr-vl", "content_list.json": "mineru", "paper.tei.xml": "grobid",
    "paper.docling.json": "docling", "paper.pdf": "pdf", "paper.md": "markdown",
}


def _real_samples() -> list[tuple[str, str, Path, str]]:
    """(test id, paper id, path, expected source format) of every real sample."""
    if not DATA.is_dir():
        return []
    out: list[tuple[str, str, Path, str]] = []
    for p in sorted(DATA.glob("paddleocr_vl/*/result.json")):
        out.append((f"paddleocr_vl/{p.parent.name}", p.parent.name, p, "paddleocr-vl"))
    for p in sorted(DATA.glob("mineru/*/content_list.json")):
        out.append((f"mineru/{p.parent.name}", p.parent.name, p, "mineru"))
    for p in sorted(DATA.glob("formats/grobid_tei/*.tei.xml")):
        key = p.name.removesuffix(".tei.xml")
        out.append((f"grobid/{key}", key, p, "grobid"))
    for p in sorted(DATA.glob("formats/docling/**/*.json")):  # DoclingDocuments (not .md, not .nxml)
        key = p.name.removesuffix(".json").removesuffix(".docling")
        out.append((f"docling/{p.parent.name}/{key}", key, p, "docling"))
    for p in sorted(DATA.glob("pdfs/*.pdf")):
        out.append((f"pdf/{p.stem}", p.stem, p, "pdf"))
    for p in sorted(DATA.glob("mineru/*/paper.pdf")):
        out.append((f"pdf/mineru/{p.parent.name}", p.parent.name, p, "pdf"))
    return out


def _sample_library() -> list[tuple[str, str, Path, str]]:
    out: list[tuple[str, str, Path, str]] = []
    for d in sorted(SAMPLE_LIBRARY.iterdir()) if SAMPLE_LIBRARY.is_dir() else []:
        files = [f for f in d.iterdir() if f.is_file()]
        fmt = next((SAMPLE_FORMATS[f.name] for f in files if f.name in SAMPLE_FORMATS), None)
        out.append((f"sample-library/{d.name}", d.name, d, fmt))
    return out


def _params() -> list:
    real = _real_samples()
    params = [pytest.param(pid, path, fmt, id=tid, marks=pytest.mark.realdata) for tid, pid, path, fmt in real]
    if not real:
        params.append(pytest.param(None, None, None, id="shared-data-absent", marks=pytest.mark.skip(reason=NO_DATA)))
    params += [pytest.param(pid, path, fmt, id=tid) for tid, pid, path, fmt in _sample_library()]
    return params


PAPERS = _params()


@functools.cache
def _run(paper_id: str, path: Path) -> PaperOutputs:
    return process_paper(path, paper_id=paper_id)


_norm = squashed


def furniture_strings(out: PaperOutputs) -> set[str]:
    """The paper's running header/footer/page-number texts worth looking for in units."""
    found = {_norm(b.text) for b in out.paper.blocks if b.role in FURNITURE and b.text.strip()}
    return {f for f in found if not (f.isdigit() and len(f) < 4)}  # "7" occurs in any text


def furniture_leaks(out: PaperOutputs) -> list[tuple[str, str]]:
    """(unit_id, furniture string) for each body unit holding a furniture string: as a
    whole line, or (12+ characters) anywhere in the text."""
    strings = furniture_strings(out)
    leaks: list[tuple[str, str]] = []
    for u in out.body_units:
        lines = {_norm(line) for line in u.text.split("\n")}
        flat = _norm(u.text)
        for f in sorted(strings):
            if f in lines or (len(f) >= 12 and f in flat):
                leaks.append((u.unit_id, f))
    return leaks


def outputs_dict(out: PaperOutputs) -> dict[str, Any]:
    return {
        "paper": {"paper_id": out.paper.paper_id, "source_format": out.paper.source_format,
                  "adapter": out.paper.adapter, "ocr_result_hash": out.paper.ocr_result_hash,
                  "title": out.paper.title, "warnings": list(out.paper.warnings),
                  "blocks": [b.to_dict() for b in out.paper.blocks]},
        "markdown": out.render.markdown,
        "render_map": out.render.render_map.to_dict(),
        "tree": out.tree.to_dict(),
        "body_units": [u.to_dict() for u in out.body_units],
        "object_units": [u.to_dict() for u in out.object_units],
    }


@pytest.mark.parametrize("paper_id,path,fmt", PAPERS)
def test_parses_with_the_expected_adapter(paper_id: str, path: Path, fmt: str) -> None:
    out = _run(paper_id, path)
    assert out.paper.paper_id == paper_id
    assert out.paper.source_format == fmt
    assert out.body_units, "a paper with text gives at least one body unit"
    assert all(u.paper_id == paper_id and u.text.strip() for u in out.body_units)


@pytest.mark.parametrize("paper_id,path,fmt", PAPERS)
def test_no_page_furniture_in_body_units(paper_id: str, path: Path, fmt: str) -> None:
    out = _run(paper_id, path)
    assert furniture_leaks(out) == []


@pytest.mark.parametrize("paper_id,path,fmt", PAPERS)
def test_every_caption_in_exactly_one_object_unit_under_a_real_section(paper_id: str, path: Path, fmt: str) -> None:
    out = _run(paper_id, path)
    sections = {n.node_id for n in out.tree.walk() if n.node_id != "root"}
    problems = []
    for b in out.paper.blocks:
        if b.role not in CAPTION_ROLES:
            continue
        owners = [o for o in out.object_units if b.block_id in o.block_ids]
        if len(owners) != 1:
            problems.append((b.block_id, b.text[:60], f"in {len(owners)} object units"))
        elif owners[0].node_id not in sections:
            problems.append((b.block_id, b.text[:60], f"under {owners[0].node_id!r}, not a section"))
        elif b.text.strip() and _norm(b.text) not in _norm(owners[0].caption):
            problems.append((b.block_id, b.text[:60], "text missing from the unit's caption"))
    assert problems == []


@pytest.mark.parametrize("paper_id,path,fmt", PAPERS)
def test_every_emitted_body_block_is_in_a_body_unit(paper_id: str, path: Path, fmt: str) -> None:
    out = _run(paper_id, path)
    in_units = {bid for u in out.body_units for bid in u.block_ids}
    by_id = {b.block_id: b for b in out.paper.blocks}
    emitted = [e for e in out.render.render_map.emitted_blocks if e.role in BODY_ROLES | BACKMATTER_ROLES]
    assert emitted, "a paper with text emits body blocks"
    missing = [(e.block_id, e.role, by_id[e.block_id].text[:60]) for e in emitted if e.block_id not in in_units]
    assert missing == []


def digest(out: PaperOutputs) -> str:
    return hashlib.sha256(json.dumps(outputs_dict(out), sort_keys=True).encode("utf-8")).hexdigest()


def digests_here() -> dict[str, str]:
    """Digest of every paper's outputs in this process (run in the other process)."""
    return {p.id: digest(process_paper(p.values[1], paper_id=p.values[0])) for p in PAPERS if p.values[0]}


@functools.lru_cache(maxsize=1)
def _digests_from_another_process() -> dict[str, str]:
    root = Path(__file__).resolve().parents[2]
    seed = "271828" if os.environ.get("PYTHONHASHSEED") != "271828" else "314159"
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from tests.transform.test_units_realdata import digests_here; print(json.dumps(digests_here()))")
    proc = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True,
                          cwd=root, env={**os.environ, "PYTHONHASHSEED": seed}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("paper_id,path,fmt", PAPERS)
def test_output_is_deterministic(paper_id: str, path: Path, fmt: str, request: pytest.FixtureRequest) -> None:
    first = _run(paper_id, path)
    second = process_paper(path, paper_id=paper_id)  # a fresh, uncached run
    a, b = outputs_dict(first), outputs_dict(second)
    for key in a:
        assert a[key] == b[key], key
    test_id = request.node.callspec.id
    assert _digests_from_another_process()[test_id] == digest(first), "differs in another process"


def test_furniture_check_catches_a_leak() -> None:
    """The furniture check itself: a header line inside a unit, and a long header mid-text."""
    from sheaf.transform.chain import units_from_paper
    from tests.kits.papers import blk, make_paper

    paper = make_paper([
        blk("page_header", "Journal of Synthetic Results"), blk("page_number", "12"),
        blk("page_footer", "Preprint"), blk("heading", "1 Intro", 1),
        blk("body", "Text. Journal of Synthetic Results continues."), blk("body", "Preprint"),
        blk("body", "Page 12 of the text."),
    ])
    leaks = furniture_leaks(units_from_paper(paper))
    assert {f for _, f in leaks} == {"Journal of Synthetic Results", "Preprint"}
