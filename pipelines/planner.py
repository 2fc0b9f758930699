"""The plan shared by `sheaf build`, `sheaf status`, the nightly schedule and `sheaf doctor`:
the per-paper chain as the asset graph defines it, each paper's status, where its rebuild
starts, and how the papers to build are cut into runs.

- **The chain** (`chain_of`) is read from the asset graph, never written out by hand: the
  materializable assets partitioned by paper, in topological order; the assets computed by one
  step (a multi-asset) together; the ones stored as per-paper files (their definition metadata
  ``sheaf/artifact`` names the file suffix) and each asset's code version.
- A paper is *built* when every asset of its chain has a materialization whose code version
  is current and whose OCR hash is the paper's current one; otherwise it is *missing*, *stale*
  (with reasons) or *failed* (its latest materialization recorded an error and its input has
  not changed since). The embedding model is part of `vector_collections`' code version
  (`model_code_version`), so a model change is a code-version change Dagster sees too.
- `index_drift` is the cheap cross-check (counts only) of index rows and artifacts against the
  materializations that every build runs on its plan; `sheaf doctor` adds hashes.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster import AssetKey, DagsterInstance, Definitions, RepositoryDefinition

from pipelines.partitions import papers_partitions
from pipelines.state import EventInfo, latest_events, latest_observed_versions
from sheaf.store.select import open_backend
from sheaf.vectors.identity import CONTEXT_CAP, CONTEXT_SEP, PASSAGE_TEMPLATE, resolve_model_path

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


# --- the embedding model in a code version ------------------------------------------------------

_MODEL_SEP = "|model="
_HEAD_TAIL = 1 << 20  # bytes of a large file's start and end that enter its fingerprint


def model_version(model: str) -> str:
    """What a vector depends on, as a short string, computed without loading the model:
    ``<canonical name>@<12 hex>`` over the passage template and, for a local model folder,
    every file's name, size and bytes (a file over 4 MiB, the weights: its first and last MiB).
    A fingerprint, not the full identity: the vector step still checks the loaded model's
    identity (weights hash) against the collection's."""
    name, target = resolve_model_path(model)
    h = hashlib.sha256(f"{name}\0{PASSAGE_TEMPLATE}|sep={CONTEXT_SEP}|cap={CONTEXT_CAP}".encode())
    folder = Path(target)
    if folder.is_dir():
        for f in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
            size = f.stat().st_size
            h.update(f"\0{f.relative_to(folder).as_posix()}\0{size}\0".encode())
            with f.open("rb") as fh:
                if size <= 4 * _HEAD_TAIL:
                    h.update(fh.read())
                else:
                    h.update(fh.read(_HEAD_TAIL))
                    fh.seek(size - _HEAD_TAIL)
                    h.update(fh.read(_HEAD_TAIL))
    return f"{name}@{h.hexdigest()[:12]}"


def model_code_version(base: str | None, model: str) -> str:
    """`base` (the asset's own code version) with the configured model's `model_version`."""
    return f"{base or ''}{_MODEL_SEP}{model_version(model)}"


def split_model(code_version: str | None) -> tuple[str | None, str | None]:
    """(the asset's own code version, its model version or None)."""
    if code_version is None or _MODEL_SEP not in code_version:
        return code_version, None
    base, _, model = code_version.partition(_MODEL_SEP)
    return base, model


def _model_name(model_version_: str) -> str:
    return model_version_.rpartition("@")[0] or model_version_


# --- per-paper status ----------------------------------------------------------------------------

@dataclass(slots=True)
class PaperStatus:
    key: str
    state: str  # built | stale | missing | failed
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # from the last vector/units steps
    #: The first chain asset to rebuild (it and everything below it); None when nothing is due.
    rebuild_from: str | None = None


def _code_change(recorded: str | None, current: str | None) -> tuple[bool, str | None]:
    """(the asset's code changed, the model change's reason or None) between two code versions."""
    if not current or recorded == current:
        return False, None
    (rb, rm), (cb, cm) = split_model(recorded), split_model(current)
    if rm is not None and cm is not None and rb == cb and rm != cm:
        old, new = _model_name(rm), _model_name(cm)
        return False, f"model changed: {old} → {new}" if old != new else f"model changed: {new} (its files changed)"
    return True, None


def paper_statuses(instance: DagsterInstance, defs: ChainSource, settings: Any = None,
                   keys: list[str] | None = None, observed: dict[str, str] | None = None) -> dict[str, PaperStatus]:
    """Per paper: built / stale (why) / missing / failed, from materialization metadata alone.
    `defs`: what `chain_of` takes. (`settings` is unused: the configured model is part of
    `vector_collections`' code version.)"""
    chain = chain_of(defs)
    keys = list(keys if keys is not None else instance.get_dynamic_partitions(papers_partitions.name))
    observed = observed if observed is not None else latest_observed_versions(instance)
    code = chain.code_versions
    first_asset, last_asset = chain.first, chain.assets[-1]
    events: dict[str, dict[str, EventInfo]] = {a: latest_events(instance, a, partitions=keys) for a in chain.assets}
    out: dict[str, PaperStatus] = {}
    for key in keys:
        st = PaperStatus(key, "built")
        evs = {a: events[a].get(key) for a in chain.assets}
        missing = [a for a, e in evs.items() if e is None]
        errors = [(a, e.metadata["error"]) for a, e in evs.items() if e is not None and "error" in e.metadata]
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
        if errors:
            st.state, st.error = "failed", errors[0][1]
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


