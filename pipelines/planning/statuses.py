"""The plan shared by `sheaf build`, `sheaf status`, the nightly schedule and `sheaf doctor`:
the per-paper chain as the asset graph defines it, each paper's status, where its rebuild
starts, and how the papers to build are cut into runs.

- **The chain** (`chain_of`) is read from the asset graph, never written out by hand: the
  materializable assets partitioned by paper, in topological order; the assets computed by one
  step (a multi-asset) together; the ones stored as per-paper files (their definition metadata
  ``sheaf/artifact`` names the file suffix) and each asset's code version.
- A paper is *built* when every asset of its chain has a materialization whose code version
  is current and whose OCR hash is the paper's current one; otherwise it is *missing*, *stale*
  (with reasons), *unreadable* (its file cannot be read: corrupt, truncated, empty, no text) or
  *failed* (a step failed on it otherwise); an unreadable or failed paper is retried only when
  its input or the code changed. The embedding model is part of `vector_collections`' code version
  (`model_code_version`), so a model change is a code-version change Dagster sees too.
- `index_drift` is the cheap cross-check (counts only) of index rows and artifacts against the
  materializations that every build runs on its plan; `sheaf doctor` adds hashes.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagster import AssetKey, DagsterInstance, Definitions, RepositoryDefinition

from pipelines.partitions import papers_partitions
from pipelines.planning.drift import artifact_index_drift
from pipelines.planning.events import EventInfo, latest_events, latest_observed_versions
from pipelines.planning.plan import PaperStatus
from sheaf.vectors.identity import model_name, split_model

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

#: Definition metadata of an asset stored as one file per paper: the file's suffix.
ARTIFACT_METADATA = "sheaf/artifact"


# --- the chain, from the asset graph ----------------------------------------------------------

@dataclass(frozen=True)
class Chain:
    """The per-paper chain of a code location's asset graph."""

    assets: tuple[str, ...]  # topological order
    steps: tuple[tuple[str, ...], ...]  # the assets each step computes together, in chain order
    artifacts: Mapping[str, str]  # asset stored as a per-paper file -> its suffix, in chain order
    code_versions: Mapping[str, str | None]

    @property
    def first(self) -> str:
        return self.assets[0]

    def index(self, asset: str) -> int:
        return self.assets.index(asset)

    def step_start(self, asset: str) -> str:
        """The first asset of `asset`'s step: a rebuild starting at any of them starts there."""
        return next(s[0] for s in self.steps if asset in s)

    def below(self, asset: str) -> tuple[str, ...]:
        """`asset`'s step and every chain asset below it."""
        return self.assets[self.index(self.step_start(asset)):]

    def earliest(self, assets: list[str]) -> str:
        """The step start of the first of `assets` in chain order."""
        return self.step_start(min(assets, key=self.index))


ChainSource = Any  # Definitions | RepositoryDefinition | AssetGraph | Chain


def chain_of(source: ChainSource) -> Chain:
    """The per-paper chain of `source` (Definitions, a repository such as a schedule's
    ``context.repository_def``, an asset graph, or a Chain)."""
    if isinstance(source, Chain):
        return source
    if isinstance(source, Definitions):
        graph = source.resolve_asset_graph()
    elif isinstance(source, RepositoryDefinition):
        graph = source.asset_graph
    else:
        graph = source
    steps: list[tuple[str, ...]] = []
    key_of: dict[str, AssetKey] = {}
    for ad in graph.assets_defs:
        if (not ad.keys or not ad.is_materializable  # asset checks have no keys; ocr_result is observed
                or getattr(ad.partitions_def, "name", None) != papers_partitions.name):
            continue
        names = tuple(spec.key.path[-1] for spec in ad.specs)
        key_of.update({spec.key.path[-1]: spec.key for spec in ad.specs})
        steps.append(names)
    # Kahn's algorithm over steps (ties by name, so the order is stable)
    step_of = {a: s for s in steps for a in s}
    needs = {s: {step_of[p.path[-1]] for a in s for p in graph.get(key_of[a]).parent_keys
                 if p.path[-1] in step_of} - {s} for s in steps}
    ordered: list[tuple[str, ...]] = []
    while needs:
        ready = sorted((s for s, n in needs.items() if not n), key=lambda s: s[0])
        if not ready:  # pragma: no cover - Dagster refuses cyclic graphs
            raise ValueError(f"the paper chain has a cycle among {sorted(needs)}")
        ordered.append(ready[0])
        del needs[ready[0]]
        for n in needs.values():
            n.discard(ready[0])
    assets = tuple(a for s in ordered for a in s)
    nodes = {a: graph.get(key_of[a]) for a in assets}
    artifacts = {a: str(nodes[a].metadata[ARTIFACT_METADATA]) for a in assets
                 if ARTIFACT_METADATA in (nodes[a].metadata or {})}
    return Chain(assets, tuple(ordered), artifacts, {a: nodes[a].code_version for a in assets})


