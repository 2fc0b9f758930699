"""The library-wide report: DuckDB over every paper's Parquet artifacts."""
from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, asset

from assets.resources import SheafConfig
from pipelines.automation import REPORT_CONDITION
from sheaf.store.report import library_report_data, report_markdown


@asset(deps=["ocr_blocks", "body_units", "object_units"], group_name="report", code_version="1",
       automation_condition=REPORT_CONDITION)
def library_report(context: AssetExecutionContext, sheaf: SheafConfig) -> MaterializeResult:
    """Library-wide picture: papers per format, sections/units/tokens per paper, papers without headings, shared text."""
    data = library_report_data(sheaf.settings().artifacts_dir)
    return MaterializeResult(metadata={
        "report": MetadataValue.md(report_markdown(data)),
        "papers": data["papers"], "units": data["units"], "tokens": data["tokens"],
        "papers_without_headings": len(data["papers_without_headings"]),
        "shared_units": len(data["shared_units"]),
    })
