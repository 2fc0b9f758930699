"""Property tests over generated papers: no body text lost, no block in two units."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sheaf.core.models import BACKMATTER_ROLES, BODY_ROLES
from sheaf.transform.chain import units_from_paper
from tests.kits.papers import blk, make_paper

words = st.text(alphabet="abcdefghijklmnopqrstuvwxyzäöü ", min_size=1, max_size=40).map(
    lambda s: " ".join(s.split()) or "x")

block = st.one_of(
    st.builds(lambda t: blk("body", t + "."), words),
    st.builds(lambda t: blk("abstract", t), words),
    st.builds(lambda t: blk("list", "- " + t), words),
    st.builds(lambda t: blk("equation", "E = " + t), words),
    st.builds(lambda t: blk("footnote", t), words),
    st.builds(lambda t: blk("backmatter_body", t), words),
    st.builds(lambda t, lv: blk("heading", t.title(), lv), words, st.integers(1, 4)),
    st.builds(lambda t: blk("backmatter_heading", "Funding " + t, 1), words),
    st.builds(lambda t: blk("reference_heading", "References", 1), words),
    st.builds(lambda t: blk("reference", "Ref " + t), words),
    st.builds(lambda t: blk("figure_caption", "Figure 1. " + t), words),
    st.builds(lambda t: blk("page_header", "Journal " + t), words),
)


def _with_pages(specs: list[dict]) -> list[dict]:
    for i, s in enumerate(specs):
        s["page"] = 1 + i // 7
    return specs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(block, min_size=1, max_size=40).map(_with_pages), st.sampled_from([30, 80, 1000]))
def test_every_emitted_body_block_is_in_exactly_one_unit(specs, cap):
    paper = make_paper(specs)
    out = units_from_paper(paper, token_cap=cap)
    emitted = {e.block_id for e in out.render.render_map.emitted_blocks}
    unit_roles = BODY_ROLES | BACKMATTER_ROLES
    wanted = [b for b in paper.blocks if b.block_id in emitted and b.role in unit_roles and b.text.strip()]
    # a block split over parts of one section counts once: group parts by their base id
    owners: dict[str, set[str]] = {}
    for u in out.body_units:
        base = u.unit_id.split(":part_")[0]
        for bid in u.block_ids:
            owners.setdefault(bid, set()).add(base)
    for b in wanted:
        assert len(owners.get(b.block_id, set())) == 1, (b, owners.get(b.block_id))
    # no other block (references, captions, headings, furniture) ever reaches a unit
    allowed = {b.block_id for b in wanted}
    assert set(owners) <= allowed
    # every emitted block lands in some section (nothing orphaned)
    owned = set()
    for n in out.tree.walk():
        if n.node_id != "root":
            owned |= set(n.own_block_ids) | set(n.object_block_ids) | ({n.heading_block_id} - {None})
    assert emitted <= owned


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(block, min_size=1, max_size=40).map(_with_pages), st.sampled_from([25, 80, 1000]))
def test_concatenated_units_lose_no_body_text(specs, cap):
    paper = make_paper(specs)
    out = units_from_paper(paper, token_cap=cap)
    unit_words = " ".join(u.text for u in out.body_units).split()
    expect = []
    emitted = {e.block_id for e in out.render.render_map.emitted_blocks}
    by_id = {b.block_id: b for b in paper.blocks}
    # reading order of the tree: units come section by section, so compare as multisets
    for bid in emitted:
        b = by_id.get(bid)
        if b and b.role in BODY_ROLES | BACKMATTER_ROLES:
            expect.extend(b.text.split())
    assert sorted(unit_words) == sorted(expect)
