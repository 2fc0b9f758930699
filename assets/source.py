"""Source group: the observed OCR output of each paper."""

from dagster import DataVersion, DataVersionsByPartition, observable_source_asset

from pipelines.partitions import papers_partitions
from pipelines.resources import SheafConfig
from sheaf.core.models import IngestError
from sheaf.formats import source_hash
from sheaf.library.discover import discover_library


@observable_source_asset(partitions_def=papers_partitions, group_name="source",
                         description="Raw OCR/layout output of each paper; its data version is the paper's "
                                     "ocr_result_hash.")
def ocr_result(context, sheaf: SheafConfig) -> DataVersionsByPartition:
    """Raw OCR/layout output of each paper; its data version is the paper's ocr_result_hash."""
    settings = sheaf.settings()
    versions: dict[str, DataVersion] = {}
    for paper in discover_library(settings).papers:
        try:
            versions[paper.key] = DataVersion(source_hash(paper.path, paper.key)[2])
        except IngestError as e:
            context.log.warning(str(e))
    known = set(context.instance.get_dynamic_partitions(papers_partitions.name))
    return DataVersionsByPartition({k: v for k, v in versions.items() if k in known})
