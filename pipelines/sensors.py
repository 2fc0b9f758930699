"""Sensors: library discovery (partitions + run-less observations) and the automation sensor."""

from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.resources import SheafConfig
from pipelines.partitions import papers_partitions
from pipelines.sync import observations, plan_sync, remove_paper_everywhere


@sensor(minimum_interval_seconds=60, default_status=DefaultSensorStatus.RUNNING,
        description="Scan the library: add new papers, drop removed ones, record changed OCR hashes.")
def library_discovery_sensor(context: SensorEvaluationContext, sheaf: SheafConfig):
    settings = sheaf.settings()
    plan = plan_sync(context.instance, settings)
    for key in plan.invalid_keys:
        context.log.warning(f"invalid paper key refused: {key!r}")
    for key, msg in plan.errors.items():
        context.log.warning(msg)
    if not (plan.added or plan.removed or plan.changed):
        return SkipReason(f"no change in {len(plan.scan.discovery.papers)} papers")
    for key in plan.removed:
        remove_paper_everywhere(settings, key)
    requests = []
    if plan.added:
        requests.append(papers_partitions.build_add_request(plan.added))
    if plan.removed:
        requests.append(papers_partitions.build_delete_request(plan.removed))
    return SensorResult(dynamic_partitions_requests=requests, asset_events=observations(plan))


#: Runs the eager conditions of the chain (STOPPED by default in Dagster: we start it).
automation_sensor = AutomationConditionSensorDefinition(
    "sheaf_automation",
    target=AssetSelection.all(),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
)
