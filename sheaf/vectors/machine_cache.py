"""The per-user machine cache: what a home's first build used to pay again in every home (the ONNX
export of the embedding model, ~18 s, and the measurement of the embedding backends) is made once
per machine and shared by every home::

    <cache>/onnx/<key>/<identity.key>/model.onnx, tokenizer.json, export.json
                      /key.json          what the key was made from
    <cache>/backends/<key>.json          a backend record (`sheaf.vectors.backend_choice.Measurement`)

``<cache>`` is ``SHEAF_CACHE_DIR`` when set, else the platform's per-user cache folder
(``platformdirs.user_cache_dir("sheaf")``: ``$XDG_CACHE_HOME/sheaf`` or ``~/.cache/sheaf`` on
Linux, ``~/Library/Caches/sheaf`` on macOS). An export's key is made from what the export depends
on: the model's files (`sheaf.vectors.identity.model_version`: its name, the passage template, every
file's name, size and bytes) and the versions of torch, transformers, sentence-transformers, onnx
and onnxruntime; a record's key from the facts it was measured on (`MachineFacts`: CPU model and
flags, cores, device, the model identity) and the same versions. Any change is a new entry.

Entries nobody linked for `PRUNE_AFTER_DAYS` are removed when a new one is made (`prune`): an
upgrade of torch or of the export's format makes a new ~90 MB entry, and the one it replaces goes
a month later. Homes keep what they linked (hard links or copies: their own files).

An entry is made under a file lock (``fcntl``: two builds at once make it once; the second waits
and finds it) and published whole (the export is written in a temp folder beside it and renamed; a
record is written to a temp file and renamed). A home only links to an entry (`link_into`: hard
links in ``<home>/models/<identity.key>/``, built in a temp folder and renamed into place; copies
where the cache and the home are on different file systems). A cache folder that cannot be written
(`open_cache` says why) leaves the home to make its own, as before the cache: never a failed build.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sheaf.core.files import locked, write_atomic
from sheaf.core.lazy import lazy_module
from sheaf.core.user_cache import cache_dir, default_cache_dir
from sheaf.vectors.backend_choice import RECORD_FORMAT, MachineFacts, Measurement, load_record, save_record
from sheaf.vectors.identity import model_version
from sheaf.vectors.onnx import EXPORT_FORMAT, find_export, sweep_unfinished

hashlib = lazy_module("hashlib")

__all__ = ["LIBRARIES", "PRUNE_AFTER_DAYS", "MachineCache", "cache_dir", "default_cache_dir", "library_versions", "link_into",
           "locked", "open_cache"]

#: An export entry not linked into a home for this many days is removed when a new entry is made.
PRUNE_AFTER_DAYS = 30

#: The libraries an export or a measurement depends on: a new version of any makes a new entry.
LIBRARIES = ("torch", "transformers", "sentence-transformers", "onnx", "onnxruntime")


def _package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def library_versions(versions: Callable[[str], str | None] = _package_version) -> dict[str, str | None]:
    """The installed version of each of `LIBRARIES` (None: not installed); no import of any."""
    return {name: versions(name) for name in LIBRARIES}


def _key(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def _same_files(src: Path, dest: Path) -> bool:
    """Whether `dest` holds every file of `src`: a hard link of it, or a copy (`shutil.copy2`: the
    same size and modification time)."""
    try:
        for p in src.iterdir():
            if not p.is_file():
                continue
            a, b = p.stat(), (dest / p.name).stat()
            if not ((a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
                    or (a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns)):
                return False
    except OSError:
        return False
    return True


def link_into(export: Path, models_root: Path) -> Path:
    """``<models_root>/<export's name>`` holding `export`'s files as hard links (copies where the
    file system cannot link, e.g. across devices), published whole: built in a temp folder beside
    it (``.NAME.tmp-PID-THREAD``, swept by `sweep_unfinished` if this process dies) and renamed
    over what was there. A folder that already holds them is left as it is."""
    export, models_root = Path(export), Path(models_root)
    dest = models_root / export.name
    if dest.is_dir() and _same_files(export, dest):
        return dest
    models_root.mkdir(parents=True, exist_ok=True)
    sweep_unfinished(models_root)
    tag = f"{os.getpid()}-{threading.get_ident()}"
    tmp = models_root / f".{export.name}.tmp-{tag}"
    old = models_root / f".{export.name}.old-{tag}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for p in export.iterdir():
            if not p.is_file():
                continue
            try:
                os.link(p, tmp / p.name)
            except OSError:  # another device, or a file system without hard links
                shutil.copy2(p, tmp / p.name)
        with contextlib.suppress(FileNotFoundError):  # another process may have moved it just now
            os.replace(dest, old)
        try:
            os.replace(tmp, dest)
        except OSError:  # another process published it first: theirs holds the same files
            if not (dest.is_dir() and _same_files(export, dest)):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)
    return dest


@dataclass(frozen=True, slots=True)
class MachineCache:
    """The machine cache at `root` (writable: see `open_cache`)."""

    root: Path
    #: library name -> installed version (computed once per cache object)
    versions: Mapping[str, str | None] | None = None

    def _versions(self) -> Mapping[str, str | None]:
        return self.versions if self.versions is not None else library_versions()

    # --- the ONNX export -------------------------------------------------------------------------

    def export_key(self, model: str) -> tuple[str, dict[str, Any]]:
        """(the key of `model`'s export, what it was made from)."""
        payload = {"format": EXPORT_FORMAT, "model": model_version(model), "libraries": dict(self._versions())}
        return _key(payload), payload

    def export_root(self, model: str) -> Path:
        """The models folder of `model`'s entry (the export is in ``<it>/<identity.key>``)."""
        return self.root / "onnx" / self.export_key(model)[0]

    def ensure_export(self, model: str, models_root: Path, make: Callable[[Path], Path],
                      poll: Callable[[], None] | None = None) -> Path:
        """The export of `model` linked into the home's models folder `models_root` (`link_into`),
        from the cache entry; when the entry has no usable export, `make(entry_root)` makes it
        there first (it returns the export's folder). All under the entry's lock: of two builds at
        once one exports and the other waits for it, then links (two workers of one build, into
        the same home, link one after the other: the second finds the links there)."""
        key, payload = self.export_key(model)
        entry = self.root / "onnx" / key
        made = False
        with locked(self.root / "onnx" / f".{key}.lock", poll):
            found = find_export(entry, model)
            if found is None:
                entry.mkdir(parents=True, exist_ok=True)
                found = Path(make(entry))
                made = True
                with contextlib.suppress(OSError):
                    write_atomic(entry / "key.json", json.dumps(payload, indent=1, ensure_ascii=False)
                                 .encode("utf-8"))
            with contextlib.suppress(OSError):  # the entry's last use, read by `prune`
                os.utime(entry / "key.json")
            linked = link_into(found, models_root)
        if made:
            self.prune(keep=key)
        return linked

    def prune(self, keep: str | None = None, older_than_days: float = PRUNE_AFTER_DAYS,
              now: float | None = None) -> list[Path]:
        """Remove the export entries last linked (``key.json``'s modification time; the folder's
        when it has none) more than `older_than_days` ago, except `keep`; an entry whose lock is
        held (being made or linked now) is left; its empty lock file stays (removing it could let two
processes lock two files of one name). Returns what was removed; best effort."""
        cutoff = (time.time() if now is None else now) - older_than_days * 86400
        removed: list[Path] = []
        base = self.root / "onnx"
        if not base.is_dir():
            return removed
        import fcntl

        for entry in sorted(base.iterdir()):
            if entry.name == keep or entry.name.startswith(".") or not entry.is_dir():
                continue
            try:
                stamp = entry / "key.json"
                used = (stamp if stamp.exists() else entry).stat().st_mtime
                if used >= cutoff:
                    continue
                with open(base / f".{entry.name}.lock", "a+") as f:
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    try:
                        shutil.rmtree(entry)
                        removed.append(entry)
                    finally:
                        fcntl.flock(f, fcntl.LOCK_UN)
            except OSError:
                continue
        return removed

    # --- the backend record ----------------------------------------------------------------------

    def record_path(self, facts: MachineFacts) -> Path:
        """Where the record measured on `facts` is kept (keyed by the facts and the library versions)."""
        payload = {"format": RECORD_FORMAT, "facts": facts.to_dict(), "libraries": dict(self._versions())}
        return self.root / "backends" / f"{_key(payload)}.json"

    def load_record(self, facts: MachineFacts) -> Measurement | None:
        """The record measured on `facts`, if the cache has it."""
        rec = load_record(self.record_path(facts))
        return rec if rec is not None and rec.facts == facts else None

    def save_record(self, m: Measurement) -> None:
        """Keep `m` (atomically; best effort)."""
        save_record(self.record_path(m.facts), m)

    @contextlib.contextmanager
    def measuring(self, facts: MachineFacts, poll: Callable[[], None] | None = None) -> Iterator[None]:
        """Held while the backends are measured on `facts`: a second build waits, then finds the record."""
        path = self.record_path(facts)
        with locked(path.with_name(f".{path.stem}.lock"), poll):
            yield


def open_cache(root: Path) -> tuple[MachineCache | None, str | None]:
    """(the machine cache at `root`, None) when its folder can be made and written to; else
    (None, why), and the home keeps its own export and record."""
    root = Path(root)
    try:
        import fcntl  # noqa: F401 - the locks need it
    except ImportError:  # pragma: no cover - not on this platform
        return None, "file locks (fcntl) are not available on this platform"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".probe-{os.getpid()}-{threading.get_ident()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        return None, f"the machine cache folder {root} cannot be written ({e.strerror or e})"
    return MachineCache(root, library_versions()), None
