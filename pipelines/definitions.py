"""The one assembly point: every asset, check, sensor, schedule and resource of Sheaf."""
from __future__ import annotations

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

from assets.paper import ocr_blocks, ocr_render, retrieval_units, structure_tree
from assets.resources import SheafConfig
from assets.source import ocr_result
from io_managers import PaperArtifactIOManager
from pipelines.partitions import papers_partitions
from sheaf.settings import get_settings

#: Every per-paper asset from blocks to vectors: what `sheaf build` and backfills run.
paper_chain_job = define_asset_job(
    "paper_chain",
    selection=AssetSelection.all(include_sources=False) - AssetSelection.keys("ocr_result"),
    partitions_def=papers_partitions,
    description="Rebuild the chosen papers through the whole chain.",
)


def build_definitions(home: str = "", library: str = "") -> Definitions:
    """Definitions for a Sheaf home and library (defaults: the SHEAF_* settings)."""
    settings = get_settings(**({"home": home} if home else {}), **({"library": library} if library else {}))
    return Definitions(
        assets=[ocr_result, ocr_blocks, ocr_render, structure_tree, retrieval_units],
        resources={
            "sheaf": SheafConfig(home=str(settings.home), library=str(settings.library)),
            "artifacts": PaperArtifactIOManager(root=str(settings.artifacts_dir.resolve())),
        },
        jobs=[paper_chain_job],
        executor=in_process_executor,
    )


defs = build_definitions()
