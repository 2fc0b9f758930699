"""The whole per-paper transform chain, Dagster-free: parse → render → tree → units.

One function per stage; the Dagster assets call the stages one by one (each stage is an
asset, its output stored between steps), and `units_from_paper` / `process_paper` compose
the very same functions for the CLI and the tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sheaf.core.models import BodyUnit, ObjectUnit, ParsedPaper, Render, RenderMap, SectionNode
from sheaf.formats import parse_paper
from sheaf.formats.pdf.ocr import PageOcr
from sheaf.transform.render import render_paper
from sheaf.transform.tree import build_tree
from sheaf.transform.units import DEFAULT_TOKEN_CAP, body_units, object_units


@dataclass(frozen=True, slots=True)
class PaperOutputs:
    """Every stage's output for one paper."""

    paper: ParsedPaper
    render: Render
    tree: SectionNode
    body_units: tuple[BodyUnit, ...]
    object_units: tuple[ObjectUnit, ...]


# --- the stages ---------------------------------------------------------------------------

def parse(path: Path | str, paper_id: str | None = None, fmt: str = "auto", ocr: PageOcr | None = None) -> ParsedPaper:
    """Stage 1: one paper's folder or file → its canonical blocks with roles; `ocr` reads the
    pages of a PDF that have no usable text layer."""
    return parse_paper(path, paper_id, fmt, ocr=ocr)


def render(paper: ParsedPaper) -> Render:
    """Stage 2: the paper's Markdown and its render-map (heading and emitted-block events)."""
    return render_paper(paper)


def tree(paper: ParsedPaper, render_map: RenderMap) -> SectionNode:
    """Stage 3: sections nested by heading level, from the render-map's events."""
    return build_tree(render_map, paper.title or paper.paper_id)


def units(paper: ParsedPaper, section_tree: SectionNode,
          token_cap: int = DEFAULT_TOKEN_CAP) -> tuple[tuple[BodyUnit, ...], tuple[ObjectUnit, ...]]:
    """Stage 4: the retrieval units: (body units split past `token_cap`, figure/table units)."""
    return (tuple(body_units(paper.paper_id, section_tree, paper.blocks, token_cap)),
            tuple(object_units(paper.paper_id, section_tree, paper.blocks)))


# --- the composition ----------------------------------------------------------------------

def units_from_paper(paper: ParsedPaper, token_cap: int = DEFAULT_TOKEN_CAP) -> PaperOutputs:
    """Render, tree and units of an already parsed paper."""
    rendered = render(paper)
    section_tree = tree(paper, rendered.render_map)
    body, objects = units(paper, section_tree, token_cap)
    return PaperOutputs(paper=paper, render=rendered, tree=section_tree, body_units=body, object_units=objects)


def process_paper(
    path: Path | str, paper_id: str | None = None, fmt: str = "auto", token_cap: int = DEFAULT_TOKEN_CAP,
    ocr: PageOcr | None = None,
) -> PaperOutputs:
    """Parse one paper's folder or file and run every transform on it."""
    return units_from_paper(parse(path, paper_id, fmt, ocr), token_cap)
