"""`sheaf parse`: the JSON envelope, every --stage, --format, a whole library, bad input.

Each check runs the command for real in a subprocess (`python -m sheaf.cli.app`) and/or
in-process through `sheaf.cli.app.main`. Bad input must always give exit != 0 and the error
envelope on stdout (never a traceback); degraded input gives exit 0 with warnings.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sheaf import __version__
from sheaf.cli.app import STAGES, main
from sheaf.core.models import Block
from tests.kits.papers import one_envelope

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "data" / "sample-library"
PAPERS = LIBRARY / "papers"
MD_PAPER = PAPERS / "F7RZ4JDB"  # Markdown, H2/H3 nesting, one figure and one table
PADDLE_PAPER = PAPERS / "QX7HK2MA"  # PaddleOCR-VL, running headers, figures, tables

OK_KEYS = {"ok", "command", "version", "data", "count", "warnings", "next_actions"}
ERROR_KEYS = {"ok", "command", "version", "error"}
BLOCK_FIELDS = set(Block.__dataclass_fields__)
HEADING_FIELDS = {"line_number", "markdown_level", "title", "page", "block_id", "emitted_order"}
EMITTED_FIELDS = {"emitted_order", "line_start", "line_end", "page", "block_id", "role", "emitted_as"}


# --- running the command ---------------------------------------------------------------------

def run_sub(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """`python -m sheaf.cli.app ...` in a fresh process: (exit code, stdout, stderr)."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    proc = subprocess.run([sys.executable, "-m", "sheaf.cli", *args], capture_output=True, text=True,
                          encoding="utf-8", cwd=cwd or ROOT, env=env, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`sheaf.cli.app.main([...])` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def run(mode: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run_sub(*args) if mode == "subprocess" else run_main(capsys, *args)


envelope = one_envelope


def assert_ok_envelope(env: dict[str, Any], count: int | None = None) -> None:
    assert set(env) == OK_KEYS
    assert env["ok"] is True and env["command"] == "parse" and env["version"] == __version__
    assert isinstance(env["data"], dict)
    assert isinstance(env["count"], int) and (count is None or env["count"] == count)
    assert isinstance(env["warnings"], list) and all(isinstance(w, str) for w in env["warnings"])
    assert isinstance(env["next_actions"], list)


def assert_error_envelope(code: int, stdout: str, stderr: str, err_code: str, *fragments: str) -> dict[str, Any]:
    assert code != 0
    assert "Traceback" not in stderr and "Traceback" not in stdout
    env = envelope(stdout)
    assert set(env) == ERROR_KEYS
    assert env["ok"] is False and env["command"] == "parse" and env["version"] == __version__
    err = env["error"]
    assert set(err) >= {"code", "message", "details"} and err["code"] == err_code
    for frag in fragments:
        assert frag in err["message"], (frag, err["message"])
    return env


# --- envelope and stages -------------------------------------------------------------------

def test_json_envelope_through_a_subprocess() -> None:
    code, out, err = run_sub("parse", str(MD_PAPER), "--json")
    assert code == 0, err
    assert "Traceback" not in err
    env = envelope(out)
    assert_ok_envelope(env, count=1)
    data = env["data"]
    assert data["paper_id"] == "F7RZ4JDB" and data["stage"] == "units"
    summary = data["summary"]
    assert summary["source_format"] == "markdown" and summary["body_units"] == len(data["body_units"])
    assert summary["object_units"] == len(data["object_units"]) and len(summary["ocr_result_hash"]) == 64
    assert env["warnings"] == []


def test_console_script_runs_the_same_command(capsys: pytest.CaptureFixture[str]) -> None:
    script = Path(sys.executable).with_name("sheaf")
    if not script.exists():
        pytest.skip(f"console script not installed next to {sys.executable}")
    proc = subprocess.run([str(script), "parse", str(MD_PAPER), "--json", "--stage", "tree"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    code, out, _ = run_main(capsys, "parse", str(MD_PAPER), "--json", "--stage", "tree")
    assert code == 0 and envelope(proc.stdout) == envelope(out)


def _walk(node: dict[str, Any]):
    yield node
    for c in node["children"]:
        yield from _walk(c)


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_gives_its_fields(capsys: pytest.CaptureFixture[str], stage: str) -> None:
    code, out, err = run_main(capsys, "parse", str(PADDLE_PAPER), "--json", "--stage", stage)
    assert code == 0, err
    env = envelope(out)
    assert_ok_envelope(env, count=1)
    data = env["data"]
    assert data["stage"] == stage and data["paper_id"] == "QX7HK2MA" and "summary" in data
    if stage == "blocks":
        blocks = data["blocks"]
        assert blocks and all(set(b) == BLOCK_FIELDS for b in blocks)
        assert [b["order"] for b in blocks] == list(range(len(blocks)))
        assert all(re.fullmatch(r"p\d+:\d+", b["block_id"]) and b["paper_id"] == "QX7HK2MA" for b in blocks)
        assert {"page_header", "page_number", "heading", "body", "figure_caption"} <= {b["role"] for b in blocks}
    elif stage == "markdown":
        md = data["markdown"]
        assert md.startswith("# ") and "<!-- page 2 -->" in md and "\n## " in md
    elif stage == "render-map":
        rm = data["render_map"]
        assert set(rm) == {"headings", "emitted_blocks"}
        assert rm["headings"] and all(set(h) == HEADING_FIELDS for h in rm["headings"])
        assert rm["emitted_blocks"] and all(set(e) == EMITTED_FIELDS for e in rm["emitted_blocks"])
        assert [e["emitted_order"] for e in rm["emitted_blocks"]] == list(range(len(rm["emitted_blocks"])))
        # the line numbers point into this paper's Markdown
        _, md_out, _ = run_main(capsys, "parse", str(PADDLE_PAPER), "--json", "--stage", "markdown")
        lines = envelope(md_out)["data"]["markdown"].split("\n")
        for h in rm["headings"]:
            assert lines[h["line_number"] - 1] == "#" * h["markdown_level"] + " " + h["title"]
            assert rm["emitted_blocks"][h["emitted_order"]]["block_id"] == h["block_id"]
        for e in rm["emitted_blocks"]:
            assert 1 <= e["line_start"] <= e["line_end"] <= len(lines)
            assert e["role"] not in ("page_header", "page_footer", "page_number", "noise")
    elif stage == "tree":
        tree = data["tree"]
        nodes = list(_walk(tree))
        assert tree["node_id"] == "root" and tree["children"]
        assert all("title" in n and isinstance(n["children"], list) for n in nodes)
        assert len(nodes) - 1 == data["summary"]["sections"]
        assert any(n["children"] for n in tree["children"])  # 2.1-style subsections nest
    else:
        body, objects = data["body_units"], data["object_units"]
        assert body and all(u["unit_id"].startswith("QX7HK2MA:body:") and u["text"].strip() for u in body)
        assert objects and all({"unit_id", "label", "caption"} <= set(o) for o in objects)
        assert {o["label"] for o in objects} >= {"Figure 1", "Table 1"}
        assert len({u["unit_id"] for u in body + objects}) == len(body) + len(objects)


def test_markdown_stage_prints_the_markdown_when_not_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "parse", str(MD_PAPER), "--stage", "markdown")
    assert code == 0
    _, js, _ = run_main(capsys, "parse", str(MD_PAPER), "--stage", "markdown", "--json")
    assert out == envelope(js)["data"]["markdown"]


def test_readable_output_is_an_indented_tree_with_unit_counts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "parse", str(MD_PAPER))
    assert code == 0
    _, js, _ = run_main(capsys, "parse", str(MD_PAPER), "--json")
    data = envelope(js)["data"]
    lines = out.splitlines()
    assert lines[0].startswith("F7RZ4JDB  [markdown]")
    assert re.search(r"\d+ blocks, \d+ sections, 13 body units, 2 objects", lines[1])
    rows = [re.fullmatch(r"( +)- (.+?)  \[(\d+) units(?:, (\d+) objects)?\]", ln) for ln in lines[2:]]
    rows = [m for m in rows if m]
    assert len(rows) == data["summary"]["sections"]
    indent = {m.group(2): len(m.group(1)) for m in rows}
    assert indent["2.1 Models"] > indent["2 Methods"] == indent["1 Introduction"]
    units = {m.group(2): int(m.group(3)) for m in rows}
    assert units["2.2 Simulation design"] == 2  # the ~1,400-token paragraph is split in two
    assert sum(units.values()) == len(data["body_units"])
    assert sum(int(m.group(4) or 0) for m in rows) == len(data["object_units"])


# --- --format -----------------------------------------------------------------------------

def test_format_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "NOTE1" / "notes.txt"  # Markdown under a name auto-detection does not know
    notes.parent.mkdir()
    shutil.copyfile(MD_PAPER / "paper.md", notes)
    code, out, err = run_main(capsys, "parse", str(notes.parent), "--json")
    assert_error_envelope(code, out, err, "BAD_INPUT", "NOTE1", "notes.txt")
    code, out, err = run_main(capsys, "parse", str(notes), "--json", "--format", "markdown", "--paper-id", "NOTE1")
    assert code == 0, err
    env = envelope(out)
    assert env["data"]["summary"]["source_format"] == "markdown" and env["data"]["paper_id"] == "NOTE1"
    assert env["data"]["summary"]["body_units"] == 13
    # forcing the right format on a detectable paper changes nothing; a wrong one is refused
    code, forced, _ = run_main(capsys, "parse", str(PADDLE_PAPER), "--json", "--format", "paddleocr-vl")
    _, auto, _ = run_main(capsys, "parse", str(PADDLE_PAPER), "--json")
    assert code == 0 and envelope(forced) == envelope(auto)
    code, out, err = run_main(capsys, "parse", str(PADDLE_PAPER / "result.json"), "--json", "--format", "mineru")
    assert_error_envelope(code, out, err, "BAD_INPUT", "QX7HK2MA", "result.json")


def test_unknown_format_is_a_usage_error() -> None:
    code, out, err = run_sub("parse", str(MD_PAPER), "--format", "word")
    assert code == 2 and out == "" and "invalid choice" in err and "Traceback" not in err


# --- a library folder --------------------------------------------------------------------

def test_library_folder_gives_one_row_per_paper(capsys: pytest.CaptureFixture[str]) -> None:
    keys = sorted(p.name for p in PAPERS.iterdir() if p.is_dir())
    code, out, err = run_sub("parse", str(LIBRARY), "--json")
    assert code == 0, err
    env = envelope(out)
    assert_ok_envelope(env, count=len(keys))
    data = env["data"]
    assert data["layout"] == "plain"
    assert [r["paper_id"] for r in data["papers"]] == keys
    for r in data["papers"]:
        assert "error" not in r and r["body_units"] > 0 and r["sections"] >= 1
    formats = {r["source_format"] for r in data["papers"]}
    assert formats == {"paddleocr-vl", "mineru", "grobid", "docling", "pdf", "markdown"}
    no_headings = next(r for r in data["papers"] if r["paper_id"] == "L2YSNC8V")
    assert no_headings["warnings"] and no_headings["sections"] == 1
    # the readable table: a header, a rule, one line per paper, a total
    code, text, _ = run_main(capsys, "parse", str(LIBRARY))
    assert code == 0
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["paper", "format"] and set(lines[1].replace(" ", "")) == {"-"}
    assert [ln.split()[0] for ln in lines[2:2 + len(keys)]] == keys
    assert f"{len(keys)} parsed, 0 failed, 1 with warnings" in text


def test_library_with_a_broken_paper_names_it_and_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lib = tmp_path / "lib"
    shutil.copytree(PAPERS / "F7RZ4JDB", lib / "papers" / "F7RZ4JDB")
    (lib / "papers" / "BROKEN1").mkdir()
    (lib / "papers" / "BROKEN1" / "content_list.json").write_text('[{"type": "text", "te', encoding="utf-8")
    code, out, err = run_main(capsys, "parse", str(lib), "--json")
    assert code != 0 and "Traceback" not in err
    env = envelope(out)
    rows = {r["paper_id"]: r for r in env["data"]["papers"]}
    assert set(rows) == {"F7RZ4JDB", "BROKEN1"} and "error" not in rows["F7RZ4JDB"]
    assert rows["BROKEN1"]["error"]["path"].endswith("content_list.json")
    assert any("BROKEN1" in w for w in env["warnings"])


# --- bad input ------------------------------------------------------------------------------

def _paddle(blocks: list[dict], pages: int = 1) -> str:
    page = {"prunedResult": {"width": 1000, "height": 1400, "parsing_res_list": blocks}}
    return json.dumps([{"layoutParsingResults": [page] * pages}])


def _pblk(label: str, text: str, box=(100, 100, 900, 160), order=None) -> dict:
    return {"block_label": label, "block_content": text, "block_bbox": list(box), "block_order": order}


GOOD_PADDLE = _paddle([
    _pblk("doc_title", "A Study of Things", order=1),
    _pblk("paragraph_title", "1 Introduction", (100, 200, 500, 230), 2),
    _pblk("text", "Some text about things.", (100, 240, 900, 400), 3),
    _pblk("number", "1", (480, 1350, 520, 1380)),
])

#: name -> (paper key, file name, bytes, error code, fragments of the message)
BAD_INPUTS: dict[str, tuple[str, str, bytes, str, tuple[str, ...]]] = {
    "truncated-paddle-json": ("TRUNC1", "result.json", GOOD_PADDLE[:70].encode(), "BAD_INPUT", ("malformed JSON",)),
    "truncated-mineru-json": ("TRUNC2", "content_list.json", b'[{"type": "text", "text": "abc', "BAD_INPUT",
                              ("malformed JSON",)),
    "wrong-schema-paddle": ("SCHEMA1", "result.json", b'{"layoutParsingResults": 5}', "BAD_INPUT",
                            ("expected a list of pages",)),
    "wrong-schema-mineru": ("SCHEMA2", "content_list.json", b'{"foo": 1}', "BAD_INPUT", ("expected a JSON list",)),
    "empty-file": ("EMPTY1", "content_list.json", b"", "BAD_INPUT", ("empty",)),
    "empty-markdown": ("EMPTY2", "paper.md", b"", "BAD_INPUT", ("empty",)),
    "no-text": ("NOTEXT1", "result.json",
                _paddle([_pblk("image", ""), _pblk("number", "3", (480, 1350, 520, 1380))]).encode(),
                "BAD_INPUT", ("no text",)),
    "no-text-markdown": ("NOTEXT2", "paper.md", b"<!-- page 1 -->\n\n<!-- page 2 -->\n", "BAD_INPUT", ("no text",)),
}


@pytest.mark.parametrize("mode", ["subprocess", "in-process"])
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gives_the_error_envelope(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str,
                                            mode: str) -> None:
    key, name, raw, err_code, fragments = BAD_INPUTS[case]
    f = tmp_path / key / name
    f.parent.mkdir()
    f.write_bytes(raw)
    for target in (f.parent, f):  # the paper's folder, and the file itself
        code, out, err = run(mode, capsys, "parse", str(target), "--json")
        env = assert_error_envelope(code, out, err, err_code, key, name, *fragments)
        details = env["error"]["details"]
        assert details["paper_id"] == key and details["path"] == str(f)
    # without --json: a one-line error on stderr, nothing on stdout, still no traceback
    code, out, err = run(mode, capsys, "parse", str(f.parent))
    assert code != 0 and out == "" and err.startswith(f"error [{err_code}]") and "Traceback" not in err


@pytest.mark.parametrize("mode", ["subprocess", "in-process"])
def test_unrecognised_file_in_a_paper_folder_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     mode: str) -> None:
    f = tmp_path / "ODD1" / "result.json"  # not PaddleOCR-VL (no layoutParsingResults): not detected
    f.parent.mkdir()
    f.write_text('{"foo": 1}', encoding="utf-8")
    code, out, err = run(mode, capsys, "parse", str(f.parent), "--json")
    assert_error_envelope(code, out, err, "BAD_INPUT", "ODD1", "result.json", "found no")


