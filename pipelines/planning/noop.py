"""A build or `sheaf status` that proves "nothing changed" without loading Dagster.

Most builds find nothing to do (the nightly schedule, a plugin building on every save, an
agent checking before it searches), and Dagster's import and instance alone cost a process
~2.5-3 s here. `prove_unchanged` answers from the discovery scan, the last recorded plan
(`pipelines.planning.recorded_plan`) read straight from Dagster's SQLite files (`pipelines.dagster_internals.home_files`)
and the index, and it answers "unchanged" only when every fact the Dagster way would check
says so:

- the home is the one Sheaf sets up (its dagster.yaml, the Dagster version it reads) and no
  run is unfinished (queued, running, or left by a dead process: the Dagster way reaps those);
- the record is current: no chain asset materialized since it was made, no `ocr_result`
  observed since, nothing wiped, and the chain's code versions (the model's fingerprint
  among them) are the ones it was made with (`pipelines.planning.versions`);
- the library holds exactly the recorded papers, each with its recorded OCR hash, and the
  library metadata export is the one last loaded (and still in the index);
- the index is healthy and its rows and the per-paper artifacts agree with the recorded
  counts (`pipelines.planning.drift`, as the Dagster way checks every build).

Anything else (an edit, a new paper, a run from the UI, a model change, an unreadable file)
is not an answer: the caller goes the Dagster way, which plans from the materializations
and records a new plan. So the answer is never a second source of truth: it is Dagster's
record, read without Dagster, used only while it provably still holds.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipelines.build_lock import build_holder, build_lock, check_writable, lock_holder, running_state, sweep_leftovers
from pipelines.dagster_internals.home_files import CannotTell, DagsterFiles
from pipelines.planning.drift import artifact_index_drift, metadata_missing
from pipelines.planning.plan import (
    BuildReport,
    Events,
    PaperStatus,
    Record,
    SyncPlan,
    code_digest,
    current_versions,
    needs_build,
    record_from_json,
    with_warning_events,
)
from pipelines.planning.versions import chain_code_versions
from sheaf.core.progress import phase
from sheaf.core.settings import Settings
from sheaf.formats.pdf.ocr import from_settings as ocr_from_settings
from sheaf.library.metadata import export_hash
from sheaf.library.sources import SourceScan, scan_sources
from sheaf.store.select import check_backend

#: The partitions, the recorded plan's asset, the observed source and the library metadata
#: asset, by name (as `pipelines.partitions`, `pipelines.planning.recorded_plan` and `assets` define them; a
#: test checks the names).
PAPERS = "papers"
STATUS_ASSET = "library_status"
SOURCE_ASSET = "ocr_result"
METADATA_ASSET = "library_metadata"


@dataclass(slots=True)
class Proof:
    """`unchanged`: every paper's status is the recorded one (`statuses`, in partition order);
    else `why` says what sent the caller the Dagster way."""

    unchanged: bool
    why: str = ""
    #: the library scan, when the proof got that far (a build or status the Dagster way reuses it)
    scan: SourceScan | None = None
    plan: SyncPlan | None = None
    statuses: dict[str, PaperStatus] = field(default_factory=dict)
    #: the last recorded plan, once the proof found it current (code, cursor, observations)
    record: Record | None = None

    @classmethod
    def no(cls, why: str) -> Proof:
        return cls(False, why)


def prove_unchanged(settings: Settings, *, write_cache: bool = True) -> Proof:
    """Whether nothing changed since the last recorded plan (see the module doc). Reads only;
    `write_cache`: keep the scan's stat cache current (the build does, `sheaf status` does not)."""
    home = Path(settings.dagster_home)
    if not home.is_dir():
        return Proof.no("no Dagster home yet")
    try:
        with DagsterFiles(home) as files:
            return _prove(settings, files, write_cache)
    except CannotTell as e:
        return Proof.no(str(e))


def _recorded(files: DagsterFiles) -> Record | None:
    """The last recorded plan (`pipelines.planning.recorded_plan`), read from the home's files."""
    return record_from_json((files.latest_metadata(STATUS_ASSET) or {}).get("record"))


def recorded_unreadable(settings: Settings) -> dict[str, str]:
    """{paper: why its file cannot be read} as the last build recorded it, read without Dagster
    and without a scan of the library (what a status poll every 2 s can afford); {} when the
    home has no record or its files cannot tell."""
    home = Path(settings.dagster_home)
    if not home.is_dir():
        return {}
    try:
        with DagsterFiles(home) as files:
            record = _recorded(files)
    except CannotTell:
        return {}
    if record is None:
        return {}
    return {k: st.error or "" for k, st in sorted(record.statuses.items()) if st.state == "unreadable"}


