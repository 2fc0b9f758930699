"""Automation: what rebuilds a paper, and how bulk work is chunked into runs."""
from __future__ import annotations

from dagster import AutomationCondition, BackfillPolicy

from sheaf.core.settings import get_settings

#: Papers per run in backfills and `sheaf build`. A run costs ~0.45 s of its own whatever its size
#: (its start and end, its steps' and planned events, the gaps between runs): 100 → 200 saved
#: ~2.3 ms a paper (1,000-paper rebuild, 20.0-21.3 → 18.2-18.6 s), for ~15 MB more held by the
#: run's IO manager; no growth past that up to 400 (docs/benchmarks.md, Orchestration at scale).
MAX_PARTITIONS_PER_RUN = get_settings().papers_per_run  # SHEAF_PAPERS_PER_RUN, default 200
BACKFILL_POLICY = BackfillPolicy.multi_run(max_partitions_per_run=MAX_PARTITIONS_PER_RUN)

#: A paper is rebuilt through the chain when its OCR output (or a parent) changed; every
#: paper is rebuilt from an asset down when that asset's code_version changes (`eager()`
#: alone ignores code versions, while `sheaf build`/status report them as "code changed").
CHAIN_CONDITION = AutomationCondition.eager() | AutomationCondition.code_version_changed()

#: When the nightly rebuild runs (cron, UTC): SHEAF_NIGHTLY_CRON, default 02:00.
NIGHTLY_CRON = get_settings().nightly_cron

#: The library-wide report: refreshed when papers were rebuilt since it last ran (not only through
#: `sheaf build`: by the automation sensor after UI and automation runs), never while a run of the
#: chain is in progress. Unlike `eager()`, a paper that is missing or failed does not hold it back.
REPORT_CONDITION = (
    (AutomationCondition.newly_missing() | AutomationCondition.any_deps_updated()).since_last_handled()
    & ~AutomationCondition.any_deps_in_progress() & ~AutomationCondition.in_progress()
)

#: The library's status (`library_status`): refreshed like the report after the chain is rebuilt;
#: when a paper's OCR output is observed to change, the discovery sensor requests the refresh itself
#: (so it happens with automation paused).
STATUS_CONDITION = REPORT_CONDITION
