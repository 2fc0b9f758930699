"""OCR of the PDF pages without a usable text layer (`sheaf.formats.pdf.ocr`): scanned pages
read into the same blocks a text layer gives, only the pages that need it, once per machine."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sheaf.core import progress
from sheaf.core.models import IngestError
from sheaf.formats import parse_paper
from sheaf.formats.pdf.ocr import PageOcr, models_dir, page_ocr
from sheaf.transform.chain import units_from_paper
from tests.kits.ocr_models import link_models
from tests.kits.pdf_writer import QUOKKA_TITLE as TITLE
from tests.kits.pdf_writer import quokka_pdf as _text_pdf
from tests.kits.pdf_writer import scanned_pdf

pytestmark = pytest.mark.skipif(models_dir() is None, reason="rapidocr is not installed")

@pytest.fixture()
def cache(tmp_path: Path, ocr_models: Path) -> Path:
    """A machine cache of the test's own, holding OCR's int8 model as a user's does after a first OCR."""
    link_models(ocr_models, tmp_path / "cache")
    return tmp_path / "cache"


def _read(pdf: Path, ocr: PageOcr):
    return parse_paper(pdf, "QUOKKA", ocr=ocr)


def _pages(cache: Path) -> list[Path]:
    """The cached pages: ocr/<identity>/<sha[:2]>/<sha>/<page>.json."""
    return sorted((cache / "ocr").glob("*/*/*/*.json"))


def _text(paper) -> str:
    return " ".join(b.text for b in paper.blocks)


def test_a_scanned_paper_is_read_by_ocr_into_searchable_blocks(tmp_path: Path, cache: Path) -> None:
    pdf = scanned_pdf(tmp_path / "scan.pdf", _text_pdf(tmp_path / "text.pdf"))
    paper = _read(pdf, page_ocr("auto", cache))
    text = _text(paper)
    assert "seventeen animals near the lighthouse" in text
    assert "matched by their length" in text
    assert {b.source_format for b in paper.blocks if b.text} == {"ocr"}
    assert all(re.search(r"OCR, confidence (0\.\d\d|1\.00)", b.role_reason or "") for b in paper.blocks if b.text)
    assert any("pages read by OCR" in w and "1-2" in w for w in paper.warnings)
    assert paper.title == TITLE  # the largest type on page 1, as for a text layer
    out = units_from_paper(paper)
    assert any("Methods" in u.section_path for u in out.body_units)  # a heading found by its capitals/size
    assert any("quokka census" in u.text for u in out.body_units)


def test_a_mixed_pdf_has_only_its_scanned_pages_read(tmp_path: Path, cache: Path) -> None:
    pdf = scanned_pdf(tmp_path / "mixed.pdf", _text_pdf(tmp_path / "text.pdf"), scan={1})
    paper = _read(pdf, page_ocr("auto", cache))
    sources = {b.page: b.source_format for b in paper.blocks if b.text}
    assert sources == {1: "pdf", 2: "ocr"}
    assert "Burrows were mapped" in _text(paper)
    entries = [p.name for p in _pages(cache)]
    assert entries == ["1.json"]  # the second page alone, cached by the PDF's hash


