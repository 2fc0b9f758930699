"""`sheaf doctor`: cross-check, per paper, the library ↔ Dagster partitions ↔ Parquet artifacts ↔
index rows (units, FTS, vectors of the current model) ↔ the latest materialization metadata
(counts and hashes), and report every drift with its cause; `--repair` rebuilds only the
affected papers and removes orphans.

The cheap part of the cross-check (counts only), which `sheaf build` also runs when it plans,
is `pipelines.planning.statuses.index_drift`: a paper whose index rows or artifacts disagree with its
materializations is rebuilt from the first asset that drifted, whatever Dagster's event log
says. That is what makes a build killed between an index commit and Dagster's record of it
(or an index moved aside) come back whole.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from dagster import AssetKey, DagsterInstance, Definitions

from pipelines.build.command import build
from pipelines.build.live import dead_runs, reap_dead_runs
from pipelines.build.sync import remove_paper_everywhere
from pipelines.build_lock import build_lock, lock_holder, prepare_index, sweep_leftovers
from pipelines.partitions import papers_partitions
from pipelines.planning.drift import metadata_missing, open_index_readonly
from pipelines.planning.events import latest_events, latest_observed_versions
from pipelines.planning.statuses import chain_of, paper_statuses
from sheaf.core.models import paper_key_problem, valid_paper_key
from sheaf.library.discover import discover_library
from sheaf.store.artifact_store import SUFFIXES, ArtifactStore, open_artifacts
from sheaf.store.artifacts import dict_hash, table_hash
from sheaf.store.health import artifact_unit_digest
from sheaf.store.select import check_backend, open_backend
from sheaf.vectors.embedder import Embedder
from sheaf.vectors.identity import resolve_model_path

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

# --- the doctor --------------------------------------------------------------------------------

@dataclass(slots=True)
class Issue:
    kind: str
    detail: str
    cause: str
    repair: str
    paper: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"paper": self.paper, "kind": self.kind, "detail": self.detail, "cause": self.cause,
                "repair": self.repair}


@dataclass(slots=True)
class Diagnosis:
    issues: list[Issue] = field(default_factory=list)
    papers: dict[str, dict[str, Any]] = field(default_factory=dict)
    index: dict[str, Any] = field(default_factory=dict)
    checked: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, kind: str, detail: str, cause: str, repair: str, paper: str | None = None) -> None:
        self.issues.append(Issue(kind, detail, cause, repair, paper))

    @property
    def affected_papers(self) -> list[str]:
        return sorted({i.paper for i in self.issues if i.paper and i.repair == "rebuild"})

    def summary(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for i in self.issues:
            out[i.kind] = out.get(i.kind, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"issues": [i.to_dict() for i in self.issues], "summary": self.summary(),
                "affected_papers": self.affected_papers, "index": self.index, "checked": self.checked,
                "seconds": round(self.seconds, 2)}


_KILLED = "a build was interrupted (killed, crashed or out of space) between two of its writes"


def _artifact_hash(store: ArtifactStore, asset: str, name: str) -> str | None:
    payload = store.read_file(asset, name)
    return table_hash(payload) if isinstance(payload, pa.Table) else dict_hash(payload)


def diagnose(settings: Settings, defs: Definitions, instance: DagsterInstance) -> Diagnosis:
    """Every drift between the library, Dagster, the artifacts and the index, with its cause."""
    chain = chain_of(defs)
    t0 = time.perf_counter()
    d = Diagnosis()
    holder = lock_holder(settings.home)
    if holder:
        d.add("build_running", f"a sheaf build (pid {holder}) is running", "work in progress looks like drift",
              "none: run the doctor again when it is done")

    # 1. library ↔ partitions
    lib = discover_library(settings, write=False) if Path(settings.library).is_dir() else None
    library_keys = {p.key for p in lib.papers} if lib else set()
    for k in (lib.invalid_keys if lib else ()):
        d.add("invalid_key", f"library folder {k!r} is not a valid paper key",
              f"{paper_key_problem(k)}; the folder is skipped", "none: rename the folder to the paper's "
              "Zotero item key")
    partitions = list(instance.get_dynamic_partitions(papers_partitions.name))
    part_set = set(partitions)
    for k in sorted(library_keys - part_set):
        d.add("unregistered_paper", "in the library but not a Dagster partition",
              "added to the library since the last build", "rebuild", k)
    for k in sorted(part_set - library_keys):
        d.add("orphan_partition", "a Dagster partition whose paper is no longer in the library",
              "the paper was removed (or its folder renamed) and no build ran since", "remove", k)

    # 2. dead runs
    for run, pid in dead_runs(instance):
        d.add("dead_run", f"run {run.run_id[:8]} ({run.job_name}) shows {run.status.value} but its process "
                  f"(pid {pid}) is gone", "the build process was killed or crashed", "mark failed")

    # 3. index health
    health = check_backend(settings, deep=True)
    d.index = health.to_dict()
    if not health.ok:
        d.add("index_damaged", health.message, "the Postgres server cannot be reached or used" if health.state ==
              "unavailable" else "the index file was damaged (disk fault, a copy cut short, "
              "or a write outside Sheaf)" if health.state != "schema" else "written by another Sheaf version",
              "move aside and rebuild")

    last = instance.get_latest_materialization_event(AssetKey("library_metadata"))
    loaded = last.asset_materialization.metadata.get("papers") if last and last.asset_materialization else None
    if health.ok and metadata_missing(settings, getattr(loaded, "value", loaded)):
        d.add("metadata_missing", "the index holds fewer library metadata rows than the last load recorded",
              "the index was replaced or rows were deleted outside Sheaf", "reload")

    # 4. per paper: materializations ↔ artifacts ↔ index
    observed = latest_observed_versions(instance)
    statuses = paper_statuses(instance, chain, settings, partitions, observed=observed)
    events = {a: latest_events(instance, a, partitions=partitions) for a in chain.assets}
    store = open_artifacts(settings)
    names = {asset: store.names(asset) for asset in {*chain.artifacts, "body_units", "object_units"}}
    conn = open_index_readonly(settings) if health.ok or health.state == "damaged_collections" else None
    try:
        cols = conn.collections() if conn is not None else {}
        try:
            current = _current_identity_key(settings, cols)
        except Exception:  # noqa: BLE001
            current = None
        stats = conn.paper_index_stats(current if current in cols and current not in
                                       health.damaged_collections else None) if conn is not None else {}
        for key in partitions:
            st = statuses[key]
            info: dict[str, Any] = {"state": st.state, "reasons": list(st.reasons), "error": st.error}
            d.papers[key] = info
            if key not in library_keys:
                continue
            if st.state in ("missing", "stale"):
                d.add("not_built", f"{st.state}: {'; '.join(st.reasons)}", "the library or code changed since "
                      "the last build, or a build did not finish", "rebuild", key)
            failed = st.state == "failed"
            for asset, suffix in chain.artifacts.items():
                e = events[asset].get(key)
                name = f"{key}{suffix}"
                if e is None:
                    continue
                if "error" in e.metadata:
                    if name in names[asset]:
                        d.add("stale_artifact", f"{asset} artifact exists but the paper's last {asset} failed",
                              _KILLED + " or the file was restored by hand", "rebuild", key)
                    continue
                if name not in names[asset]:
                    d.add("missing_artifact", f"{asset} artifact missing ({name})",
                          "deleted outside Sheaf, or " + _KILLED, "rebuild", key)
                    continue
                want = e.metadata.get("output_hash")
                if want and asset in ("ocr_blocks", "render_map", "structure_tree"):
                    try:
                        got = _artifact_hash(store, asset, name)
                    except Exception as ex:  # noqa: BLE001
                        d.add("unreadable_artifact", f"{asset}: {type(ex).__name__}: {ex}",
                              "the file is damaged", "rebuild", key)
                        continue
                    if got != want:
                        d.add("artifact_hash_mismatch", f"{asset} artifact hash {got[:12]} ≠ recorded {want[:12]}",
                              "the file was changed outside Sheaf, or " + _KILLED, "rebuild", key)
            bu_ev = events["body_units"].get(key)
            if bu_ev is not None and "error" not in bu_ev.metadata:
                units = f"{key}.parquet"
                want = bu_ev.metadata.get("output_hash")
                if units in names["body_units"] and units in names["object_units"]:
                    try:
                        bt, ot = store.read_file("body_units", units), store.read_file("object_units", units)
                        got = table_hash(bt) + ":" + table_hash(ot)[:16]
                        if want and got != want:
                            d.add("artifact_hash_mismatch", f"units artifacts hash {got[:12]} ≠ recorded {want[:12]}",
                                  "the files were changed outside Sheaf, or " + _KILLED, "rebuild", key)
                        elif conn is not None and not failed:
                            a_digest = artifact_unit_digest(bt.to_pylist(), ot.to_pylist())
                            i_digest = conn.unit_digest(key)
                            if a_digest != i_digest and events["fts_tables"].get(key) is not None:
                                d.add("index_units_mismatch", "the index's units differ from the units artifacts",
                                      _KILLED + ", or the index was written outside Sheaf", "rebuild", key)
                    except Exception as ex:  # noqa: BLE001
                        d.add("unreadable_artifact", f"units: {type(ex).__name__}: {ex}", "the file is damaged",
                              "rebuild", key)
            s = stats.get(key, {})
            info["index"] = s
            fts = events["fts_tables"].get(key)
            vec = events["vector_collections"].get(key)
            if conn is None:
                continue
            if failed:
                if s.get("body_units", 0) or s.get("object_units", 0):
                    d.add("stale_index_rows", f"{s['body_units']}+{s['object_units']} units indexed for a failed paper",
                          _KILLED, "rebuild", key)
                continue
            if fts is not None and "error" not in fts.metadata:
                wb, wo = fts.metadata.get("body_units"), fts.metadata.get("object_units")
                gb, go = s.get("body_units", 0), s.get("object_units", 0)
                if (wb is not None and gb != wb) or (wo is not None and go != wo):
                    d.add("index_units_mismatch",
                          f"index holds {gb}+{go} units; the last fts_tables recorded {wb}+{wo}",
                          _KILLED + ", or rows were deleted outside Sheaf (or the index was replaced)", "rebuild", key)
                if s.get("body_fts", 0) != gb or s.get("object_fts", 0) != go:
                    d.add("index_fts_mismatch",
                          f"FTS rows {s.get('body_fts', 0)}+{s.get('object_fts', 0)} ≠ units {gb}+{go}",
                          "FTS rows deleted or added outside a paper's transaction", "rebuild", key)
            if vec is not None and "error" not in vec.metadata:
                want = vec.metadata.get("passages")
                ck = vec.metadata.get("model_identity")
                if current and ck and ck != current:
                    continue  # built with another model: `not_built` (model changed) says so
                if current and current in health.damaged_collections:
                    d.add("vectors_missing", f"vector collection {current} is damaged", "see index_damaged",
                          "rebuild", key)
                    continue
                got, nv = s.get("passages", 0), s.get("vectors", 0)
                if current not in cols and want:
                    d.add("vectors_missing", f"no vector collection of the current model ({current})",
                          "the collection was dropped, or the index replaced", "rebuild", key)
                elif want is not None and got != want:
                    d.add("vectors_mismatch",
                          f"index holds {got} passages; the last vector_collections recorded {want}",
                          _KILLED + ", or vectors were deleted outside Sheaf", "rebuild", key)
                elif nv != got:
                    d.add("vectors_mismatch", f"{nv} vectors for {got} passages", "vector rows deleted or added "
                          "outside the paper's transaction", "rebuild", key)
                if s.get("dangling_passages"):
                    d.add("vectors_mismatch", f"{s['dangling_passages']} passages point at units that are gone",
                          "units replaced without their vectors", "rebuild", key)
        if conn is not None and current in cols and current not in health.damaged_collections:
            bad = conn.vector_bytes_mismatch(cols[current])
            for key, n in sorted(bad.items()):
                d.add("vector_corrupted", f"{n} vectors differ from the cached embedding of their text",
                      "the vector bytes were changed on disk", "rebuild", key)

        # 5. orphans: index rows, artifacts, leftovers
        if conn is not None:
            for key in sorted(set(stats) - part_set):
                s = stats[key]
                d.add("orphan_index_rows", f"{s.get('body_units', 0)}+{s.get('object_units', 0)} units, "
                      f"{s.get('passages', 0)} passages of a paper that is not a partition",
                      "the paper was removed but its rows stayed (a removal interrupted, or rows written outside "
                      "a build)",
                      "remove", key)
            for kind, n in conn.global_orphans().items():
                if n:
                    d.add("orphan_rows", f"{n} {kind.replace('_', ' ')}", "rows written or deleted outside a "
                          "paper's transaction", "remove")
    finally:
        if conn is not None:
            conn.close()
    for asset in store.assets():
        for fname in sorted(names[asset] if asset in names else store.names(asset)):
            if fname.startswith("."):
                d.add("orphan_file", f"{asset}/{fname}", "a temp file of a write that was interrupted", "remove")
                continue
            stem, dot, ext = fname.rpartition(".")
            key = stem if dot and f".{ext}" in SUFFIXES else None
            if key is None or not valid_paper_key(key) or key not in part_set:
                d.add("orphan_artifact", f"{asset}/{fname}", "the paper is no longer a partition "
                      "(removed while no build ran, or a removal was interrupted)", "remove", key)
    d.checked = {"library_papers": len(library_keys), "partitions": len(partitions),
                 "indexed_papers": len(stats) if isinstance(stats, dict) else 0}
    d.seconds = time.perf_counter() - t0
    return d


def _current_identity_key(settings: Settings, cols: dict[str, Any]) -> str | None:
    """The collection key of the configured model, without loading it when the index can tell:
    the collection whose model name matches (the newest one when several do)."""
    name = resolve_model_path(settings.embedding_model)[0]
    matching = [k for k, ident in cols.items() if ident.name == name]
    if len(matching) == 1:
        return matching[0]
    if not matching:
        return None
    return Embedder.from_settings(settings).identity.key


# --- repair ----------------------------------------------------------------------------------------

def repair(settings: Settings, defs: Definitions, instance: DagsterInstance, diagnosis: Diagnosis,
           progress: Any = lambda s: None) -> dict[str, Any]:
    """Fix what `diagnosis` found: dead runs marked failed, temp files swept, a damaged index
    moved aside, orphans removed, then only the affected papers rebuilt (a plan-driven build,
    then a forced rebuild of papers whose drift the plan cannot see, e.g. hash mismatches). One
    embedder serves both builds (the model loads at most once)."""
    embedder = Embedder.from_settings(settings)
    done: dict[str, Any] = {}
    kinds = {i.kind for i in diagnosis.issues}
    with build_lock(settings.home, progress):
        done["dead_runs_failed"] = [r["run_id"] for r in reap_dead_runs(instance)]
        done["files_swept"] = sweep_leftovers(Path(settings.home), Path(settings.artifacts_dir))
        if "index_damaged" in kinds:
            done["index"] = prepare_index(settings, full=True, say=progress)
        partitions = set(instance.get_dynamic_partitions(papers_partitions.name))
        removed: list[str] = []
        for i in diagnosis.issues:
            if i.kind == "orphan_partition" and i.paper in partitions:
                remove_paper_everywhere(settings, i.paper)
                instance.delete_dynamic_partition(papers_partitions.name, i.paper)
                removed.append(i.paper)
        done["partitions_removed"] = removed
        rows_removed: list[str] = []
        if settings.index_backend == "postgres" or Path(settings.index_path).exists():
            index = open_backend(settings)
            try:
                for i in diagnosis.issues:
                    if i.kind == "orphan_index_rows" and i.paper and i.paper not in partitions:
                        index.remove_paper(i.paper)
                        rows_removed.append(i.paper)
                if "orphan_rows" in kinds:
                    done["orphan_rows_removed"] = index.remove_global_orphans()
            finally:
                index.close()
        done["index_rows_removed"] = rows_removed
        files: list[str] = []
        store = open_artifacts(settings)
        for i in diagnosis.issues:
            if i.kind == "orphan_artifact":
                asset, _, fname = i.detail.partition("/")
                if i.paper and i.paper not in partitions:
                    files += [str(x) for x in store.delete_paper(i.paper)]
                elif store.remove(asset, fname):
                    files.append(f"{store.location}/{i.detail}")
            elif i.kind == "orphan_file":
                asset, _, fname = i.detail.partition("/")
                store.remove(asset, fname)
                files.append(f"{store.location}/{i.detail}")
        done["files_removed"] = files
        # the plan-driven build: new papers, removed ones, stale ones and count drift
        rep = build(settings, defs, progress=progress, embedder=embedder)
        done["build"] = {"planned": sorted(rep.planned), "seconds": rep.seconds}
        after = diagnose(settings, defs, instance)
        forced = [k for k in after.affected_papers if k in set(instance.get_dynamic_partitions(papers_partitions.name))]
        if forced:
            progress(f"rebuilding {len(forced)} papers whose drift the plan cannot see: {', '.join(forced)}")
            rep2 = build(settings, defs, papers=forced, full=True, progress=progress, embedder=embedder)
            done["forced_rebuild"] = {"papers": forced, "seconds": rep2.seconds}
    return done
