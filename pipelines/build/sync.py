"""Keeping Dagster's partitions and observations in step with the library folder.

Used by the discovery sensor and by `sheaf build`: new papers become partitions, removed
papers lose their partition, artifacts and index rows, and a paper's `ocr_result` data
version is recorded only when its hash changed (run-less observations).
"""
from __future__ import annotations

from collections.abc import Mapping

from dagster import AssetObservation, DagsterInstance

from pipelines.dagster_internals.steps import report_runless_observations
from pipelines.partitions import papers_partitions
from pipelines.planning.events import latest_observed_versions
from pipelines.planning.paper_view import identities, identity_metadata
from pipelines.planning.plan import SyncPlan, current_versions
from pipelines.planning.sources import SOURCE_METADATA
from sheaf.core.settings import Settings
from sheaf.library.discover import source_ref
from sheaf.library.sources import SourceScan, scan_sources
from sheaf.store.artifact_store import open_artifacts
from sheaf.store.select import open_backend


def observations(plan: SyncPlan, settings: Settings, previous: Mapping[str, str] | None = None
                 ) -> list[AssetObservation]:
    """The run-less `ocr_result` observations of the papers whose data version changed (with
    their `previous` hash, when known). Each also records what the chain's first step needs of
    the paper, so that a run reads it here instead of discovering the library again: its source
    (`source`: where discovery found it, `source_ref`) and its identity (title, first author,
    year: what the UI shows)."""
    prev = previous or {}
    found = {p.key: p for p in plan.scan.discovery.papers if p.key in plan.changed}
    ids = identities(plan.scan.discovery.metadata_files, keys=plan.changed) if plan.changed else {}
    return [
        AssetObservation(asset_key="ocr_result", partition=k, tags={"dagster/data_version": v},
                         metadata={"ocr_result_hash": v, **({"previous_ocr_result_hash": prev[k]} if k in prev
                                                            else {"change": "new"}),
                                   **({SOURCE_METADATA: source_ref(found[k].path, settings.library, settings.home)}
                                      if k in found else {}),
                                   **identity_metadata(ids.get(k))})
        for k, v in sorted(plan.changed.items())
    ]


def plan_sync(instance: DagsterInstance, settings: Settings, observed: Mapping[str, str] | None = None, *,
              write_cache: bool = True, scan: SourceScan | None = None) -> SyncPlan:
    """Compare the library folder with the instance's partitions and last observations
    (`observed`: those versions, when the caller knows them from a current record,
    `pipelines.planning.recorded_plan`; else every paper's latest observation is read; `write_cache=False`:
    read-only, for `sheaf status`; `scan`: the library's scan, made moments ago by the no-op
    proof, `pipelines.planning.noop`)."""
    if scan is None:
        scan = scan_sources(settings, settings.artifacts_dir / "_source_stats.json", write_cache=write_cache)
    existing = set(instance.get_dynamic_partitions(papers_partitions.name))
    present = {p.key for p in scan.discovery.papers}
    observed = observed if observed is not None else latest_observed_versions(instance)
    current = current_versions(scan)
    changed = {k: v for k, v in current.items() if observed.get(k) != v}
    return SyncPlan(
        added=sorted(present - existing),
        removed=sorted(existing - present),
        changed=changed,
        invalid_keys=list(scan.discovery.invalid_keys),
        errors=dict(scan.errors),
        scan=scan,
        versions=current,
    )


def remove_paper_everywhere(settings: Settings, key: str) -> dict[str, int]:
    """Delete a removed paper's artifacts and index rows (Dagster keeps no per-partition wipe).

    Its library metadata row stays while the library's export lists it (`library_metadata`
    owns those rows and prunes what the export drops): deleted here, the index held fewer
    metadata rows than the export loaded, so the same build reloaded the whole export to put
    the row back (1.5 s of a removal at 10,000 papers)."""
    files = len(open_artifacts(settings).delete_paper(key))
    had_rows = False
    if settings.index_backend == "postgres" or settings.index_path.exists():
        index = open_backend(settings)
        try:
            # the embedding cache keeps its vectors (content-addressed, never answered from): a
            # renamed or moved file comes back under a new key in the same build, from the cache
            had_rows = bool(index.remove_paper(key, keep_metadata=True, prune_cache=False))
        finally:
            index.close()
    return {"files": files, "index_rows_removed": int(had_rows)}


def apply_sync(instance: DagsterInstance, settings: Settings, plan: SyncPlan) -> None:
    """Apply a plan directly to the instance (what `sheaf build` does; the sensor returns it instead)."""
    if plan.added:
        instance.add_dynamic_partitions(papers_partitions.name, plan.added)
    for key in plan.removed:
        remove_paper_everywhere(settings, key)
        instance.delete_dynamic_partition(papers_partitions.name, key)
    # one batch: a first build of 10,000 papers records 10,000 observations
    report_runless_observations(instance, observations(plan, settings))
