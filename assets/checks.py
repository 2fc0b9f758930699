"""Per-paper asset checks: the build's consistency, recorded per partition.

The five checks are one step (`paper_checks`, a multi-asset check that can run any subset of
them): per paper, each artifact is read once, the index is asked once and the chain's events
once, whichever checks need them; each check still has its own key, its own result per paper
and its own history in the UI. (Five steps read the same artifacts up to three times a paper,
and each step costs a run its own start, events and context.) The artifacts are read through the
run's IO manager (`artifacts`), so the tables the run itself just wrote come from memory
(`io_managers.parquet`).
"""
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSpec,
    AssetKey,
    MetadataValue,
    ResourceParam,
    multi_asset_check,
)

from io_managers import PaperArtifactIOManager
from pipelines.dagster_internals.steps import check_target, log_check_evaluations
from pipelines.partitions import papers_partitions
from pipelines.planning.events import latest_events
from pipelines.planning.paper_view import titles_of, verdict
from pipelines.planning.statuses import Chain, chain_events, statuses_of
from pipelines.resources import SheafConfig
from sheaf.store.artifacts import render_map_from_dict, table_to_body_units, table_to_object_units, table_to_paper
from sheaf.store.select import open_backend
from sheaf.transform.checks import (
    CheckOutcome,
    check_index_rows,
    check_no_furniture,
    check_units_cover_blocks,
    check_vectors,
)
from sheaf.vectors.embedder import Embedder

COVER_CHECK = "units_cover_body_blocks"
FURNITURE_CHECK = "no_page_furniture_in_units"
FTS_CHECK = "fts_rows_match_units"
VECTORS_CHECK = "vectors_match_passages"
#: The paper's state as a check of the chain's last asset: red, with the reason, on every paper
#: that needs work. Evaluated by every run of the chain (after the paper's vectors) and, for the
#: papers it changed, by each refresh of `library_status` (the discovery sensor requests one when
#: papers change), so an edited paper turns red before anything rebuilds it.
UP_TO_DATE_CHECK = "paper_up_to_date"


def _spec(name: str, asset: str, description: str) -> AssetCheckSpec:
    return AssetCheckSpec(name, asset=asset, partitions_def=papers_partitions, description=description)


SPECS = (
    _spec(COVER_CHECK, "body_units", "Every emitted body block lands in exactly one unit."),
    _spec(FURNITURE_CHECK, "body_units", "No running header, footer or page number reaches a unit."),
    _spec(FTS_CHECK, "fts_tables", "The paper's FTS rows equal its units."),
    _spec(VECTORS_CHECK, "vector_collections", "Vector rows equal the passages of the current embedding model."),
    _spec(UP_TO_DATE_CHECK, "vector_collections",
          "The paper is built from its current OCR output with the current code and model; fails with the reason "
          "otherwise (OCR changed, model changed: A → B, code changed: ASSET, failed: ERROR, missing: never built)."),
)


def paper_evaluations(instance, asset: str, check: str,
                      outcomes: Mapping[str, CheckOutcome]) -> list[AssetCheckEvaluation]:
    """One evaluation per paper of `outcomes`, each naming the materialization it checked (the
    paper's latest of `asset`): the check's Partitions tab counts an evaluation only while it
    targets the partition's latest materialization, so one without a target reads "Missing"."""
    return _evaluations(asset, check, outcomes, latest_events(instance, asset, partitions=list(outcomes)))


def _evaluations(asset: str, check: str, outcomes: Mapping[str, CheckOutcome],
                 latest: Mapping[str, Any]) -> list[AssetCheckEvaluation]:
    out = []
    for k, o in outcomes.items():
        ev = latest.get(k)
        out.append(AssetCheckEvaluation(
            asset_key=AssetKey(asset), check_name=check, passed=o.passed, partition=k,
            # the paper first: the run's log shows a check's metadata, not its partition
            description=o.description, metadata={"paper": k, **o.metadata},
            target_materialization_data=check_target(ev.storage_id, ev.run_id, ev.timestamp) if ev else None))
    return out


@dataclass
class _Paper:
    """What one paper's checks read, each read at most once (None: missing)."""

    blocks: Any = None
    render_map: Any = None
    units: Any = None
    objects: Any = None
    unit_rows: tuple[int, int] | None = None


def _missing(what: str) -> CheckOutcome:
    return CheckOutcome(False, f"no {what} artifact (the paper failed upstream)")


