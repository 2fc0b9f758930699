"""The records' dict form (`to_dict`, what artifacts and the index are written from)."""
from dataclasses import asdict
from pathlib import Path

import pytest

from sheaf.core.record_dict import record_dict
from sheaf.library.metadata import export_files_metadata
from sheaf.transform import chain

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample-library"


@pytest.mark.parametrize("key", sorted(p.name for p in (SAMPLE / "papers").iterdir()))
def test_record_dict_is_asdict_for_every_record_of_a_paper(key):
    """`record_dict` (a record's fields, no deep copy) is exactly `dataclasses.asdict` for every
    record a sample paper makes: its blocks, render events, units and library metadata. A field
    holding a nested record would tell them apart."""
    path = next((SAMPLE / "papers" / key).iterdir())
    paper = chain.parse(path, key)
    render = chain.render(paper)
    body, objects = chain.units(paper, chain.tree(paper, render.render_map))
    metas = export_files_metadata([SAMPLE / "library.json"]).papers
    records = [*paper.blocks, *render.render_map.headings, *render.render_map.emitted_blocks, *body, *objects, *metas]
    assert paper.blocks and body and metas
    for r in records:
        assert record_dict(r) == asdict(r), type(r).__name__
