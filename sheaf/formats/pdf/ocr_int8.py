"""OCR's recognition model in 8-bit integers, made once per machine from RapidOCR's own fp32 model.

Recognition is ~85% of a scanned page's OCR time, nearly all of it in convolutions. Static int8
quantization (weights per output channel, activations per tensor, QDQ form that onnxruntime runs
as integer kernels) makes it ~1.4x faster on 2 cores (a 12-page scan 57 -> 45 s); the character
error rate on born-digital pages rendered to images moved from 0.75% to 0.82% (`bench/parse/ocr.py`).

Static quantization needs each activation's range, measured on inputs like the real ones. They
come from a calibration page made here, never from a user's files: lines of text in the PDF
standard fonts (serif, sans, mono; regular, bold, italic; 7 to 16 pt) drawn with PDFium, rendered
at OCR's scale, found by the detection model and cut out as recognition sees them. Everything
is deterministic, so the recipe (`RECIPE`) names the model in the engine's identity.

The model is written to ``<cache>/ocr/models/<source sha-256>-<recipe>/rec_int8.onnx`` under a
file lock (two builds at once make it once) and renamed into place whole. Making it costs ~10 s,
once; where it cannot be made (a cache that cannot be written, a quantizer error) the fp32 model
reads and the papers it reads say so in their warnings.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sheaf.core.files import locked
from sheaf.core.progress import phase
from sheaf.formats.pdf.pdfium import LOCK, draw_text

#: What the int8 model is made from; bump when the calibration or the quantization changes.
RECIPE = "int8-1"
#: Calibration lines: sentences of the kind papers hold (prose, numbers, symbols, references).
_TEXT = (
    "The results of the second experiment are shown in Table 3 and Figure 4.",
    "In contrast to earlier work (Smith et al., 2019), we find no effect of age.",
    "Participants (n = 48; 27 female, mean age 23.4 years) gave informed consent.",
    "2.1 Data collection and preprocessing",
    "ABSTRACT",
    "Journal of Experimental Psychology, 45(3), 112-129. doi:10.1037/0022-3514",
    "p < 0.001, F(2, 94) = 17.35, with an effect size of 0.42 [0.21, 0.63].",
    "Über die Sprache und das Denken: zur Theorie der Darstellung, S. 28-31.",
    "where x_i denotes the i-th input vector and W is a learned weight matrix;",
    "Keywords: gesture, dialogue, interaction, social psychology, language",
    "We thank the anonymous reviewers for their helpful comments and suggestions.",
    "1 Introduction",
    "Received 12 March 2001; accepted 4 September 2001",
    "https://www.example.org/articles/1234 - accessed on 5 May 2020",
    "Correspondence: j.doe@university.edu; Tel.: +1-555-0100",
    "TABLE 2. Mean scores (SD) by condition and group",
)
_FONTS = (b"Times-Roman", b"Times-Bold", b"Times-Italic", b"Helvetica", b"Helvetica-Bold", b"Courier")
_SIZES = (7.0, 8.5, 10.0, 12.0, 16.0)


def int8_model(source: Path, cache: Path, engine: Callable[[], Any], scale: float,
               poll: Callable[[], None] | None = None) -> Path:
    """The int8 recognition model made from `source` (the fp32 model), from `cache` or made there now
    with `engine()` (a RapidOCR whose detector and recognizer are loaded, on the fp32 models; called
    only when the model is made). What stops it from being made is raised (the caller reads with
    the fp32 model instead)."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    folder = cache / "models" / f"{digest}-{RECIPE}"
    path = folder / "rec_int8.onnx"
    if path.is_file():
        return path
    import tempfile

    with locked(folder.parent / f".{folder.name}.lock", poll):
        if not path.is_file():
            phase("OCR: making the int8 recognition model (once per machine, ~10 s)")
            inputs = calibration_inputs(engine(), scale)
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as tmp:
                made = quantize(source, inputs, Path(tmp))
                os.replace(made, path)
    return path


def calibration_inputs(engine: Any, scale: float) -> list[Any]:
    """The recognizer's inputs for every line of the calibration page: cut out where the detector
    finds them, each resized as recognition does (48 pixels high, at least 320 wide)."""
    import numpy as np
    from rapidocr.utils.process_img import get_rotate_crop_image

    image = _calibration_page(scale)
    det = engine.text_det(image)
    boxes = [] if det.boxes is None else det.boxes
    rec = engine.text_rec
    _, height, width = rec.rec_image_shape
    out = []
    for box in boxes:
        crop = get_rotate_crop_image(image, np.array(box, dtype=np.float32))
        h, w = crop.shape[:2]
        if h < 4 or w < 4:
            continue
        out.append(rec.resize_norm_img(crop, max(width / height, w / h))[np.newaxis, :].astype(np.float32))
    if len(out) < 20:
        raise ValueError(f"the calibration page gave {len(out)} lines")
    return out


def _calibration_page(scale: float) -> Any:
    """The calibration page as an RGB array: each sentence in each font, sizes taking turns."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    lines = [(font, _SIZES[(i + j) % len(_SIZES)], text)
             for i, font in enumerate(_FONTS) for j, text in enumerate(_TEXT)]
    width = 640.0
    height = sum(size * 1.6 for _, size, _ in lines) + 40
    with LOCK:  # PDFium is not thread-safe
        doc = pdfium.PdfDocument.new()
        try:
            page = doc.new_page(width, height)
            fonts: dict[bytes, Any] = {}
            y = 20.0
            for font, size, text in lines:
                y += size * 1.6
                draw_text(doc, page, fonts, font, size, 30, height - y, text)
            raw.FPDFPage_GenerateContent(page.raw)
            image = page.render(scale=scale).to_numpy()
            page.close()
            return image
        finally:
            doc.close()


def quantize(source: Path, inputs: list[Any], work: Path) -> Path:
    """`source` quantized to int8 (QDQ, per-channel weights, min-max activation ranges over `inputs`)
    in the folder `work`; the path of the result."""
    import onnx
    from onnx import version_converter
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = work / "prepared.onnx"
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    model = onnx.load(str(prepared))
    if max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0) < 13:
        model = version_converter.convert_version(model, 13)  # per-channel scales need opset 13
        onnx.save(model, str(prepared))
    name = model.graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(inputs)

        def get_next(self) -> dict[str, Any] | None:
            x = next(self._it, None)
            return None if x is None else {name: x}

    out = work / "rec_int8.onnx"
    quantize_static(str(prepared), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=["Conv", "MatMul"], activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True)
    return out
