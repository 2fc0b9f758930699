"""Per-paper artifacts: `<artifacts>/<asset>/<KEY>.parquet` (Arrow tables) or `.json` (dicts).

Assets return `{partition_key: payload}` for the partitions of the run that succeeded (a
paper that failed is left out, and its old artifact removed so nothing stale survives);
downstream inputs load the same mapping for the partitions present. Writes are atomic
(temp file + rename), so a crash never leaves a torn file.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from dagster import ConfigurableIOManager, InputContext, OutputContext

from sheaf.core.models import valid_paper_key


def artifact_path(root: Path, asset: str, key: str, suffix: str) -> Path:
    """Path of one paper's artifact; refuses keys that could escape the folder."""
    if not valid_paper_key(key):
        raise ValueError(f"invalid paper key {key!r}")
    return root / asset / f"{key}{suffix}"


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_artifact(root: Path, asset: str, key: str, payload: pa.Table | dict | str) -> Path:
    """Write one paper's payload atomically; returns the path."""
    if isinstance(payload, pa.Table):
        path = artifact_path(root, asset, key, ".parquet")
        _atomic_write(path, lambda tmp: pq.write_table(payload, tmp))
    else:
        path = artifact_path(root, asset, key, ".json")
        text = json.dumps(payload, ensure_ascii=False, sort_keys=True)
        _atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    for other in (".parquet", ".json"):
        stale = artifact_path(root, asset, key, other)
        if stale != path:
            stale.unlink(missing_ok=True)
    return path


def read_artifact(root: Path, asset: str, key: str) -> pa.Table | dict | None:
    """One paper's payload, or None when it has none."""
    p = artifact_path(root, asset, key, ".parquet")
    if p.exists():
        return pq.read_table(p)
    j = artifact_path(root, asset, key, ".json")
    if j.exists():
        return json.loads(j.read_text(encoding="utf-8"))
    return None


def artifact_rows(root: Path, asset: str, key: str) -> int | None:
    """The row count of one paper's Parquet artifact, from its footer (no column is read), or
    None when it has none."""
    p = artifact_path(root, asset, key, ".parquet")
    return pq.read_metadata(p).num_rows if p.exists() else None


def delete_artifacts(root: Path, key: str) -> list[Path]:
    """Delete every artifact of one paper across all assets; returns what was deleted."""
    gone: list[Path] = []
    if not root.is_dir():
        return gone
    for asset_dir in root.iterdir():
        if asset_dir.is_dir():
            for suffix in (".parquet", ".json"):
                p = artifact_path(root, asset_dir.name, key, suffix)
                if p.exists():
                    p.unlink()
                    gone.append(p)
    return gone


class PaperArtifactIOManager(ConfigurableIOManager):
    """Stores `{paper_key: payload}` outputs one file per paper and asset."""

    root: str

    def _asset(self, context: OutputContext | InputContext) -> str:
        return context.asset_key.path[-1]

    def handle_output(self, context: OutputContext, obj: dict[str, Any] | None) -> None:
        if obj is None:
            return
        root, asset = Path(self.root), self._asset(context)
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        for key in keys:
            if key in obj:
                write_artifact(root, asset, key, obj[key])
            else:  # the paper failed this step: no stale artifact may survive
                for suffix in (".parquet", ".json"):
                    artifact_path(root, asset, key, suffix).unlink(missing_ok=True)

    def load_input(self, context: InputContext) -> dict[str, Any]:
        root, asset = Path(self.root), self._asset(context)
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        out: dict[str, Any] = {}
        for key in keys:
            payload = read_artifact(root, asset, key)
            if payload is not None:
                out[key] = payload
        return out
