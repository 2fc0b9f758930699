"""Where the tests find their data, and the one helper that puts a session's model export in a home."""
from __future__ import annotations

from pathlib import Path

#: The real data beside the checkout (`../shared/data`); tests that need it skip when it is absent.
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

#: The bundled sample library.
SAMPLE_LIBRARY = Path(__file__).resolve().parents[2] / "data" / "sample-library"


def link_onnx_export(export: Path, home: Path) -> Path:
    """Hard-link a session's ONNX export into `home`'s models folder (no 90 MB copy)."""
    from sheaf.vectors.onnx_export import link_export

    return link_export(export, home)
