"""Cheap change detection for a library: (size, mtime) first, content hash only when those moved.
A source the discovery made itself (a Zotero manifest) comes with its hash and is not read.

The stat cache (`<home>/artifacts/_source_stats.json`) is only a cache of hashes, never build
state: deleting it costs one re-hash of every paper and changes nothing else.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sheaf.core.models import IngestError
from sheaf.core.settings import Settings
from sheaf.formats import source_hash
from sheaf.library.discover import Discovery, discover_library


@dataclass(frozen=True, slots=True)
class SourceScan:
    """Every paper's current ocr_result_hash (or why it has none)."""

    discovery: Discovery
    hashes: dict[str, str]
    errors: dict[str, str]
    hashed: int  # papers whose bytes were read this time


def scan_sources(settings: Settings, cache_file: Path | None = None, *, write_cache: bool = True) -> SourceScan:
    """Hash every paper of the settings' library, re-reading only files whose size or mtime changed.
    `write_cache=False` (`sheaf status`): the stat cache (and a Zotero mirror) is read, never written."""
    disc = discover_library(settings, write=write_cache)
    cache: dict[str, list] = {}
    if cache_file and cache_file.exists():
        try:
            cache = json.loads(cache_file.read_text())
        except (OSError, ValueError):
            cache = {}
    hashes: dict[str, str] = {}
    errors: dict[str, str] = {}
    new_cache: dict[str, list] = {}
    hashed = 0
    known = disc.hashes
    for p in disc.papers:
        h = known.get(p.key)
        if h is not None:  # a source the discovery made moments ago, with its hash
            hashes[p.key] = h
            continue
        c = cache.get(p.key)
        try:
            st = _stat(c[0]) if c else None  # one stat a paper: its file, unless it is gone
            if st is not None and [st.st_size, st.st_mtime_ns] == c[1:3] and str(p.path) == c[4]:
                hashes[p.key] = c[3]
                new_cache[p.key] = c
                continue
            file, _fmt, h = source_hash(p.path, p.key)
            hashed += 1
            st = os.stat(file)
            hashes[p.key] = h
            new_cache[p.key] = [str(file), st.st_size, st.st_mtime_ns, h, str(p.path)]
        except IngestError as e:
            errors[p.key] = str(e)
        except OSError as e:
            errors[p.key] = f"paper {p.key}: {e}"
    if cache_file and write_cache and new_cache != cache:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_file.parent, prefix=".stats.")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(new_cache, separators=(",", ":")))  # one write: json.dump writes piece by piece
        os.replace(tmp, cache_file)
    return SourceScan(disc, hashes, errors, hashed)


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
