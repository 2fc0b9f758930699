"""Library-wide assets: the report (DuckDB over every paper's Parquet artifacts) and the
library's status (every paper's state and why, as a table, plus the build's record)."""
from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, ResourceParam, asset

from assets.checks import UP_TO_DATE_CHECK, paper_evaluations
from pipelines.dagster_internals.event_reads import check_partition_statuses
from pipelines.dagster_internals.steps import log_check_evaluations
from pipelines.partitions import papers_partitions
from pipelines.planning.events import latest_observed_versions
from pipelines.planning.paper_view import identities, verdict
from pipelines.planning.policy import REPORT_CONDITION, STATUS_CONDITION
from pipelines.planning.recorded_plan import STATUS_ASSET, chain_cursor, load_record, record_metadata, statuses_from
from pipelines.planning.statuses import Chain
from pipelines.resources import SheafConfig
from sheaf.library.discover import discover_library
from sheaf.store.artifact_store import open_artifacts
from sheaf.store.library_report import library_report_data, report_markdown
from sheaf.transform.checks import CheckOutcome


@asset(deps=["ocr_blocks", "body_units", "object_units"], group_name="report", code_version="1",
       automation_condition=REPORT_CONDITION)
def library_report(context: AssetExecutionContext, sheaf: SheafConfig) -> MaterializeResult:
    """Library-wide picture: papers per format, sections/units/tokens per paper, papers without headings,
    shared text."""
    data = library_report_data(open_artifacts(sheaf.settings()))
    return MaterializeResult(metadata={
        "report": MetadataValue.md(report_markdown(data)),
        "papers": data["papers"], "units": data["units"], "tokens": data["tokens"],
        "papers_without_headings": len(data["papers_without_headings"]),
        "shared_units": len(data["shared_units"]),
    })


# Not a dependent of `ocr_result`: automation would refresh it on every observation, while the
# discovery sensor that records them already requests that refresh (automation paused or not).
@asset(name=STATUS_ASSET, deps=["vector_collections"], group_name="report",
       automation_condition=STATUS_CONDITION)
def library_status(context: AssetExecutionContext, sheaf: SheafConfig,
                   chain: ResourceParam[Chain]) -> MaterializeResult:
    """Every paper's state (built / stale and why / missing / failed) as a table with its title,
    first author and year, from the papers' materializations and their latest observed OCR hash.
    Refreshed when the discovery sensor sees papers change and after the chain is rebuilt; each
    refresh also re-evaluates the `paper_up_to_date` check of the papers whose state changed."""
    instance = context.instance
    keys = list(instance.get_dynamic_partitions(papers_partitions.name))
    versions = latest_observed_versions(instance)
    cursor = chain_cursor(instance, chain)  # before reading: a run after this makes the record stale
    statuses, _ = statuses_from(instance, chain, keys, versions, load_record(instance, chain))
    last = chain.assets[-1]
    passed_now = set(check_partition_statuses(instance, last, UP_TO_DATE_CHECK, papers_partitions)
                     .get("SUCCEEDED", []))
    exports = discover_library(sheaf.settings()).metadata_files
    ids = identities(exports)
    due = {}
    for k, st in statuses.items():
        ok, why = verdict(st)
        if not ok or k not in passed_now:
            title = ids.get(k, {}).get("title")
            due[k] = CheckOutcome(ok, why, {"state": st.state, **({"title": title} if title else {})})
    log_check_evaluations(context, paper_evaluations(instance, last, UP_TO_DATE_CHECK, due))
    need = sorted(k for k, st in statuses.items() if st.state != "built")
    if need:
        context.log.info(f"{len(need)} of {len(keys)} papers need work: "
                         + "; ".join(f"{k} ({verdict(statuses[k])[1]})" for k in need[:20]))
    return MaterializeResult(metadata={
        "needs_work_count": len(need),
        **record_metadata(instance, chain, statuses, versions, cursor, exports),
    })
