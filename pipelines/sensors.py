"""Sensors: library discovery (partitions + run-less observations) and the automation sensor."""

from dagster import (
    AssetSelection, AutomationConditionSensorDefinition, DefaultSensorStatus, RunRequest,
    SensorEvaluationContext, SensorResult, SkipReason, sensor,
)

from assets.resources import SheafConfig
from pipelines.partitions import papers_partitions
from pipelines.state import latest_observed_versions
from pipelines.plan import SyncPlan
from pipelines.sync import observations, plan_sync, remove_paper_everywhere
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
        dynamic_partitions_requests=requests, asset_events=observations(plan, previous),
        run_requests=[RunRequest(tags={"sheaf/discovery": summary})])


#: Runs the eager conditions of the chain (STOPPED by default in Dagster: we start it).
automation_sensor = AutomationConditionSensorDefinition(
    "sheaf_automation",
    target=AssetSelection.all(),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=get_settings().automation_interval_seconds,
)