def test_pages_read_once_per_machine_and_again_for_a_new_pdf(tmp_path: Path, cache: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    text = _text_pdf(tmp_path / "text.pdf")
    pdf = scanned_pdf(tmp_path / "scan.pdf", text)
    first = _read(pdf, page_ocr("auto", cache))
    again = page_ocr("auto", cache)
    monkeypatch.setattr(PageOcr, "read_image", lambda self, *a: pytest.fail("a cached page was read again"))
    assert _read(pdf, again).blocks == first.blocks  # the cache alone: no page read again
    monkeypatch.undo()
    changed = scanned_pdf(tmp_path / "scan2.pdf", text, scale=1.5)  # other bytes: a new entry
    assert "seventeen animals" in _text(_read(changed, page_ocr("auto", cache)))
    assert len(_pages(cache)) == 4


def test_ocr_off_leaves_a_scan_without_text_and_says_how_to_read_it(tmp_path: Path, cache: Path) -> None:
    pdf = scanned_pdf(tmp_path / "scan.pdf", _text_pdf(tmp_path / "text.pdf"))
    with pytest.raises(IngestError) as err:
        _read(pdf, page_ocr("off", cache))
    assert err.value.message == ("no text layer (a scan): OCR is off (SHEAF_OCR=off); "
                                 "SHEAF_OCR=auto reads such pages")
    assert not _pages(cache) and not (cache / "ocr" / "engine.json").exists()


def test_force_reads_every_page_even_with_a_text_layer(tmp_path: Path, cache: Path) -> None:
    paper = _read(_text_pdf(tmp_path / "text.pdf"), page_ocr("force", cache))
    assert {b.source_format for b in paper.blocks if b.text} == {"ocr"}
    assert "seventeen animals" in _text(paper)


def test_a_stop_is_honoured_between_pages(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pdf = scanned_pdf(tmp_path / "scan.pdf", _text_pdf(tmp_path / "text.pdf"))
    ocr = page_ocr("auto", cache)
    real = PageOcr.read_image

    def read_then_stop(self, image, scale):
        lines = real(self, image, scale)
        progress.request_stop("test")
        return lines

    monkeypatch.setattr(PageOcr, "read_image", read_then_stop)
    try:
        with pytest.raises(progress.StopRequested):  # the build's stop, not the paper's error
            _read(pdf, ocr)
    finally:
        progress._stop.clear()
    assert [p.name for p in _pages(cache)] == ["0.json"]  # the page read before the stop is kept


def test_an_ocr_engine_identity_names_its_files_and_settings(cache: Path) -> None:
    on, off = page_ocr("auto", cache), page_ocr("off", cache)
    assert off.code_version == "" and not off.enabled
    mode, identity = on.code_version.split(":")
    assert mode == "auto" and len(identity) == 16
    assert page_ocr("force", cache).code_version == f"force:{identity}"


def test_the_engine_identity_is_hashed_once_per_machine(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every build and status needs the identity (it is in the parse's code version): the 31 MB
    of models are hashed once, then the identity is read from the machine cache."""
    from sheaf.formats.pdf import ocr as ocr_module

    first = page_ocr("auto", cache).code_version
    assert (cache / "ocr" / "engine.json").is_file()
    ocr_module._IDENTITIES.clear()  # as a new process
    ocr_module._MEMOS.clear()
    real = Path.read_bytes

    def no_models(self: Path) -> bytes:
        assert self.suffix != ".onnx", "a model file was hashed again"
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", no_models)
    assert page_ocr("auto", cache).code_version == first


@pytest.mark.realdata
@pytest.mark.e2e  # twelve pages read: about a minute on two cores
def test_a_real_scanned_article_becomes_searchable(shared_data: Path, tmp_path: Path) -> None:
    """Bavelas et al. 1995, a scan with a publisher's stamp as its only text: its title, its
    authors, its body and its reference list come out of the page images."""
    pdf = next((shared_data / "zotero_dirs/FranziZimm__Literaturedatabase/storage/ND3Q8Y2H").glob("*.pdf"))
    paper = parse_paper(pdf, "ND3Q8Y2H", ocr=page_ocr("auto", tmp_path / "cache"))
    text = _text(paper)
    assert paper.title == "Gestures Specialized for Dialogue"
    assert "Janet Beavin Bavelas" in text
    assert "interactive gestures" in text and "sequential monologues" in text.lower()
    assert sum(b.role == "reference" for b in paper.blocks) >= 20
    assert {b.source_format for b in paper.blocks if b.text} == {"ocr"}  # the stamp's text layer is not kept


def test_a_zotero_item_whose_pdf_is_scanned_has_text(tmp_path: Path, cache: Path) -> None:
    """A Zotero paper's manifest naming a scanned PDF (Zotero extracted nothing from it): its
    text comes from OCR, so the item is no longer metadata only."""
    import json

    from sheaf.formats.zotero_source import MANIFEST_FORMAT, SUFFIX

    pdf = scanned_pdf(tmp_path / "scan.pdf", _text_pdf(tmp_path / "text.pdf"))
    manifest = tmp_path / f"QUOKKA{SUFFIX}"
    manifest.write_text(json.dumps({"format": MANIFEST_FORMAT, "sources": [
        {"attachment": "ATT1", "title": "Full Text PDF", "path": str(pdf), "format": "pdf"}]}))
    with pytest.raises(IngestError, match="no text"):
        parse_paper(manifest, "QUOKKA", ocr=page_ocr("off", cache))
    paper = parse_paper(manifest, "QUOKKA", ocr=page_ocr("auto", cache))
    assert "seventeen animals near the lighthouse" in _text(paper)
    assert paper.source_format == "zotero" and {b.source_format for b in paper.blocks if b.text} == {"ocr"}
