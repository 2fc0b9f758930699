"""The structure tree and units on hand-built papers: cases of nesting, splits and objects."""
from __future__ import annotations

from sheaf.transform.chain import units_from_paper
from sheaf.transform.tree import build_tree
from tests.kits.papers import blk, make_paper, make_render_map


def nodes_by_title(tree):
    out = {}
    for n in tree.walk():
        out.setdefault(n.title, []).append(n)
    return out


def test_duplicate_heading_titles_are_told_apart_by_block_id():
    paper = make_paper([
        blk("heading", "1 Study one", 1), blk("heading", "1.1 Results", 2), blk("body", "first results"),
        blk("heading", "2 Study two", 1), blk("heading", "2.1 Results", 2), blk("body", "second results"),
        blk("heading", "Results", 1), blk("body", "third"), blk("heading", "Results", 1), blk("body", "fourth"),
    ])
    out = units_from_paper(paper)
    same = [n for n in out.tree.walk() if n.title == "Results"]
    assert len(same) == 2
    assert same[0].node_id != same[1].node_id
    assert same[0].heading_block_id != same[1].heading_block_id
    ids = [u.unit_id for u in out.body_units]
    assert len(ids) == len(set(ids))
    texts = {u.text for u in out.body_units if u.section_path == ("Results",)}
    assert texts == {"third", "fourth"}


def test_h2_h3_h3_siblings_give_correct_section_paths():
    paper = make_paper([
        blk("heading", "Methods", 1), blk("heading", "Participants", 2), blk("body", "p"),
        blk("heading", "Procedure", 2), blk("body", "q"), blk("heading", "Results", 1), blk("body", "r"),
    ])
    out = units_from_paper(paper)
    paths = {u.text: u.section_path for u in out.body_units}
    assert paths == {"p": ("Methods", "Participants"), "q": ("Methods", "Procedure"), "r": ("Results",)}
    methods = nodes_by_title(out.tree)["Methods"][0]
    assert [c.title for c in methods.children] == ["Participants", "Procedure"]
    assert {u.section_level for u in out.body_units if u.text in "pq"} == {2}


def test_parent_owns_intro_and_summary_only():
    # emitted order: parent heading, intro, summary, child heading, child body
    rm = make_render_map([
        ("h1", "heading", "2 Parent", 1), ("intro", "body", "intro", None), ("summary", "body", "summary", None),
        ("h2", "heading", "2.1 Child", 2), ("cbody", "body", "child body", None),
    ])
    tree = build_tree(rm)
    parent = tree.children[0]
    assert parent.own_block_ids == ("intro", "summary")
    assert parent.children[0].own_block_ids == ("cbody",)
    assert set(parent.subtree_block_ids) == {"h1", "intro", "summary", "h2", "cbody"}


def test_child_body_never_repeated_in_parent():
    paper = make_paper([
        blk("heading", "3 Results", 1), blk("body", "overview"), blk("heading", "3.1 Dose", 2),
        blk("body", "dose response was linear"), blk("heading", "3.2 Safety", 2), blk("body", "no events"),
    ])
    out = units_from_paper(paper)
    parent = [u for u in out.body_units if u.section_path == ("3 Results",)]
    assert [u.text for u in parent] == ["overview"]
    for u in out.body_units:
        others = [v for v in out.body_units if v is not u]
        assert all(u.text not in v.text for v in others)


def test_empty_container_gives_no_unit():
    paper = make_paper([
        blk("heading", "2 Methods", 1), blk("heading", "2.1 Design", 2), blk("body", "design text"),
    ])
    out = units_from_paper(paper)
    assert [u.section_path for u in out.body_units] == [("2 Methods", "2.1 Design")]
    node = nodes_by_title(out.tree)["2 Methods"][0]
    assert node.own_block_ids == ()


def test_reference_items_never_in_body_units():
    paper = make_paper([
        blk("heading", "1 Intro", 1), blk("body", "we cite things"),
        blk("reference_heading", "References", 1), blk("reference", "Smith J (2020) A study. Nature."),
        blk("reference", "Doe A (2019) Another. Science."),
    ])
    out = units_from_paper(paper)
    joined = " ".join(u.text for u in out.body_units)
    assert "Smith J" not in joined and "Doe A" not in joined
    refs = [n for n in out.tree.walk() if n.kind == "references"]
    assert len(refs) == 1 and len(refs[0].own_block_ids) == 2


def test_references_without_heading_get_their_own_section():
    paper = make_paper([blk("body", "text"), blk("reference", "Smith J (2020) A study.")])
    out = units_from_paper(paper)
    refs = [n for n in out.tree.walk() if n.kind == "references"]
    assert len(refs) == 1 and refs[0].title == "References"
    assert all("Smith" not in u.text for u in out.body_units)


