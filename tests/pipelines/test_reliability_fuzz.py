"""Hostile input: every input adapter fuzzed with malformed files (hypothesis, >= 200 generated
inputs per format), and hostile paper keys.

Each input is a real file on disk, parsed through `parse_paper` with its format forced (as a
library whose file has the right name would be). Mutation classes: truncation, wrong types
(a node of the document replaced by a value of another type), huge strings, deep nesting,
NUL bytes, invalid UTF-8, absurd bboxes/page numbers/sizes, random bytes, a wrong root, empty
files, and (XML) entity declarations.

Every case must end in one of two ways, for that paper only:
- a named `IngestError` (paper id, file path and a message), or
- a parsed paper whose blocks are valid (pages in range, bboxes in 0-1, no NUL, known roles)
  and which goes through every later stage without an exception: render, tree, units, the
  Arrow artifacts (int32 pages!) and an index write. An exception anywhere else would fail
  the whole Dagster step, i.e. every paper batched with this one.
Inputs that are certainly damaged in the text (invalid UTF-8 in a text format) must also be
*warned* about when they parse.
"""
from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sheaf.core.models import ROLES, IngestError
from sheaf.formats import parse_paper

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample-library" / "papers"
EXAMPLES_FLOOR = 200
EXAMPLES = int(os.environ.get("SHEAF_FUZZ_EXAMPLES", "210"))
MIN_EXAMPLES = min(EXAMPLES_FLOOR, EXAMPLES)  # the env knob is for quick local runs only
PAPER = "FUZZ1"

BASES: dict[str, tuple[str, str]] = {
    "paddleocr-vl": ("QX7HK2MA", "result.json"),
    "mineru": ("W6TB4YRS", "content_list.json"),
    "grobid": ("H8VCN5GZ", "paper.tei.xml"),
    "docling": ("D2LPA7XK", "paper.docling.json"),
    "markdown": ("F7RZ4JDB", "paper.md"),
    "pdf": ("P9KE3UHB", "paper.pdf"),
}
JSON_FORMATS = {"paddleocr-vl", "mineru", "docling"}
TEXT_FORMATS = JSON_FORMATS | {"grobid", "markdown"}

COMMON = ["truncate", "huge_string", "deep_nesting", "nul_bytes", "invalid_utf8", "absurd_numbers",
          "random_bytes", "empty"]
CLASSES: dict[str, list[str]] = {
    **{f: COMMON + ["wrong_type", "wrong_root"] for f in JSON_FORMATS},
    "grobid": COMMON + ["wrong_type", "wrong_root", "entities"],
    "markdown": COMMON + ["wrong_type"],
    "pdf": COMMON + ["wrong_root"],
}
#: format -> mutation class -> outcome -> count (reported in docs/benchmarks.md)
OUTCOMES: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))

ABSURD = [1e308, -1e308, float("nan"), float("inf"), -float("inf"), -5, 0, 2 ** 63, 10 ** 30, -(2 ** 31) - 1,
          2 ** 31, 1e-320, 123456789012]
NUMERIC_KEYS = {"bbox", "block_bbox", "page_idx", "page_no", "page", "width", "height", "page_index", "l", "t",
                "r", "b", "size", "page_count", "text_level", "level", "block_order", "prov", "coord_origin",
                "block_id", "group_id", "global_block_id", "global_group_id", "page_size", "pages"}


def _base(fmt: str) -> bytes:
    key, name = BASES[fmt]
    return (SAMPLE / key / name).read_bytes()


# --- tree helpers for JSON documents -----------------------------------------------------------

def _paths(obj: Any, limit: int = 20000) -> list[tuple[Any, Any]]:
    """(container, key) of every node below the root (breadth first, capped)."""
    out: list[tuple[Any, Any]] = []
    todo = [obj]
    while todo and len(out) < limit:
        node = todo.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k))
            if isinstance(v, (dict, list)):
                todo.append(v)
    return out


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, allow_nan=True).encode("utf-8")


junk_values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.lists(st.integers(min_value=-10 ** 12, max_value=10 ** 12), max_size=6),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=3), st.just([[]]), st.just({"": None}),
)


# --- mutations ---------------------------------------------------------------------------------