def needs_build(st: PaperStatus) -> bool:
    if st.state == "built":
        return False
    if st.state == "failed":
        return bool(st.reasons)
    return True


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

def open_index_readonly(settings: Any):
    """The index (an `IndexBackend`, SQLite or Postgres) opened read-only, or None when it is
    missing or unusable."""
    try:
        return open_backend(settings, readonly=True)
    except Exception:  # noqa: BLE001 - an unusable index: every paper drifted
        return None


def index_drift(settings: Any, instance: DagsterInstance, statuses: dict[str, Any],
                defs: ChainSource) -> dict[str, tuple[str, list[str]]]:
    """Papers (built or stale) whose artifacts or index rows disagree with their latest
    materializations: ``{key: (first asset to rebuild, reasons)}``. Cheap enough for every
    build: no event read (the counts and the vector step's model come from the statuses'
    metadata), one grouped query per index table, a stat per artifact. `sheaf doctor` adds hashes."""
    chain = chain_of(defs)
    keys = [k for k, st in statuses.items() if st.state in ("built", "stale")]
    if not keys:
        return {}
    identity = {k: statuses[k].metadata.get("model_identity") for k in keys}  # from the vector step's metadata
    conn = open_index_readonly(settings)
    stats: dict[str | None, dict[str, dict[str, int]]] = {}
    have: set[str] = set()
    try:
        if conn is not None:
            have = set(conn.collections())
            for ck in set(identity.values()) | {None}:
                try:
                    stats[ck] = conn.paper_index_stats(ck if ck in have else None)
                except Exception:  # noqa: BLE001 - a damaged collection reads as no vectors
                    stats[ck] = conn.paper_index_stats(None)
    finally:
        if conn is not None:
            conn.close()
    root = Path(settings.artifacts_dir)
    out: dict[str, tuple[str, list[str]]] = {}
    for key in keys:
        st = statuses[key]
        reasons: list[str] = []
        starts: list[str] = []
        for asset, suffix in chain.artifacts.items():  # every chain asset materialized without error
            if not (root / asset / f"{key}{suffix}").exists():
                reasons.append(f"artifact {asset} missing")
                starts.append(asset)
        if conn is None:
            reasons.append("index unreadable or missing")
            starts.append("fts_tables")
        else:
            s = stats[None].get(key, {})
            want_b, want_o = st.metadata.get("body_units"), st.metadata.get("object_units")
            got_b, got_o = s.get("body_units", 0), s.get("object_units", 0)
            if (want_b is not None and got_b != want_b) or (want_o is not None and got_o != want_o):
                reasons.append(f"index holds {got_b}+{got_o} units, the build recorded {want_b}+{want_o}")
                starts.append("fts_tables")
            elif s.get("body_fts", 0) != got_b or s.get("object_fts", 0) != got_o:
                reasons.append(f"FTS rows {s.get('body_fts', 0)}+{s.get('object_fts', 0)} ≠ units {got_b}+{got_o}")
                starts.append("fts_tables")
            ck = identity.get(key)
            want = st.metadata.get("passages")
            if ck is not None and want and not any(r.startswith("model changed") for r in st.reasons):
                v = stats.get(ck, {}).get(key, {})
                got, vecs = v.get("passages", 0), v.get("vectors", 0)
                if ck not in have:
                    reasons.append(f"vector collection {ck} missing from the index")
                    starts.append("vector_collections")
                elif got != want or vecs != got or v.get("dangling_passages", 0):
                    reasons.append(f"index holds {got} passages / {vecs} vectors, the build recorded {want}")
                    starts.append("vector_collections")
        if reasons:
            out[key] = (chain.earliest(starts), reasons)
    return out


def apply_index_drift(settings: Any, instance: DagsterInstance, statuses: dict[str, Any],
                      defs: ChainSource) -> dict[str, list[str]]:
    """Mark papers whose index rows or artifacts drifted as stale, rebuilding from the first
    drifted asset (`sheaf build` calls this on its plan). Returns {key: reasons}."""
    chain = chain_of(defs)
    drift = index_drift(settings, instance, statuses, chain)
    for key, (start, reasons) in drift.items():
        st = statuses[key]
        st.state = "stale"
        st.reasons.extend(f"index drift: {r}" for r in reasons)
        st.rebuild_from = start if st.rebuild_from is None else min(st.rebuild_from, start, key=chain.index)
    return {k: r for k, (_, r) in drift.items()}


def metadata_missing(settings: Any, last: Any) -> bool:
    """True when the index holds fewer metadata rows than the last `library_metadata` loaded
    (the index was replaced, moved aside or rows were lost): the metadata must be loaded again."""
    if last is None or last.asset_materialization is None:
        return False
    v = last.asset_materialization.metadata.get("papers")
    loaded = getattr(v, "value", v)
    if not isinstance(loaded, int) or loaded <= 0:
        return False
    conn = open_index_readonly(settings)
    if conn is None:
        return True
    try:
        have = conn.papers_with_metadata()
    except Exception:  # noqa: BLE001
        return True
    finally:
        conn.close()
    return have < loaded
