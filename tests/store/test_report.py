"""The library report (DuckDB over every paper's Parquet artifacts), on real files."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sheaf.store.library_report import library_report_data, report_markdown

LONG = "A paragraph long enough to count as shared text between papers, " * 4


def _write(root: Path, asset: str, key: str, columns: dict) -> None:
    (root / asset).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), root / asset / f"{key}.parquet")


def _paper(root: Path, key: str, fmt: str | None, roles: list[str], texts: list[str], extra: bool = False) -> None:
    blocks = {"paper_id": [key] * len(roles), "role": roles}
    if fmt is not None:  # None: a file of an older schema, without the column
        blocks["source_format"] = [fmt] * len(roles)
    if extra:  # a newer schema's column the report does not read
        blocks["added_later"] = ["x"] * len(roles)
    _write(root, "ocr_blocks", key, blocks)
    _write(root, "body_units", key, {"paper_id": [key] * len(texts), "node_id": [f"{key}/n{i}" for i in range(len(texts))],
                                     "token_count": [10] * len(texts), "text": texts})


def test_report_counts_papers_formats_units_and_shared_text(tmp_path):
    _paper(tmp_path, "AAAA0001", "mineru", ["heading", "body"], [LONG, "short"])
    _paper(tmp_path, "BBBB0002", "docling", ["body"], [LONG], extra=True)
    _paper(tmp_path, "CCCC0003", "mineru", ["heading"], ["other"])
    d = library_report_data(tmp_path)
    assert d["papers"] == 3 and d["units"] == 4 and d["tokens"] == 40
    assert d["formats"] == [{"format": "mineru", "papers": 2}, {"format": "docling", "papers": 1}]
    assert d["papers_without_headings"] == ["BBBB0002"]
    assert [s["papers"] for s in d["shared_units"]] == [["AAAA0001", "BBBB0002"]]
    assert d["distribution"]["units_per_paper"]["max"] == 2


@pytest.mark.parametrize("old", ["AAAA0001", "CCCC0003"])
def test_report_reads_files_of_different_schemas(tmp_path, old):
    """A paper built before a column the report reads existed (first or last in the files' order)
    beside papers with it and with a newer column: every paper counted, the old one's format unknown."""
    fmt = {"AAAA0001": "mineru", "BBBB0002": "docling", "CCCC0003": "mineru"}
    fmt[old] = None
    _paper(tmp_path, "AAAA0001", fmt["AAAA0001"], ["heading"], [LONG])
    _paper(tmp_path, "BBBB0002", fmt["BBBB0002"], ["body"], [LONG], extra=True)
    _paper(tmp_path, "CCCC0003", fmt["CCCC0003"], ["heading"], ["other"])
    d = library_report_data(tmp_path)
    assert d["papers"] == 3 and d["units"] == 3
    assert {(f["format"], f["papers"]) for f in d["formats"]} == {("docling", 1), ("mineru", 1), (None, 1)}
    assert d["papers_without_headings"] == ["BBBB0002"]
    assert [s["papers"] for s in d["shared_units"]] == [["AAAA0001", "BBBB0002"]]


def test_report_of_an_empty_store(tmp_path):
    assert library_report_data(tmp_path)["papers"] == 0


def test_shared_text_is_shown_by_its_first_120_characters(tmp_path):
    text = "Ünïcödé " + "é" * 150 + LONG
    _paper(tmp_path, "AAAA0001", "mineru", ["heading"], [text])
    _paper(tmp_path, "BBBB0002", "mineru", ["heading"], [text, LONG])
    d = library_report_data(tmp_path)
    assert d["shared_units"] == [{"text": text[:120], "papers": ["AAAA0001", "BBBB0002"]}]


def test_the_reports_duckdb_prints_no_progress_bar():
    """DuckDB draws a progress bar on stdout once a query runs past 2 s (the report's did at
    10,000 papers), inside `sheaf build --json`, whose stdout is one envelope."""
    from sheaf.store.library_report import connect

    con = connect()
    try:
        assert con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0] is False
    finally:
        con.close()


def _blocks(root: Path, key: str, formats: list[str]) -> None:
    _write(root, "ocr_blocks", key, {"paper_id": [key] * len(formats), "role": ["body"] * len(formats),
                                     "source_format": formats})


def test_each_paper_is_counted_once_by_its_primary_source_and_fallbacks_apart(tmp_path):
    """Zotero papers mix formats (a PDF, Zotero's extracted text where a PDF could not be read,
    Zotero's own notes): each paper counts once, by the format most of its text comes from, and
    the papers that read a fallback are counted apart, labelled."""
    _blocks(tmp_path, "PDFNOTES", ["pdf"] * 5 + ["zotero"] * 7)  # a short PDF, long notes
    _blocks(tmp_path, "MIXEDFT1", ["pdf"] * 6 + ["zotero-ft-cache"] * 3 + ["zotero"])  # 2nd PDF unreadable
    _blocks(tmp_path, "FTCACHE1", ["zotero-ft-cache"] * 4 + ["zotero"] * 2)  # the PDF missing
    _blocks(tmp_path, "NOTESONL", ["zotero"] * 3)  # notes only
    _blocks(tmp_path, "MINERU01", ["mineru"] * 4)
    d = library_report_data(tmp_path)
    assert d["papers"] == 5 == sum(f["papers"] for f in d["formats"])
    assert d["formats"] == [{"format": "pdf", "papers": 2}, {"format": "mineru", "papers": 1},
                            {"format": "zotero", "papers": 1}, {"format": "zotero-ft-cache", "papers": 1}]
    assert [(f["format"], f["papers"]) for f in d["fallbacks"]] == [("zotero-ft-cache", 2)]
    md = report_markdown(d)
    assert "| primary source (each paper once) | papers |" in md
    assert "| zotero-ft-cache: Zotero's extracted text (.zotero-ft-cache), where a PDF could not be read | 2 |" in md
