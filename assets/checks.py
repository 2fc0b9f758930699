"""Per-paper asset checks: the build's consistency, recorded per partition."""
from collections.abc import Callable, Mapping

from dagster import (
    AssetCheckEvaluation, AssetCheckExecutionContext, AssetCheckResult, AssetKey, MetadataValue, ResourceParam,
    asset_check,
)

from assets.resources import SheafConfig
from pipelines.dagster_private import check_target, log_check_evaluations
from pipelines.paper_view import verdict
from pipelines.partitions import papers_partitions
from pipelines.planner import Chain, paper_statuses
from pipelines.state import latest_events
from sheaf.store.artifact_store import open_artifacts
from sheaf.store.artifacts import render_map_from_dict, table_to_body_units, table_to_object_units, table_to_paper
from sheaf.store.select import open_backend
from sheaf.transform.checks import (
    CheckOutcome, check_index_rows, check_no_furniture, check_units_cover_blocks, check_vectors,
)
from sheaf.vectors.embedder import Embedder


def paper_evaluations(instance, asset: str, check: str,
                      outcomes: Mapping[str, CheckOutcome]) -> list[AssetCheckEvaluation]:
    """One evaluation per paper of `outcomes`, each naming the materialization it checked (the
    paper's latest of `asset`): the check's Partitions tab counts an evaluation only while it
    targets the partition's latest materialization, so one without a target reads "Missing"."""
    latest = latest_events(instance, asset, partitions=list(outcomes))
    out = []
    for k, o in outcomes.items():
        ev = latest.get(k)
        out.append(AssetCheckEvaluation(
            asset_key=AssetKey(asset), check_name=check, passed=o.passed, partition=k,
            description=o.description, metadata=o.metadata,
            target_materialization_data=check_target(ev.storage_id, ev.run_id, ev.timestamp) if ev else None))
    return out


def _per_partition(context: AssetCheckExecutionContext, fn: Callable[[str], CheckOutcome]) -> AssetCheckResult:
    """Evaluate `fn` for each paper of the run. A one-paper run records that paper's result
    (partition-scoped); a multi-paper run records one evaluation per paper, logged inside the
    run (it resolves the partition's planned check row, so status per partition is readable
    from the instance and the UI), plus the step's own result: a verdict over the run's
    papers, which Dagster records with no partition (it shows as "—" in the check's
    history and counts for no paper).

    (Run-less per-partition evaluations cannot be re-reported in Dagster 1.13: the storage
    keys them by (check, run, partition), so a second run-less report of a paper fails.)
    """
    keys = list(context.partition_keys)
    outcomes = {k: fn(k) for k in keys}
    if len(keys) == 1:
        o = outcomes[keys[0]]
        return AssetCheckResult(passed=o.passed, description=o.description, metadata=o.metadata)
    spec = next(iter(context.check_specs))
    log_check_evaluations(context, paper_evaluations(context.instance, spec.asset_key.path[-1], spec.name, outcomes))
    failed = {k: o.description for k, o in sorted(outcomes.items()) if not o.passed}
    return AssetCheckResult(
        passed=not failed, description=f"{len(failed)} of {len(keys)} papers failed (each paper has its own result)",
        metadata={"papers_checked": len(keys), "failed_papers": MetadataValue.json(dict(list(failed.items())[:100]))})


def _reader(sheaf: SheafConfig):
    """`read(asset, key)`: one paper's artifact (the settings read once per check, not per paper)."""
    return open_artifacts(sheaf.settings()).read


def _unit_rows(sheaf: SheafConfig):
    """`rows(key)`: (body units, object units) of one paper from its artifacts' footers, or None."""
    store = open_artifacts(sheaf.settings())

    def rows(key: str) -> tuple[int, int] | None:
        b, o = store.rows("body_units", key), store.rows("object_units", key)
        return None if b is None or o is None else (b, o)
    return rows


def _missing(what: str) -> CheckOutcome:
    return CheckOutcome(False, f"no {what} artifact (the paper failed upstream)")


