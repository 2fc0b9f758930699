"""Nightly schedule: materialize missing and stale papers in chunked runs."""

from dagster import AssetKey, DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, SkipReason, schedule

from assets.resources import SheafConfig
from pipelines.automation import MAX_PARTITIONS_PER_RUN, NIGHTLY_CRON
from pipelines.partitions import papers_partitions


@schedule(cron_schedule=NIGHTLY_CRON, job_name="paper_chain", execution_timezone="UTC",
          default_status=DefaultScheduleStatus.RUNNING,  # on whenever the daemon runs (dagster dev)
          description="Nightly: rebuild every missing or stale paper, in chunks of papers per run.")
def nightly_rebuild(context: ScheduleEvaluationContext, sheaf: SheafConfig):
    from pipelines.build import CHAIN, chain_from, chunk_targets, needs_build, paper_statuses
    from pipelines.definitions import defs

    settings = sheaf.settings()
    ordered = list(context.instance.get_dynamic_partitions(papers_partitions.name))
    statuses = paper_statuses(context.instance, defs, settings, ordered)
    starts = {k: st.rebuild_from or CHAIN[0] for k, st in statuses.items() if needs_build(st)}
    if not starts:
        return SkipReason(f"all {len(ordered)} papers are built")
    day = context.scheduled_execution_time.strftime("%Y-%m-%d") if context.scheduled_execution_time else "now"
    return [
        RunRequest(
            run_key=f"nightly-{day}-{first}-{keys[0]}-{keys[-1]}",
            asset_selection=None if first == CHAIN[0] else [AssetKey(a) for a in chain_from(first)],
            tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
        for first, keys in chunk_targets(ordered, starts, MAX_PARTITIONS_PER_RUN)
    ]
