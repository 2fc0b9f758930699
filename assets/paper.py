"""Per-paper transform assets: blocks → Markdown + render-map → tree → units.

Each asset is a thin wrapper over one stage of `sheaf.transform.chain` (the same functions
`process_paper` composes), run for every partition of the run (`context.partition_keys`):
read its inputs, call the stage, return `{paper_key: artifact}` with small per-paper
metadata. A step that writes two assets (a multi-asset) is named after both,
`fulltext_markdown_and_render_map`, `body_units_and_object_units`: what a run's timeline
shows is what the asset graph shows. Assets stored as per-paper files declare their suffix (`sheaf/artifact`
definition metadata): `pipelines.planning.statuses` reads the chain's artifacts from it.
"""

from typing import Any

from dagster import AssetExecutionContext, AssetIn, AssetOut, asset, multi_asset

from assets._batch import run_per_paper
from pipelines.partitions import papers_partitions
from pipelines.planning.paper_view import identity_metadata
from pipelines.planning.policy import BACKFILL_POLICY, CHAIN_CONDITION
from pipelines.planning.sources import paper_sources
from pipelines.planning.statuses import ARTIFACT_METADATA
from pipelines.planning.versions import CODE_VERSIONS
from pipelines.resources import SheafConfig
from sheaf.core.models import IngestError
from sheaf.formats import source_hash
from sheaf.formats.pdf.ocr import from_settings as ocr_from_settings
from sheaf.formats.pdf.ocr import ocr_metadata
from sheaf.store.artifacts import (
    body_units_to_table,
    dict_hash,
    object_units_to_table,
    paper_to_table,
    render_map_from_dict,
    table_hash,
    table_to_paper,
    tree_from_dict,
)
from sheaf.transform import chain

MULTI: dict[str, Any] = dict(partitions_def=papers_partitions, backfill_policy=BACKFILL_POLICY)
COMMON: dict[str, Any] = dict(MULTI, automation_condition=CHAIN_CONDITION)


def _stored(suffix: str) -> dict[str, Any]:
    """Definition metadata of an asset stored as one `<KEY><suffix>` file per paper."""
    return {ARTIFACT_METADATA: suffix}


def _out(name: str, description: str, suffix: str) -> AssetOut:
    return AssetOut(io_manager_key="artifacts", code_version=CODE_VERSIONS[name], automation_condition=CHAIN_CONDITION,
                    description=description, metadata=_stored(suffix))


def _missing(key: str, what: str) -> IngestError:
    return IngestError(key, None, f"no {what} artifact: the upstream step failed or was not run", upstream=True)


@asset(deps=["ocr_result"], group_name="render", io_manager_key="artifacts", code_version=CODE_VERSIONS["ocr_blocks"],
       metadata=_stored(".parquet"), **COMMON)
def ocr_blocks(context: AssetExecutionContext, sheaf: SheafConfig) -> dict[str, Any]:
    """Canonical blocks with roles, parsed from each paper's OCR/layout output."""
    keys = list(context.partition_keys)  # the run's papers alone: not a listing of the whole library
    settings = sheaf.settings()
    papers, ids = paper_sources(context.instance, settings, keys)
    ocr = ocr_from_settings(settings)  # reads the pages of PDFs without a usable text layer

    def one(key: str):
        if key not in papers:
            raise IngestError(key, None, "paper not found in the library")
        try:
            paper = chain.parse(papers[key], key, ocr=ocr)
        except IngestError as e:  # its input's hash, recorded with the error: a new file is tried again
            try:
                e.ocr_result_hash = source_hash(papers[key], key)[2]
            except (IngestError, OSError):
                pass
            raise
        table = paper_to_table(paper)
        return {"ocr_blocks": table}, {
            **identity_metadata(ids.get(key)), "ocr_result_hash": paper.ocr_result_hash, "source_format": paper.source_format,
            "adapter": paper.adapter, "blocks": len(paper.blocks), "warnings": list(paper.warnings),
            **ocr_metadata(paper),
            "output_hash": table_hash(table),
        }

    return run_per_paper(context, keys, one).get("ocr_blocks", {})