# --- per-paper status ----------------------------------------------------------------------------

def _code_change(recorded: str | None, current: str | None) -> tuple[bool, str | None]:
    """(the asset's code changed, the model change's reason or None) between two code versions."""
    if not current or recorded == current:
        return False, None
    (rb, rm), (cb, cm) = split_model(recorded), split_model(current)
    if rm is not None and cm is not None and rb == cb and rm != cm:
        old, new = model_name(rm), model_name(cm)
        return False, f"model changed: {old} → {new}" if old != new else f"model changed: {new} (its files changed)"
    return True, None


def paper_statuses(instance: DagsterInstance, defs: ChainSource, settings: Settings | None = None,
                   keys: list[str] | None = None, observed: dict[str, str] | None = None) -> dict[str, PaperStatus]:
    """Per paper: built / stale (why) / missing / failed, from materialization metadata alone.
    `defs`: what `chain_of` takes. (`settings` is unused: the configured model is part of
    `vector_collections`' code version.)"""
    chain = chain_of(defs)
    keys = list(keys if keys is not None else instance.get_dynamic_partitions(papers_partitions.name))
    observed = observed if observed is not None else latest_observed_versions(instance)
    out: dict[str, PaperStatus] = {}
    for i in range(0, len(keys), STATUS_CHUNK):
        out.update(_chunk_statuses(instance, chain, keys[i:i + STATUS_CHUNK], observed))
    return out


#: `paper_statuses` reads the papers' events this many papers at a time: what it keeps of them is
#: a few fields a paper, while the events of all 10,000 papers of a first build (8 a paper, each
#: with its metadata) held ~300 MB at once.
STATUS_CHUNK = 1000


def _chunk_statuses(instance: DagsterInstance, chain: Chain, keys: list[str],
                    observed: dict[str, str]) -> dict[str, PaperStatus]:
    return statuses_of(chain, keys, observed, chain_events(instance, chain, keys))


def chain_events(instance: DagsterInstance, chain: Chain, keys: list[str]) -> dict[str, dict[str, EventInfo]]:
    """Per chain asset, the latest materialization of each of `keys` that has one."""
    return {a: latest_events(instance, a, partitions=keys) for a in chain.assets}


def statuses_of(chain: Chain, keys: list[str], observed: Mapping[str, str],
                events: Mapping[str, Mapping[str, EventInfo]]) -> dict[str, PaperStatus]:
    """Each of `keys`' status from its latest chain `events` (`chain_events`) and its current OCR
    hash in `observed`."""
    code = chain.code_versions
    first_asset, last_asset = chain.first, chain.assets[-1]
    out: dict[str, PaperStatus] = {}
    for key in keys:
        st = PaperStatus(key, "built")
        evs = {a: events[a].get(key) for a in chain.assets}
        missing = [a for a, e in evs.items() if e is None]
        errors = [(a, e.metadata.get("unreadable") or e.metadata["error"], "unreadable" in e.metadata)
                  for a, e in evs.items() if e is not None and "error" in e.metadata]
        first = evs[first_asset]
        if first is not None and observed.get(key) and first.metadata.get("ocr_result_hash") not in (None, observed[key]):
            st.reasons.append("OCR changed")
        elif first is not None and observed.get(key, "").startswith("unreadable:") and "error" not in first.metadata:
            st.reasons.append("OCR changed")
        changed: list[str] = []
        model_changed: list[str] = []
        for a, e in evs.items():
            if e is None:
                continue
            code_changed, model_reason = _code_change(e.code_version, code[a])
            if code_changed:
                changed.append(a)
            elif model_reason and "error" not in e.metadata:
                model_changed.append(a)
                st.reasons.append(model_reason)
        if changed:
            st.reasons.insert(len(st.reasons) - len(model_changed), "code changed: " + ", ".join(changed))
        order = [evs[a].storage_id for a in chain.assets if evs[a] is not None]
        if not missing and any(b < a for a, b in zip(order, order[1:])):
            st.reasons.append("upstream rebuilt")
        if errors:  # the first step's error says what: a file that cannot be read, or a failure
            st.state, st.error = "unreadable" if errors[0][2] else "failed", errors[0][1]
        elif missing:
            st.state = "missing"
            st.reasons.insert(0, "never built" if len(missing) == len(chain.assets) else "missing: " + ", ".join(missing))
        elif st.reasons:
            st.state = "stale"
        if errors and st.reasons and "OCR changed" not in st.reasons and not changed:
            st.reasons = []  # a failed paper is retried only when its input or code changed
        # Where a rebuild starts: a code bump of structure_tree rebuilds it and below, not the
        # parse above it (as `code_version_changed()` does under the automation sensor).
        if errors or missing and first is None or "OCR changed" in st.reasons:
            due = [first_asset] if (st.reasons or not errors) else []
        else:
            due = list(missing) + changed + model_changed
            if "upstream rebuilt" in st.reasons:
                due += [chain.assets[i + 1] for i, (a, b) in enumerate(zip(order, order[1:])) if b < a][:1]
        if due and st.state != "built":
            st.rebuild_from = chain.earliest(due)
        vec = evs[last_asset]
        if vec is not None:
            st.metadata = {k: vec.metadata.get(k) for k in ("passages", "embeddings_computed", "model", "model_identity")
                           if k in vec.metadata}
        units = evs.get("body_units")
        if units is not None:
            st.metadata.update({k: units.metadata.get(k) for k in ("body_units", "object_units", "tokens") if k in units.metadata})
        out[key] = st
    return out


