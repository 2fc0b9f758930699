"""The last recorded plan: what a build knew about every paper when it finished, kept as the
metadata of a run-less `library_status` materialization, so that the next build (or `sheaf
status`) proves "nothing changed" from the discovery scan without reading every paper's events.

It is a summary of materializations, never a second source of truth. A record is used only
while it is provably current:

- no chain asset has been materialized since it was made: the latest storage id of each chain
  asset (Dagster's asset records, one query) equals the one it recorded. Any run it did not
  see (a UI backfill, the automation sensor, a run of another build) moves that id, and the
  planner falls back to reading every paper's latest materializations;
- no paper's OCR output has been observed since (the newest `ocr_result` observation is the
  one it saw: the discovery sensor's observations also make it stale);
- the chain's code versions (the embedding model's fingerprint among them) are the ones it
  was made with.

Then a paper whose OCR hash is the one recorded has the recorded status; edited papers (a
different hash) and papers the record does not hold are read from their own events. Deleting
the record costs one full read of the event log and changes nothing else.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dagster import AssetKey, AssetMaterialization, DagsterInstance, MetadataValue

from pipelines.planning.events import latest_events
from pipelines.planning.paper_view import identities, status_table, table_rows
from pipelines.planning.plan import PaperStatus, Record, code_digest, record_from_json, record_json, status_counts
from pipelines.planning.statuses import Chain, paper_statuses

STATUS_ASSET = "library_status"
#: Papers listed by name in the record's table for the UI (all of them are in `record`).
TABLE_ROWS = 200

def chain_digest(chain: Chain) -> str:
    """`pipelines.planning.plan.code_digest` of `chain`."""
    return code_digest(chain.assets, chain.code_versions)


def chain_cursor(instance: DagsterInstance, chain: Chain) -> int:
    """The newest storage id among the chain assets' latest materializations (one query)."""
    records = instance.get_asset_records([AssetKey(a) for a in chain.assets])
    return max((r.asset_entry.last_materialization_storage_id or 0 for r in records), default=0)


def observation_cursor(instance: DagsterInstance) -> int:
    """The storage id of the newest `ocr_result` observation (one query)."""
    res = instance.fetch_observations(AssetKey("ocr_result"), limit=1)
    return res.records[0].storage_id if res.records else 0


def load_record(instance: DagsterInstance, chain: Chain, known: Record | None = None) -> Record | None:
    """The last record, when it is still current (see the module doc); else None. `known`: the
    record the no-op proof read from this home's files moments before (`pipelines.planning.noop`), checked
    here as current and not read and unpacked a second time (~0.16 s at 10,000 papers); when it
    is no longer current (another build recorded since), the latest record is read."""
    if known is not None and _current(instance, chain, known):
        return known
    record = _latest_record(instance)
    return record if record is not None and _current(instance, chain, record) else None


def _current(instance: DagsterInstance, chain: Chain, record: Record) -> bool:
    if record.code != chain_digest(chain) or record.assets != chain.assets:
        return False
    return record.cursor == chain_cursor(instance, chain) and record.observed == observation_cursor(instance)


def _latest_record(instance: DagsterInstance) -> Record | None:
    ev = instance.get_latest_materialization_event(AssetKey(STATUS_ASSET))
    mat = ev.asset_materialization if ev is not None else None
    if mat is None:
        return None
    meta = {k: getattr(v, "value", v) for k, v in (mat.metadata or {}).items()}
    return record_from_json(meta.get("record"))


def write_record(instance: DagsterInstance, chain: Chain, statuses: Mapping[str, PaperStatus],
                 versions: Mapping[str, str], cursor: int, metadata_files: Iterable[str | Path]) -> None:
    """Record `statuses` (planned with the OCR `versions`) as current up to storage id `cursor`."""
    instance.report_runless_asset_event(AssetMaterialization(
        STATUS_ASSET, metadata=record_metadata(instance, chain, statuses, versions, cursor, metadata_files)))


def record_metadata(instance: DagsterInstance, chain: Chain, statuses: Mapping[str, PaperStatus],
                    versions: Mapping[str, str], cursor: int, metadata_files: Iterable[str | Path]) -> dict[str, Any]:
    """The metadata of a `library_status` materialization holding the record (what
    `write_record` reports run-less after `sheaf build`; the `library_status` asset materializes
    it in a run), with the per-paper table the UI shows (`papers_table`): the same after every
    build path. `metadata_files`: the library's exports, for the papers' titles."""
    counts = status_counts(statuses)
    raw = record_json(statuses, versions, cursor=cursor, observed=observation_cursor(instance),
                      code=chain_digest(chain), assets=chain.assets, artifacts=chain.artifacts)
    return {
        "papers_table": papers_table(instance, chain, statuses, metadata_files),
        "papers": len(statuses), **{f"papers_{s}": n for s, n in sorted(counts.items())},
        "needs_work": MetadataValue.md(_table(statuses.values())),
        "record": MetadataValue.json(raw),
    }


def papers_table(instance: DagsterInstance, chain: Chain, statuses: Mapping[str, PaperStatus],
                 metadata_files: Iterable[str | Path]) -> Any:
    """The `paper_view.status_table` of `statuses`; identities and last-build times are read for
    the papers it lists only (`TABLE_ROWS`), so a large library's one-paper edit stays cheap."""
    keys = [st.key for st in table_rows(statuses)]
    built = {k: e.timestamp for k, e in latest_events(instance, chain.assets[-1], partitions=keys).items()}
    return status_table(statuses, identities(metadata_files, keys), built)


def _table(statuses: Iterable[PaperStatus]) -> str:
    rows = [st for st in statuses if st.state != "built"]
    if not rows:
        return "Every paper is built."
    lines = ["| paper | state | why |", "|---|---|---|"]
    for st in rows[:TABLE_ROWS]:
        why = st.error if st.state in ("failed", "unreadable") else "; ".join(st.reasons)
        lines.append(f"| {st.key} | {st.state} | {(why or '').replace('|', '/')[:200]} |")
    if len(rows) > TABLE_ROWS:
        lines.append(f"| … | {len(rows) - TABLE_ROWS} more | |")
    return "\n".join(lines)


def same_statuses(a: Mapping[str, PaperStatus], b: Mapping[str, PaperStatus]) -> bool:
    """Whether two sets of statuses say the same (as the record's JSON would: a tuple is a list).
    Papers compared one by one, stopping at the first difference: a removal's differ in their keys,
    and writing both as JSON first took 0.26 s of a removal at 10,000 papers."""
    if a.keys() != b.keys():
        return False

    def plain(s: PaperStatus) -> list[Any]:
        return [s.state, s.reasons, s.error, s.rebuild_from, s.metadata]

    for k, s in a.items():
        x, y = plain(s), plain(b[k])
        if x != y and json.dumps(x, sort_keys=True, default=str) != json.dumps(y, sort_keys=True, default=str):
            return False
    return True


def statuses_from(instance: DagsterInstance, chain: Chain, keys: list[str], versions: Mapping[str, str],
                  record: Record | None) -> tuple[dict[str, PaperStatus], int]:
    """Every paper's status, `versions` being its current OCR hashes: from a current `record`
    where the paper's hash is the recorded one, else (edited, new, or no record) from its
    latest materializations; and how many papers' events were read."""
    if record is None:
        return paper_statuses(instance, chain, None, keys, observed=dict(versions)), len(keys)
    known, fresh = record.current_for({k: versions.get(k, "") for k in keys})
    if fresh:
        known.update(paper_statuses(instance, chain, None, fresh, observed=dict(versions)))
    return {k: known[k] for k in keys}, len(fresh)
