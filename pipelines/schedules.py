"""Nightly schedule: materialize missing and stale papers in chunked runs."""

from dagster import RunRequest, ScheduleEvaluationContext, SkipReason, schedule

from assets.resources import SheafConfig
from pipelines.automation import MAX_PARTITIONS_PER_RUN, NIGHTLY_CRON
from pipelines.partitions import papers_partitions


@schedule(cron_schedule=NIGHTLY_CRON, job_name="paper_chain", execution_timezone="UTC",
          description="Nightly: rebuild every missing or stale paper, in chunks of papers per run.")
def nightly_rebuild(context: ScheduleEvaluationContext, sheaf: SheafConfig):
    from pipelines.build import needs_build, paper_statuses, partition_ranges
    from pipelines.definitions import defs

    settings = sheaf.settings()
    ordered = list(context.instance.get_dynamic_partitions(papers_partitions.name))
    statuses = paper_statuses(context.instance, defs, settings, ordered)
    targets = {k for k, st in statuses.items() if needs_build(st)}
    if not targets:
        return SkipReason(f"all {len(ordered)} papers are built")
    day = context.scheduled_execution_time.strftime("%Y-%m-%d") if context.scheduled_execution_time else "now"
    return [
        RunRequest(run_key=f"nightly-{day}-{start}-{end}", tags={
            "dagster/asset_partition_range_start": start, "dagster/asset_partition_range_end": end})
        for start, end, _ in partition_ranges(ordered, targets, MAX_PARTITIONS_PER_RUN)
    ]