@multi_asset(
    outs={"fulltext_markdown": _out("fulltext_markdown", "Each paper's OCR render as Markdown, in reading order.", ".json"),
          "render_map": _out("render_map", "Each paper's render-map: heading events and emitted-block events of the render.",
                             ".json")},
    ins={"ocr_blocks": AssetIn()},
    group_name="render",
    **MULTI,
)
def fulltext_markdown_and_render_map(context: AssetExecutionContext, ocr_blocks: dict[str, Any]):
    """OCR render: each paper's Markdown and its render-map (heading and emitted-block events).
    The op (a run's step) is named after the two assets it writes, as the asset graph shows them."""
    def one(key: str):
        if key not in ocr_blocks:
            raise _missing(key, "ocr_blocks")
        paper = table_to_paper(ocr_blocks[key])
        render = chain.render(paper)
        rm = render.render_map.to_dict()
        return {"fulltext_markdown": {"paper_id": key, "markdown": render.markdown}, "render_map": rm}, {
            "ocr_result_hash": paper.ocr_result_hash, "headings": len(rm["headings"]),
            "emitted_blocks": len(rm["emitted_blocks"]), "markdown_lines": render.markdown.count("\n"),
            "output_hash": dict_hash(rm),
        }

    res = run_per_paper(context, context.partition_keys, one, ("fulltext_markdown", "render_map"))
    return res.get("fulltext_markdown", {}), res.get("render_map", {})


@asset(ins={"render_map": AssetIn(), "ocr_blocks": AssetIn()}, group_name="structure",
       io_manager_key="artifacts", code_version=CODE_VERSIONS["structure_tree"], metadata=_stored(".json"), **COMMON)
def structure_tree(context: AssetExecutionContext, render_map: dict[str, Any],
                   ocr_blocks: dict[str, Any]) -> dict[str, Any]:
    """Sections nested by heading level, with block intervals in emitted order."""
    def one(key: str):
        if key not in render_map or key not in ocr_blocks:
            raise _missing(key, "render_map")
        paper = table_to_paper(ocr_blocks[key])
        tree = chain.tree(paper, render_map_from_dict(render_map[key]))
        d = tree.to_dict()
        nodes = list(tree.walk())
        return {"structure_tree": d}, {
            "ocr_result_hash": paper.ocr_result_hash, "sections": len(nodes) - 1,
            "depth": max(n.level for n in nodes), "output_hash": dict_hash(d),
        }

    return run_per_paper(context, context.partition_keys, one).get("structure_tree", {})


@multi_asset(
    outs={"body_units": _out("body_units", "Section-level body text units, split past the token cap.", ".parquet"),
          "object_units": _out("object_units", "Figure and table units: caption, label, table text, nearby text.", ".parquet")},
    ins={"structure_tree": AssetIn(), "ocr_blocks": AssetIn()},
    group_name="units",
    **MULTI,
)
def body_units_and_object_units(context: AssetExecutionContext, sheaf: SheafConfig, structure_tree: dict[str, Any],
                    ocr_blocks: dict[str, Any]):
    """Retrieval units: section-level body text (split past the token cap) and figures/tables.
    The op is named after the two assets it writes, as the asset graph shows them."""
    cap = sheaf.settings().unit_token_cap

    def one(key: str):
        if key not in structure_tree or key not in ocr_blocks:
            raise _missing(key, "structure_tree")
        paper = table_to_paper(ocr_blocks[key])
        bu, ou = chain.units(paper, tree_from_dict(structure_tree[key]), cap)
        bt, ot = body_units_to_table(bu), object_units_to_table(ou)
        return {"body_units": bt, "object_units": ot}, {
            "ocr_result_hash": paper.ocr_result_hash, "body_units": len(bu), "object_units": len(ou),
            "tokens": sum(u.token_count for u in bu), "output_hash": table_hash(bt) + ":" + table_hash(ot)[:16],
        }

    res = run_per_paper(context, context.partition_keys, one, ("body_units", "object_units"))
    return res.get("body_units", {}), res.get("object_units", {})
