"""The chain composed once: `process_paper` is the composition of the stage functions, and the
assets' path (each stage's output stored as an artifact and read back by the next stage) gives
the very same units."""
from __future__ import annotations

from pathlib import Path

import pytest

from sheaf.library.discover import discover
from sheaf.store.artifacts import (
    body_units_to_table,
    object_units_to_table,
    paper_to_table,
    render_map_from_dict,
    table_title,
    table_to_body_units,
    table_to_object_units,
    table_to_paper,
    tree_from_dict,
)
from sheaf.transform import chain

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample-library"
PAPERS = {p.key: p.path for p in discover(SAMPLE).papers}


@pytest.mark.parametrize("key", sorted(PAPERS))
def test_process_paper_is_the_composition_of_the_stages(key):
    out = chain.process_paper(PAPERS[key], key)
    paper = chain.parse(PAPERS[key], key)
    rendered = chain.render(paper)
    tree = chain.tree(paper, rendered.render_map)
    body, objects = chain.units(paper, tree)
    assert out.paper == paper and out.render == rendered and out.tree == tree
    assert out.body_units == body and out.object_units == objects


@pytest.mark.parametrize("key", sorted(PAPERS))
def test_stages_through_stored_artifacts_give_the_same_units(key):
    """What the assets do: blocks, render-map, tree and units each go through their artifact
    form (Parquet table / JSON dict) between stages."""
    direct = chain.process_paper(PAPERS[key], key, token_cap=200)
    table = paper_to_table(chain.parse(PAPERS[key], key))
    paper = table_to_paper(table)
    assert table_title(table) == paper.title == direct.paper.title  # what the vector step reads
    render_map = render_map_from_dict(chain.render(paper).render_map.to_dict())
    tree = tree_from_dict(chain.tree(paper, render_map).to_dict())
    body, objects = chain.units(paper, tree, 200)
    assert tuple(table_to_body_units(body_units_to_table(body))) == direct.body_units
    assert tuple(table_to_object_units(object_units_to_table(objects))) == direct.object_units


def test_the_assets_call_the_stages_not_the_transforms():
    """assets/paper.py reaches the transforms only through `sheaf.transform.chain`."""
    src = (Path(__file__).resolve().parents[2] / "assets" / "paper.py").read_text(encoding="utf-8")
    for name in ("sheaf.transform.render", "sheaf.transform.tree", "sheaf.transform.units", "parse_paper"):
        assert name not in src, name
    for stage in ("chain.parse(", "chain.render(", "chain.tree(", "chain.units("):
        assert stage in src, stage