def mutate(fmt: str, cls: str, data: st.DataObject) -> bytes:
    raw = _base(fmt)
    rnd = random.Random(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    if cls == "truncate":
        return raw[: data.draw(st.integers(0, len(raw) - 1), label="cut")]
    if cls == "empty":
        return data.draw(st.sampled_from([b"", b"   \n\t", b"\xef\xbb\xbf", b"\x00", b"\n" * 1000]), label="empty")
    if cls == "nul_bytes":
        b = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 50), label="n")):
            b.insert(rnd.randrange(len(b) + 1), 0)
        if fmt in JSON_FORMATS and rnd.random() < 0.5:  # NULs inside string values, validly escaped
            return bytes(raw).replace(b'"text": "', b'"text": "\\u0000\\u0000', rnd.randint(1, 30))
        return bytes(b)
    if cls == "invalid_utf8":
        b = bytearray(raw)
        seqs = [b"\xff", b"\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xc0\xaf"]
        if fmt in TEXT_FORMATS and rnd.random() < 0.6:  # inside text, where decoding must warn
            hits = [m.end() for m in re.finditer(rb'"text": "|<p>|\n\n[A-Z]', raw)]
            for pos in sorted(rnd.sample(hits, min(len(hits), rnd.randint(1, 8))), reverse=True):
                b[pos:pos] = rnd.choice(seqs)
        else:
            for _ in range(data.draw(st.integers(1, 20), label="n")):
                b[rnd.randrange(len(b) + 1):0] = rnd.choice(seqs)
        return bytes(b)
    if cls == "random_bytes":
        b = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 200), label="n")):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        return bytes(b)
    if fmt in JSON_FORMATS:
        return _mutate_json(fmt, cls, raw, data, rnd)
    if fmt == "grobid":
        return _mutate_xml(cls, raw, data, rnd)
    if fmt == "markdown":
        return _mutate_md(cls, raw, data, rnd)
    return _mutate_pdf(cls, raw, data, rnd)


