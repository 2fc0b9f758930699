"""The cheap cross-checks every build runs on its plan, with no Dagster: index rows and per-paper
artifacts against what the materializations recorded (counts only; `sheaf doctor` adds hashes),
and whether the library metadata the last `library_metadata` run loaded is still in the index.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sheaf.store.artifact_store import open_artifacts
from sheaf.store.select import open_backend

if TYPE_CHECKING:
    from sheaf.core.settings import Settings


def open_index_readonly(settings: Settings):
    """The index (an `IndexBackend`, SQLite or Postgres) opened read-only, or None when it is
    missing or unusable."""
    try:
        return open_backend(settings, readonly=True)
    except Exception:  # noqa: BLE001 - an unusable index: every paper drifted
        return None


#: Up to this many papers, the drift check counts their own index rows (an edit's one paper at
#: 10,000 papers: its rows, not ~0.4 s of counts over the whole index); above it, the whole index
#: grouped by paper at once.
SCOPED_UP_TO = 200


#: Up to this many artifacts (papers x chain assets), the drift check looks each file up; above
#: it, each asset's folder is listed once.
LOOKUPS_UP_TO = 60


def artifact_index_drift(settings: Settings, statuses: Mapping[str, Any],
                         artifacts: Mapping[str, str]) -> dict[str, tuple[list[str], list[str]]]:
    """Papers (built or stale) whose artifacts or index rows disagree with their latest
    materializations: ``{key: (assets to rebuild, reasons)}``; `artifacts`: the chain's
    per-paper files (asset -> suffix). Cheap enough for every build: no event read (the counts
    and the vector step's model come from the statuses' metadata), one grouped query per index
    table, one listing per asset folder. `sheaf doctor` adds hashes."""
    keys = [k for k, st in statuses.items() if st.state in ("built", "stale")]
    if not keys:
        return {}
    identity = {k: statuses[k].metadata.get("model_identity") for k in keys}  # from the vector step's metadata
    conn = open_index_readonly(settings)
    stats: dict[str | None, dict[str, dict[str, int]]] = {}
    have: set[str] = set()
    scope = keys if len(keys) <= SCOPED_UP_TO else None  # a few papers (those a build just rebuilt): their rows
    try:
        if conn is not None:
            have = set(conn.collections())
            # Units and FTS rows are counted with each collection's counts: a separate count of them
            # only when no paper has a collection.
            for ck in {ck for ck in identity.values() if ck is not None} or {None}:
                try:
                    stats[ck] = conn.paper_index_stats(ck if ck in have else None, paper_ids=scope)
                except Exception:  # noqa: BLE001 - a damaged collection reads as no vectors
                    stats[ck] = conn.paper_index_stats(None, paper_ids=scope)
            stats.setdefault(None, next(iter(stats.values())))
    finally:
        if conn is not None:
            conn.close()
    store = open_artifacts(settings)  # no folder yet: every artifact in it reads as missing
    if len(keys) * len(artifacts) <= LOOKUPS_UP_TO:  # an edit's paper: its files looked up, not 10,000 listed
        files = {asset: {f"{k}{suffix}" for k in keys if store.exists(asset, k, suffix)}
                 for asset, suffix in artifacts.items()}
    else:  # one listing per asset, not a look-up per file
        files = {asset: store.names(asset) for asset in artifacts}
    out: dict[str, tuple[list[str], list[str]]] = {}
    for key in keys:
        st = statuses[key]
        reasons: list[str] = []
        starts: list[str] = []
        for asset, suffix in artifacts.items():  # every chain asset materialized without error
            if f"{key}{suffix}" not in files[asset]:
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
            out[key] = (starts, reasons)
    return out


def metadata_missing(settings: Settings, loaded: Any) -> bool:
    """True when the index holds fewer metadata rows than the last `library_metadata` loaded
    (`loaded`: its `papers` metadata; the index was replaced, moved aside or rows were lost):
    the metadata must be loaded again."""
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
