"""The one assembly point: every asset, check, job, sensor, schedule and resource of Sheaf."""

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

from assets.checks import ALL_CHECKS
from assets.index import fts_tables, library_metadata, vector_collections
from assets.paper import ocr_blocks, ocr_render, retrieval_units, structure_tree
from assets.report import library_report
from assets.resources import SheafConfig
from assets.source import ocr_result
from io_managers import PaperArtifactIOManager
from pipelines.partitions import papers_partitions
from pipelines.schedules import nightly_rebuild
from pipelines.sensors import automation_sensor, library_discovery_sensor
from sheaf.settings import get_settings

PAPER_ASSETS = AssetSelection.groups("render", "structure", "units", "index") - AssetSelection.keys("library_metadata")

#: Every per-paper asset from blocks to vectors, with their checks: what `sheaf build`,
#: backfills and the nightly schedule run.
paper_chain_job = define_asset_job(
    "paper_chain", selection=PAPER_ASSETS, partitions_def=papers_partitions,
    description="Rebuild the chosen papers through the whole chain (blocks → vectors).",
)
#: The unpartitioned library-wide assets.
library_job = define_asset_job(
    "library_job", selection=AssetSelection.keys("library_metadata", "library_report"),
    description="Load library metadata and refresh the library report.",
)


def build_definitions(home: str = "", library: str = "") -> Definitions:
    """Definitions for a Sheaf home and library (defaults: the SHEAF_* settings)."""
    settings = get_settings(**({"home": home} if home else {}), **({"library": library} if library else {}))
    return Definitions(
        assets=[ocr_result, ocr_blocks, ocr_render, structure_tree, retrieval_units, fts_tables,
                vector_collections, library_metadata, library_report],
        asset_checks=ALL_CHECKS,
        jobs=[paper_chain_job, library_job],
        sensors=[library_discovery_sensor, automation_sensor],
        schedules=[nightly_rebuild],
        resources={
            "sheaf": SheafConfig(home=str(settings.home.resolve()), library=str(settings.library.resolve())),
            "artifacts": PaperArtifactIOManager(root=str(settings.artifacts_dir.resolve())),
        },
        executor=in_process_executor,
    )


defs = build_definitions()
