"""Where a run finds its papers: the source and identity discovery recorded with each paper's
latest `ocr_result` observation (`pipelines.build.sync.observations`), so that the chain's first
step reads them instead of discovering the library again; discovery only for the papers whose
observation names no source or whose source has moved."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster import DagsterInstance

from pipelines.planning.events import latest_events
from pipelines.planning.paper_view import identities
from sheaf.core.settings import Settings
from sheaf.library.discover import discover_library, source_from_ref

#: The metadata of an `ocr_result` observation naming where the paper's source was found
#: (`sheaf.library.discover.source_ref`).
SOURCE_METADATA = "source"
#: The identity fields an observation carries (`pipelines.planning.paper_view.identity_metadata`).
IDENTITY_FIELDS = ("title", "first_author", "year")


@dataclass(frozen=True, slots=True)
class ObservedSource:
    """What discovery recorded of a paper with its latest `ocr_result` observation."""

    ref: str  # `sheaf.library.discover.source_ref`
    identity: dict[str, Any]


def observed_sources(instance: DagsterInstance, keys: Iterable[str]) -> dict[str, ObservedSource]:
    """{paper: its source and identity as its latest `ocr_result` observation recorded them}, for
    those of `keys` whose observation records a source (an observation made by the UI's "Observe
    sources", or by an earlier Sheaf, records none)."""
    out: dict[str, ObservedSource] = {}
    for k, e in latest_events(instance, "ocr_result", "observation", list(keys)).items():
        ref = e.metadata.get(SOURCE_METADATA)
        if isinstance(ref, str) and ref:
            out[k] = ObservedSource(ref, {f: e.metadata[f] for f in IDENTITY_FIELDS if f in e.metadata})
    return out


def paper_sources(instance: DagsterInstance, settings: Settings, keys: list[str]) -> tuple[dict[str, Path], dict[str, dict[str, Any]]]:
    """({paper: its source}, {paper: its identity}) for a run's papers: as discovery recorded them
    with each paper's latest `ocr_result` observation, where that source is still there; the rest
    (a source moved since, an observation that records none) found by discovering those papers."""
    papers: dict[str, Path] = {}
    ids: dict[str, dict[str, Any]] = {}
    for key, seen in observed_sources(instance, keys).items():
        path = source_from_ref(seen.ref, settings.library, settings.home)
        if path.exists():
            papers[key], ids[key] = path, seen.identity
    rest = [k for k in keys if k not in papers]
    if rest:
        found = discover_library(settings, keys=rest)
        papers.update({p.key: p.path for p in found.papers})
        ids.update(identities(found.metadata_files, keys=rest))  # title, first author, year: what the UI shows
    return papers, ids
