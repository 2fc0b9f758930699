"""`text_layer_problem`: is a PDF's text layer usable, and if not, why (in plain words).

Synthetic PDFs are written here byte by byte (a Type1 font whose encoding names glyphs that
have no Unicode value, an empty page, a truncated file); the real ones are the Zotero
storage PDFs of ../shared (two of them scanned), skipped when that folder is absent.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from sheaf.formats.pdf import text_layer_problem
from tests.kits.pdf_writer import lines_page, raw_pdf

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
ZOTERO_PDFS = sorted((DATA / "zotero_dirs").glob("*/storage/*/*.pdf")) if DATA.is_dir() else []
SCANNED = {"ND3Q8Y2H", "U3JDWJNH"}  # picture-only scans among the Zotero storage PDFs

WORDS = ("the model reads every page of the library and keeps what it finds in order so that "
         "later stages can cite the right section and page for each passage of text").split()


def _prose(n_lines: int, seed: int = 0) -> list[bytes]:
    return [" ".join(WORDS[(seed + k * 7 + j) % len(WORDS)] for j in range(11)).encode() for k in range(n_lines)]


def test_usable_text_layer_is_none(tmp_path):
    assert text_layer_problem(raw_pdf(tmp_path / "ok.pdf", [lines_page(_prose(40)), lines_page(_prose(40, 3))])) is None


def test_scanned_pages_say_no_text_layer(tmp_path):
    assert text_layer_problem(raw_pdf(tmp_path / "empty.pdf", [[], [], []])) == "no text layer (scanned)"
    mostly = raw_pdf(tmp_path / "mostly.pdf", [lines_page(_prose(40))] + [[]] * 5)
    assert text_layer_problem(mostly) == "no text layer (scanned): only 1 of 6 pages read have text"


def test_garbled_text_layer_gives_the_share(tmp_path):
    # every other word drawn with glyphs the font's encoding names but Unicode does not know
    lines = [b" ".join(w if j % 2 else b"\x85\x86\x87" for j, w in enumerate(ln.split())) for ln in _prose(40)]
    problem = text_layer_problem(raw_pdf(tmp_path / "garbled.pdf", [lines_page(lines)], b"133 /g1 /g2 /g3"))
    assert problem is not None and problem.startswith("text layer garbled: ")
    assert problem.endswith("% of words unmapped")
    assert 40 <= int(problem.split(": ")[1].split("%")[0]) <= 60


def test_damaged_and_wrong_files_never_raise(tmp_path):
    good = raw_pdf(tmp_path / "ok.pdf", [lines_page(_prose(40))]).read_bytes()
    (tmp_path / "cut.pdf").write_bytes(good[:200])
    assert text_layer_problem(tmp_path / "cut.pdf").startswith("damaged PDF: ")
    (tmp_path / "notes.pdf").write_text("just some notes\n")
    assert text_layer_problem(tmp_path / "notes.pdf") == "not a PDF: the file does not start with a %PDF- header"
    assert text_layer_problem(tmp_path / "missing.pdf").startswith("unreadable file: ")
    (tmp_path / "garbage.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40)
    assert text_layer_problem(tmp_path / "garbage.pdf").startswith("damaged PDF: ")


@pytest.mark.skipif(not ZOTERO_PDFS, reason=f"no Zotero storage PDFs under {DATA} (a clone without ../shared)")
def test_zotero_storage_pdfs():
    problems = {p.parent.name: text_layer_problem(p) for p in ZOTERO_PDFS}
    assert {k for k, v in problems.items() if v} == SCANNED, problems
    assert all(problems[k].startswith("no text layer (scanned)") for k in SCANNED)
