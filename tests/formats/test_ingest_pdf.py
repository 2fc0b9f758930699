"""Born-digital PDF adapter (pypdfium2 text layer).

Real samples come from ../shared/data (R vignettes, two-column ACL papers with MinerU's
content_list.json as heading/order ground truth, GROBID's PDFs); each test skips with a
reason when they are absent. A synthetic two-column paper and the bad inputs are built here
with pypdfium2 itself, so those tests always run.
"""
from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from sheaf.core.models import FURNITURE_ROLES, HEADING_ROLES, IngestError
from sheaf.formats import parse_paper
from sheaf.formats import pdf as pdf_adapter
from sheaf.formats.common import numbering_depth
from sheaf.formats.pdf.pdfium import draw_text
from tests.kits.papers import alnum_key
from tests.kits.pdf_writer import pdf_bytes

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
NO_DATA = f"real sample data not found at {DATA} (a clone without ../shared)"


def _pdf_samples() -> list:
    if not DATA.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA), id="no-data")]
    files = sorted((DATA / "pdfs").glob("*.pdf")) + sorted((DATA / "mineru").glob("*/paper.pdf")) \
        + sorted((DATA / "formats" / "grobid_tei").glob("*.pdf"))
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no PDFs under {DATA}"), id="none")]
    return [pytest.param(f, id=f.parent.name if f.name == "paper.pdf" else f.stem) for f in files]


def _mineru_samples() -> list:
    root = DATA / "mineru"
    if not root.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA), id="no-data")]
    keys = sorted(p.name for p in root.iterdir()
                  if (p / "paper.pdf").is_file() and (p / "content_list.json").is_file())
    reason = f"no paper.pdf + content_list.json under {root}"
    return keys or [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="none")]


PDFS = _pdf_samples()
MINERU_KEYS = _mineru_samples()
_CACHE: dict[Path, object] = {}


def _parsed(path: Path):
    if path not in _CACHE:
        _CACHE[path] = parse_paper(path)
    return _CACHE[path]


_norm = alnum_key


def _ground_truth(key: str) -> list[dict]:
    return json.loads((DATA / "mineru" / key / "content_list.json").read_text(encoding="utf-8"))


def _gt_headings(key: str) -> tuple[dict | None, list[dict]]:
    """MinerU's title (the first text_level item on page 0) and its other headings."""
    heads = [x for x in _ground_truth(key) if x.get("type") == "text" and x.get("text_level")]
    title = heads[0] if heads and heads[0].get("page_idx") == 0 else None
    return title, [h for h in heads if h is not title]


def _find_heading(blocks, text: str):
    n = _norm(text)
    if not n:
        return None
    for b in blocks:
        if b.role in HEADING_ROLES:
            k = _norm(b.text)
            if k == n or (k and (k in n or n in k) and min(len(k), len(n)) / max(len(k), len(n)) >= 0.8):
                return b
    return None


# --- a synthetic two-column paper, written with pypdfium2 ------------------------------

WORDS = ("the model reads every page of the library and keeps what it finds in order so that "
         "later stages can cite the right section and page for each passage of text").split()


def _words(seed: int, n: int) -> str:
    return " ".join(WORDS[(seed + k) % len(WORDS)] for k in range(n))