def test_structured_inserts_go_to_backmatter_units():
    paper = make_paper([
        blk("heading", "1 Intro", 1), blk("body", "main text"),
        blk("backmatter_heading", "Acknowledgements", 1), blk("backmatter_body", "We thank the lab."),
        blk("backmatter_heading", "Funding", 1), blk("body", "Grant 123."),
    ])
    out = units_from_paper(paper)
    kinds = {u.text: u.unit_kind for u in out.body_units}
    assert kinds == {"main text": "body", "We thank the lab.": "backmatter_body", "Grant 123.": "backmatter_body"}


def test_mixed_body_and_backmatter_split_into_two_units():
    paper = make_paper([
        blk("heading", "4 Discussion", 1), blk("body", "we discuss"),
        blk("backmatter_body", "Key points: one, two"), blk("body", "more discussion"),
    ])
    out = units_from_paper(paper)
    us = [u for u in out.body_units if u.section_path == ("4 Discussion",)]
    assert sorted(u.unit_kind for u in us) == ["backmatter_body", "body"]
    body = next(u for u in us if u.unit_kind == "body")
    assert body.text == "we discuss\n\nmore discussion"
    assert len({u.unit_id for u in us}) == 2


def test_token_cap_splits_into_parts():
    para = " ".join(f"Sentence number {i} says something." for i in range(60))  # 360 tokens
    paper = make_paper([blk("heading", "1 Long", 1)] + [blk("body", para) for _ in range(4)])
    out = units_from_paper(paper, token_cap=800)
    ids = [u.unit_id for u in out.body_units]
    assert ids == ["TEST1:body:sec_p1_0:part_001", "TEST1:body:sec_p1_0:part_002"]
    assert [u.part_ordinal for u in out.body_units] == [1, 2]
    assert all(u.token_count <= 800 for u in out.body_units)
    # one paragraph over the cap is split at sentence boundaries
    out2 = units_from_paper(make_paper([blk("heading", "1 Long", 1), blk("body", para * 4)]), token_cap=200)
    assert len(out2.body_units) > 1
    assert all(u.token_count <= 200 for u in out2.body_units)
    assert all(u.text.endswith(".") for u in out2.body_units)


def test_object_belongs_only_to_its_most_specific_section():
    paper = make_paper([
        blk("heading", "3 Results", 1), blk("body", "As Fig. 2 shows, x rises."),
        blk("heading", "3.1 Growth", 2), blk("body", "growth text"),
        blk("figure", "", bid="p1:4"), blk("figure_caption", "Figure 2. Growth over time.", attached_to="p1:4"),
    ])
    out = units_from_paper(paper)
    assert len(out.object_units) == 1
    obj = out.object_units[0]
    assert obj.section_path == ("3 Results", "3.1 Growth")
    assert obj.label == "Figure 2" and obj.nearby_text == "As Fig. 2 shows, x rises."
    owners = [n.title for n in out.tree.walk() if "p1:4" in n.object_block_ids]
    assert owners == ["3.1 Growth"]


def test_intervals_follow_emitted_order_not_reading_order():
    # reading order: caption (p1:2) before its table (p1:3); the render emits the table first
    paper = make_paper([
        blk("heading", "2 Data", 1), blk("body", "See Table 1."),
        blk("table_caption", "Table 1. Counts.", attached_to="p1:3"), blk("table", "a | b\n1 | 2", bid="p1:3"),
        blk("heading", "3 Next", 1), blk("body", "next"),
    ])
    out = units_from_paper(paper)
    emitted = [e.block_id for e in out.render.render_map.emitted_blocks]
    assert emitted.index("p1:3") < emitted.index("p1:2")
    orders = {e.block_id: e.emitted_order for e in out.render.render_map.emitted_blocks}
    data = nodes_by_title(out.tree)["2 Data"][0]
    assert data.start == orders["p1:0"] and data.end == orders["p1:4"]
    assert set(data.object_block_ids) == {"p1:2", "p1:3"}
    assert out.object_units[0].table_text == "a | b\n1 | 2"


def test_blocks_consumed_by_an_object_never_in_own_block_ids():
    paper = make_paper([
        blk("heading", "1 A", 1), blk("body", "text"), blk("figure", "chart axis 0 10", bid="p1:2"),
        blk("figure_caption", "Figure 1: A chart.", attached_to="p1:2"),
        blk("table_caption", "Table 9: orphan caption"),
    ])
    out = units_from_paper(paper)
    for n in out.tree.walk():
        assert not {"p1:2", "p1:3", "p1:4"} & set(n.own_block_ids)
    assert all("chart" not in u.text and "Figure 1" not in u.text for u in out.body_units)
    assert sorted(o.label for o in out.object_units) == ["Figure 1", "Table 9"]