@asset_check(asset="body_units", partitions_def=papers_partitions,
             description="Every emitted body block lands in exactly one unit.")
def units_cover_body_blocks(context: AssetCheckExecutionContext, sheaf: SheafConfig) -> AssetCheckResult:
    read = _reader(sheaf)

    def one(key: str) -> CheckOutcome:
        blocks, rm, units = read("ocr_blocks", key), read("render_map", key), read("body_units", key)
        if blocks is None or rm is None or units is None:
            return _missing("blocks/render_map/units")
        return check_units_cover_blocks(table_to_paper(blocks), render_map_from_dict(rm), table_to_body_units(units))
    return _per_partition(context, one)


@asset_check(asset="body_units", partitions_def=papers_partitions,
             description="No running header, footer or page number reaches a unit.")
def no_page_furniture_in_units(context: AssetCheckExecutionContext, sheaf: SheafConfig) -> AssetCheckResult:
    read = _reader(sheaf)

    def one(key: str) -> CheckOutcome:
        blocks, units, objs = (read(a, key) for a in ("ocr_blocks", "body_units", "object_units"))
        if blocks is None or units is None or objs is None:
            return _missing("blocks/units")
        return check_no_furniture(table_to_paper(blocks), table_to_body_units(units), table_to_object_units(objs))
    return _per_partition(context, one)


@asset_check(asset="fts_tables", partitions_def=papers_partitions,
             description="The paper's FTS rows equal its units.")
def fts_rows_match_units(context: AssetCheckExecutionContext, sheaf: SheafConfig) -> AssetCheckResult:
    conn = open_backend(sheaf.settings())
    rows = _unit_rows(sheaf)
    try:
        def one(key: str) -> CheckOutcome:
            n = rows(key)
            if n is None:
                return _missing("units")
            return check_index_rows(conn.counts(key), *n)
        return _per_partition(context, one)
    finally:
        conn.close()


@asset_check(asset="vector_collections", partitions_def=papers_partitions,
             description="Vector rows equal the passages of the current embedding model.")
def vectors_match_passages(context: AssetCheckExecutionContext, sheaf: SheafConfig,
                           embedder: ResourceParam[Embedder]) -> AssetCheckResult:
    ident = embedder.identity
    conn = open_backend(sheaf.settings())
    rows = _unit_rows(sheaf)
    try:
        def one(key: str) -> CheckOutcome:
            n = rows(key)
            if n is None:
                return _missing("units")
            return check_vectors(conn.counts(key), ident.passages_table, ident.vec_table, sum(n))
        return _per_partition(context, one)
    finally:
        conn.close()


#: The paper's state as a check of the chain's last asset: red, with the reason, on every paper
#: that needs work. Evaluated by every run of the chain (after the paper's vectors) and, for the
#: papers it changed, by each refresh of `library_status` (the discovery sensor requests one when
#: papers change), so an edited paper turns red before anything rebuilds it.
UP_TO_DATE_CHECK = "paper_up_to_date"


@asset_check(asset="vector_collections", name=UP_TO_DATE_CHECK, partitions_def=papers_partitions,
             description="The paper is built from its current OCR output with the current code and model; "
                         "fails with the reason otherwise (OCR changed, model changed: A → B, code changed: "
                         "ASSET, failed: ERROR, missing: never built).")
def paper_up_to_date(context: AssetCheckExecutionContext, chain: ResourceParam[Chain]) -> AssetCheckResult:
    keys = list(context.partition_keys)
    observed = {k: e.data_version for k, e in latest_events(context.instance, "ocr_result", "observation",
                                                                partitions=keys).items() if e.data_version}
    statuses = paper_statuses(context.instance, chain, None, keys, observed=observed)

    def one(key: str) -> CheckOutcome:
        passed, why = verdict(statuses[key])
        return CheckOutcome(passed, why, {"state": statuses[key].state})
    return _per_partition(context, one)


ALL_CHECKS = [units_cover_body_blocks, no_page_furniture_in_units, fts_rows_match_units, vectors_match_passages,
              paper_up_to_date]
