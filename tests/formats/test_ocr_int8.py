"""OCR's int8 recognition model (`sheaf.formats.pdf.ocr_int8`): made once per machine from a
calibration page of its own, then used by every OCR on that machine; where it cannot be made
the fp32 model reads, and the engine's identity says which model read."""
from __future__ import annotations

from pathlib import Path

import pytest

from sheaf.formats import parse_paper
from sheaf.formats.pdf import ocr_int8
from sheaf.formats.pdf.ocr import SCALE, PageOcr, models_dir, page_ocr
from tests.kits.ocr_models import link_models
from tests.kits.pdf_writer import quokka_pdf, scanned_pdf

pytestmark = pytest.mark.skipif(models_dir() is None, reason="rapidocr is not installed")


def _rec_model(ocr: PageOcr) -> Path:
    return Path(ocr._load().cfg.Rec.model_path)


def test_a_machine_with_the_int8_model_reads_with_it_and_never_makes_it_again(
        tmp_path: Path, ocr_models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert [p.name for p in ocr_models.glob("*/*.onnx")] == ["rec_int8.onnx"]
    cache = tmp_path / "cache"
    link_models(ocr_models, cache)
    monkeypatch.setattr(ocr_int8, "quantize", lambda *a: pytest.fail("the int8 model was made again"))
    ocr = page_ocr("auto", cache)
    assert _rec_model(ocr).name == "rec_int8.onnx"
    pdf = scanned_pdf(tmp_path / "scan.pdf", quokka_pdf(tmp_path / "text.pdf"))
    text = " ".join(b.text for b in parse_paper(pdf, "QUOKKA", ocr=ocr).blocks)
    assert "seventeen animals near the lighthouse" in text


def test_the_calibration_page_gives_recognition_inputs_for_its_lines() -> None:
    engine = PageOcr("force", None)._load()
    engine._load_det_model()
    engine._load_rec_model()
    inputs = ocr_int8.calibration_inputs(engine, SCALE)
    # 6 fonts x 16 sentences: nearly all found by the detector, each 48 pixels high, >= 320 wide
    assert len(inputs) >= 80
    assert all(x.shape[:3] == (1, 3, 48) and x.shape[3] >= 320 for x in inputs)


def test_a_cache_that_cannot_hold_the_model_leaves_the_fp32_model_reading_and_says_so(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "ocr").mkdir(parents=True)
    (cache / "ocr" / "models").write_text("a file where the models folder goes")
    ocr = page_ocr("auto", cache)
    assert _rec_model(ocr) == models_dir() / "PP-OCRv6_rec_small.onnx"
    pdf = scanned_pdf(tmp_path / "scan.pdf", quokka_pdf(tmp_path / "text.pdf"))
    paper = parse_paper(pdf, "QUOKKA", ocr=ocr)
    assert "seventeen animals" in " ".join(b.text for b in paper.blocks)
    said = [w for w in paper.warnings if w.startswith("OCR read with the fp32 model")]
    assert len(said) == 1 and str(cache / "ocr" / "models") in said[0]


def test_the_engine_identity_names_the_recognition_model(tmp_path: Path) -> None:
    """Pages read by the int8 model and by the fp32 one are cached apart: a new model, a new entry."""
    cache = tmp_path / "cache"
    int8, fp32 = page_ocr("auto", cache), PageOcr("auto", cache / "ocr", precision="fp32")
    assert int8.rec_form == ocr_int8.RECIPE and fp32.rec_form == "fp32"
    assert PageOcr("auto", None).rec_form == "fp32"  # no cache to make it in
    assert int8.code_version != fp32.code_version
    with pytest.raises(ValueError, match="int8 or fp32"):
        PageOcr("auto", cache, precision="fp16")