def _mutate_json(fmt: str, cls: str, raw: bytes, data: st.DataObject, rnd: random.Random) -> bytes:
    doc = json.loads(raw)
    paths = _paths(doc)
    if cls == "wrong_root":
        return _dumps(data.draw(st.one_of(junk_values, st.just([doc]), st.just({"result": doc}),
                                          st.just({"result": {"result": {"result": {"result": doc}}}}),
                                          st.just([1, "x", None]), st.just({"errorCode": 500, "errorMsg": "boom"})),
                                label="root"))
    if cls == "wrong_type":
        for _ in range(data.draw(st.integers(1, 25), label="n")):
            node, k = paths[rnd.randrange(len(paths))]
            node[k] = data.draw(junk_values, label="value")
        return _dumps(doc)
    if cls == "absurd_numbers":
        numeric = [(n, k) for n, k in paths if (isinstance(k, str) and k in NUMERIC_KEYS)
                   or isinstance(n[k], (int, float)) and not isinstance(n[k], bool)]
        for _ in range(data.draw(st.integers(1, 40), label="n")):
            node, k = numeric[rnd.randrange(len(numeric))]
            v = node[k]
            if isinstance(v, list) or (isinstance(k, str) and "bbox" in k):
                node[k] = [rnd.choice(ABSURD) for _ in range(rnd.choice([0, 1, 3, 4, 4, 4, 8]))]
            else:
                node[k] = rnd.choice(ABSURD)
        return _dumps(doc)
    if cls == "huge_string":
        strings = [(n, k) for n, k in paths if isinstance(n[k], str)]
        node, k = strings[rnd.randrange(len(strings))]
        n = data.draw(st.integers(50_000, 1_500_000), label="len")
        unit = rnd.choice(["word ", "α", "x", "Ω\u0301 ", "<td>", "1.2.3.4 ", "Fig. 1 "])
        node[k] = unit * (n // len(unit))
        return _dumps(doc)
    if cls == "deep_nesting":
        node, k = paths[rnd.randrange(len(paths))]
        node[k] = "__DEEP__"
        depth = data.draw(st.integers(200, 200_000), label="depth")
        opener, closer = rnd.choice([("[", "]"), ('{"a":', "}")])
        return _dumps(doc).replace(b'"__DEEP__"', (opener * depth + "1" + closer * depth).encode(), 1)
    raise AssertionError(cls)


def _mutate_xml(cls: str, raw: bytes, data: st.DataObject, rnd: random.Random) -> bytes:
    text = raw.decode("utf-8")
    if cls == "wrong_root":
        return data.draw(st.sampled_from([b"<html><body><p>x</p></body></html>", b"<TEI/>", b"<a>",
                                          b"not xml at all", b"<?xml version='1.0'?>",
                                          b'<TEI xmlns="http://www.tei-c.org/ns/1.0"><text/></TEI>',
                                          b"<TEI><text><body><div><head>1</head></div></body></text></TEI>"]))
    if cls == "entities":
        bomb = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;'
                '&lol;&lol;&lol;&lol;&lol;&lol;"><!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;'
                '&lol2;&lol2;">]>')
        xxe = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
        head = rnd.choice([bomb, xxe])
        body = re.sub(r"^\s*<\?xml[^>]*\?>", "", text, count=1)
        body = body.replace("<p>", "<p>" + rnd.choice(["&lol3;", "&xxe;"]), 1)
        return (head + body).encode()
    if cls == "wrong_type":  # structure broken: elements dropped, duplicated or renamed
        tags = [m for m in re.finditer(r"<(/?)([A-Za-z][\w:]*)([^>]*)>", text)]
        b = text
        for _ in range(data.draw(st.integers(1, 15), label="n")):
            m = rnd.choice(tags)
            op = rnd.choice(["drop", "rename", "dup"])
            if op == "drop":
                b = b.replace(m.group(0), "", 1)
            elif op == "rename":
                b = b.replace(m.group(0), f"<{m.group(1)}zz{m.group(3)}>", 1)
            else:
                b = b.replace(m.group(0), m.group(0) * 2, 1)
        return b.encode()
    if cls == "absurd_numbers":
        vals = ["1e308", "-1e308", "nan", "inf", "-5", "0", "99999999999999999999", "x", "", "1,2", "-0"]

        def coords(_: re.Match) -> str:
            return 'coords="' + ";".join(",".join(rnd.choice(vals) for _ in range(rnd.choice([1, 4, 5, 5, 9])))
                                         for _ in range(rnd.randint(1, 3))) + '"'
        t = re.sub(r'coords="[^"]*"', coords, text)
        t = re.sub(r'\bn="[^"]*"', lambda m: f'n="{rnd.choice(vals + ["1.1.1.1.1.1.1.1.1.1.1.1", "IV.2.a"])}"', t)
        if rnd.random() < 0.3:
            t = t.replace("<body>", '<body><pb n="-3" coords="1e308,0,0,0,0"/><pb n="999999999999"/>', 1)
        return t.encode()
    if cls == "huge_string":
        n = data.draw(st.integers(50_000, 1_500_000), label="len")
        return text.replace("<p>", "<p>" + "word " * (n // 5), 1).encode()
    if cls == "deep_nesting":
        depth = data.draw(st.integers(200, 100_000), label="depth")
        tag = rnd.choice(["div", "hi", "p", "ref"])
        return text.replace("<body>", "<body>" + f"<{tag}>" * depth + "deep" + f"</{tag}>" * depth, 1).encode()
    raise AssertionError(cls)


def _mutate_md(cls: str, raw: bytes, data: st.DataObject, rnd: random.Random) -> bytes:
    text = raw.decode("utf-8")
    lines = text.split("\n")
    if cls == "wrong_type":  # binary junk, control characters, a lone fence, stray HTML
        junk = rnd.choice(["\x01\x02\x1b[31m", "```", "<table><tr><td>", "$$", "|||", "\r\r\r", "\u202e\u200b",
                           "![](", "<!-- page", "# ", "######## too deep"])
        for _ in range(data.draw(st.integers(1, 30), label="n")):
            lines.insert(rnd.randrange(len(lines) + 1), junk)
        return "\n".join(lines).encode()
    if cls == "absurd_numbers":
        for _ in range(data.draw(st.integers(1, 10), label="n")):
            v = rnd.choice(["0", "-1", "999999999999", "5001", "1e9", "2147483648", "00000000000000000000007"])
            lines.insert(rnd.randrange(len(lines) + 1), f"<!-- page {v} -->")
        lines.insert(rnd.randrange(len(lines) + 1), "#" * rnd.randint(1, 60) + " Heading 9.9.9.9.9.9.9.9.9.9.9.9")
        return "\n".join(lines).encode()
    if cls == "huge_string":
        n = data.draw(st.integers(50_000, 1_500_000), label="len")
        unit = rnd.choice(["word ", "x", "Ω ", "| a | b |\n", "# h\n", "\n"])
        if unit == "# h\n":  # many headings rather than one huge string: ~10 µs each, keep it short
            n = min(n, 80_000)
        lines.insert(rnd.randrange(len(lines) + 1), unit * (n // len(unit)))
        return "\n".join(lines).encode()
    if cls == "deep_nesting":
        depth = data.draw(st.integers(200, 100_000), label="depth")
        unit = rnd.choice([">", "- ", "  ", "[", "*"])
        lines.insert(rnd.randrange(len(lines) + 1), unit * depth + "deep")
        return "\n".join(lines).encode()
    raise AssertionError(cls)


def _mutate_pdf(cls: str, raw: bytes, data: st.DataObject, rnd: random.Random) -> bytes:
    if cls == "wrong_root":
        return data.draw(st.sampled_from([b"%PDF-1.7\n", b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF",
                                          b"%PDF-" + bytes(range(256)) * 4, b"{\"not\": \"a pdf\"}",
                                          b"%PDF-1.7\n" + b"\x00" * 5000 + b"\n%%EOF"]))
    if cls == "absurd_numbers":
        vals = [b"1e308", b"-99999999999", b"0", b"-1", b"99999999999999999999", b"nan", b"2147483648"]
        out = re.sub(rb"/MediaBox\s*\[[^\]]*\]", lambda m: b"/MediaBox [" + b" ".join(rnd.choice(vals) for _ in range(4))
                     + b"]", raw)
        out = re.sub(rb"/Count\s+\d+", lambda m: b"/Count " + rnd.choice(vals), out)
        out = re.sub(rb"(\d+\.?\d*) Tf", lambda m: rnd.choice(vals) + b" Tf", out) if rnd.random() < 0.5 else out
        return out
    if cls == "huge_string":
        n = data.draw(st.integers(50_000, 3_000_000), label="len")
        pos = rnd.randrange(len(raw))
        return raw[:pos] + b"A" * n + raw[pos:]
    if cls == "deep_nesting":
        depth = data.draw(st.integers(200, 100_000), label="depth")
        pos = raw.find(b"<<") + 2
        return raw[:pos] + b"/Deep " + b"[" * depth + b"]" * depth + b" " + raw[pos:]
    raise AssertionError(cls)


# --- what every outcome must satisfy ------------------------------------------------------------

def _check_parsed(paper: Any, fmt: str) -> None:
    from sheaf.formats.common import MAX_PAGES
    from sheaf.store.artifacts import (
        body_units_to_table,
        object_units_to_table,
        paper_to_table,
    )
    from sheaf.store.sqlite.writer import replace_paper
    from sheaf.transform.chain import units_from_paper

    assert paper.paper_id == PAPER
    ids = set()
    for b in paper.blocks:
        assert isinstance(b.page, int) and 1 <= b.page <= MAX_PAGES, b.page
        assert b.role in ROLES, b.role
        assert isinstance(b.text, str) and "\x00" not in b.text
        assert b.block_id not in ids
        ids.add(b.block_id)
        if b.bbox is not None:
            assert len(b.bbox) == 4 and all(isinstance(v, float) and math.isfinite(v) and 0 <= v <= 1 for v in b.bbox)
        if b.heading_level is not None:
            assert isinstance(b.heading_level, int) and 0 <= b.heading_level <= 64, b.heading_level
    out = units_from_paper(paper)
    assert "\x00" not in out.render.markdown
    paper_to_table(paper)
    body_units_to_table(out.body_units)
    object_units_to_table(out.object_units)
    replace_paper(_index(), PAPER, out.body_units, out.object_units)


_CONN: list[Any] = []


def _index():
    if not _CONN:
        from sheaf.store.sqlite.schema import open_index

        _CONN.append(open_index(":memory:"))
    return _CONN[0]


def _run_one(fmt: str, cls: str, payload: bytes, folder: Path) -> str:
    name = BASES[fmt][1]
    f = folder / name
    f.write_bytes(payload)
    warnings_before: list[str] = []
    try:
        paper = parse_paper(f, PAPER, fmt)
    except IngestError as e:
        assert e.paper_id == PAPER and e.path and str(f) in e.path, (e.paper_id, e.path)
        assert e.message.strip(), "an IngestError without a message"
        assert PAPER in str(e)
        return "IngestError"
    del warnings_before
    _check_parsed(paper, fmt)
    if cls == "invalid_utf8" and fmt in TEXT_FORMATS:
        assert any("UTF-8" in w for w in paper.warnings), paper.warnings
    return "parsed with warnings" if paper.warnings else "parsed"


@pytest.mark.parametrize("fmt", sorted(BASES))
def test_adapter_fuzz(fmt: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix=f"sheaf-fuzz-{fmt}-"))
    seen = Counter()
    per_class = -(-EXAMPLES // len(CLASSES[fmt]))  # every class gets its share
    def fuzz_class(cls: str) -> None:
        @settings(max_examples=per_class, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck), print_blob=True)
        @given(data=st.data())
        def one(data: st.DataObject) -> None:
            payload = mutate(fmt, cls, data)
            outcome = _run_one(fmt, cls, payload, folder)
            seen[cls] += 1
            OUTCOMES[fmt][cls][outcome] += 1

        one()

    try:
        for cls in CLASSES[fmt]:
            fuzz_class(cls)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    total = sum(seen.values())
    assert total >= MIN_EXAMPLES, (fmt, total)
    assert set(seen) == set(CLASSES[fmt]), (fmt, seen)
    from tests.kits import reliability as kit

    kit.report(f"fuzz-{fmt}", {c: dict(v) for c, v in OUTCOMES[fmt].items()})


# --- paper keys that would escape the data folder ------------------------------------------------

HOSTILE_KEYS = ["../x", "..", ".", "...", "..x", "x..", "a/../b", "/etc/passwd", "/abs", "a/b", "a\\b", "C:\\x",
                "", " ", "x\x00y", "~", "~/x", "a b", "ünï", "x\n", "%2e%2e", "..%2f", "-rf /", "\u2024\u2024"]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.one_of(st.sampled_from(HOSTILE_KEYS),
                 st.text(min_size=0, max_size=12).filter(lambda s: not re.fullmatch(r"[A-Za-z0-9._-]+", s)
                                                          or ".." in s or s in (".", "")),
                 st.builds(lambda a, b: f"{a}/{b}", st.text(max_size=5), st.text(max_size=5)),
                 st.builds(lambda a: f"{a}..{a}", st.text(alphabet="abc.", max_size=4))))
def test_hostile_paper_keys_are_refused_everywhere(key: str) -> None:
    from io_managers.parquet import artifact_path, delete_artifacts, write_artifact
    from pipelines.partitions import split_valid_keys
    from sheaf.core.models import PaperMeta, valid_paper_key
    from sheaf.store.sqlite.writer import replace_paper, upsert_papers

    assert not valid_paper_key(key), key
    root = Path(tempfile.gettempdir()) / "sheaf-keys-root"
    with pytest.raises(ValueError):
        artifact_path(root, "ocr_blocks", key, ".parquet")
    with pytest.raises(ValueError):
        write_artifact(root, "ocr_blocks", key, {"x": 1})
    if root.is_dir():
        with pytest.raises(ValueError):
            delete_artifacts(root, key)
    assert split_valid_keys([key, "GOOD1"]) == (["GOOD1"], [key])
    with pytest.raises(ValueError):
        replace_paper(_index(), key, [], [])
    with pytest.raises(ValueError):
        upsert_papers(_index(), [PaperMeta(key=key, citation_key=None, title="t", authors=(), first_author=None,
                                          year=None, journal=None, doi=None, pmid=None, abstract=None,
                                          collections=(), domain=None, item_type="journalArticle", source="x")])


def test_hostile_folder_names_and_metadata_keys_are_skipped(tmp_path: Path) -> None:
    from sheaf.library.discover import discover
    from sheaf.library.metadata import load_metadata_file

    papers = tmp_path / "lib" / "papers"
    for name in ("GOOD1", "...", "..x", "a..b", "sp ace", "ünï", "x;y", ".hidden"):
        (papers / name).mkdir(parents=True)
        (papers / name / "paper.md").write_text("# T\n\nText.\n")
    d = discover(tmp_path / "lib")
    assert [p.key for p in d.papers] == ["GOOD1"]  # "...", "..x", ".hidden": dot folders are skipped
    assert set(d.invalid_keys) == {"a..b", "sp ace", "ünï", "x;y"}
    export = tmp_path / "lib" / "library.json"
    export.write_text(json.dumps({"items": [
        {"key": k, "itemType": "journalArticle", "title": "t"} for k in ("GOOD1", "../x", "/abs", "...", "a/b")]}))
    load = load_metadata_file(export)
    assert [p.key for p in load.papers] == ["GOOD1"]
    assert len(load.warnings) == 4
