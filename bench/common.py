"""Helpers shared by the benchmark scripts in bench/: the machine a run was measured on, and
writing a script's section of docs/benchmarks.md.

The scripts run as `python bench/<name>.py` from the project root, so this folder is on
sys.path and they import this module as `from bench.common import ...`.
"""
from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"


# --- docs/benchmarks.md -------------------------------------------------------------------------

def splice_section(text: str, section: str, begin: str, end: str, before: str | None = None) -> str:
    """`text` with the part from `begin` to `end` (markers included) replaced by `section`; without
    the markers, `section` goes in front of `before` (if given and present), else at the end after a
    blank line."""
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        return text[:a] + section.rstrip("\n") + text[b:]
    if before and before in text:
        a = text.index(before)
        return text[:a] + section.rstrip("\n") + "\n\n" + text[a:]
    return text.rstrip("\n") + "\n\n" + section


def write_docs_section(section: str, begin: str, end: str, docs: Path = DOCS) -> None:
    """Replace the text between the `begin` and `end` markers of `docs` by `section` (a missing
    file starts as "# Benchmarks"; without the markers the section is appended)."""
    text = docs.read_text(encoding="utf-8") if docs.exists() else "# Benchmarks\n"
    text = splice_section(text, section, begin, end)
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(text, encoding="utf-8")


# --- the machine ----------------------------------------------------------------------------------

def cpu_model() -> str:
    """The CPU's model name: `lscpu`, else /proc/cpuinfo, else what `platform` knows, else "?"."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "?"


def memory() -> str:
    """Total RAM from /proc/meminfo as "N GiB", or "?"."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return "?"


def package_version(name: str, missing: str | None = "?") -> str | None:
    """The installed version of distribution `name`, or `missing`."""
    try:
        return version(name)
    except PackageNotFoundError:
        return missing


def machine(packages: Sequence[str] = ()) -> dict[str, Any]:
    """cpu, cores, memory, python, then the version of each of `packages` under its name as given
    ("?" if not installed)."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "memory": memory(), "python": platform.python_version(),
            **{p: package_version(p) for p in packages}}


# --- the processes a benchmark runs -------------------------------------------------------------

@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """`values` set in os.environ while the block runs (for the processes it starts and the
    settings read in it), then put back as they were."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def vector_step_readings() -> Iterator[tuple[str, Any]]:
    """(run id, metadata) of every `vector_collections` materialization of the current
    DAGSTER_HOME that embedded passages, oldest first: the build's own reading of its encode."""
    from dagster import AssetKey, DagsterInstance

    inst = DagsterInstance.get()
    cursor = None
    while True:
        res = inst.fetch_materializations(AssetKey("vector_collections"), limit=1000, cursor=cursor, ascending=True)
        for rec in res.records:
            meta = rec.asset_materialization.metadata
            if int(getattr(meta.get("embeddings_computed"), "value", 0) or 0):
                yield rec.run_id, meta
        if not res.has_more:
            return
        cursor = res.cursor