@pytest.mark.parametrize("mode", ["subprocess", "in-process"])
def test_missing_path_is_not_found(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str) -> None:
    missing = tmp_path / "NOPE1" / "result.json"
    code, out, err = run(mode, capsys, "parse", str(missing), "--json")
    env = assert_error_envelope(code, out, err, "NOT_FOUND", str(missing))
    assert env["error"]["details"]["path"] == str(missing)
    code, out, err = run(mode, capsys, "parse", str(missing))
    assert code != 0 and out == "" and "NOT_FOUND" in err and "Traceback" not in err


@pytest.mark.parametrize("mode", ["subprocess", "in-process"])
def test_no_headings_is_a_warned_one_section_result(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   mode: str) -> None:
    f = tmp_path / "FLAT1" / "paper.md"
    f.parent.mkdir()
    f.write_text("A first paragraph with no heading above it.\n\nA second paragraph.\n", encoding="utf-8")
    code, out, err = run(mode, capsys, "parse", str(f.parent), "--json", "--stage", "tree")
    assert code == 0, err
    env = envelope(out)
    assert_ok_envelope(env, count=1)
    assert env["warnings"] and any("no headings" in w for w in env["warnings"])
    tree = env["data"]["tree"]
    assert len(tree["children"]) == 1 and tree["children"][0]["children"] == []
    assert env["data"]["summary"]["sections"] == 1 and env["data"]["summary"]["body_units"] == 1
    code, text, _ = run(mode, capsys, "parse", str(f.parent))
    assert code == 0 and "warning: no headings" in text


