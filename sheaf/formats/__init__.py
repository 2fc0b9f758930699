"""Input adapters: one module per format, each turning raw OCR/layout output into RawBlocks.

`parse_paper(path)` finds the paper's file, detects the format (or takes `fmt`), runs the
adapter and `finalize`, and returns a `ParsedPaper`. Every failure is an `IngestError`
naming the paper and the file; nothing else escapes.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sheaf.core.models import IngestError, ParsedPaper
from sheaf.core.progress import StopRequested
from sheaf.formats.common import RawBlock, content_hash, finalize, read_bytes

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.formats.pdf.ocr import PageOcr


class Adapter(Protocol):
    """What every input format's module provides (`sheaf/formats/<format>.py`): its `VERSION`
    (part of `ocr_result_hash`: bump it when its output changes), `matches(path)` (is this
    file of my format? cheap: a name or the file's head) and `parse(...)` (raw bytes → the
    `RawBlock`s in reading order and the title if the format knows it; `finalize` does the rest;
    problems are `IngestError`s or appended to `warnings`). A format whose pages may be scans
    (the PDF) sets `READS_SCANS = True` and takes `ocr=` (a `PageOcr`) in `parse`."""

    VERSION: str

    def matches(self, path: Path) -> bool: ...

    def parse(self, paper_id: str, path: Path, data: bytes, warnings: list[str]) -> tuple[list[RawBlock], str | None]: ...

#: format name -> module under sheaf.formats. Detection tries them in this order.
FORMATS: dict[str, str] = {
    "zotero": "zotero_source",  # a Zotero paper's manifest (sheaf.formats.zotero_source)
    "paddleocr-vl": "paddleocr_vl",
    "mineru": "mineru",
    "grobid": "grobid",
    "docling": "docling",
    "markdown": "markdown",
    "pdf": "pdf",
}


def adapter(fmt: str) -> Adapter:
    """The adapter module for a format name."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of: {', '.join(FORMATS)}")
    return importlib.import_module(f"sheaf.formats.{FORMATS[fmt]}")  # type: ignore[return-value]


def find_input(paper_id: str, path: Path, fmt: str = "auto") -> tuple[Path, str]:
    """The paper's input file and its format, from a file or a paper folder."""
    if not path.exists():
        raise IngestError(paper_id, str(path), "no such file or folder")
    if path.is_file():
        candidates = [path]
    else:
        candidates = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    formats = list(FORMATS) if fmt == "auto" else [fmt]
    if fmt != "auto":
        adapter(fmt)  # validate the name
    for name in formats:
        mod = adapter(name)
        for p in candidates:
            if mod.matches(p):
                return p, name
    if fmt != "auto" and path.is_file():
        return path, fmt
    problems = [p for p in (_json_problem(c, path) for c in candidates[:5]) if p]
    broken = [m for bad, m in problems if bad]
    if broken:  # a file that would be an output but cannot be read: say what is wrong with it
        raise IngestError(paper_id, str(path), "; ".join(broken))
    what = f"{fmt} input" if fmt != "auto" else "recognised OCR/layout output (result.json, content_list.json, .tei.xml, .docling.json, .md or .pdf)"
    if problems:
        raise IngestError(paper_id, str(path), f"found no {what}: {'; '.join(m for _, m in problems)}")
    among = ""
    if path.is_dir() and candidates:  # name the files that were looked at
        names = [str(p.relative_to(path)) for p in candidates[:5]]
        among = f" among {', '.join(names)}" + (f" and {len(candidates) - 5} more" if len(candidates) > 5 else "")
    elif path.is_dir():
        among = ": the folder is empty"
    raise IngestError(paper_id, str(path), f"found no {what}{among}")


