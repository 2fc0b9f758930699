"""The query commands' choices and defaults, in one place for the library (`sheaf.search.retriever`)
and the CLI's parser (which must stay light: nothing is imported here)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

__all__ = ["MODES", "KINDS", "KIND_HELP", "UNIT_KINDS", "DEFAULT_LIMIT", "DEFAULT_PER_PAPER", "DEFAULT_WINDOW",
           "unit_kind_of", "in_kinds"]

MODES = ("lexical", "semantic", "hybrid")
#: The unit kinds the index holds, as every surface names them (`--kind`, the MCP tools' `kind`):
#: `body` (the paper's text, back matter included), `object` (figures and tables), `note` (a
#: Zotero child note), `annotation` (a Zotero highlight or comment).
UNIT_KINDS = ("body", "object", "note", "annotation")
#: What `--kind` takes: one unit kind, `backmatter` (the body units a reader marked as back matter:
#: acknowledgements, funding, footnotes ...; ranked below the body otherwise), or `all`.
KINDS = (*UNIT_KINDS, "backmatter", "all")
KIND_HELP = ("body text (back matter included), backmatter (acknowledgements, funding, footnotes ... alone), "
             "object (figures and tables), note (Zotero notes), "
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


def in_kinds(unit_id: str, kinds: Sequence[str]) -> bool:
    """Whether a unit is of one of `kinds` (`UNIT_KINDS`, or `backmatter`: a body unit whose id
    ends ``:backmatter[:part_NNN]``)."""
    kind = unit_kind_of(unit_id)
    if kind in kinds:
        return True
    if kind != "body" or "backmatter" not in kinds:
        return False
    parts = unit_id.split(":")
    return (parts[-2] if parts[-1].startswith("part_") else parts[-1]) == "backmatter"
