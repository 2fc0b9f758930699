"""Structure tree: sections nested by heading level, block intervals in emitted order.

Built from the render-map alone: a stack on heading level gives nesting; a
section spans from its heading to the next heading of the same or a shallower level; its
`own_block_ids` are its span minus its children's spans minus the heading itself, minus
figures/tables and their captions (those are objects, listed in `object_block_ids`).
Everything emitted before the first heading gets a `front` section, so nothing emitted is
orphaned.
"""
from __future__ import annotations

from sheaf.core.models import EmittedBlock, RenderMap, SectionNode
from sheaf.core.parsed import NO_PAGE

_OBJECT_ROLES = frozenset({"figure", "table"})
_CAPTION_ROLES = frozenset({"figure_caption", "table_caption"})

_KIND_OF_HEADING = {
    "reference_heading": "references",
    "backmatter_heading": "backmatter",
}


def node_id_for(block_id: str) -> str:
    """A section's node id from its heading's block id: 'p3:5' → 'sec_p3_5'."""
    safe = "".join(c if c.isalnum() else "_" for c in block_id)
    return f"sec_{safe}"


def build_tree(render_map: RenderMap, paper_title: str = "") -> SectionNode:
    """The section tree of one paper from its render-map."""
    emitted = list(render_map.emitted_blocks)
    n = len(emitted)
    root = SectionNode("root", paper_title, 0, "root", None, (), 0, n)
    heading_orders = [h.emitted_order for h in render_map.headings]
    first_heading = heading_orders[0] if heading_orders else n
    if first_heading > 0:
        title = "Front matter" if heading_orders else "Full text"
        root.children.append(SectionNode("front", title, 1, "front", None, (title,), 0, first_heading))

    role_of = {e.block_id: e.role for e in emitted}
    stack: list[SectionNode] = [root]
    for h in render_map.headings:
        level = h.markdown_level - 1
        while len(stack) > 1 and stack[-1].level >= level:
            stack.pop()
        parent = stack[-1]
        kind = _KIND_OF_HEADING.get(role_of.get(h.block_id, ""), None)
        if kind is None:
            kind = parent.kind if parent.kind in ("references", "backmatter") else "body"
        node = SectionNode(
            node_id_for(h.block_id), h.title, level, kind, h.block_id,
            parent.section_path + (h.title,), h.emitted_order, n,
        )
        parent.children.append(node)
        stack.append(node)

    # end of each section = start of the next heading at the same or a shallower level
    _close(root, n)
    _fill(root, emitted)
    return root


def _close(node: SectionNode, end: int) -> None:
    node.end = end
    for i, child in enumerate(node.children):
        nxt = node.children[i + 1].start if i + 1 < len(node.children) else end
        _close(child, nxt)


def _fill(node: SectionNode, emitted: list[EmittedBlock]) -> None:
    for c in node.children:
        _fill(c, emitted)
    inside_children: set[int] = set()
    for c in node.children:
        inside_children.update(range(c.start, c.end))
    own: list[str] = []
    objects: list[str] = []
    subtree: list[str] = []
    pages: list[int] = []
    for e in emitted[node.start:node.end]:
        subtree.append(e.block_id)
        if e.emitted_order in inside_children:
            continue
        if e.block_id == node.heading_block_id:
            pages.append(e.page)
            continue
        pages.append(e.page)
        if e.role in _OBJECT_ROLES or (e.role in _CAPTION_ROLES and e.emitted_as == "caption"):
            objects.append(e.block_id)
        else:
            own.append(e.block_id)
    node.own_block_ids = tuple(own)
    node.object_block_ids = tuple(objects)
    node.subtree_block_ids = tuple(subtree)
    child_pages = [c.page_span for c in node.children if c.page_span]
    pages = [p for p in pages if p != NO_PAGE]
    lo = pages + [s[0] for s in child_pages]
    hi = pages + [s[1] for s in child_pages]
    node.page_span = (min(lo), max(hi)) if lo else None