def _json_problem(file: Path, folder: Path) -> tuple[bool, str] | None:
    """What is wrong with a `.json` file no adapter took: (True, "result.json: invalid JSON at
    line 3 column 5 (Expecting value)") when it cannot be read, (False, why it is no known
    output) for an empty file or a `result.json` of another shape, else None."""
    if not file.name.lower().endswith(".json"):
        return None
    import json  # only on this failure path

    name = str(file.relative_to(folder)) if folder.is_dir() else file.name
    try:
        text = file.read_bytes().decode("utf-8-sig")
        if not text.strip():
            return False, f"{name} is empty"
        data = json.loads(text)
    except UnicodeDecodeError as e:
        return True, f"{name}: not UTF-8 text (invalid byte at offset {e.start})"
    except json.JSONDecodeError as e:
        return True, f"{name}: invalid JSON at line {e.lineno} column {e.colno} ({e.msg})"
    except (OSError, RecursionError, ValueError) as e:
        return True, f"{name}: cannot be read ({e})"
    if file.name == "result.json":
        return False, (f"{name} is valid JSON but not PaddleOCR-VL output (no 'layoutParsingResults'"
                       f"{'' if isinstance(data, (dict, list)) else '; not an object or a list'})")
    return None


_KNOWN_SUFFIXES = (".tei.xml", ".docling.json", ".json", ".xml", ".pdf", ".md", ".markdown")


def paper_id_for(path: Path) -> str:
    """Default paper key: the paper folder's name, or the file name up to its first dot."""
    if path.is_dir():
        return path.name
    if path.parent.name == "json" and path.name == "result.json":  # PaperForge: ocr/<KEY>/json/
        return path.parent.parent.name
    name = path.name
    for suffix in _KNOWN_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name in {"result", "content_list", "content_list_v2", "full", "paper", ""}:
        return path.parent.name
    return name.removesuffix("_content_list")


def parse_paper(path: Path | str, paper_id: str | None = None, fmt: str = "auto", ocr: PageOcr | None = None) -> ParsedPaper:
    """Parse one paper's folder or file into canonical blocks. `ocr`: what reads a PDF's pages
    that have no usable text layer (`sheaf.formats.pdf.ocr`; None: nothing does)."""
    path = Path(path)
    pid = paper_id or paper_id_for(path)
    file, name = find_input(pid, path, fmt)
    mod = adapter(name)
    data = read_bytes(pid, file)
    warnings: list[str] = []
    adapter_id = f"{name}/{mod.VERSION}"
    try:
        if hasattr(mod, "parse_blocks"):  # a source made of other sources (a Zotero paper): finalized parts
            blocks, title = mod.parse_blocks(pid, file, data, warnings, ocr=ocr)
        else:
            if ocr is not None and getattr(mod, "READS_SCANS", False):  # a format whose pages OCR may read
                raws, title = mod.parse(pid, file, data, warnings, ocr=ocr)  # type: ignore[call-arg]
            else:
                raws, title = mod.parse(pid, file, data, warnings)
            blocks = finalize(pid, name, raws, warnings)
    except StopRequested:  # a stop asked for while OCR read a page: the build's, not the paper's problem
        raise
    except IngestError as e:
        if e.path is None:
            raise IngestError(pid, str(file), e.message, bug=e.bug) from None
        raise
    except RecursionError:
        raise IngestError(pid, str(file), f"{name}: input nested too deeply") from None
    except Exception as e:  # an adapter bug or a schema we did not foresee: name it, never crash
        raise IngestError(pid, str(file), f"{name}: unexpected input ({type(e).__name__}: {e})", bug=True) from e
    text_blocks = [b for b in blocks if b.text and b.role not in ("noise", "page_number", "page_header", "page_footer")]
    if not text_blocks:
        raise IngestError(pid, str(file), "the paper has no text")
    if not any(b.role in ("heading", "reference_heading", "backmatter_heading", "abstract_heading") for b in blocks):
        warnings.append("no headings found: the paper is one section")
    if title is None:
        title = next((b.text for b in blocks if b.role == "title"), None)
    return ParsedPaper(
        paper_id=pid,
        source_format=name,
        source_path=str(file),
        adapter=adapter_id,
        ocr_result_hash=content_hash(data, adapter_id),
        blocks=tuple(blocks),
        warnings=tuple(warnings),
        title=title,
    )


def source_hash(path: Path | str, paper_id: str, fmt: str = "auto") -> tuple[Path, str, str]:
    """(input file, format, ocr_result_hash) of a paper without parsing it: cheap to observe."""
    file, name = find_input(paper_id, Path(path), fmt)
    mod = adapter(name)
    return file, name, content_hash(read_bytes(paper_id, file), f"{name}/{mod.VERSION}")
