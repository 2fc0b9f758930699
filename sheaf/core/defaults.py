"""The query commands' choices and defaults, in one place for the library (`sheaf.search.retriever`)
and the CLI's parser (which must stay light: nothing is imported here)."""
from __future__ import annotations

__all__ = ["MODES", "KINDS", "KIND_HELP", "UNIT_KINDS", "DEFAULT_LIMIT", "DEFAULT_PER_PAPER", "DEFAULT_WINDOW",
           "unit_kind_of"]

MODES = ("lexical", "semantic", "hybrid")
#: The unit kinds the index holds, as every surface names them (`--kind`, the MCP tools' `kind`):
#: `body` (the paper's text, back matter included), `object` (figures and tables), `note` (a
#: Zotero child note), `annotation` (a Zotero highlight or comment).
UNIT_KINDS = ("body", "object", "note", "annotation")
#: What `--kind` takes: one unit kind, or `all`.
KINDS = (*UNIT_KINDS, "all")
KIND_HELP = ("body text (back matter included), object (figures and tables), note (Zotero notes), "
             "annotation (Zotero highlights and comments), or all (default)")
DEFAULT_LIMIT = 10
DEFAULT_PER_PAPER = 2
DEFAULT_WINDOW = 2


def unit_kind_of(unit_id: str) -> str:
    """The kind (one of `UNIT_KINDS`) of a unit, from its id alone: a body unit's id is
    ``{paper}:body:{node}[:note|:annotation|:backmatter][:part_NNN]``; every other unit is a
    figure or table (``{paper}:{figure|table}:{block}``)."""
    parts = unit_id.split(":")
    if len(parts) < 3 or parts[1] != "body":
        return "object"
    tail = parts[-2] if parts[-1].startswith("part_") and len(parts) > 3 else parts[-1]
    return tail if tail in ("note", "annotation") else "body"
