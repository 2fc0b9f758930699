"""A scanned paper in a folder of PDFs, as a user meets it: `sheaf build` reads its pages by OCR,
search finds a sentence of it, `sheaf report` says which papers were read so, and a rebuild
reads no page again (the OCR is kept per machine); with SHEAF_OCR=off (a code change of the parse)
the paper is read again, is unreadable, and says how to read it."""
from __future__ import annotations

from pathlib import Path

import pytest

from sheaf.formats.pdf.ocr import models_dir
from tests.kits.ocr_models import link_models
from tests.kits.pdf_writer import quokka_pdf, scanned_pdf
from tests.kits.pipeline import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.skipif(models_dir() is None, reason="rapidocr is not installed")]


def _cli(*argv: str) -> tuple[int, dict]:
    return run_cli([*argv, "--json"])


def test_a_scanned_paper_is_built_searchable_and_never_read_twice(tmp_path: Path, monkeypatch, ocr_models) -> None:
    lib = tmp_path / "Scans"
    lib.mkdir()
    scanned_pdf(lib / "quokka1998.pdf", quokka_pdf(tmp_path / "text.pdf"))
    cache = tmp_path / "cache"
    link_models(ocr_models, cache)
    for k in ("SHEAF_INDEX_FILE", "SHEAF_EMBEDDING_MODEL", "SHEAF_OCR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SHEAF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home" / "dagster_home"))
    monkeypatch.setenv("SHEAF_LIBRARY", str(lib))
    monkeypatch.setenv("SHEAF_CACHE_DIR", str(cache))

    code, env = _cli("build")
    assert code == 0 and env["data"]["states"] == {"built": 1}, env
    code, env = _cli("retrieve", "seventeen animals near the lighthouse", "--mode", "lexical")
    assert env["data"]["matches"][0]["zotero_key"].startswith("quokka1998")
    code, env = _cli("report")
    assert env["data"]["ocr"]["papers"] == 1 and env["data"]["ocr"]["pages"] == 2
    entries = sorted(cache.rglob("*.json"))
    ocr_entries = [p for p in entries if "/ocr/" in str(p) and p.name != "engine.json"]
    assert len(ocr_entries) == 2
    stamps = [p.stat().st_mtime_ns for p in ocr_entries]

    code, env = _cli("build", "--full")  # every stage rebuilt: the pages come from the machine cache
    assert code == 0 and env["data"]["states"] == {"built": 1}, env
    assert env["data"]["embeddings_computed"] == 0  # the same passages: nothing embedded again
    assert [p.stat().st_mtime_ns for p in ocr_entries] == stamps

    monkeypatch.setenv("SHEAF_OCR", "off")  # a code change of the parse: the paper is read again, without OCR
    code, env = _cli("build")
    assert code == 0 and env["data"]["states"] == {"unreadable": 1}, env
    error = env["data"]["papers"][0]["error"]
    assert error.startswith("no text layer (a scan)") and "SHEAF_OCR=auto reads such pages" in error
