"""Per-paper artifacts: `<artifacts>/<asset>/<KEY>.parquet` (Arrow tables) or `.json` (dicts), in a
local folder or an object store (`root`: a path or an fsspec URL; SHEAF_ARTIFACTS_URL).

Assets return `{partition_key: payload}` for the partitions of the run that succeeded (a
paper that failed is left out, and its old artifact removed so nothing stale survives);
downstream inputs load the same mapping for the partitions present. Writes are atomic
(a local temp file + rename; one put on an object store: `sheaf.store.artifact_store`), so a
crash never leaves a torn file.

Within one run, the Arrow tables the run itself wrote are read back from memory, not from their
files: the IO manager is a new object for every run (Dagster makes one per run from its config),
and it keeps each table it wrote until the run ends. Later steps of the run load those, and so do
the run's asset checks (`read`); a paper's `ocr_blocks` alone was read back four times a run, and
a Parquet read of a paper's small file costs ~0.5 ms here. The table in memory is the one written
(Arrow tables are immutable) and the file holds exactly it, so the two reads give equal tables;
JSON payloads are always read from their files (a dict read back from JSON can differ from the
one written: tuples become lists, keys strings).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from dagster import ConfigurableIOManager, InputContext, OutputContext
from pydantic import PrivateAttr

from sheaf.store.artifact_store import ArtifactStore, artifact_store

Root = ArtifactStore | Path | str  # a store, a local folder or an fsspec URL


def artifact_path(root: Root, asset: str, key: str, suffix: str) -> Path | str:
    """Path (a URL in an object store) of one paper's artifact; refuses keys that could escape."""
    return artifact_store(root).path(asset, key, suffix)


def write_artifact(root: Root, asset: str, key: str, payload: pa.Table | dict | str) -> Path | str:
    """Write one paper's payload atomically; returns the path."""
    return artifact_store(root).write(asset, key, payload)


def read_artifact(root: Root, asset: str, key: str) -> pa.Table | dict | None:
    """One paper's payload, or None when it has none."""
    return artifact_store(root).read(asset, key)


def artifact_rows(root: Root, asset: str, key: str) -> int | None:
    """The row count of one paper's Parquet artifact, from its footer (no column is read), or
    None when it has none."""
    return artifact_store(root).rows(asset, key)


def delete_artifacts(root: Root, key: str) -> list[Path | str]:
    """Delete every artifact of one paper across all assets; returns what was deleted."""
    return artifact_store(root).delete_paper(key)


class PaperArtifactIOManager(ConfigurableIOManager):
    """Stores `{paper_key: payload}` outputs one file per paper and asset, under `root` (a local
    folder or an fsspec URL such as ``s3://bucket/prefix``)."""

    root: str
    #: {(asset, paper key): table} this run wrote (see the module docstring); a fresh dict per run.
    _written: dict[tuple[str, str], pa.Table] = PrivateAttr(default_factory=dict)
    _artifacts: ArtifactStore | None = PrivateAttr(default=None)

    def _asset(self, context: OutputContext | InputContext) -> str:
        return context.asset_key.path[-1]

    def _store(self) -> ArtifactStore:
        if self._artifacts is None:
            self._artifacts = artifact_store(self.root)
        return self._artifacts

    def handle_output(self, context: OutputContext, obj: dict[str, Any] | None) -> None:
        if obj is None:
            return
        store, asset = self._store(), self._asset(context)
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        for key in keys:
            self._written.pop((asset, key), None)
            if key in obj:
                store.write(asset, key, obj[key])
                if isinstance(obj[key], pa.Table):
                    self._written[(asset, key)] = obj[key]
            else:  # the paper failed this step: no stale artifact may survive
                store.delete(asset, key)

    def read(self, asset: str, key: str) -> pa.Table | dict | None:
        """One paper's payload: the table this run wrote, else the stored artifact (None: none)."""
        table = self._written.get((asset, key))
        return table if table is not None else self._store().read(asset, key)

    def rows(self, asset: str, key: str) -> int | None:
        """The row count of one paper's table artifact (from the file's footer unless this run
        wrote it), or None when it has none."""
        table = self._written.get((asset, key))
        return table.num_rows if table is not None else self._store().rows(asset, key)

    def load_input(self, context: InputContext) -> dict[str, Any]:
        asset = self._asset(context)
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        out: dict[str, Any] = {}
        for key in keys:
            payload = self.read(asset, key)
            if payload is not None:
                out[key] = payload
        return out