def make_pdf(path: Path, pages: list[list[tuple]], size=(595, 842)) -> Path:
    """Write a PDF whose pages hold (x, y_from_top, font_size, bold, text) items."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    doc = pdfium.PdfDocument.new()
    fonts: dict[bytes, object] = {}
    for items in pages:
        page = doc.new_page(*size)
        for x, y, fs, bold, text in items:
            draw_text(doc, page, fonts, b"Helvetica-Bold" if bold else b"Helvetica", fs, x, size[1] - y, text)
        raw.FPDFPage_GenerateContent(page.raw)
        page.close()
    doc.save(str(path))
    doc.close()
    return path


class _Column:
    def __init__(self, x: float, y: float, items: list):
        self.x, self.y, self.items = x, y, items

    def text(self, t: str, fs: float = 10) -> None:
        for ln in textwrap.wrap(t, 42):
            self.line(ln, fs)

    def line(self, t: str, fs: float = 10, bold: bool = False) -> None:
        self.items.append((self.x, self.y, fs, bold, t))
        self.y += 12

    def head(self, t: str, fs: float = 12, before: float = 8) -> None:
        self.y += before
        self.line(t, fs, True)
        self.y += 4


def synthetic_paper(path: Path) -> Path:
    pages: list[list[tuple]] = []
    for p in range(3):  # running header and page number on every page
        pages.append([(200, 40, 8, False, "Synthetic Journal of Layout Tests"), (290, 810, 9, False, str(p + 1))])
    it = pages[0]
    it.append((57, 90, 18, True, "A Synthetic Study of Two Column Layouts"))
    it.append((200, 120, 11, False, "Ada Lovelace and Alan Turing"))
    left, right = _Column(57, 170, it), _Column(308, 170, it)
    left.head("Abstract", before=0)
    left.text("We describe a synthetic paper. " + _words(0, 30))
    left.head("1 Introduction")
    left.text("Introduction text starts here. " + _words(3, 60))
    left.line("This sentence ends with an experi-")
    left.line("ment that works as expected today.")
    right.text("The right column continues the introduction. " + _words(7, 50))
    right.head("2 Methods")
    right.text("Methods text follows the heading. " + _words(11, 40))
    right.head("2.1 Data Sources", fs=10, before=6)
    right.text("Data text under the subsection. " + _words(13, 30))
    it = pages[1]
    left, right = _Column(57, 80, it), _Column(308, 80, it)
    left.text("Page two opens with body text. " + _words(17, 70))
    left.y += 120  # the picture, which has no text
    left.line("Figure 1: A synthetic figure caption.", fs=9)
    right.head("3 Results", before=0)
    right.text("Results text in the right column. " + _words(19, 110))
    it = pages[2]
    left, right = _Column(57, 80, it), _Column(308, 80, it)
    left.head("4 Conclusion", before=0)
    left.text("We conclude that layouts can be read. " + _words(23, 140))
    right.head("References", before=0)
    for k in range(6):
        right.line(f"Author {k}. 2020. A cited work number {k}. Journal.", fs=9)
        right.y += 3
    return make_pdf(path, pages)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    path = synthetic_paper(tmp_path_factory.mktemp("pdf") / "synthetic.pdf")
    return parse_paper(path)


def test_matches(tmp_path):
    assert pdf_adapter.matches(Path("paper.pdf")) and pdf_adapter.matches(Path("PAPER.PDF"))
    assert not pdf_adapter.matches(Path("content_list.json"))
    bare = tmp_path / "download"
    bare.write_bytes(b"%PDF-1.7\n...")
    assert pdf_adapter.matches(bare)
    other = tmp_path / "notes"
    other.write_bytes(b"plain text")
    assert not pdf_adapter.matches(other)


def test_synthetic_structure(synthetic):
    p = synthetic
    assert p.source_format == "pdf" and p.adapter == f"pdf/{pdf_adapter.VERSION}"
    assert p.title == "A Synthetic Study of Two Column Layouts"
    by_text = {b.text: b for b in p.blocks}
    assert by_text["Abstract"].role == "abstract_heading"
    heads = {b.text: b.heading_level for b in p.blocks if b.role == "heading"}
    assert heads == {"1 Introduction": 1, "2 Methods": 1, "2.1 Data Sources": 2, "3 Results": 1,
                     "4 Conclusion": 1}
    assert by_text["References"].role == "reference_heading"
    assert by_text["Ada Lovelace and Alan Turing"].role == "authors"
    assert any(b.role == "abstract" and b.text.startswith("We describe") for b in p.blocks)
    assert sum(b.role == "reference" for b in p.blocks) >= 1


def test_synthetic_reading_order_and_dehyphenation(synthetic):
    blocks = [b for b in synthetic.blocks if b.role not in FURNITURE_ROLES]
    order = [b.text.split(" ")[0] + " " + b.text.split(" ")[1] if " " in b.text else b.text for b in blocks]
    idx = {t: k for k, t in enumerate(order)}
    # page 1: abstract, the introduction (left column), then the right column
    assert idx["Abstract"] < idx["We describe"] < idx["1 Introduction"] < idx["Introduction text"] \
        < idx["The right"] < idx["2 Methods"] < idx["Methods text"] < idx["2.1 Data"] < idx["Data text"]
    # page 2: the left column with its figure caption before the right column
    assert idx["Page two"] < idx["Figure 1:"] < idx["3 Results"] < idx["Results text"]
    intro = next(b for b in blocks if b.text.startswith("Introduction text"))
    assert "experiment that works" in intro.text and "experi-" not in intro.text
    assert all("\x02" not in b.text for b in synthetic.blocks)


def test_synthetic_furniture_and_figures(synthetic):
    p = synthetic
    for page in (1, 2, 3):
        on_page = [b for b in p.blocks if b.page == page]
        assert [b.text for b in on_page if b.role == "page_number"] == [str(page)]
        assert [b.role for b in on_page if b.text == "Synthetic Journal of Layout Tests"] == ["page_header"]
        assert not any(b.text == str(page) for b in on_page if b.role not in FURNITURE_ROLES)
    cap = next(b for b in p.blocks if b.role == "figure_caption")
    fig = next(b for b in p.blocks if b.block_id == cap.attached_to)
    assert fig.role == "figure" and fig.page == cap.page and fig.order == cap.order - 1


# --- bad input --------------------------------------------------------------------------

def _encrypted_pdf() -> bytes:
    """A one-page PDF with a standard security handler whose password we do not know."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
            b"<< /Filter /Standard /V 1 /R 2 /O <" + b"11" * 32 + b"> /U <" + b"22" * 32 + b"> /P -44 >>"]
    return pdf_bytes(objs, b" /Encrypt 4 0 R /ID [<%s> <%s>]" % (b"ab" * 16, b"ab" * 16))


