"""Consistency checks of one paper's build (pure functions; Dagster's asset checks call them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sheaf.core.models import (
    BACKMATTER_ROLES,
    BODY_ROLES,
    FURNITURE_ROLES,
    BodyUnit,
    ObjectUnit,
    ParsedPaper,
    RenderMap,
)


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)


def check_units_cover_blocks(paper: ParsedPaper, render_map: RenderMap, units: list[BodyUnit]) -> CheckOutcome:
    """Every emitted body block lands in exactly one unit (parts of one section count once)."""
    roles = {b.block_id: b.role for b in paper.blocks}
    texts = {b.block_id: b.text for b in paper.blocks}
    wanted = {e.block_id for e in render_map.emitted_blocks
              if roles.get(e.block_id) in BODY_ROLES | BACKMATTER_ROLES and texts.get(e.block_id, "").strip()}
    owners: dict[str, set[str]] = {}
    for u in units:
        for bid in u.block_ids:
            owners.setdefault(bid, set()).add(u.unit_id.split(":part_")[0])
    missing = sorted(wanted - set(owners))
    doubled = sorted(b for b, o in owners.items() if len(o) > 1)
    passed = not missing and not doubled
    return CheckOutcome(passed, "every body block is in exactly one unit" if passed else
                        f"{len(missing)} body blocks in no unit, {len(doubled)} in several",
                        {"body_blocks": len(wanted), "missing": missing[:20], "doubled": doubled[:20]})


def check_no_furniture(paper: ParsedPaper, units: list[BodyUnit], objects: list[ObjectUnit]) -> CheckOutcome:
    """No running header, footer or page number reaches a unit's block list."""
    furniture = {b.block_id for b in paper.blocks if b.role in FURNITURE_ROLES}
    leaked = sorted({bid for u in (*units, *objects) for bid in u.block_ids} & furniture)
    return CheckOutcome(not leaked, "no page furniture in units" if not leaked else
                        f"{len(leaked)} furniture blocks in units", {"leaked": leaked[:20]})


def check_index_rows(counts: dict[str, int], n_units: int, n_objects: int) -> CheckOutcome:
    """The paper's FTS rows equal its units, and its unit rows equal the artifacts'."""
    ok = (counts.get("body_units") == n_units and counts.get("object_units") == n_objects
          and counts.get("body_units_fts") == n_units and counts.get("object_units_fts") == n_objects)
    return CheckOutcome(ok, "FTS rows = units" if ok else "FTS/unit rows differ from the units artifact",
                        {"artifact_units": n_units, "artifact_objects": n_objects,
                         **{k: v for k, v in counts.items() if "units" in k}})


def check_vectors(counts: dict[str, int], passages_table: str, vec_table: str, n_units: int) -> CheckOutcome:
    """Vector rows = passages of the current model, and a paper with units has vectors."""
    p, v = counts.get(passages_table, 0), counts.get(vec_table, 0)
    ok = p == v and (p > 0 or n_units == 0)
    return CheckOutcome(ok, f"{v} vectors for {p} passages" if ok else
                        f"vectors ({v}) and passages ({p}) disagree, or a paper with {n_units} units has none",
                        {"passages": p, "vectors": v, "units": n_units})
