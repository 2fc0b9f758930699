"""PaddleOCR-VL (`result.json`) and MinerU (`content_list.json`) adapters.

Real samples come from ../shared/data (skipped with a reason when absent); the bad-input
and scale tests build their own files.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from sheaf.core.models import FURNITURE_ROLES, HEADING_ROLES, IngestError
from sheaf.formats import find_input, parse_paper
from sheaf.formats.common import caption_label, clean_text
from sheaf.formats.paddleocr_vl import classify_front, clean_inline, html_table_text
from tests.kits.papers import cleaned

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
PADDLE = DATA / "paddleocr_vl"
MINERU = DATA / "mineru"
NO_DATA = f"real sample data not found at {DATA} (a clone without ../shared)"


def _samples(root: Path, marker: str) -> list:
    if not root.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_DATA), id="no-data")]
    keys = sorted(p.name for p in root.iterdir() if (p / marker).is_file())
    return keys or [pytest.param(None, marks=pytest.mark.skip(reason=f"no {marker} under {root}"), id="none")]


PADDLE_KEYS = _samples(PADDLE, "result.json")
MINERU_KEYS = _samples(MINERU, "content_list.json")

_CACHE: dict[Path, object] = {}


def _parsed(folder: Path):
    if folder not in _CACHE:
        _CACHE[folder] = parse_paper(folder)
    return _CACHE[folder]


_norm = cleaned


def _paddle_pages(key: str) -> list[list[dict]]:
    data = json.loads((PADDLE / key / "result.json").read_text(encoding="utf-8"))
    return [lp["prunedResult"]["parsing_res_list"] for line in data for lp in line["layoutParsingResults"]]


def _furniture_strings(texts: list[str]) -> set[str]:
    out: set[str] = set()
    for t in texts:
        c = clean_text(t)
        if c:
            out.add(c)
            out.update(ln.strip() for ln in c.split("\n") if ln.strip())
    return out


def _assert_no_furniture_in_text(paper, furniture: set[str]) -> None:
    """No header/footer/page-number string is (or, when long enough to be unambiguous, is
    inside) a body, abstract or list block."""
    for b in paper.blocks:
        if b.role not in ("body", "abstract", "list"):
            continue
        for f in furniture:
            assert b.text != f, f"{b.block_id} ({b.role}) is the running header/footer {f!r}"
            if len(f) >= 12:
                assert f not in b.text, f"{b.block_id} ({b.role}) contains the running header/footer {f!r}"


def _assert_captions_attached(paper) -> None:
    """Every caption on a page with a figure/table is attached to one of that page's objects,
    no object carries two captions, and attachments point at figures/tables."""
    by_id = {b.block_id: b for b in paper.blocks}
    objects_on = {}
    for b in paper.blocks:
        if b.role in ("figure", "table"):
            objects_on.setdefault(b.page, []).append(b)
    targets = []
    for b in paper.blocks:
        if b.role not in ("figure_caption", "table_caption"):
            continue
        if objects_on.get(b.page):
            assert b.attached_to, f"caption {b.block_id} {b.text[:50]!r} is not attached"
        if b.attached_to:
            t = by_id[b.attached_to]
            assert t.role in ("figure", "table") and t.page == b.page
            targets.append(b.attached_to)
    assert len(targets) == len(set(targets)), "an object has two captions"


def _assert_ids_and_order(paper) -> None:
    assert [b.order for b in paper.blocks] == list(range(len(paper.blocks)))
    assert len({b.block_id for b in paper.blocks}) == len(paper.blocks)
    pages = [b.page for b in paper.blocks]
    assert pages == sorted(pages), "blocks are not in page order"
    for b in paper.blocks:
        assert re.fullmatch(r"p\d+:\d+", b.block_id) and b.block_id.startswith(f"p{b.page}:")
        if b.bbox is not None:
            assert all(0.0 <= v <= 1.0 for v in b.bbox) and b.bbox[0] <= b.bbox[2] and b.bbox[1] <= b.bbox[3]


# --- PaddleOCR-VL: real samples ------------------------------------------------------------

@pytest.mark.realdata
@pytest.mark.parametrize("key", PADDLE_KEYS)
def test_paddle_sample_parses(key):
    p = _parsed(PADDLE / key)
    assert p.source_format == "paddleocr-vl" and p.paper_id == key
    assert p.adapter.startswith("paddleocr-vl/") and len(p.ocr_result_hash) == 64
    pages = _paddle_pages(key)
    assert max(b.page for b in p.blocks) == len(pages)
    doc_titles = [_norm(b["block_content"]) for pg in pages for b in pg if b["block_label"] == "doc_title"]
    assert p.title == doc_titles[0]
    assert [b.role for b in p.blocks].count("title") == 1
    _assert_ids_and_order(p)
    # every reference_content block became a reference
    n_refs = sum(1 for pg in pages for b in pg if b["block_label"] == "reference_content" and b["block_content"].strip())
    assert sum(1 for b in p.blocks if b.role == "reference") >= n_refs


@pytest.mark.realdata
@pytest.mark.parametrize("key", PADDLE_KEYS)
def test_paddle_headings_are_the_paragraph_titles(key):
    p = _parsed(PADDLE / key)
    expected = []
    for pg in _paddle_pages(key):
        flow = sorted(pg, key=lambda b: (b["block_order"] is None, b["block_order"] or 0))
        expected += [_norm(b["block_content"]) for b in flow if b["block_label"] == "paragraph_title"]
    # a paragraph title inside a figure's area is figure text, "Keywords" opens front matter,
    # a line repeated on many pages is furniture (the edge rules): each says why
    moved = {b.text: b.role_reason for b in p.blocks if b.raw_label == "paragraph_title" and b.role not in HEADING_ROLES}
    assert all(r and (r.startswith(("inside figure", "repeated on")) or r == "keywords heading")
               for r in moved.values()), moved
    got = [b.text for b in p.blocks if b.role in HEADING_ROLES]
    assert got == [h for h in expected if h not in moved]
    assert all(b.heading_level and b.heading_level >= 1 for b in p.blocks if b.role in HEADING_ROLES)
    for b in p.blocks:  # numbered headings take their depth from the number
        if b.role in HEADING_ROLES and re.match(r"^\d+\.\d+\.?\s", b.text):
            assert b.heading_level == 2, b.text
        if b.role in HEADING_ROLES and re.match(r"^\d+\.?\s+[A-Z]", b.text):
            assert b.heading_level == 1, b.text


@pytest.mark.realdata
@pytest.mark.parametrize("key", PADDLE_KEYS)
def test_paddle_running_headers_and_footers_stay_out_of_the_text(key):
    p = _parsed(PADDLE / key)
    pages = _paddle_pages(key)
    furniture = _furniture_strings(
        [b["block_content"] for pg in pages for b in pg if b["block_label"] in ("header", "footer", "number")]
    )
    assert furniture
    _assert_no_furniture_in_text(p, furniture)
    for b in p.blocks:
        if b.raw_label in ("header", "header_image", "footer", "footer_image", "number", "aside_text",
                           "formula_number"):
            assert b.role in FURNITURE_ROLES, (b.block_id, b.raw_label, b.role)


@pytest.mark.realdata
@pytest.mark.parametrize("key", PADDLE_KEYS)
def test_paddle_captions_attach_to_their_figures_and_tables(key):
    p = _parsed(PADDLE / key)
    _assert_captions_attached(p)
    # every numbered caption PaddleOCR found ("Fig. 3 ...", "TABLE 2 ...") survives as a caption
    caps = [b for b in p.blocks if b.role in ("figure_caption", "table_caption")]
    assert caps
    for b in caps:
        if caption_label(b.text) and caption_label(b.text).startswith("Table"):
            assert b.role == "table_caption"


@pytest.mark.realdata
@pytest.mark.parametrize("key", PADDLE_KEYS)
def test_paddle_reading_order_and_tables(key):
    p = _parsed(PADDLE / key)
    # text blocks keep PaddleOCR's block_order within each page
    for page_no, pg in enumerate(_paddle_pages(key), start=1):
        want = [_norm(b["block_content"]) for b in sorted(
            (b for b in pg if b["block_order"] is not None and b["block_label"] == "paragraph_title"),
            key=lambda b: b["block_order"])]
        got = [b.text for b in p.blocks if b.page == page_no and b.raw_label == "paragraph_title"]
        assert got == want
        # running headers/page numbers come first or last on their page, never inside the flow
        page_blocks = [b for b in p.blocks if b.page == page_no]
        flow = [i for i, b in enumerate(page_blocks) if b.role not in FURNITURE_ROLES]
        for i, b in enumerate(page_blocks):
            if b.raw_label in ("header", "number") and flow and b.bbox and b.bbox[1] < 0.2:
                assert i < flow[0]
    for b in p.blocks:
        if b.role == "table":
            assert "<td" not in b.text and "<tr" not in b.text
            assert not b.text or " | " in b.text or "\n" not in b.text


@pytest.mark.realdata
@pytest.mark.parametrize("key", PADDLE_KEYS)
def test_paddle_front_matter(key):
    p = _parsed(PADDLE / key)
    meta_file = PADDLE / key / "source_metadata.json"
    if not meta_file.is_file():
        pytest.skip("no source_metadata.json")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    authors = [b for b in p.blocks if b.role == "authors"]
    assert authors, "no author line found"
    first_last = meta["authors"][0].split()[-1]
    assert first_last in authors[0].text
    assert authors[0].page == 1 and "$" not in authors[0].text
    title_at = next(b.order for b in p.blocks if b.role == "title")
    assert authors[0].order > title_at
    assert any(b.role == "abstract" for b in p.blocks)


@pytest.mark.realdata
def test_paddle_specific_fixes_on_real_pages():
    if not PADDLE.is_dir():
        pytest.skip(NO_DATA)
    jbjs = _parsed(PADDLE / "VAMSAZMG")
    by_text = {b.text: b for b in jbjs.blocks}
    # a running header the layout model labelled `text`
    hdr = [b for b in jbjs.blocks if b.raw_label == "text" and b.text.startswith("REPAIR INTEGRITY AND FUNCTIONAL")]
    assert hdr and all(b.role == "page_header" for b in hdr)
    # "Fig. 1" + "Schematic drawings ..." merged into one caption, attached to the image
    fig1 = [b for b in jbjs.blocks if b.text.startswith("Fig. 1 Schematic drawings")]
    assert len(fig1) == 1 and fig1[0].attached_to
    assert "Fig. 1" not in by_text or by_text["Fig. 1"].role != "figure_caption"
    # a table whose first row is its caption
    t3 = [b for b in jbjs.blocks if b.role == "table_caption" and b.text.startswith("TABLE III")]
    assert len(t3) == 1 and t3[0].attached_to
    # the copyright banner above the title is furniture, not body
    assert all(b.role in FURNITURE_ROLES for b in jbjs.blocks if b.text.startswith("COPYRIGHT ©"))
    afm = _parsed(PADDLE / "8CCATQE3")
    assert all(b.role == "noise" for b in afm.blocks if b.text in ("(a)", "(b)", "(c)"))
    assert all(b.role == "noise" for b in afm.blocks if b.raw_label == "aside_text")
    tissue = _parsed(PADDLE / "37LK5T97")
    fig = [b for b in tissue.blocks if b.text.startswith("FIG. 1. Both IM")]
    assert fig and fig[0].role == "figure_caption" and fig[0].attached_to  # caption labelled `text`
    assert [b.text for b in tissue.blocks if b.role == "backmatter_heading"] == ["Acknowledgments", "Disclosure Statement"]


# --- MinerU: real samples ------------------------------------------------------------------

def _mineru_items(key: str) -> list[dict]:
    return json.loads((MINERU / key / "content_list.json").read_text(encoding="utf-8"))


def _heading_text(s: str) -> str:
    return _norm(clean_inline(s))


@pytest.mark.realdata
@pytest.mark.parametrize("key", MINERU_KEYS)
def test_mineru_sample_parses(key):
    p = _parsed(MINERU / key)
    assert p.source_format == "mineru" and p.paper_id == key
    assert Path(p.source_path).name == "content_list.json"  # never content_list_v2.json
    items = _mineru_items(key)
    heads = [it for it in items if it.get("text_level")]
    assert p.title == _heading_text(heads[0]["text"])
    assert max(b.page for b in p.blocks) == max(int(it["page_idx"]) for it in items) + 1
    _assert_ids_and_order(p)
    assert not any("<sup>" in b.text or "</sub>" in b.text for b in p.blocks)
    # each ref_text list item is one reference (text under the References heading is one too)
    n_refs = sum(len(it["list_items"]) for it in items if it["type"] == "list" and it.get("sub_type") == "ref_text")
    assert sum(1 for b in p.blocks if b.role == "reference" and b.raw_label == "list") == n_refs
    assert [b.text for b in p.blocks if b.role == "reference_heading"] == ["References"]


@pytest.mark.realdata
@pytest.mark.parametrize("key", MINERU_KEYS)
def test_mineru_headings_are_the_text_level_items(key):
    p = _parsed(MINERU / key)
    items = _mineru_items(key)
    expected = [_heading_text(it["text"]) for it in items if it.get("text_level")][1:]  # [0] is the title
    got = [b.text for b in p.blocks if b.role in HEADING_ROLES]
    promoted = [h for h in got if h not in expected]
    # MinerU labels an appendix title at the top of a page as a running header: it is a heading
    headers = {_norm(it["text"]) for it in items if it["type"] == "header"}
    assert all(h in headers and h.lower().startswith("appendix") for h in promoted)
    assert [h for h in got if h not in promoted] == expected
    for b in p.blocks:
        if b.role not in HEADING_ROLES:
            continue
        m = re.match(r"^(?:[A-Z]|\d+)((?:\.\d+)*)\s", b.text)
        if m:
            assert b.heading_level == 1 + m.group(1).count("."), b.text
        if b.text in ("Abstract", "Limitations", "References", "Acknowledgements", "Ethics Statement"):
            assert b.heading_level == 1, b.text


@pytest.mark.realdata
@pytest.mark.parametrize("key", MINERU_KEYS)
def test_mineru_running_headers_and_footers_stay_out_of_the_text(key):
    p = _parsed(MINERU / key)
    items = _mineru_items(key)
    furniture = _furniture_strings(
        [it.get("text", "") for it in items if it["type"] in ("page_number", "footer", "header")]
    )
    furniture -= {b.text for b in p.blocks if b.role in HEADING_ROLES}  # a promoted appendix title
    _assert_no_furniture_in_text(p, furniture)
    for b in p.blocks:
        if b.raw_label in ("page_number", "footer"):
            assert b.role in FURNITURE_ROLES


@pytest.mark.realdata
@pytest.mark.parametrize("key", MINERU_KEYS)
def test_mineru_captions_attach_to_their_objects(key):
    p = _parsed(MINERU / key)
    items = _mineru_items(key)
    _assert_captions_attached(p)
    by_id = {b.block_id: b for b in p.blocks}
    caps = [b for b in p.blocks if b.role in ("figure_caption", "table_caption")]
    n_caps = sum(  # a caption list holding only panel labels ("(a)") gives no caption block
        1 for it in items
        if any(isinstance(c, str) and len(c.strip()) > 3 for k in ("image_caption", "img_caption", "chart_caption", "table_caption")
               for c in it.get(k) or [])
    )
    assert len(caps) >= n_caps
    for b in caps:
        assert b.attached_to, b.text[:60]
        if b.raw_label == "table_caption":
            assert by_id[b.attached_to].role == "table"
    for b in p.blocks:
        if b.role == "table":
            assert "<td" not in b.text


@pytest.mark.realdata
def test_mineru_specifics_on_real_papers():
    if not MINERU.is_dir():
        pytest.skip(NO_DATA)
    triad = _parsed(MINERU / "2024.emnlp-main.101")
    roles = {b.text: b.role for b in triad.blocks}
    assert roles["Chang Zong, Yuchen Yan, Weiming Lu, Jian Shao"] == "authors"
    assert roles["Tsinghua University"] == "affiliation"
    assert roles["Limitations"] == "backmatter_heading"
    head = {b.text: b.heading_level for b in triad.blocks if b.role in HEADING_ROLES}
    assert head["Here are some examples:"] == 2  # MinerU's odd heading sits under "C Prompts ..."
    assert head["2.1 Phases of KBQA"] == 2 and head["2 Preliminaries"] == 1
    abstract = [b for b in triad.blocks if b.role == "abstract"]
    assert len(abstract) == 1 and abstract[0].text.startswith("Recent progress with LLM-based agents")
    nl = _parsed(MINERU / "2024.emnlp-main.12")
    head = {b.text: b.heading_level for b in nl.blocks if b.role in HEADING_ROLES}
    assert head["4.4.1 Encoding operands vs. results"] == 3
    simul = _parsed(MINERU / "2024.emnlp-main.69")
    heads = [b for b in simul.blocks if b.role in HEADING_ROLES]
    app = next(i for i, b in enumerate(heads) if b.text == "Appendix A Prompts")
    assert heads[app + 1].text.startswith("Prompt used to extract") and heads[app + 1].heading_level == 2
    assert heads[app].page == heads[app + 1].page and heads[app].order < heads[app + 1].order
    assert {b.text: b.heading_level for b in heads}["Example 1"] == 2
    assert any(b.role == "authors" and "Koshkin" in b.text for b in simul.blocks)
    # Markdown escapes outside math are undone
    cod = _parsed(MINERU / "2024.emnlp-main.55")
    assert not any(re.search(r"[a-z]\\_[A-Z]", b.text) for b in cod.blocks if b.role in ("body", "list"))


@pytest.mark.realdata
def test_mineru_folder_prefers_content_list_over_v2():
    if not MINERU.is_dir():
        pytest.skip(NO_DATA)
    folder = next(p for p in sorted(MINERU.iterdir()) if (p / "content_list_v2.json").is_file())
    file, fmt = find_input(folder.name, folder)
    assert (file.name, fmt) == ("content_list.json", "mineru")


# --- helpers ---------------------------------------------------------------------------------

def test_html_table_text():
    html = ('<table><tr><td rowspan="2">Model</td><td colspan="2">Score &amp; rank</td></tr>'
            '<tr><td>P<br>value</td><td>&lt;0.01</td></tr><tr><td></td><td></td></tr></table>')
    assert html_table_text(html) == "Model | Score & rank\nP value | <0.01"
    assert html_table_text("no markup &amp; all") == "no markup & all"
    assert html_table_text("<table><tr><td>unclosed") == "unclosed"


def test_clean_inline():
    assert clean_inline("word<sup>1</sup> and 10<sup>-5</sup>, H<sub>2</sub>O <b>b</b>") == "word and 10^-5, H2O b"
    assert clean_inline(r"fra\_Latn and $a\_b$ keep <word X in source-language>") == \
        r"fra_Latn and $a\_b$ keep <word X in source-language>"


@pytest.mark.parametrize("text,kind", [
    ("Chang Zong<sup>1</sup>, Yuchen Yan<sup>1</sup>, Weiming Lu<sup>1</sup>†", "authors"),
    ("Lukas Edman<sup>1,3</sup> Helmut Schmid<sup>1</sup> Alexander Fraser<sup>2,3,4</sup>", "authors"),
    ("By Hiroyuki Sugaya, MD, Kazuhiko Maeda, MD, and Joji Moriishi, MD", "authors"),
    ("S. Connor Dennis, BS, $ ^{1,2} $ Cory J. Berkland, PhD, $ ^{1-3} $", "authors"),
    ("<sup>1</sup>College of Computer Science, Zhejiang University", "affiliation"),
    ("{zongchang, luwm}@zju.edu.cn", "affiliation"),
    ("A Prospective Outcome Study", None),
    ("Keywords: viscoelastic, photoacoustic, laser-induced stress wave", None),
    ("We propose a method that works well, and it is fast.", None),
])
def test_classify_front(text, kind):
    assert classify_front(text) == kind


# --- bad input ----------------------------------------------------------------------------

def _page(blocks: list[dict], w: int = 1000, h: int = 1400) -> dict:
    return {"prunedResult": {"width": w, "height": h, "parsing_res_list": blocks}}


def _blk(label: str, text: str, box=(100, 100, 900, 160), order=None) -> dict:
    return {"block_label": label, "block_content": text, "block_bbox": list(box), "block_order": order}


def _paddle_file(tmp_path: Path, obj, key: str = "KEY1", raw: bytes | None = None) -> Path:
    d = tmp_path / "ocr" / key / "json"
    d.mkdir(parents=True)
    f = d / "result.json"
    f.write_bytes(raw if raw is not None else json.dumps(obj).encode())
    return f


def _mineru_file(tmp_path: Path, obj, key: str = "KEY2", raw: bytes | None = None,
                 name: str = "content_list.json") -> Path:
    d = tmp_path / "papers" / key
    d.mkdir(parents=True)
    f = d / name
    f.write_bytes(raw if raw is not None else json.dumps(obj).encode())
    return f


GOOD_PADDLE = [{"layoutParsingResults": [_page([
    _blk("doc_title", "A Study of Things", order=1),
    _blk("paragraph_title", "1 Introduction", (100, 200, 500, 230), 2),
    _blk("text", "Some text about things.", (100, 240, 900, 400), 3),
    _blk("number", "1", (480, 1350, 520, 1380)),
])]}]

GOOD_MINERU = [
    {"type": "text", "text": "A Study of Things", "text_level": 1, "bbox": [100, 50, 900, 80], "page_idx": 0},
    {"type": "text", "text": "1 Introduction", "text_level": 1, "bbox": [100, 100, 400, 120], "page_idx": "0"},
    {"type": "text", "text": "Some text about things.", "bbox": [100, 130, 900, 300], "page_idx": "0"},
    {"type": "page_number", "text": "1", "bbox": [480, 950, 520, 970], "page_idx": "0"},
]


def _expect_error(file: Path, key: str, *fragments: str, fmt: str = "auto") -> IngestError:
    with pytest.raises(IngestError) as ei:
        parse_paper(file, fmt=fmt)
    e = ei.value
    assert e.paper_id == key and e.path == str(file)
    for frag in fragments:
        assert frag in e.message, e.message
    return e


def test_paddle_good_minimal(tmp_path):
    f = _paddle_file(tmp_path, GOOD_PADDLE)
    p = parse_paper(f)
    assert p.paper_id == "KEY1" and p.title == "A Study of Things"
    assert [(b.role, b.text) for b in p.blocks] == [
        ("title", "A Study of Things"), ("heading", "1 Introduction"),
        ("body", "Some text about things."), ("page_number", "1")]


@pytest.mark.parametrize("obj", [
    GOOD_PADDLE[0],  # one result line as an object
    {"logId": "x", "errorCode": 0, "result": GOOD_PADDLE[0]},  # the API envelope
    {"result": GOOD_PADDLE},
])
def test_paddle_other_envelopes(tmp_path, obj):
    p = parse_paper(_paddle_file(tmp_path, obj))
    assert p.title == "A Study of Things" and len(p.blocks) == 4


def test_paddle_json_lines(tmp_path):
    line = json.dumps(GOOD_PADDLE[0])
    p = parse_paper(_paddle_file(tmp_path, None, raw=(line + "\n" + line + "\n").encode()))
    assert max(b.page for b in p.blocks) == 2  # the page counter runs across result lines


def test_paddle_truncated_json(tmp_path):
    raw = json.dumps(GOOD_PADDLE).encode()
    f = _paddle_file(tmp_path, None, raw=raw[: len(raw) // 2])
    _expect_error(f, "KEY1", "malformed JSON")


@pytest.mark.parametrize("obj,fragment", [
    ({"a": 1}, "layoutParsingResults"),
    ([1, 2], "result line 0 is int"),
    ([], "empty"),
    ([{"foo": 1}], "layoutParsingResults"),
    ([{"layoutParsingResults": 5}], "expected a list of pages"),
    ([{"layoutParsingResults": [7]}], "page 1 is int"),
    ([{"layoutParsingResults": [{"prunedResult": {}}]}], "parsing_res_list"),
    ({"logId": "x", "errorCode": 500, "errorMsg": "Internal error"}, "service returned an error"),
    ("just a string", "found str"),
    (42, "found int"),
])
def test_paddle_wrong_schema(tmp_path, obj, fragment):
    # auto-detection does not take these files for PaddleOCR-VL; the format named explicitly does
    _expect_error(_paddle_file(tmp_path, obj), "KEY1", fragment, fmt="paddleocr-vl")


def test_paddle_empty_file(tmp_path):
    _expect_error(_paddle_file(tmp_path, None, raw=b""), "KEY1", "empty", fmt="paddleocr-vl")
    f2 = _paddle_file(tmp_path, None, key="KEY3", raw=b"  \n ")
    _expect_error(f2, "KEY3", "empty", fmt="paddleocr-vl")
    _expect_error(f2, "KEY3", "found no")  # auto-detection: not recognisable, still named


def test_paddle_no_text(tmp_path):
    obj = [{"layoutParsingResults": [_page([_blk("image", ""), _blk("number", "3", (480, 1350, 520, 1380)),
                                            _blk("text", "   ", order=1)])]}]
    _expect_error(_paddle_file(tmp_path, obj), "KEY1", "no text")


def test_paddle_non_utf8_degrades_with_a_warning(tmp_path):
    raw = json.dumps(GOOD_PADDLE).encode().replace(b"Some text", b"Some t\xe9xt \xff\xfe")
    p = parse_paper(_paddle_file(tmp_path, None, raw=raw))
    assert any("invalid UTF-8" in w for w in p.warnings)
    body = next(b for b in p.blocks if b.role == "body")
    assert "\ufffd" in body.text and body.text.startswith("Some t")


def test_paddle_odd_blocks_warn_not_crash(tmp_path):
    obj = [{"layoutParsingResults": [_page([
        "not a block",
        {"block_label": "mystery_label", "block_content": "Odd but real text.", "block_bbox": [1, 2, 3]},
        {"block_label": "text", "block_content": 12345, "block_bbox": ["a", 1, 2, 3], "block_order": "x"},
        _blk("text", "Body text here.", order=1),
    ])]}]
    p = parse_paper(_paddle_file(tmp_path, obj))
    assert any("not an object" in w for w in p.warnings)
    assert any("mystery_label" in w for w in p.warnings)
    assert {b.text for b in p.blocks} >= {"Odd but real text.", "Body text here."}


def test_paddle_matches_sniffs_the_head(tmp_path):
    from sheaf.formats import paddleocr_vl
    f = _paddle_file(tmp_path, GOOD_PADDLE)
    assert paddleocr_vl.matches(f)
    other = tmp_path / "result.json"
    other.write_text('{"something": "else"}')
    assert not paddleocr_vl.matches(other)
    assert not paddleocr_vl.matches(tmp_path / "missing" / "result.json")


def test_paddle_500_pages_parse_quickly(tmp_path):
    pages = []
    for i in range(500):
        pages.append(_page([
            _blk("header", "Journal of Synthetic Results", (100, 20, 600, 50)),
            _blk("number", str(i + 1), (900, 20, 950, 50)),
            _blk("paragraph_title", f"{i + 1} Section {i + 1}", (100, 100, 600, 130), 1),
            _blk("text", f"Paragraph one of page {i + 1} with enough words to look like text.", (100, 140, 480, 600), 2),
            _blk("text", f"Paragraph two of page {i + 1}, right column.", (520, 140, 900, 600), 3),
            _blk("image", "", (100, 700, 900, 1100)),
            _blk("figure_title", f"Figure {i + 1}. A synthetic figure.", (100, 1110, 900, 1150)),
            _blk("footer", "© 2024 Nobody", (100, 1350, 400, 1380)),
        ]))
    obj = [{"layoutParsingResults": pages[k:k + 100]} for k in range(0, 500, 100)]  # 5 result lines
    f = _paddle_file(tmp_path, obj)
    t0 = time.perf_counter()
    p = parse_paper(f)
    elapsed = time.perf_counter() - t0
    assert elapsed < 20, f"500 pages took {elapsed:.1f} s"
    assert max(b.page for b in p.blocks) == 500
    assert sum(1 for b in p.blocks if b.role == "heading") == 500
    assert all(b.role == "page_header" for b in p.blocks if b.text == "Journal of Synthetic Results")
    caps = [b for b in p.blocks if b.role == "figure_caption"]
    assert len(caps) == 500 and all(c.attached_to == f"p{c.page}:{int(c.block_id.split(':')[1]) - 1}" for c in caps)


def test_mineru_good_minimal_and_string_page_idx(tmp_path):
    items = GOOD_MINERU + [
        {"type": "text", "text": "More text on page four.", "bbox": [100, 100, 900, 200], "page_idx": "3"},
        {"type": "table", "table_body": "<table><tr><td>a</td><td>b</td></tr></table>",
         "table_caption": ["Table 1: Things."], "table_footnote": ["* a note"], "bbox": [100, 300, 900, 500],
         "page_idx": 3},
        {"type": "image", "img_caption": ["Figure 1: A picture."], "img_footnote": [], "bbox": [1, 2, 3, 4],
         "page_idx": 3},
        {"type": "list", "sub_type": "text", "list_items": ["first", "second"], "bbox": [1, 2, 3, 4], "page_idx": 3},
        {"type": "equation", "text": "$$x=1$$", "text_format": "latex", "bbox": [1, 2, 3, 4], "page_idx": 3},
    ]
    p = parse_paper(_mineru_file(tmp_path, items))
    assert p.title == "A Study of Things"
    roles = [(b.page, b.role, b.text) for b in p.blocks]
    assert (4, "body", "More text on page four.") in roles
    assert (4, "table", "a | b") in roles and (4, "table_caption", "Table 1: Things.") in roles
    assert (4, "footnote", "* a note") in roles and (4, "list", "first\nsecond") in roles
    assert (4, "equation", "$$x=1$$") in roles
    cap = next(b for b in p.blocks if b.role == "figure_caption")
    assert cap.attached_to and next(b for b in p.blocks if b.block_id == cap.attached_to).role == "figure"


def test_mineru_truncated_json(tmp_path):
    raw = json.dumps(GOOD_MINERU).encode()
    _expect_error(_mineru_file(tmp_path, None, raw=raw[:-7]), "KEY2", "malformed JSON")


@pytest.mark.parametrize("obj,fragment", [
    ({"a": 1}, "expected a JSON list of content items"),
    ([1, 2], "content item 0 is int"),
    ([], "empty"),
    ([{"text": "no type"}], "no content item has a `type`"),
    ("text", "found str"),
])
def test_mineru_wrong_schema(tmp_path, obj, fragment):
    _expect_error(_mineru_file(tmp_path, obj), "KEY2", fragment)


def test_mineru_empty_file(tmp_path):
    _expect_error(_mineru_file(tmp_path, None, raw=b""), "KEY2", "empty")


def test_mineru_no_text(tmp_path):
    items = [{"type": "image", "img_caption": [], "bbox": [1, 2, 3, 4], "page_idx": 0},
             {"type": "page_number", "text": "1", "bbox": [1, 2, 3, 4], "page_idx": 0},
             {"type": "text", "text": "  ", "bbox": [1, 2, 3, 4], "page_idx": 0}]
    _expect_error(_mineru_file(tmp_path, items), "KEY2", "no text")


def test_mineru_non_utf8_degrades_with_a_warning(tmp_path):
    raw = json.dumps(GOOD_MINERU).encode().replace(b"Some text", b"Some t\xe9xt")
    p = parse_paper(_mineru_file(tmp_path, None, raw=raw))
    assert any("invalid UTF-8" in w for w in p.warnings)
    assert any("\ufffd" in b.text for b in p.blocks if b.role == "body")


def test_mineru_bad_items_warn(tmp_path):
    items = GOOD_MINERU + [{"text": "typeless"}, {"type": "weird", "text": "Weird but text.", "page_idx": None},
                           {"type": "text", "text": "Bad page.", "page_idx": "x", "bbox": "nope"}]
    p = parse_paper(_mineru_file(tmp_path, items))
    assert any("no `type`" in w for w in p.warnings)
    assert any("page_idx" in w for w in p.warnings) and any("weird" in w for w in p.warnings)
    assert {"Weird but text.", "Bad page."} <= {b.text for b in p.blocks}


def test_mineru_matches_names(tmp_path):
    from sheaf.formats import mineru
    assert mineru.matches(Path("x/content_list.json"))
    assert mineru.matches(Path("x/paper_content_list.json"))
    assert not mineru.matches(Path("x/content_list_v2.json"))
    assert not mineru.matches(Path("x/paper_content_list_v2.json"))
    assert not mineru.matches(Path("x/middle.json"))
    d = tmp_path / "papers" / "K"
    d.mkdir(parents=True)
    (d / "content_list_v2.json").write_text("[]")
    (d / "content_list.json").write_text(json.dumps(GOOD_MINERU))
    assert find_input("K", d) == (d / "content_list.json", "mineru")


def test_mineru_panel_label_only_caption_gives_no_empty_caption_block(tmp_path):
    # MinerU splits a two-panel figure into two charts; the first carries only "(a)" as caption
    items = GOOD_MINERU + [
        {"type": "chart", "content": "", "chart_caption": ["(a)"], "bbox": [100, 400, 450, 600], "page_idx": 0},
        {"type": "chart", "content": "", "chart_caption": ["(b)", "Figure 1: Two panels."],
         "bbox": [500, 400, 900, 600], "page_idx": 0},
        {"type": "table", "table_caption": ["(c)"], "table_body": "<table><tr><td>a</td></tr></table>",
         "bbox": [100, 650, 900, 800], "page_idx": 0},
    ]
    p = parse_paper(_mineru_file(tmp_path, items))
    caps = [b for b in p.blocks if b.role in ("figure_caption", "table_caption")]
    assert [c.text for c in caps] == ["Figure 1: Two panels."]
    assert all(c.text.strip() for c in caps)
