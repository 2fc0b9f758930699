"""Sensors: library discovery (partitions + run-less observations) and the automation sensor."""

import datetime as dt

from dagster import (
    AssetKey,
    AssetSelection,
    AutomationConditionSensorDefinition,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from pipelines.build.sync import observations, plan_sync, remove_paper_everywhere
from pipelines.partitions import papers_partitions
from pipelines.planning.events import latest_observed_versions
from pipelines.planning.plan import SyncPlan
from pipelines.planning.recorded_plan import STATUS_ASSET
from pipelines.resources import SheafConfig
from sheaf.core.models import valid_paper_key
from sheaf.core.settings import get_settings

#: The job the discovery sensor requests when papers changed: the library's status (and, through
#: it, the `paper_up_to_date` check of the changed papers), so the UI shows what needs work even
#: while automation is paused.
STATUS_JOB = "library_status_job"


def _short(h: str | None) -> str:
    return "-" if not h else h if h.startswith("unreadable:") else h[:12]


def describe_changes(plan: SyncPlan, previous: dict[str, str], known: set[str]) -> list[str]:
    """One line per paper the scan found added, removed or changed (old → new OCR hash)."""
    lines = [f"added {k}: OCR {_short(plan.changed.get(k) or plan.versions.get(k))}" for k in plan.added]
    lines += [f"removed {k}" + ("" if valid_paper_key(k) else " (not a valid paper key: a hand-added partition)")
              for k in plan.removed]
    lines += [f"changed {k}: OCR {_short(previous.get(k))} → {_short(v)}"
              for k, v in sorted(plan.changed.items()) if k not in plan.added and k in known]
    lines += [f"observed {k}: OCR {_short(v)}" for k, v in sorted(plan.changed.items())
              if k not in plan.added and k not in known]
    return lines


@sensor(minimum_interval_seconds=get_settings().discovery_interval_seconds, default_status=DefaultSensorStatus.RUNNING, job_name=STATUS_JOB,
        description="Scan the library: add new papers, drop removed ones (and partitions added by hand that are "
                    "not papers of the library), record changed OCR hashes, then refresh library_status.")
def library_discovery_sensor(context: SensorEvaluationContext, sheaf: SheafConfig):
    settings = sheaf.settings()
    previous = latest_observed_versions(context.instance)
    known = set(context.instance.get_dynamic_partitions(papers_partitions.name))
    plan = plan_sync(context.instance, settings, observed=previous)
    for key in plan.invalid_keys:
        context.log.warning(f"invalid paper key refused: {key!r}")
    for key, msg in plan.errors.items():
        context.log.warning(msg)
    if not (plan.added or plan.removed or plan.changed):
        return SkipReason(f"no change in {len(plan.scan.discovery.papers)} papers")
    lines = describe_changes(plan, previous, known)
    for line in lines:
        context.log.info(line)
    for key in plan.removed:
        if valid_paper_key(key):  # a bad key (added by hand in the UI) has no files to delete
            remove_paper_everywhere(settings, key)
    requests = []
    if plan.added:
        requests.append(papers_partitions.build_add_request(plan.added))
    if plan.removed:
        requests.append(papers_partitions.build_delete_request(plan.removed))
    summary = f"{len(plan.added)} added, {len(plan.removed)} removed, " \
              f"{len([k for k in plan.changed if k not in plan.added])} changed"
    return SensorResult(
        dynamic_partitions_requests=requests, asset_events=observations(plan, settings, previous),
        run_requests=[RunRequest(tags={"sheaf/discovery": summary, "sheaf/changes": "; ".join(lines)[:250]})])


#: Runs whose end can change a paper's state: finished, one way or the other.
_FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
_PARTITION_TAGS = ("dagster/partition", "dagster/asset_partition_range_start")


def papers_of_run(tags) -> str:
    """The papers a run targets, as its tags name them ("" for a run of no paper)."""
    if "dagster/partition" in tags:
        return tags["dagster/partition"]
    start, end = tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")
    return "" if start is None else start if start == end else f"{start}…{end}"


def runs_since_status(instance) -> list:
    """The runs over papers (a partition or a range of them: UI picker, backfill, nightly,
    automation, `sheaf build`, `dagster asset materialize`) that finished after `library_status`
    was last written, newest first: each may have changed a paper's state."""
    ev = instance.get_latest_materialization_event(AssetKey(STATUS_ASSET))
    since = dt.datetime.fromtimestamp(ev.timestamp if ev else 0, tz=dt.timezone.utc)
    records = instance.get_run_records(RunsFilter(statuses=_FINISHED, updated_after=since), limit=1000)
    return [r for r in records if r.dagster_run.job_name != STATUS_JOB
            and any(t in r.dagster_run.tags for t in _PARTITION_TAGS)
            and (r.end_time or r.update_timestamp.timestamp()) > since.timestamp()]


@sensor(minimum_interval_seconds=get_settings().automation_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING, job_name=STATUS_JOB,
        description="Refresh library_status after any run over papers finished since it was last written, "
                    "whatever launched the run and whether automation is on or paused.")
def library_status_refresh_sensor(context: SensorEvaluationContext):
    runs = runs_since_status(context.instance)
    if not runs:
        return SkipReason("library_status is newer than every finished run over papers")
    newest = runs[0].dagster_run
    papers = sorted({papers_of_run(r.dagster_run.tags) for r in runs})
    described = ", ".join(papers[:10]) + (f" and {len(papers) - 10} more" if len(papers) > 10 else "")
    context.log.info(f"{len(runs)} run(s) over papers finished since library_status was refreshed: {described}")
    # keyed by the newest run: one refresh for it, however many ticks see it before the refresh lands
    return RunRequest(run_key=f"status-after-{newest.run_id}",
                      tags={"sheaf/refresh_after": f"{len(runs)} run(s): {described}"[:200]})


#: Runs the eager conditions of the chain (STOPPED by default in Dagster: we start it).
automation_sensor = AutomationConditionSensorDefinition(
    "sheaf_automation",
    target=AssetSelection.all(),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=get_settings().automation_interval_seconds,
)
