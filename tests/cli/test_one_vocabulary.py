"""Every surface names the same things the same way: the unit kinds `--kind` takes (body,
object, note, annotation, all) on each command that filters units, the Zotero link in the text
output, no page for a note that has none, and the report's papers counted once each.

A small index is built here from a Zotero paper's source manifest (its reading as a build does
it: a Markdown attachment, two annotations, one with a page and one without, and a child note),
beside a sample paper with figures, without Dagster or vectors (lexical mode)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sheaf.cli.app import main
from sheaf.core.defaults import KINDS, unit_kind_of
from sheaf.core.models import PaperMeta
from sheaf.formats.zotero_source import MANIFEST_FORMAT
from sheaf.store.sqlite import schema as ix
from sheaf.store.sqlite import writer as wr
from sheaf.transform.chain import process_paper
from tests.kits.papers import one_envelope

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample-library"
ZKEY, OKEY = "ZNOTE001", "W6TB4YRS"
NOTE = "My own note: the zebrafish regenerate their fins within a fortnight."
HIGHLIGHT = "Zebrafish fin regeneration is complete after fourteen days."
LINK = f"zotero://select/library/items/{ZKEY}"
PAGELESS = "An annotation on zebrafish whose page Zotero did not record."


def zotero_manifest(dest: Path) -> Path:
    """A Zotero paper's source manifest (what `sheaf.library.zotero_mirror` writes): one attachment
    (the sample's Markdown paper), a highlight on page 3 with a comment, one without a page, a note."""
    m = {"format": MANIFEST_FORMAT, "version": "2", "key": ZKEY,
         "sources": [{"attachment": "ATT00001", "title": "Full Text",
                      "path": str(SAMPLE / "papers" / "L2YSNC8V" / "paper.md"), "format": "auto"}],
         "annotations": [{"type": "highlight", "text": HIGHLIGHT, "comment": "zebrafish again", "page": 3},
                         {"type": "highlight", "text": PAGELESS, "page": None}],
         "notes": [{"text": NOTE}]}
    path = dest / f"{ZKEY}.zotero.json"
    path.write_text(json.dumps(m), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def kinds_index(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kinds")
    conn = ix.open_index(root / "sheaf.db")
    wr.upsert_papers(conn, [PaperMeta(ZKEY, None, "Zebrafish fins", ("Ada Lovelace",), "Ada Lovelace", 2021,
                                      None, None, None, None, (), None, link=LINK)])
    for key, path in ((ZKEY, zotero_manifest(root)), (OKEY, SAMPLE / "papers" / OKEY)):
        out = process_paper(path, key)
        wr.replace_paper(conn, key, out.body_units, out.object_units)
    conn.close()
    return root / "sheaf.db"


@pytest.fixture()
def env(kinds_index, tmp_path, monkeypatch):
    monkeypatch.setenv("SHEAF_INDEX_FILE", str(kinds_index))
    monkeypatch.setenv("SHEAF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHEAF_LIBRARY", str(SAMPLE))
    monkeypatch.delenv("SHEAF_INDEX_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "110")


@pytest.fixture(scope="module")
def validator():
    """The result envelope's JSON schema (docs/result-envelope.schema.json)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((SAMPLE.parents[1] / "docs" / "result-envelope.schema.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def cli(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main([*args, "--no-server", "--json"])
    return code, one_envelope(capsys.readouterr().out)


def test_the_vocabulary_of_kinds():
    assert KINDS == ("body", "object", "note", "annotation", "backmatter", "all")
    assert [unit_kind_of(u) for u in ("K:body:sec_p1_0", "K:body:sec_p1_0:part_002", "K:body:root:note",
                                      "K:body:sec_a2_p1_0:annotation:part_001", "K:body:sec_p1_0:backmatter",
                                      "K:figure:p3:4", "K:table:p2:1")] == \
        ["body", "body", "note", "annotation", "body", "object", "object"]


@pytest.mark.parametrize("kind, sources", [("note", {"note"}), ("annotation", {"annotation"}),
                                           ("body", {"body", "backmatter"}), ("object", {"figure", "table"}),
                                           ("backmatter", {"backmatter"})])
def test_retrieve_kind_takes_every_unit_kind(env, capsys, validator, kind, sources):
    code, e = cli(capsys, "retrieve", "zebrafish", "OR", "flower", "OR", "figure", "OR", "thank", "--mode", "lexical",
                  "--kind", kind, "--per-paper", "0", "--limit", "50")
    assert code == 0 and e["ok"], e
    validator.validate(e)
    assert e["data"]["kind"] == kind
    got = {m["source"] for m in e["data"]["matches"]}
    assert got and got <= sources, got


def test_retrieve_all_holds_every_kind(env, capsys):
    code, e = cli(capsys, "retrieve", "zebrafish", "--mode", "lexical", "--per-paper", "0", "--limit", "50")
    assert code == 0
    assert {"note", "annotation"} <= {m["source"] for m in e["data"]["matches"]}


@pytest.mark.parametrize("kind, sources", [("note", {"note"}), ("annotation", {"annotation"}),
                                           ("all", {"note", "annotation"}), ("body", set())])
def test_grep_kind_takes_every_unit_kind(env, capsys, validator, kind, sources):
    code, e = cli(capsys, "grep", "zebrafish", "--kind", kind)
    assert code == 0 and e["ok"], e
    validator.validate(e)
    assert {m["source"] for m in e["data"]["matches"]} == sources


@pytest.mark.parametrize("term, kind, found", [
    ("fortnight", "note", [(ZKEY, "note")]), ("fortnight", "annotation", []), ("fortnight", "body", []),
    ("fourteen", "annotation", [(ZKEY, "annotation")]), ("fourteen", "note", []),
    ("fortnight", "all", [(ZKEY, "note")]), ("bumblebees", "object", [(OKEY, "figure")])])
def test_search_kind_finds_papers_by_their_units_of_that_kind(env, capsys, validator, term, kind, found):
    """`search --kind note` finds a paper by its notes (the evidence shown is the note), and not
    by a word its notes do not hold."""
    code, e = cli(capsys, "search", term, "--kind", kind)
    assert code == 0 and e["ok"] and e["data"]["kind"] == kind, e
    validator.validate(e)
    assert [(m["zotero_key"], m["source"]) for m in e["data"]["matches"]] == found


def test_a_note_and_a_pageless_annotation_have_no_page(env, capsys):
    code, e = cli(capsys, "grep", "zebrafish")
    hits = [(m["source"], m["span"], m["page"], m["page_span"]) for m in e["data"]["matches"]]
    # the highlight (and its comment) on Zotero's page 3; the other annotation and the note on none
    assert hits == [("annotation", "Zebrafish", 3, [3, 3]), ("annotation", "zebrafish", 3, [3, 3]),
                    ("annotation", "zebrafish", None, [3, 3]), ("note", "zebrafish", None, None)], hits
    capsys.readouterr()
    assert main(["grep", "regenerate", "--no-server"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "regenerate" in ln)
    assert " p." not in line, line  # was "p.1"


def text(capsys, *args: str) -> str:
    capsys.readouterr()
    assert main([*args, "--no-server"]) == 0
    return capsys.readouterr().out


def test_the_zotero_link_is_in_the_text_output(env, capsys):
    """search, retrieve (compact and --full), get and timeline print a Zotero item's link, whole,
    on its own line; a paper without one prints none."""
    code, e = cli(capsys, "retrieve", "zebrafish", "--mode", "lexical", "--kind", "note")
    assert e["data"]["matches"][0]["link"] == LINK
    short = e["data"]["matches"][0]["short_id"]
    for args in (("search", "zebrafish"), ("retrieve", "zebrafish", "--mode", "lexical"),
                 ("retrieve", "zebrafish", "--mode", "lexical", "--full"), ("get", short), ("timeline", short)):
        lines = [ln.strip() for ln in text(capsys, *args).splitlines()]
        assert LINK in lines, (args, lines)
    assert text(capsys, "timeline", short).count(LINK) == 1  # under the paper's line, not per unit
    out = text(capsys, "retrieve", "flower", "--mode", "lexical", "--paper", OKEY)
    assert "zotero://" not in out


@pytest.mark.realdata
def test_a_real_zotero_items_annotations_by_kind_with_their_link_and_pages(shared_data, tmp_path, monkeypatch,
                                                                          capsys):
    """San7o's MapReduce item (two highlights, on pages 1 and 2) read from its Zotero data
    directory and indexed: `--kind annotation` gives its annotations, with Zotero's pages, and
    the text output its zotero://select link."""
    from sheaf.library.discover import discover
    from sheaf.library.metadata import export_files_metadata
    from tests.kits.zotero import ZOTERO_DIRS

    key, src = "YDQMNNXT", shared_data / "zotero_dirs" / ZOTERO_DIRS[1]
    d = discover(src, mirror=tmp_path / "mirror")
    meta = export_files_metadata(d.metadata_files).by_key()[key]
    conn = ix.open_index(tmp_path / "sheaf.db")
    wr.upsert_papers(conn, [meta])
    out = process_paper({p.key: p.path for p in d.papers}[key], key)
    wr.replace_paper(conn, key, out.body_units, out.object_units)
    conn.close()
    monkeypatch.setenv("SHEAF_INDEX_FILE", str(tmp_path / "sheaf.db"))
    monkeypatch.setenv("SHEAF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHEAF_LIBRARY", str(src))
    monkeypatch.delenv("SHEAF_INDEX_URL", raising=False)
    code, e = cli(capsys, "retrieve", "map", "reduce", "--mode", "lexical", "--kind", "annotation",
                  "--per-paper", "0")
    assert code == 0 and e["data"]["matches"]
    assert {m["source"] for m in e["data"]["matches"]} == {"annotation"}
    assert {m["link"] for m in e["data"]["matches"]} == {meta.link} and meta.link.startswith("zotero://select/")
    code, g = cli(capsys, "grep", "map", "--kind", "annotation")
    assert g["data"]["matches"] and {m["page"] for m in g["data"]["matches"]} <= {1, 2}
    assert meta.link in [ln.strip() for ln in text(capsys, "retrieve", "map", "reduce", "--mode", "lexical").splitlines()]