# --- runs -----------------------------------------------------------------------------------------

def partition_ranges(ordered: list[str], targets: set[str], max_per_run: int) -> list[tuple[str, str, list[str]]]:
    """Contiguous runs of target keys in the partition order, at most `max_per_run` each."""
    ranges: list[list[str]] = []
    current: list[str] = []
    for k in ordered:
        if k in targets and len(current) < max_per_run:
            current.append(k)
            continue
        if current:
            ranges.append(current)
            current = []
        if k in targets:
            current.append(k)
    if current:
        ranges.append(current)
    return [(r[0], r[-1], r) for r in ranges]


def chunk_targets(chain: Chain, ordered: list[str], starts: dict[str, str],
                  max_per_run: int) -> list[tuple[str, list[str]]]:
    """(first asset, partition keys) per run: papers grouped by where their rebuild starts
    (upstream first), each group cut into contiguous partition ranges."""
    out: list[tuple[str, list[str]]] = []
    for first in sorted(set(starts.values()), key=chain.index):
        group = {k for k, s in starts.items() if s == first}
        out += [(first, keys) for _, _, keys in partition_ranges(ordered, group, max_per_run)]
    return out


def selection_from(chain: Chain, first: str) -> list[AssetKey] | None:
    """The asset selection of a run of the chain from `first` down (None: the whole chain)."""
    return None if first == chain.first else [AssetKey(a) for a in chain.below(first)]


# --- the planner's check: index rows and artifacts against the materializations -------------------

def index_drift(settings: Settings, instance: DagsterInstance, statuses: dict[str, Any],
                defs: ChainSource) -> dict[str, tuple[str, list[str]]]:
    """`pipelines.planning.drift.artifact_index_drift` of the chain of `defs`: ``{key: (first asset to
    rebuild, reasons)}``."""
    chain = chain_of(defs)
    return {k: (chain.earliest(starts), reasons)
            for k, (starts, reasons) in artifact_index_drift(settings, statuses, chain.artifacts).items()}


def apply_index_drift(settings: Settings, instance: DagsterInstance, statuses: dict[str, Any],
                      defs: ChainSource) -> dict[str, list[str]]:
    """Mark papers whose index rows or artifacts drifted as stale, rebuilding from the first
    drifted asset (`sheaf build` calls this on its plan). Returns {key: reasons}. A marked paper's
    status is replaced in `statuses` by a changed copy, never changed in place: a caller keeps the
    plan as it was in a shallow copy of the dict (copying every status took 0.2 s at 10,000 papers)."""
    chain = chain_of(defs)
    drift = index_drift(settings, instance, statuses, chain)
    for key, (start, reasons) in drift.items():
        st = statuses[key] = statuses[key].copy()
        st.state = "stale"
        st.reasons.extend(f"index drift: {r}" for r in reasons)
        st.rebuild_from = start if st.rebuild_from is None else min(st.rebuild_from, start, key=chain.index)
    return {k: r for k, (_, r) in drift.items()}
