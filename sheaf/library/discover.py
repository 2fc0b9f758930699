"""Library discovery: which papers a library folder holds, in each layout.

- a Zotero data directory: `<dir>/zotero.sqlite` + `storage/` (`sheaf.library.zotero`); each
  paper's source is its manifest in the Zotero mirror of Sheaf's home;
- a PaperForge vault: `<vault>/System/PaperForge/ocr/<KEY>/json/result.json`, Better BibTeX
  exports in `<vault>/System/PaperForge/exports/*.json` (file stem = domain);
- a plain library: `<lib>/papers/<KEY>/` (one OCR/layout output or a PDF) and
  `<lib>/library.json` (Better BibTeX JSON or CSL-JSON).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sheaf.core.models import valid_paper_key
from sheaf.core.settings import Settings, check_home_library
from sheaf.library.folder import discover_folder, is_pdf_folder
from sheaf.library.zotero import is_zotero_dir
from sheaf.library.zotero_mirror import discover_zotero

PAPERFORGE_OCR = Path("System/PaperForge/ocr")
PAPERFORGE_EXPORTS = Path("System/PaperForge/exports")


class PaperSource:
    """One paper found in a library: its key and the folder or file holding its OCR output.
    Given as a string, the `Path` is made when first asked for: a no-op build of a 10,000-paper
    Zotero library never asks (a `Path` each would cost it ~0.1 s)."""

    __slots__ = ("key", "_path")

    def __init__(self, key: str, path: Path | str) -> None:
        self.key = key
        self._path = path

    @property
    def path(self) -> Path:
        if not isinstance(self._path, Path):
            self._path = Path(self._path)
        return self._path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PaperSource) and (self.key, self.path) == (other.key, other.path)

    def __hash__(self) -> int:
        return hash((self.key, str(self._path)))

    def __repr__(self) -> str:
        return f"PaperSource(key={self.key!r}, path={self.path!r})"


def source_ref(path: Path | str, library: Path, home: Path) -> str:
    """A paper source's path as a build records it: relative to the library (`lib:...`) or to the
    home (`home:...`, a source Sheaf derived, as a Zotero item's mirror), so that a home and its
    library moved together keep it; any other path as it is."""
    p = Path(path)
    for prefix, root in (("lib:", library), ("home:", home)):
        try:
            return prefix + p.relative_to(root).as_posix()
        except ValueError:
            continue
    return str(p)


def source_from_ref(ref: str, library: Path, home: Path) -> Path:
    """The path `source_ref` recorded, under this library and home."""
    if ref.startswith("lib:"):
        return library / ref[4:]
    if ref.startswith("home:"):
        return home / ref[5:]
    return Path(ref)


@dataclass(frozen=True, slots=True)
class Discovery:
    papers: tuple[PaperSource, ...]
    invalid_keys: tuple[str, ...]  # folder names refused as paper keys
    metadata_files: tuple[Path, ...]
    layout: str  # zotero | paperforge | plain | folder | empty
    metadata_only: tuple[tuple[str, str], ...] = ()  # (key, why it has no text): searchable by metadata
    notes: tuple[str, ...] = ()  # what the user should know of this reading
    #: paper key → its source's ocr_result_hash, where the discovery made that source itself
    #: moments ago (a Zotero manifest): the source scan takes it instead of reading the file
    hashes: Mapping[str, str] = field(default_factory=dict)


def layout_of(library: Path | str) -> str:
    """The layout of a library folder, as `discover` reads it: zotero | paperforge | plain | folder | empty."""
    lib = Path(library)
    if is_zotero_dir(lib):
        return "zotero"
    if (lib / PAPERFORGE_OCR).is_dir():
        return "paperforge"
    if (lib / "papers").is_dir():
        return "plain"
    return "folder" if is_pdf_folder(lib) else "empty"


def discover_library(settings: Settings, keys: Iterable[str] | None = None, *, write: bool = True) -> Discovery:
    """`discover` of the settings' library, with its Zotero mirror in the settings' home; a
    library that is not the home's own is refused first (``LIBRARY_MISMATCH``: a scan of another
    library would mark every paper of the home removed)."""
    check_home_library(settings)
    return discover(settings.library, keys, mirror=settings.home / "library-mirror", write=write,
                    zotero_base_dir=settings.zotero_base_dir, zotero_libraries=settings.zotero_libraries)


def discover(library: Path | str, keys: Iterable[str] | None = None, *, mirror: Path | None = None,
             write: bool = True, zotero_base_dir: Path | None = None, zotero_libraries: str = "all") -> Discovery:
    """Every paper in a library folder, sorted by key; invalid keys are reported, not added.
    `keys`: only those papers, looked up by name instead of listing the folder (one paper's
    step in a 10,000-paper library). A Zotero data directory is read through its mirror
    (`mirror`; a temporary one when None or when `write` is False and it is not current)."""
    lib = Path(library)
    if not lib.is_dir():
        raise FileNotFoundError(f"library folder not found: {lib}")
    if is_zotero_dir(lib):
        return _zotero(lib, keys, mirror, write, zotero_base_dir, zotero_libraries)
    if (lib / PAPERFORGE_OCR).is_dir():
        root, layout = lib / PAPERFORGE_OCR, "paperforge"
        exports = tuple(sorted((lib / PAPERFORGE_EXPORTS).glob("*.json")))
    elif (lib / "papers").is_dir():
        root, layout = lib / "papers", "plain"
        exports = tuple(p for p in (lib / "library.json",) if p.is_file())
    elif is_pdf_folder(lib):
        return _folder(lib, keys, mirror, write)
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


def _folder(lib: Path, keys: Iterable[str] | None, mirror: Path | None, write: bool) -> Discovery:
    f = discover_folder(lib, mirror / "folder" if mirror is not None else None, write=write)
    papers = f.papers if keys is None else {k: v for k, v in f.papers.items() if k in set(keys)}
    return Discovery(tuple(PaperSource(k, papers[k]) for k in sorted(papers)), (), (f.metadata_file,), "folder",
                     tuple(sorted(f.metadata_only.items())), f.notes)


def _zotero(lib: Path, keys: Iterable[str] | None, mirror: Path | None, write: bool,
            base_dir: Path | None, libraries: str) -> Discovery:
    mirror = mirror / "zotero" if mirror is not None else None
    if keys is not None and mirror is not None and (mirror / "state.json").is_file():
        # one run's papers: their manifests as the build's scan wrote them moments ago
        wanted = sorted(set(keys))
        found = [PaperSource(k, mirror / "papers" / f"{k}.zotero.json") for k in wanted]
        return Discovery(tuple(p for p in found if p.path.is_file()), (), (mirror / "library.json",), "zotero")
    z = discover_zotero(lib, mirror, base_dir=base_dir, libraries=libraries, write=write)
    papers = z.papers if keys is None else {k: v for k, v in z.papers.items() if k in set(keys)}
    return Discovery(tuple(PaperSource(k, papers[k]) for k in sorted(papers)), (), (z.metadata_file,), "zotero",
                     tuple(sorted(z.metadata_only.items())), z.notes, z.hashes)
