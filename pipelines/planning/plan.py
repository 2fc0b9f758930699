"""The plan's plain types, shared by the Dagster way of planning (`pipelines.planning.statuses`,
`pipelines.planning.recorded_plan`, `pipelines.build.command`) and the no-op proof that runs without Dagster
(`pipelines.planning.noop`): a paper's status, what discovery found, a build's report, the recorded
plan and its JSON form. Nothing here imports Dagster.
"""
from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sheaf.library.sources import SourceScan

Events = Callable[[dict[str, Any]], None]


@dataclass(slots=True)
class PaperStatus:
    key: str
    state: str  # built | stale | missing | unreadable | failed
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # from the last vector/units steps
    #: The first chain asset to rebuild (it and everything below it); None when nothing is due.
    rebuild_from: str | None = None

    def copy(self) -> PaperStatus:
        return PaperStatus(self.key, self.state, list(self.reasons), self.error, dict(self.metadata),
                           self.rebuild_from)


def needs_build(st: PaperStatus) -> bool:
    if st.state == "built":
        return False
    if st.state in ("failed", "unreadable"):
        return bool(st.reasons)
    return True


@dataclass(frozen=True, slots=True)
class SyncPlan:
    """What the library changed since the instance last looked."""

    added: list[str]
    removed: list[str]
    changed: dict[str, str]  # key -> new data version (ocr_result_hash)
    invalid_keys: list[str]
    errors: dict[str, str]
    scan: SourceScan = field(repr=False)
    #: Every present paper's current data version (its OCR hash, or a hash of why it is unreadable).
    versions: dict[str, str] = field(default_factory=dict, repr=False)


def current_versions(scan: SourceScan) -> dict[str, str]:
    """Every present paper's data version: its OCR hash, or a hash of why it cannot be read."""
    current = dict(scan.hashes)
    current.update({k: "unreadable:" + hashlib.sha256(m.encode()).hexdigest()[:16] for k, m in scan.errors.items()})
    return current


@dataclass(slots=True)
class BuildReport:
    sync: dict[str, Any]
    planned: dict[str, list[str]]  # key -> reasons
    runs: list[dict[str, Any]]
    statuses: dict[str, PaperStatus]
    embeddings_computed: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    #: How the plan was made: ``record`` (current | stale | none | skipped with --full),
    #: ``papers_read``, the papers whose events were read for it (0 for a no-op with a current
    #: record), and ``dagster``: False when the no-op proof answered without loading Dagster.
    plan: dict[str, Any] = field(default_factory=dict)


# --- the recorded plan ---------------------------------------------------------------------------

RECORD_FORMAT = 2
#: The per-paper facts a record keeps, in this order (from the units and vector steps' metadata).
FIELDS = ("passages", "embeddings_computed", "model", "model_identity", "body_units", "object_units", "tokens")


def code_digest(assets: Sequence[str], code_versions: Mapping[str, str | None]) -> str:
    """The chain's code versions (the model fingerprint included) as one short hash."""
    text = "\n".join(f"{a}={code_versions.get(a) or ''}" for a in assets)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Record:
    """The last recorded plan (see `pipelines.planning.recorded_plan`)."""

    cursor: int  # the newest storage id among the chain assets' latest materializations
    observed: int  # the storage id of the newest ocr_result observation it saw
    code: str  # `code_digest` of the chain it was made with
    assets: tuple[str, ...]  # the chain, in order
    artifacts: dict[str, str]  # the chain's per-paper files: asset -> suffix
    versions: dict[str, str]  # paper -> the OCR hash (data version) its status was planned with
    statuses: dict[str, PaperStatus]

    def current_for(self, versions: Mapping[str, str]) -> tuple[dict[str, PaperStatus], list[str]]:
        """(recorded statuses of the papers whose version is unchanged, the other papers of `versions`)."""
        known: dict[str, PaperStatus] = {}
        fresh: list[str] = []
        for key, v in versions.items():
            st = self.statuses.get(key)
            if st is not None and self.versions.get(key) == v:
                known[key] = st.copy()
            else:
                fresh.append(key)
        return known, fresh


def record_json(statuses: Mapping[str, PaperStatus], versions: Mapping[str, str], *, cursor: int, observed: int,
                code: str, assets: Sequence[str], artifacts: Mapping[str, str]) -> dict[str, Any]:
    """The JSON form of a record (the `record` metadata entry of a `library_status` materialization)."""
    papers = {
        k: [versions.get(k), st.state, st.reasons, st.error, st.rebuild_from,
            [st.metadata.get(f) for f in FIELDS] if st.metadata else []]
        for k, st in sorted(statuses.items())
    }
    # The papers packed in one string (zlib, base64): Dagster's serializer walks a JSON value node by
    # node (a 10,000-paper record, 1.8 MB, took 2.3 s to write and 0.7 s to read back every build).
    packed = base64.b64encode(zlib.compress(json.dumps(papers, separators=(",", ":")).encode(), 6)).decode()
    return {"format": RECORD_FORMAT, "cursor": cursor, "observed": observed, "code": code, "assets": list(assets),
            "artifacts": dict(artifacts), "papers_zlib": packed}


def record_from_json(raw: Any) -> Record | None:
    """The record of its JSON form; None for another format or a damaged one."""
    if not isinstance(raw, dict) or raw.get("format") != RECORD_FORMAT:
        return None
    try:
        versions: dict[str, str] = {}
        statuses: dict[str, PaperStatus] = {}
        papers = (raw["papers"] if "papers" in raw  # a record of the older, plain form
                  else json.loads(zlib.decompress(base64.b64decode(raw["papers_zlib"]))))
        for key, row in papers.items():
            version, state, reasons, error, rebuild_from, facts = row
            versions[key] = version
            meta = {k: v for k, v in zip(FIELDS, facts) if v is not None} if facts else {}
            statuses[key] = PaperStatus(key, state, list(reasons), error, meta, rebuild_from)
        return Record(int(raw["cursor"]), int(raw["observed"]), str(raw["code"]), tuple(raw["assets"]),
                      dict(raw["artifacts"]), versions, statuses)
    except (KeyError, TypeError, ValueError, zlib.error):
        return None


def status_counts(statuses: Mapping[str, PaperStatus]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for st in statuses.values():
        counts[st.state] = counts.get(st.state, 0) + 1
    return counts


# --- progress -------------------------------------------------------------------------------------

def with_warning_events(progress: Callable[[str], None], events: Events) -> tuple[Callable[[str], None], Events]:
    """(`progress` that also emits each warning line "! ..." as a `warning` event, `events`
    that holds warnings back until `start`, so the stream always begins with it)."""
    held: list[dict[str, Any]] | None = []

    def emit(event: dict[str, Any]) -> None:
        nonlocal held
        if held is not None and event.get("event") != "start":
            held.append(event)
            return
        events(event)
        if held:
            for e in held:
                events(e)
        held = None

    def say(message: str) -> None:
        progress(message)
        if message.startswith("! "):
            emit({"event": "warning", "message": message[2:]})

    return say, emit
