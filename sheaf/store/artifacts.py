"""Per-paper artifacts ↔ Arrow tables / JSON dicts (what the Parquet IO manager stores).

Explicit schemas so that an empty paper still writes a well-typed file, typed exactly as the file
reads back: a list's item field is named `element`, as Parquet's (compliant) nested types name
it, so a table in memory equals the one its file gives (a run's later steps get the very table
the run wrote: `io_managers.parquet`).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from sheaf.core.models import (
    Block,
    BodyUnit,
    EmittedBlock,
    HeadingEvent,
    ObjectUnit,
    ParsedPaper,
    RenderMap,
    SectionNode,
)


def _list(item: pa.DataType) -> pa.DataType:
    """A list type as a Parquet file reads back (its item field named `element`)."""
    return pa.list_(pa.field("element", item))


BLOCK_SCHEMA = pa.schema([
    ("paper_id", pa.string()), ("block_id", pa.string()), ("page", pa.int32()), ("order", pa.int32()),
    ("bbox", _list(pa.float32())), ("role", pa.string()), ("text", pa.string()),
    ("raw_label", pa.string()), ("heading_level", pa.int32()), ("source_format", pa.string()),
    ("attached_to", pa.string()), ("role_reason", pa.string()),
])
BODY_UNIT_SCHEMA = pa.schema([
    ("unit_id", pa.string()), ("short_id", pa.string()), ("paper_id", pa.string()), ("node_id", pa.string()),
    ("section_path", _list(pa.string())), ("section_level", pa.int32()), ("page_span", _list(pa.int32())),
    ("block_ids", _list(pa.string())), ("text", pa.string()), ("token_count", pa.int32()),
    ("unit_kind", pa.string()), ("part_ordinal", pa.int32()),
])
OBJECT_UNIT_SCHEMA = pa.schema([
    ("unit_id", pa.string()), ("short_id", pa.string()), ("paper_id", pa.string()), ("object_kind", pa.string()),
    ("label", pa.string()), ("caption", pa.string()), ("table_text", pa.string()), ("nearby_text", pa.string()),
    ("node_id", pa.string()), ("section_path", _list(pa.string())), ("page", pa.int32()),
    ("block_ids", _list(pa.string())),
])


def table_hash(table: pa.Table) -> str:
    """A content hash of a table's rows (stable across runs), for data versions."""
    h = hashlib.sha256()
    for row in table.to_pylist():
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode())
    return h.hexdigest()


def dict_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def paper_to_table(paper: ParsedPaper) -> pa.Table:
    """Blocks as rows; the paper's own fields in the schema metadata."""
    meta = {"paper_id": paper.paper_id, "source_format": paper.source_format, "source_path": paper.source_path,
            "adapter": paper.adapter, "ocr_result_hash": paper.ocr_result_hash,
            "warnings": list(paper.warnings), "title": paper.title}
    t = pa.Table.from_pylist([b.to_dict() for b in paper.blocks], schema=BLOCK_SCHEMA)
    return t.replace_schema_metadata({"sheaf.paper": json.dumps(meta)})


def table_title(table: pa.Table) -> str | None:
    """The paper's title from its blocks table's schema metadata, without reading a block."""
    title = json.loads((table.schema.metadata or {})[b"sheaf.paper"])["title"]
    return str(title) if title is not None else None


def _box(values: Sequence[float] | None) -> tuple[float, float, float, float] | None:
    if values is None:
        return None
    x0, y0, x1, y1 = (round(float(v), 4) for v in values)
    return (x0, y0, x1, y1)


def table_to_paper(table: pa.Table) -> ParsedPaper:
    meta = json.loads((table.schema.metadata or {})[b"sheaf.paper"])
    blocks = []
    for r in table.to_pylist():
        bbox = _box(r["bbox"])
        blocks.append(Block(r["paper_id"], r["block_id"], r["page"], r["order"], bbox, r["role"], r["text"],
                            r["raw_label"], r["heading_level"], r["source_format"], r["attached_to"],
                            r.get("role_reason")))
    return ParsedPaper(meta["paper_id"], meta["source_format"], meta["source_path"], meta["adapter"],
                       meta["ocr_result_hash"], tuple(blocks), tuple(meta["warnings"]), meta["title"])


def render_map_from_dict(d: dict[str, Any]) -> RenderMap:
    return RenderMap(tuple(HeadingEvent(**h) for h in d["headings"]),
                     tuple(EmittedBlock(**e) for e in d["emitted_blocks"]))


def tree_from_dict(d: dict[str, Any]) -> SectionNode:
    return SectionNode(
        node_id=d["node_id"], title=d["title"], level=d["level"], kind=d["kind"],
        heading_block_id=d["heading_block_id"], section_path=tuple(d["section_path"]),
        start=d["start"], end=d["end"], own_block_ids=tuple(d["own_block_ids"]),
        subtree_block_ids=tuple(d["subtree_block_ids"]), object_block_ids=tuple(d["object_block_ids"]),
        page_span=tuple(d["page_span"]) if d["page_span"] else None,
        children=[tree_from_dict(c) for c in d["children"]],
    )


def body_units_to_table(units: list[BodyUnit] | tuple[BodyUnit, ...]) -> pa.Table:
    return pa.Table.from_pylist([u.to_dict() for u in units], schema=BODY_UNIT_SCHEMA)


def table_to_body_units(table: pa.Table) -> list[BodyUnit]:
    return [BodyUnit(r["unit_id"], r["short_id"], r["paper_id"], r["node_id"], tuple(r["section_path"]),
                     r["section_level"], tuple(r["page_span"]) if r["page_span"] else None,
                     tuple(r["block_ids"]), r["text"], r["token_count"], r["unit_kind"], r["part_ordinal"])
            for r in table.to_pylist()]


def object_units_to_table(units: list[ObjectUnit] | tuple[ObjectUnit, ...]) -> pa.Table:
    return pa.Table.from_pylist([u.to_dict() for u in units], schema=OBJECT_UNIT_SCHEMA)


def table_to_object_units(table: pa.Table) -> list[ObjectUnit]:
    return [ObjectUnit(r["unit_id"], r["short_id"], r["paper_id"], r["object_kind"], r["label"], r["caption"],
                       r["table_text"], r["nearby_text"], r["node_id"], tuple(r["section_path"]), r["page"],
                       tuple(r["block_ids"]))
            for r in table.to_pylist()]