def _blank_pdf(path: Path) -> None:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument.new()
    doc.new_page(595, 842)
    doc.save(str(path))
    doc.close()


@pytest.mark.parametrize("case, expect", [
    ("truncated", "corrupt or truncated"),
    ("random", "not a PDF"),
    ("empty", "empty"),
    ("header_only", "corrupt or truncated"),
    ("no_text", "no text layer: run OCR first"),
    ("encrypted", "encrypted"),
])
def test_bad_input(tmp_path, case, expect):
    path = tmp_path / f"bad-{case}.pdf"
    if case == "truncated":
        whole = synthetic_paper(tmp_path / "whole.pdf").read_bytes()
        path.write_bytes(whole[: len(whole) // 2])
    elif case == "random":
        path.write_bytes(os.urandom(4096))
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "header_only":
        path.write_bytes(b"%PDF-1.7\n")
    elif case == "no_text":
        _blank_pdf(path)
    else:
        path.write_bytes(_encrypted_pdf())
    with pytest.raises(IngestError) as err:
        parse_paper(path)
    e = err.value
    assert e.paper_id == f"bad-{case}" and e.path == str(path)
    assert f"bad-{case}" in str(e) and str(path) in str(e)
    assert expect in e.message


def test_no_text_layer_message_names_ocr(tmp_path):
    path = tmp_path / "scan.pdf"
    _blank_pdf(path)
    with pytest.raises(IngestError, match=r"no text layer: run OCR first \(PaddleOCR-VL, MinerU\)"):
        parse_paper(path)


# --- real samples -----------------------------------------------------------------------

@pytest.mark.parametrize("path", PDFS)
def test_sample_parses(path):
    p = _parsed(path)
    assert p.source_format == "pdf"
    assert p.title and len(p.title) > 10
    assert sum(b.role in HEADING_ROLES for b in p.blocks) >= 5
    assert len({b.block_id for b in p.blocks}) == len(p.blocks)
    assert [b.order for b in p.blocks] == list(range(len(p.blocks)))
    for b in p.blocks:
        assert "\x02" not in b.text and "\ufffe" not in b.text
        if b.bbox is not None:
            x0, y0, x1, y1 = b.bbox
            assert 0 <= x0 <= x1 <= 1 and 0 <= y0 <= y1 <= 1
    body = " ".join(b.text for b in p.blocks if b.role == "body")
    assert len(body) > 5000


@pytest.mark.parametrize("path", PDFS)
def test_page_numbers_never_in_body(path):
    p = _parsed(path)
    pages = max(b.page for b in p.blocks)
    numbers = {b.page: b.text for b in p.blocks if b.role == "page_number"}
    assert len(numbers) >= pages - 1  # at most the title page goes unnumbered
    for b in p.blocks:
        if b.role in FURNITURE_ROLES or b.page not in numbers:
            continue
        assert b.text.strip() != numbers[b.page], f"page number {numbers[b.page]!r} left in {b.block_id} ({b.role})"


@pytest.mark.parametrize("key", MINERU_KEYS)
def test_mineru_headings_found_with_depth(key):
    p = _parsed(DATA / "mineru" / key / "paper.pdf")
    title, heads = _gt_headings(key)
    if title is not None:
        assert _norm(p.title or "")[:40] == _norm(title["text"])[:40]
    found = 0
    for h in heads:
        b = _find_heading(p.blocks, h["text"])
        if b is None:
            continue
        found += 1
        depth = numbering_depth(re.sub(r"<[^>]+>", "", h["text"]))
        if depth is not None:
            assert b.heading_level == depth, (h["text"], b.heading_level)
    assert found >= 0.8 * len(heads), f"{found}/{len(heads)} headings found"


def test_mineru_heading_recall_overall():
    if not (DATA / "mineru").is_dir():
        pytest.skip(NO_DATA)
    total = found = 0
    for key in sorted(d.name for d in (DATA / "mineru").iterdir() if (d / "paper.pdf").is_file()):
        p = _parsed(DATA / "mineru" / key / "paper.pdf")
        _, heads = _gt_headings(key)
        total += len(heads)
        found += sum(_find_heading(p.blocks, h["text"]) is not None for h in heads)
    assert total and found / total >= 0.9, f"{found}/{total}"


@pytest.mark.parametrize("key", MINERU_KEYS)
def test_two_column_reading_order(key):
    p = _parsed(DATA / "mineru" / key / "paper.pdf")
    blocks = [b for b in p.blocks if b.role not in FURNITURE_ROLES]
    abstract = next(k for k, b in enumerate(blocks) if b.role == "abstract_heading")
    intro = next(k for k, b in enumerate(blocks) if b.role == "heading" and re.match(r"1\.?\s", b.text))
    assert abstract < intro
    assert any(b.role == "abstract" for b in blocks[abstract + 1:intro])
    # the text after "1 Introduction" is the paragraph MinerU found after it
    gt = _ground_truth(key)
    gi = next(k for k, x in enumerate(gt) if x.get("text_level") and re.match(r"1\.?\s", x.get("text", "")))
    nxt = next(x for x in gt[gi + 1:] if x.get("type") == "text" and len(_norm(x.get("text", ""))) > 40)
    after = next(b for b in blocks[intro + 1:] if b.role in ("body", "list"))
    assert _norm(after.text)[:30] == _norm(nxt["text"])[:30]
    # every long paragraph MinerU saw comes in the same order here
    full = "".join(_norm(b.text) for b in p.blocks)
    pos = [full.find(_norm(x["text"])[5:45]) for x in gt if x.get("type") == "text" and len(_norm(x["text"])) > 60]
    pos = [k for k in pos if k >= 0]
    in_order = sum(a < b for a, b in zip(pos, pos[1:]))
    assert len(pos) > 10 and in_order >= 0.95 * (len(pos) - 1)


def test_overprinted_fake_bold_is_read_once(tmp_path):
    title = "A Title Printed Twice For Weight"
    items = [(57, 80, 18, False, title), (57.3, 80, 18, False, title),
             (57, 120, 12, False, "1 Introduction"), (57.25, 120, 12, False, "1 Introduction")]
    items += [(57, 140 + 12 * k, 10, False, _words(k, 12)) for k in range(30)]
    p = parse_paper(make_pdf(tmp_path / "fakebold.pdf", [items]))
    assert p.title == "A Title Printed Twice For Weight"
    assert [(b.role, b.text) for b in p.blocks[1:2]] == [("heading", "1 Introduction")]


BUNDLED = Path(__file__).resolve().parents[2] / "data" / "sample-library" / "papers"


@pytest.mark.parametrize("path", sorted(BUNDLED.glob("*/*.pdf")) or [
    pytest.param(None, marks=pytest.mark.skip(reason=f"no PDFs under {BUNDLED}"), id="none")])
def test_bundled_library_pdfs(path):
    p = parse_paper(path)
    assert p.title and p.source_format == "pdf"
    pages = max(b.page for b in p.blocks)
    assert {b.page for b in p.blocks if b.role == "page_number"} == set(range(1, pages + 1))
    assert any(b.role == "abstract" for b in p.blocks)
    assert any(b.role == "reference_heading" for b in p.blocks)
    assert all(b.attached_to for b in p.blocks if b.role in ("figure_caption", "table_caption"))


def test_author_lines_urls_references_and_equations_are_never_headings(tmp_path):
    """Lines typeset like headings (bold, or larger than the body, standing apart) that no paper
    means as one: an author line with note marks, a URL, a reference, a numbered condition, a
    sentence cut at the line's end. They stay text, and searchable; the real headings stay."""
    col = _Column(57, 80, [])
    col.line("A Study of Lines That Look Like Headings", fs=18, bold=True)
    col.y += 20
    col.head("1 Introduction")
    col.text("Introduction text starts here. " + _words(3, 60))
    col.head("Shota Shimazaki1, Student Member, IEEE, Md. Shoaib Bhuiyan2", fs=12)
    col.text("Author notes follow. " + _words(5, 30))
    col.head("https://hal.science/hal-00905460", fs=12)
    col.text("Repository text follows. " + _words(7, 30))
    col.head("2 Methods")
    col.text("Methods text follows the heading. " + _words(11, 40))
    for line in ("3. V(x, z) < 0 and W(x, z) = 0.", "0. This interconnection can be written as",
                 "4. Isebree Moens, A.: Die Pulscurve"):
        col.head(line, fs=10)
        col.text("Body text after it. " + _words(13, 30))
    p = parse_paper(make_pdf(tmp_path / "lookalikes.pdf", [col.items]))
    assert [b.text for b in p.blocks if b.role == "heading"] == ["1 Introduction", "2 Methods"]
    text = " ".join(b.text for b in p.blocks)
    for kept in ("Shota Shimazaki1", "hal-00905460", "W(x, z) = 0.", "can be written as", "Die Pulscurve"):
        assert kept in text


def test_a_second_text_layer_over_the_first_is_read_once(tmp_path):
    """Some publishers' PDFs draw a page's text twice, the second time later in the content
    stream at the same places: each line is read once, list items with their numbers."""
    col = _Column(57, 80, [])
    col.line("A Paper Whose Text Is Drawn Twice", fs=18, bold=True)
    col.y += 20
    col.head("1 Introduction")
    col.text("Introduction text starts here. " + _words(3, 50))
    items = ["1. Participants were recruited from two clinics.",
             "2. Each gave written consent before the interview.",
             "3. Interviews were recorded and transcribed."]
    for t in items:
        col.line(t)
    col.text("Body text after the list. " + _words(9, 40))
    again = [it for it in col.items if it[4] in items]  # the list drawn a second time, at the end
    p = parse_paper(make_pdf(tmp_path / "twice.pdf", [col.items + again]))
    text = " ".join(b.text for b in p.blocks)
    for t in items:
        assert text.count(t) == 1, t
    assert text.count("Introduction text starts here.") == 1


def test_numbers_set_apart_at_a_tab_stop_stay_with_their_text(tmp_path):
    """A section number or list number drawn apart from its text, which starts at a tab stop
    (MDPI's "2.1." then "Data Collection"; a numbered list with a hanging indent): one line, so
    the numbered heading is a heading and each list item keeps its number."""
    col = _Column(57, 80, [])
    col.line("A Paper With Numbers At Tab Stops", fs=18, bold=True)
    col.y += 20
    col.head("1. Introduction")
    col.text("Introduction text starts here. " + _words(3, 50))
    col.y += 8
    col.items += [(57, col.y, 10, True, "2.1."), (95, col.y, 10, True, "Data Collection")]
    col.y += 16
    col.text("Data text under the subsection. " + _words(5, 40))
    items = ["Participants were recruited from two clinics.", "Each gave written consent before the interview."]
    for k, t in enumerate(items):
        col.items += [(57, col.y, 10, False, f"{k + 1}."), (82, col.y, 10, False, t)]
        col.y += 12
    col.y += 10
    col.text("Body text after the list. " + _words(9, 40))
    p = parse_paper(make_pdf(tmp_path / "tabs.pdf", [col.items]))
    assert [b.text for b in p.blocks if b.role == "heading"] == ["1. Introduction", "2.1. Data Collection"]
    text = " ".join(b.text for b in p.blocks)
    assert "1. Participants were recruited" in text and "2. Each gave written consent" in text
    assert not any(b.text in ("1.", "2.", "2.1.") for b in p.blocks)
