"""The one assembly point: every asset, check, job, sensor, schedule and resource of Sheaf.

Importing it (what `dagster dev`'s code server and every run do) silences Dagster's Beta and
Preview warnings before the asset modules are imported: they warned once per definition in
every such process."""

from pipelines.dagster_internals.steps import quiet_beta_warnings

quiet_beta_warnings()  # before the asset modules below: their decorators warn as they are imported

from collections.abc import Mapping  # noqa: E402 - after the warnings filter, as every import below

from dagster import (
    AssetsDefinition,
    AssetSelection,
    Definitions,
    ExecutorDefinition,
    ResourceDefinition,
    define_asset_job,
    in_process_executor,
)

from assets.checks import ALL_CHECKS
from assets.index import fts_tables, library_metadata, vector_collections
from assets.library import library_report, library_status
from assets.paper import body_units_and_object_units, fulltext_markdown_and_render_map, ocr_blocks, structure_tree
from assets.source import ocr_result
from io_managers import PaperArtifactIOManager
from pipelines.automation.rebuild import OwnDefinitions, rebuild_stale
from pipelines.automation.schedules import nightly_rebuild
from pipelines.automation.sensors import (
    STATUS_JOB,
    automation_sensor,
    library_discovery_sensor,
    library_status_refresh_sensor,
)
from pipelines.planning.statuses import chain_of
from pipelines.planning.versions import chain_code_versions
from pipelines.resources import SheafConfig, embedder_resource
from sheaf.core.settings import get_settings
from sheaf.formats.pdf.ocr import from_settings as ocr_from_settings

PAPER_ASSETS = AssetSelection.groups("render", "structure", "units", "index") - AssetSelection.assets("library_metadata")

#: Every per-paper asset from blocks to vectors, with their checks: what `sheaf build`,
#: backfills and the nightly schedule run.
paper_chain_job = define_asset_job(
    "paper_chain", selection=PAPER_ASSETS,  # partitioned as its assets are (papers_partitions)
    description="Rebuild the chosen papers through the whole chain (blocks → vectors).",
)
#: The unpartitioned library-wide assets.
library_job = define_asset_job(
    "library_job", selection=AssetSelection.assets("library_metadata", "library_report"),
    description="Load library metadata and refresh the library report.",
)
#: The library's status: what the discovery sensor runs when papers changed.
status_job = define_asset_job(
    STATUS_JOB, selection=AssetSelection.assets("library_status"),
    description="Refresh library_status: every paper's state and why (and the paper_up_to_date check of the "
                "papers whose state changed).",
)


def with_code_versions(assets: list, code_versions: Mapping[str, str]) -> list:
    """`assets` with some assets' code_version replaced ({asset name: version}); how tests
    and benchmarks simulate a code change without editing the decorators."""
    unknown = set(code_versions) - {k.path[-1] for a in assets if isinstance(a, AssetsDefinition) for k in a.keys}
    if unknown:
        raise ValueError(f"no such assets: {sorted(unknown)}")

    def bump(spec):
        v = code_versions.get(spec.key.path[-1])
        return spec if v is None else spec.replace_attributes(code_version=v)

    return [a.map_asset_specs(bump) if isinstance(a, AssetsDefinition) and not a.is_observable
            and {k.path[-1] for k in a.keys} & set(code_versions) else a for a in assets]


def build_definitions(home: str = "", library: str = "",
                      code_versions: Mapping[str, str] | None = None,
                      executor: ExecutorDefinition | None = None) -> Definitions:
    """Definitions for a Sheaf home and library (defaults: the SHEAF_* settings);
    `code_versions` overrides assets' code versions (see `with_code_versions`); `executor`
    replaces the in-process executor (the code locations for many machines: `pipelines.locations.k8s`,
    `pipelines.locations.celery`).

    `vector_collections`' code version carries the configured embedding model
    (`model_code_version`: its name and a fingerprint of its files, read without loading it),
    so Dagster's own code-version checks see a model change."""
    settings = get_settings(**({"home": home} if home else {}), **({"library": library} if library else {}))
    assets = [ocr_result, ocr_blocks, fulltext_markdown_and_render_map, structure_tree, body_units_and_object_units,
              fts_tables, vector_collections, library_metadata, library_report, library_status]
    # every chain asset's code version as `pipelines.planning.versions` says now (what the no-op proof reads)
    versions = {**chain_code_versions(settings.embedding_model, ocr_from_settings(settings).code_version),
                **(code_versions or {})}
    assets = with_code_versions(assets, versions)
    resources = {
        "sheaf": SheafConfig(home=str(settings.home.resolve()), library=str(settings.library.resolve())),
        "artifacts": PaperArtifactIOManager(root=settings.artifacts_root),
        "embedder": embedder_resource,
    }
    # The per-paper chain, for the steps that read every paper's state (paper_up_to_date, library_status):
    # a run's own asset graph is only its selection, and runs of `sheaf build` carry no repository.
    chain = chain_of(Definitions(assets=[a for a in assets if a is not library_status], resources=resources))
    own = OwnDefinitions()  # what `rebuild_stale` runs paper_chain from
    own.defs = Definitions(
        assets=assets,
        asset_checks=ALL_CHECKS,
        jobs=[paper_chain_job, library_job, status_job, rebuild_stale],
        sensors=[library_discovery_sensor, automation_sensor, library_status_refresh_sensor],
        schedules=[nightly_rebuild],
        resources={**resources, "chain": ResourceDefinition.hardcoded_resource(
            chain, "The per-paper chain of these definitions, in order, with its code versions."),
            "own_definitions": ResourceDefinition.hardcoded_resource(own, "These definitions (rebuild_stale's runs).")},
        executor=executor or in_process_executor,
    )
    return own.defs


defs = build_definitions()