def _prove(settings: Settings, files: DagsterFiles, write_cache: bool) -> Proof:
    if files.storage != settings.dagster_storage:  # the Dagster way rewrites the dagster.yaml
        return Proof.no(f"SHEAF_DAGSTER_STORAGE is {settings.dagster_storage}; the home is on {files.storage}")
    if files.unfinished_runs():
        return Proof.no("a run is unfinished")
    record = _recorded(files)
    if record is None:
        return Proof.no("no recorded plan")
    code = chain_code_versions(settings.embedding_model, ocr_from_settings(settings).code_version)
    if set(record.assets) != set(code) or record.code != code_digest(record.assets, code):
        return Proof.no("the chain's code or the model changed")
    if files.cursor(record.assets) != record.cursor:
        return Proof.no("papers were materialized since the recorded plan")
    if files.newest_observation(SOURCE_ASSET) != record.observed:
        return Proof.no("OCR results were observed since the recorded plan")

    scan = scan_sources(settings, settings.artifacts_dir / "_source_stats.json", write_cache=write_cache)

    def no(why: str) -> Proof:  # the record is current: the Dagster way takes it (and the scan) from here
        return Proof(False, why, scan=scan, record=record)

    versions = current_versions(scan)
    keys = files.partitions(PAPERS)
    present = {p.key for p in scan.discovery.papers}
    if set(keys) != present:
        return no("papers were added or removed")
    if any(record.versions.get(k) != versions.get(k) for k in keys) or set(record.versions) != present:
        return no("a paper's OCR output changed")

    loaded = files.latest_metadata(METADATA_ASSET)
    if loaded is None or loaded.get("export_hash") != export_hash(scan.discovery.metadata_files):
        return no("the library metadata export changed")
    if metadata_missing(settings, loaded.get("papers")):
        return no("the index lost library metadata")
    health = check_backend(settings, deep=False)
    if health.state != "ok":
        return no(f"the index needs attention: {health.message}")
    known, _ = record.current_for(versions)
    statuses = {k: known[k] for k in keys}
    if any(needs_build(st) for st in statuses.values()):  # a build that left work (a run failed whole)
        return no("the recorded plan has papers to build")
    if artifact_index_drift(settings, statuses, record.artifacts):
        return no("index rows or artifacts disagree with the recorded plan")
    plan = SyncPlan(added=[], removed=[], changed={}, invalid_keys=list(scan.discovery.invalid_keys),
                    errors=dict(scan.errors), scan=scan, versions=versions)
    return Proof(True, "", plan=plan, statuses=statuses, record=record, scan=scan)


def quick_build(settings: Settings, progress: Callable[[str], None],
                events: Events | None = None) -> tuple[BuildReport | None, Proof]:
    """`sheaf build` when `prove_unchanged` holds: (the same `BuildReport`, and events, as the
    Dagster way's no-op, after the same crash-safety steps: the build lock, writable folders,
    leftovers swept; the proof), else (None, the proof: its `why`, and its scan for the caller,
    which builds the Dagster way)."""
    started = time.perf_counter()
    progress, events = with_warning_events(progress, events or (lambda e: None))
    paths = [settings.index_path.parent, settings.artifacts_dir, settings.dagster_home]
    with build_lock(settings.home, progress):
        check_writable(paths)
        phase("scanning the library")
        proof = prove_unchanged(settings, write_cache=True)
        if not proof.unchanged:
            return None, proof
        swept = sweep_leftovers(settings.home, settings.artifacts_dir)
    plan = proof.plan
    for k in plan.invalid_keys:
        progress(f"! invalid paper key refused: {k!r}")
    sync = {"added": [], "removed": [], "changed": [], "invalid_keys": plan.invalid_keys, "unreadable": plan.errors}
    events({"event": "start", "total": 0, "considered": len(proof.statuses), "planned": {}, "sync": sync})
    sync.update({"dead_runs_failed": [], "leftovers_removed": swept, "index_recovery": {}})
    return BuildReport(sync, {}, [], proof.statuses, 0, round(time.perf_counter() - started, 2), False,
                       {"record": "current", "papers_read": 0, "dagster": False}), proof


def idle_without_dagster(settings: Settings) -> bool:
    """True when no build runs in `settings`' home and no run is unfinished (so the live state
    is plain idle, with no dead runs to report), read without Dagster; False when it cannot tell."""
    home = Path(settings.dagster_home)
    if lock_holder(settings.home) is not None or not home.is_dir():
        return False
    try:
        with DagsterFiles(home) as files:
            return files.unfinished_runs() == 0
    except CannotTell:
        return False


def running_without_dagster(settings: Settings) -> dict[str, Any] | None:
    """The live state of the build running in `settings`' home (`pipelines.build.live.build_state`
    without its `dead_runs`, which the running build reaped when it began), read from the
    Dagster home's files without importing Dagster: what a program polling a build every few
    seconds asks for (Dagster's import alone takes seconds on a busy machine). A build that has
    not made its Dagster home yet is planning. None when no build runs or the files cannot tell."""
    holder, start, taken = build_holder(settings.home)
    if holder is None:
        return None
    taken_iso = None if taken is None else datetime.fromtimestamp(taken, timezone.utc).isoformat(timespec="seconds")
    home = Path(settings.dagster_home)
    if not (home / "history" / "runs.db").is_file():
        return running_state(holder, taken_iso, [])
    try:
        with DagsterFiles(home) as files:
            found = files.runs_tagged({"sheaf/pid": str(holder), "sheaf/build_pid": str(holder)})
    except CannotTell:
        return None
    runs = [r for r in found
            if (not start or r["tags"].get("sheaf/pid_start") in (None, start) or "sheaf/build_pid" in r["tags"])
            and (taken is None or r["created"] >= taken - 1)]
    return running_state(holder, taken_iso, runs)


def quick_status(settings: Settings) -> Proof:
    """`prove_unchanged` for `sheaf status` (writes nothing): also not while a build runs
    (its progress is in its runs, which only the Dagster way reads)."""
    if lock_holder(settings.home) is not None:
        return Proof.no("a build is running")
    return prove_unchanged(settings, write_cache=False)
