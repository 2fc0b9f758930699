"""`sheaf parse`: the transforms on one paper (or every paper of a library), no Dagster."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError, ok
from sheaf.core.models import IngestError, paper_key_problem
from sheaf.formats.pdf.ocr import PageOcr, ocr_metadata
from sheaf.formats.pdf.ocr import from_settings as ocr_from_settings
from sheaf.library.discover import discover
from sheaf.service.requests import Outcome
from sheaf.transform.chain import process_paper

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

__all__ = ["page_ocr", "paper_summary", "parse"]


def paper_summary(out: Any) -> dict[str, Any]:
    nodes = [n for n in out.tree.walk() if n.node_id != "root"]
    return {
        "paper_id": out.paper.paper_id,
        "source_format": out.paper.source_format,
        "source_path": out.paper.source_path,
        "ocr_result_hash": out.paper.ocr_result_hash,
        **ocr_metadata(out.paper),
        "blocks": len(out.paper.blocks),
        "sections": len(nodes),
        "body_units": len(out.body_units),
        "object_units": len(out.object_units),
        "tokens": sum(u.token_count for u in out.body_units),
        "warnings": list(out.paper.warnings),
    }


def _stage_data(out: Any, stage: str) -> dict[str, Any]:
    if stage == "blocks":
        return {"blocks": [b.to_dict() for b in out.paper.blocks]}
    if stage == "markdown":
        return {"markdown": out.render.markdown}
    if stage == "render-map":
        return {"render_map": out.render.render_map.to_dict()}
    if stage == "tree":
        return {"tree": out.tree.to_dict()}
    return {"body_units": [u.to_dict() for u in out.body_units],
            "object_units": [u.to_dict() for u in out.object_units]}


def page_ocr(settings: Settings) -> PageOcr:
    """The OCR the settings ask for (SHEAF_OCR), with its machine cache."""
    return ocr_from_settings(settings)


def parse(path: Path | str, *, fmt: str = "auto", stage: str = "units", paper_id: str | None = None,
          token_cap: int, ocr: PageOcr | None = None) -> Outcome:
    """One paper's parse at `stage` (`view`: its `PaperOutputs`), or one summary row per paper
    of a library folder (exit 1 when one failed). `ocr`: what reads PDF pages without a usable
    text layer (None: nothing)."""
    path = Path(path)
    if not path.exists():
        rel = "" if path.is_absolute() else f" (looked at {path.absolute()}, relative to the current folder {os.getcwd()})"
        raise SheafError("NOT_FOUND", f"no such file or folder: {path}{rel}",
                         {"path": str(path.absolute())}, hint="give a paper's folder or file, or a library folder")
    lib = discover(path) if path.is_dir() else None
    if lib is not None and lib.papers:  # a whole library: one summary row per paper
        rows: list[dict[str, Any]] = []
        for p in lib.papers:
            try:
                rows.append(paper_summary(process_paper(p.path, p.key, fmt, token_cap, ocr)))
            except IngestError as e:
                rows.append({"paper_id": p.key, "error": e.to_dict()})
        warnings = [f"folder {k!r} skipped: not a valid paper key: {paper_key_problem(k)}" for k in lib.invalid_keys]
        failed = sum(1 for r in rows if "error" in r)
        env = ok("parse", {"library": str(path), "layout": lib.layout, "papers": rows}, count=len(rows),
                 warnings=warnings + [f"{r['paper_id']}: {r['error']['message']}" for r in rows if "error" in r])
        return Outcome(env, 1 if failed else 0)
    try:
        out = process_paper(path, paper_id, fmt, token_cap, ocr)
    except IngestError as e:
        raise SheafError("BAD_INPUT", str(e), e.to_dict(),
                         hint="check the file, or force a format with --format") from None
    except ValueError as e:
        raise SheafError("BAD_INPUT", str(e), {"path": str(path)}) from None
    data = {"paper_id": out.paper.paper_id, "stage": stage, "summary": paper_summary(out)}
    data.update(_stage_data(out, stage))
    return Outcome(ok("parse", data, count=1, warnings=list(out.paper.warnings)), 0, out)
