"""OCR's int8 recognition model (`sheaf.formats.pdf.ocr_int8`) made once for a whole test run,
every xdist worker included, and linked into the machine caches tests make for themselves: each
test's cache then has what a user's machine has after its first OCR, without ~10 s to make it."""
from __future__ import annotations

import os
import shutil
from pathlib import Path


def shared_models(base: Path) -> Path:
    """The folder `<base>/ocr-models/ocr/models`, the int8 model made there first if missing
    (under the model's own lock: one worker makes it, the others wait and find it)."""
    from sheaf.formats.pdf.ocr import page_ocr

    root = base / "ocr-models"
    page_ocr("force", root)._load()
    return root / "ocr" / "models"


def link_models(models: Path, cache_root: Path) -> None:
    """`models` linked (hard links, else copies) into the machine cache `cache_root`."""
    for src in models.rglob("*.onnx"):
        dest = cache_root / "ocr" / "models" / src.relative_to(models)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dest)
        except OSError:
            shutil.copy2(src, dest)