def evaluate(keys: list[str], wanted: set[str], *, read: Callable[[str, str], Any],
             rows: Callable[[str, str], int | None], counts: Callable[[str], dict[str, int]] | None,
             vector_tables: tuple[str, str] | None,
             states: Mapping[str, Any] | None,
             titles: Mapping[str, str] | None = None) -> dict[str, dict[str, CheckOutcome]]:
    """{check: {paper: outcome}} of the `wanted` checks over `keys`. `read(asset, key)`: an artifact
    (None when missing); `rows(asset, key)`: its row count from the file's footer; `counts(key)`:
    the paper's index rows; `vector_tables`: (passages table, vector table) of the model;
    `states`: each paper's status (for `paper_up_to_date`); `titles`: papers' titles, shown with
    their `paper_up_to_date` result (a partition itself cannot carry one)."""
    out: dict[str, dict[str, CheckOutcome]] = {c: {} for c in wanted}
    full = bool(wanted & {COVER_CHECK, FURNITURE_CHECK})
    for key in keys:
        p = _Paper()
        if full:
            p.blocks, p.units, p.objects = (read(a, key) for a in ("ocr_blocks", "body_units", "object_units"))
            if COVER_CHECK in wanted:
                p.render_map = read("render_map", key)
            if p.units is not None and p.objects is not None:
                p.unit_rows = (p.units.num_rows, p.objects.num_rows)
        elif wanted & {FTS_CHECK, VECTORS_CHECK}:
            b, o = rows("body_units", key), rows("object_units", key)
            p.unit_rows = None if b is None or o is None else (b, o)
        paper = table_to_paper(p.blocks) if p.blocks is not None else None
        units = table_to_body_units(p.units) if p.units is not None and paper is not None else None
        if COVER_CHECK in wanted:
            out[COVER_CHECK][key] = (
                _missing("blocks/render_map/units") if paper is None or units is None or p.render_map is None
                else check_units_cover_blocks(paper, render_map_from_dict(p.render_map), units))
        if FURNITURE_CHECK in wanted:
            out[FURNITURE_CHECK][key] = (
                _missing("blocks/units") if paper is None or units is None or p.objects is None
                else check_no_furniture(paper, units, table_to_object_units(p.objects)))
        index_rows = counts(key) if counts is not None and p.unit_rows is not None else {}
        if FTS_CHECK in wanted:
            out[FTS_CHECK][key] = (_missing("units") if p.unit_rows is None
                                   else check_index_rows(index_rows, *p.unit_rows))
        if VECTORS_CHECK in wanted and vector_tables is not None:
            out[VECTORS_CHECK][key] = (_missing("units") if p.unit_rows is None
                                       else check_vectors(index_rows, *vector_tables, sum(p.unit_rows)))
        if UP_TO_DATE_CHECK in wanted and states is not None:
            passed, why = verdict(states[key])
            title = (titles or {}).get(key)
            out[UP_TO_DATE_CHECK][key] = CheckOutcome(passed, why, {"state": states[key].state,
                                                                    **({"title": title} if title else {})})
    return out


@multi_asset_check(specs=list(SPECS), can_subset=True, name="paper_checks",
                   description="Each paper's checks, in one step: each artifact read once a paper.")
def paper_checks(context: AssetCheckExecutionContext, sheaf: SheafConfig, embedder: ResourceParam[Embedder],
                 chain: ResourceParam[Chain], artifacts: ResourceParam[PaperArtifactIOManager],
                 ) -> Iterator[AssetCheckResult]:
    """Evaluate the selected checks for each paper of the run. A run of one partition (tagged
    `dagster/partition`: the UI's partition picker, `sheaf build` of one paper) records that
    paper's results, which Dagster files under the run's partition; a run of a partition range
    (backfills and the nightly schedule, even of one paper: Dagster would file a plain result of
    such a run under no partition) records one evaluation per paper and check, logged inside the run as one batch per check (each resolves its partition's planned
    check row, so status per partition is readable from the instance and the UI), plus each
    check's result for the step: a verdict over the run's papers, which Dagster records with no
    partition (it shows as "—" in the check's history and counts for no paper).

    (Run-less per-partition evaluations cannot be re-reported in Dagster 1.13: the storage
    keys them by (check, run, partition), so a second run-less report of a paper fails.)"""
    keys = list(context.partition_keys)
    selected = [s for s in SPECS if AssetCheckKey(s.asset_key, s.name) in context.selected_asset_check_keys]
    wanted = {s.name for s in selected}
    settings = sheaf.settings()
    instance = context.instance
    states = None
    latest: dict[str, Any] = {}  # per asset, each paper's latest materialization: read once for both uses
    if UP_TO_DATE_CHECK in wanted:
        observed = {k: e.data_version for k, e in latest_events(instance, "ocr_result", "observation",
                                                                    partitions=keys).items() if e.data_version}
        latest = chain_events(instance, chain, keys)
        states = statuses_of(chain, keys, observed, latest)
    index = open_backend(settings) if wanted & {FTS_CHECK, VECTORS_CHECK} else None
    try:
        ident = embedder.identity if VECTORS_CHECK in wanted else None
        outcomes = evaluate(keys, wanted, read=artifacts.read, rows=artifacts.rows,
                            counts=index.counts if index is not None else None,
                            vector_tables=(ident.passages_table, ident.vec_table) if ident is not None else None,
                            states=states, titles=titles_of(latest.get(chain.first, {})))
    finally:
        if index is not None:
            index.close()
    if context.has_partition_key:  # a run of one partition (its tag): Dagster files each result under it
        for s in selected:
            o = outcomes[s.name][keys[0]]
            yield AssetCheckResult(asset_key=s.asset_key, check_name=s.name, passed=o.passed,
                                   description=o.description, metadata=o.metadata)
        return
    for s in selected:
        asset = s.asset_key.path[-1]
        if asset not in latest:
            latest[asset] = latest_events(instance, asset, partitions=keys)
        log_check_evaluations(context, _evaluations(asset, s.name, outcomes[s.name], latest[asset]))
        failed = {k: o.description for k, o in sorted(outcomes[s.name].items()) if not o.passed}
        yield AssetCheckResult(
            asset_key=s.asset_key, check_name=s.name, passed=not failed,
            description=f"{len(failed)} of {len(keys)} papers failed (each paper has its own result)",
            metadata={"papers_checked": len(keys),
                      "failed_papers": MetadataValue.json(dict(list(failed.items())[:100]))})


ALL_CHECKS = [paper_checks]
