"""Library discovery: which papers a library folder holds, for both layouts of DESIGN §2.

- a PaperForge vault: `<vault>/System/PaperForge/ocr/<KEY>/json/result.json`, Better BibTeX
  exports in `<vault>/System/PaperForge/exports/*.json` (file stem = domain);
- a plain library: `<lib>/papers/<KEY>/` (one OCR/layout output or a PDF) and
  `<lib>/library.json` (Better BibTeX JSON or CSL-JSON).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sheaf.core.models import valid_paper_key

PAPERFORGE_OCR = Path("System/PaperForge/ocr")
PAPERFORGE_EXPORTS = Path("System/PaperForge/exports")


@dataclass(frozen=True, slots=True)
class PaperSource:
    """One paper found in a library: its key and the folder or file holding its OCR output."""

    key: str
    path: Path


@dataclass(frozen=True, slots=True)
class Discovery:
    papers: tuple[PaperSource, ...]
    invalid_keys: tuple[str, ...]  # folder names refused as paper keys
    metadata_files: tuple[Path, ...]
    layout: str  # paperforge | plain | empty


def discover(library: Path | str, keys: Iterable[str] | None = None) -> Discovery:
    """Every paper in a library folder, sorted by key; invalid keys are reported, not added.
    `keys`: only those papers, looked up by name instead of listing the folder (one paper's
    step in a 10,000-paper library)."""
    lib = Path(library)
    if not lib.is_dir():
        raise FileNotFoundError(f"library folder not found: {lib}")
    if (lib / PAPERFORGE_OCR).is_dir():
        root, layout = lib / PAPERFORGE_OCR, "paperforge"
        exports = tuple(sorted((lib / PAPERFORGE_EXPORTS).glob("*.json")))
    elif (lib / "papers").is_dir():
        root, layout = lib / "papers", "plain"
        exports = tuple(p for p in (lib / "library.json",) if p.is_file())
    else:
        return Discovery((), (), (), "empty")
    papers: list[PaperSource] = []
    invalid: list[str] = []
    if keys is None:  # one listing; the entries' types come with it (no stat a folder)
        with os.scandir(root) as it:
            entries = sorted(((e.name, e.is_dir()) for e in it), key=lambda x: x[0])
    else:
        entries = [(k, (root / k).is_dir()) for k in sorted(set(keys)) if (root / k).exists()]
    for name, is_dir in entries:
        if name.startswith("."):
            continue
        if not valid_paper_key(name):
            invalid.append(name)
            continue
        d = root / name
        if layout == "paperforge":
            src = d / "json" / "result.json"
            papers.append(PaperSource(name, src if src.exists() else d))
        elif is_dir:
            papers.append(PaperSource(name, d))
    return Discovery(tuple(papers), tuple(invalid), exports, layout)
