"""Nightly schedule: materialize missing and stale papers in chunked runs.

The chain and its code versions come from the code location the schedule is evaluated in
(`context.repository_def`), so this module never imports `pipelines.definitions`.
"""

from dagster import DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, SkipReason, schedule

from pipelines.partitions import papers_partitions
from pipelines.planning.events import latest_events
from pipelines.planning.paper_view import titles_of, verdict
from pipelines.planning.plan import needs_build
from pipelines.planning.policy import MAX_PARTITIONS_PER_RUN, NIGHTLY_CRON
from pipelines.planning.statuses import Chain, chain_of, chunk_targets, paper_statuses, selection_from
from pipelines.resources import SheafConfig


def _describe(why: dict[str, str], limit: int = 250, sep: str = "") -> str:
    """'KEY (reason); …' (`sep` ": ": 'KEY: title; …') for the papers a request rebuilds, cut to
    `limit` characters."""
    text = "; ".join(f"{k}{sep}{r}" if sep else f"{k} ({r})" for k, r in why.items())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def stale_runs(instance, chain: Chain, sheaf: SheafConfig) -> tuple[list[tuple[str, list[str], str, str]], int]:
    """The runs that rebuild every paper needing work (what `library_status` lists first, less
    the failed papers whose input and code are unchanged: a retry would fail the same way), and
    the number of papers: ``[(first asset, papers, "KEY (reason); …", "KEY: title; …"), …]``
    (titles from the papers' last `ocr_blocks` materializations: a paper never built has none), grouped by where each
    paper's rebuild starts, cut into contiguous ranges of at most MAX_PARTITIONS_PER_RUN papers.
    What the nightly schedule requests and the `rebuild_stale` job runs."""
    ordered = list(instance.get_dynamic_partitions(papers_partitions.name))
    statuses = paper_statuses(instance, chain, sheaf.settings(), ordered)
    starts = {k: st.rebuild_from or chain.first for k, st in statuses.items() if needs_build(st)}
    titles = titles_of(latest_events(instance, chain.first, partitions=list(starts)))
    return [(first, keys, _describe({k: verdict(statuses[k])[1] for k in keys}),
             _describe({k: titles[k] for k in keys if k in titles}, sep=": "))
            for first, keys in chunk_targets(chain, ordered, starts, MAX_PARTITIONS_PER_RUN)], len(ordered)


@schedule(cron_schedule=NIGHTLY_CRON, job_name="paper_chain", execution_timezone="UTC",
          default_status=DefaultScheduleStatus.RUNNING,  # on whenever the daemon runs (dagster dev)
          description="Nightly: rebuild every missing or stale paper, in chunks of papers per run.")
def nightly_rebuild(context: ScheduleEvaluationContext, sheaf: SheafConfig):
    chain = chain_of(context.repository_def)
    runs, total = stale_runs(context.instance, chain, sheaf)
    if not runs:
        return SkipReason(f"all {total} papers are built")
    day = context.scheduled_execution_time.strftime("%Y-%m-%d") if context.scheduled_execution_time else "now"
    return [
        RunRequest(
            run_key=f"nightly-{day}-{first}-{keys[0]}-{keys[-1]}",
            asset_selection=selection_from(chain, first),
            tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1],
                  # what the preview and the run's tags show: which papers, and why each is rebuilt
                  "sheaf/papers": why, **({"sheaf/titles": titles} if titles else {})})
        for first, keys, why, titles in runs
    ]