@pytest.mark.parametrize("mode", ["subprocess", "in-process"])
@pytest.mark.parametrize("fmt", ["markdown", "paddleocr-vl"])
def test_non_utf8_bytes_give_a_warned_degraded_result(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     mode: str, fmt: str) -> None:
    if fmt == "markdown":
        f = tmp_path / "LATIN1" / "paper.md"
        raw = "# A Title\n\n## 1 Intro\n\nCaf\u00e9 au lait, na\u00efve.\n".encode("latin-1")
    else:
        f = tmp_path / "LATIN1" / "result.json"
        raw = GOOD_PADDLE.encode().replace(b"Some text", b"Some t\xe9xt \xff\xfe")
    f.parent.mkdir()
    f.write_bytes(raw)
    code, out, err = run(mode, capsys, "parse", str(f.parent), "--json")
    assert code == 0, err
    env = envelope(out)
    assert_ok_envelope(env, count=1)
    assert any("UTF-8" in w for w in env["warnings"])
    text = "\n".join(u["text"] for u in env["data"]["body_units"])
    assert "\ufffd" in text  # the undecodable bytes are replaced, the rest is kept
    assert ("au lait" in text) if fmt == "markdown" else ("Some t" in text)


# --- a 500-page paper ------------------------------------------------------------------------

