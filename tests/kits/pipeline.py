"""Helpers for the Dagster pipeline tests: a small library, one built Sheaf home per test
process (copied for each test that changes it), and readers of the instance's records.

The base home is built once per process (memoized here, shared by test_pipeline.py and
test_sensors_schedules.py) because the embedding model loads once per process; every test
that mutates a library or home works on its own copy (`clone`).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import pipelines.definitions
from pipelines.dagster_internals.event_reads import check_status
from pipelines.planning.statuses import chain_of

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample-library"
#: Small papers of four formats (Markdown without headings, MinerU, born-digital PDF): ~50 passages.
BASE_PAPERS = ("L2YSNC8V", "M3FJ9PLC", "P9KE3UHB", "W6TB4YRS")
#: The per-paper chain, as the Definitions' asset graph defines it (`pipelines.planning.statuses`).
CHAIN = chain_of(pipelines.definitions.defs).assets


@dataclass(frozen=True)
class Home:
    """A Sheaf home (artifacts, index, Dagster home) and its library, under one folder."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def library(self) -> Path:
        return self.root / "library"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster_home"

    @property
    def papers(self) -> Path:
        return self.library / "papers"

    def env(self) -> dict[str, str]:
        return {"SHEAF_HOME": str(self.home), "SHEAF_LIBRARY": str(self.library),
                "DAGSTER_HOME": str(self.dagster_home)}

    def apply(self, mp: pytest.MonkeyPatch) -> "Home":
        for k in ("SHEAF_INDEX_FILE", "SHEAF_EMBEDDING_MODEL"):
            mp.delenv(k, raising=False)
        for k, v in self.env().items():
            mp.setenv(k, v)
        return self

    def settings(self):
        from sheaf.core.settings import get_settings

        return get_settings(home=self.home, library=self.library)

    def add_paper(self, key: str, source: str | None = None) -> Path:
        """Copy sample paper `source` (default: `key`) into the library as `key`."""
        dest = self.papers / key
        shutil.copytree(SAMPLE / "papers" / (source or key), dest)
        return dest


def make_library(dest: Path, keys: tuple[str, ...]) -> Path:
    (dest / "papers").mkdir(parents=True)
    shutil.copy2(SAMPLE / "library.json", dest / "library.json")
    for k in keys:
        shutil.copytree(SAMPLE / "papers" / k, dest / "papers" / k)
    return dest


def new_home(root: Path, keys: tuple[str, ...] = BASE_PAPERS) -> Home:
    h = Home(root)
    make_library(h.library, keys)
    h.dagster_home.mkdir(parents=True)
    return h


_BASE: dict[str, Any] = {}


def built_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, dict[str, Any]]:
    """The base home, built once per process with `sheaf build --json`: (home, envelope)."""
    if "home" not in _BASE:
        h = new_home(tmp_path_factory.mktemp("sheaf-base"))
        with pytest.MonkeyPatch.context() as mp:
            h.apply(mp)
            code, env = run_cli(["build", "--json"])
        assert code == 0, env
        _BASE.update(home=h, envelope=env)
    return _BASE["home"], _BASE["envelope"]


def clone(base: Home, dest: Path) -> Home:
    """A copy of a built home and its library (the Dagster sqlite storage is plain files)."""
    shutil.copytree(base.root, dest, symlinks=True)
    return Home(dest)


def run_cli(argv: list[str]) -> tuple[int, dict[str, Any]]:
    """`sheaf <argv> --json` in process: (exit code, parsed envelope)."""
    from sheaf.cli.app import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, json.loads(out.getvalue())


def instance():
    """The instance of the current DAGSTER_HOME."""
    from dagster import DagsterInstance

    return DagsterInstance.get()


def definitions(**kw):
    from pipelines.definitions import build_definitions

    return build_definitions(**kw)


def run_ids(inst) -> set[str]:
    return {r.run_id for r in inst.get_runs()}


def new_runs(inst, before: set[str]) -> list:
    return [r for r in inst.get_runs() if r.run_id not in before]


def run_partitions(run) -> set[str] | None:
    """The partitions a run targets, from its tags (None: an unpartitioned run)."""
    t = run.tags
    if "dagster/partition" in t:
        return {t["dagster/partition"]}
    if "dagster/asset_partition_range_start" in t:
        return {t["dagster/asset_partition_range_start"], t["dagster/asset_partition_range_end"]}
    return None


def materialization_counts(inst, assets=CHAIN) -> dict[str, dict[str, int]]:
    """{asset: {partition: number of materializations}} from the event log."""
    from dagster import AssetKey, AssetRecordsFilter

    out: dict[str, dict[str, int]] = {}
    for a in assets:
        recs = inst.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(a)), limit=10_000).records
        c: dict[str, int] = {}
        for r in recs:
            c[r.partition_key] = c.get(r.partition_key, 0) + 1
        out[a] = c
    return out


def check_results(inst, partition: str) -> dict[str, str]:
    """{asset/check: latest execution status} of the per-partition asset checks."""
    from assets.checks import ALL_CHECKS

    return {f"{ck.asset_key.path[-1]}/{ck.name}": check_status(inst, ck.asset_key.path[-1], ck.name, partition)
            for chk in ALL_CHECKS for ck in chk.check_keys}


def index_counts(home: Home, key: str) -> dict[str, int]:
    from sheaf.store.sqlite.reader import counts
    from sheaf.store.sqlite.schema import open_index

    conn = open_index(settings=home.settings())
    try:
        return counts(conn, key)
    finally:
        conn.close()


def search(home: Home, query: str) -> list[str]:
    """Paper ids (sorted, once each) of lexical matches for `query` in body units."""
    from sheaf.store.sqlite.reader import search_text
    from sheaf.store.sqlite.schema import open_index

    conn = open_index(settings=home.settings())
    try:
        return sorted({h.paper_id for h in search_text(conn, query)})
    finally:
        conn.close()


_EMBEDDERS: dict[tuple[str, str], Any] = {}  # the tests' own: one model load per test process


def shared_embedder(home: Home):
    """An embedder of `home`'s settings, shared by the tests of this process."""
    from sheaf.vectors.embedder import Embedder

    s = home.settings()
    key = (s.embedding_model, str(s.home))
    if key not in _EMBEDDERS:
        _EMBEDDERS[key] = Embedder.from_settings(s)
    return _EMBEDDERS[key]


def vector_search(home: Home, query: str, k: int = 3) -> list[str]:
    """Paper ids of the `k` nearest passages to `query`."""
    from sheaf.store.sqlite.reader import vector_search as knn
    from sheaf.store.sqlite.schema import open_index

    emb = shared_embedder(home)
    conn = open_index(settings=home.settings())
    try:
        return [h.paper_id for h in knn(conn, emb.embed_query(query), k)]
    finally:
        conn.close()


def artifacts_of(home: Home, key: str) -> list[Path]:
    root = home.home / "artifacts"
    return sorted(p for p in root.glob(f"*/{key}.*")) if root.is_dir() else []


def edit_markdown(path: Path, extra: str) -> None:
    text = path.read_text(encoding="utf-8")
    path.write_text(text.rstrip("\n") + "\n\n" + extra + "\n", encoding="utf-8")


def env_for_subprocess(home: Home) -> dict[str, str]:
    env = dict(os.environ)
    env.update(home.env())
    env.pop("SHEAF_INDEX_FILE", None)
    env["PYTHONWARNINGS"] = "ignore"
    return env
