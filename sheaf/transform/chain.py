"""The whole per-paper transform chain, Dagster-free: parse → render → tree → units."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sheaf.ingest import parse_paper
from sheaf.core.models import BodyUnit, ObjectUnit, ParsedPaper, Render, SectionNode
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


def units_from_paper(paper: ParsedPaper, token_cap: int = DEFAULT_TOKEN_CAP) -> PaperOutputs:
    """Render, tree and units of an already parsed paper."""
    render = render_paper(paper)
    tree = build_tree(render.render_map, paper.title or paper.paper_id)
    return PaperOutputs(
        paper=paper,
        render=render,
        tree=tree,
        body_units=tuple(body_units(paper.paper_id, tree, paper.blocks, token_cap)),
        object_units=tuple(object_units(paper.paper_id, tree, paper.blocks)),
    )


def process_paper(
    path: Path | str, paper_id: str | None = None, fmt: str = "auto", token_cap: int = DEFAULT_TOKEN_CAP
) -> PaperOutputs:
    """Parse one paper's folder or file and run every transform on it."""
    return units_from_paper(parse_paper(path, paper_id, fmt), token_cap)