def _paddle_500(path: Path) -> None:
    pages = []
    for i in range(500):
        n = i + 1
        pages.append({"prunedResult": {"width": 1000, "height": 1400, "parsing_res_list": [
            _pblk("header", "Journal of Synthetic Results", (100, 20, 600, 50)),
            _pblk("paragraph_title", f"{n} Section {n}", (100, 100, 600, 130), 1),
            _pblk("text", f"Paragraph of page {n} with enough words to look like running text. " * 4,
                  (100, 140, 900, 600), 2),
            _pblk("image", "", (100, 700, 900, 1100)),
            _pblk("figure_title", f"Figure {n}. A synthetic figure.", (100, 1110, 900, 1150)),
            _pblk("number", str(n), (480, 1350, 520, 1380)),
        ]}})
    path.parent.mkdir(parents=True)
    lines = [json.dumps({"layoutParsingResults": pages[k:k + 100]}) for k in range(0, 500, 100)]
    path.write_text("\n".join(lines), encoding="utf-8")  # five result lines, page index runs on


def _markdown_500(path: Path) -> None:
    md = ["# A Very Long Synthetic Paper", ""]
    for n in range(1, 501):
        md += [f"<!-- page {n} -->", "", f"## {n} Section {n}", "", f"Text of page {n}, sentence after sentence. " * 10, ""]
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(md), encoding="utf-8")


@pytest.mark.parametrize("fmt", ["paddleocr-vl", "markdown"])
def test_500_page_paper_parses_in_reasonable_time(tmp_path: Path, fmt: str) -> None:
    f = tmp_path / "BIG500" / ("result.json" if fmt == "paddleocr-vl" else "paper.md")
    (_paddle_500 if fmt == "paddleocr-vl" else _markdown_500)(f)
    t0 = time.perf_counter()
    code, out, err = run_sub("parse", str(f.parent), "--json", "--stage", "blocks")
    elapsed = time.perf_counter() - t0
    assert code == 0, err[-2000:]
    assert elapsed < 30, f"500 pages took {elapsed:.1f} s"
    env = envelope(out)
    blocks = env["data"]["blocks"]
    assert {b["page"] for b in blocks} == set(range(1, 501))
    assert sum(1 for b in blocks if b["role"] == "heading") == 500
    assert env["data"]["summary"]["sections"] >= 500
    if fmt == "paddleocr-vl":
        assert sum(1 for b in blocks if b["role"] == "figure_caption" and b["attached_to"]) == 500
        assert all(b["role"] == "page_header" for b in blocks if b["text"] == "Journal of Synthetic Results")
