"""Where the per-user machine cache lives: ``SHEAF_CACHE_DIR`` when set, else the platform's
per-user cache folder. What goes in it is made once per machine and shared by every home: the
embedding model's ONNX export and backend records (`sheaf.vectors.machine_cache`), the OCR of
scanned pages (`sheaf.formats.pdf.ocr`).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

APP = "sheaf"


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The platform's per-user cache folder for Sheaf (platformdirs where installed; else
    ``$XDG_CACHE_HOME/sheaf``, or ``~/.cache/sheaf``)."""
    env = os.environ if environ is None else environ
    if environ is None:
        try:
            import platformdirs

            return Path(platformdirs.user_cache_dir(APP, appauthor=False))
        except ImportError:  # pragma: no cover - platformdirs comes with the project's dependencies
            pass
    xdg = env.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / APP


def cache_dir(setting: str | Path | None = None) -> Path:
    """`setting` (SHEAF_CACHE_DIR) when given, else `default_cache_dir`."""
    return Path(setting).expanduser() if setting else default_cache_dir()
