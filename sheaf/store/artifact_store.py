"""Where the per-paper artifacts live: ``<root>/<asset>/<KEY>.parquet`` (Arrow tables) or ``.json``
(dicts), on a local folder or on any fsspec filesystem (``SHEAF_ARTIFACTS_URL``).

Every reader and writer of artifacts goes through an `ArtifactStore` (`open_artifacts(settings)` or
`artifact_store(root)`): the Dagster IO manager, the asset checks, the drift check, the doctor,
the report, removal of a paper, the sweep of leftovers and the Retriever's coverage.

- **Local folder** (the default, ``<home>/artifacts``; or a path / ``file://PATH``):
  `LocalArtifactStore`, plain `pathlib` and pyarrow, exactly the files and writes of before:
  a write goes to a temp file ``.<name>.<random>`` beside the artifact, then `os.replace`
  (atomic on POSIX); an interrupted write leaves only the temp file, which `sweep_temp` removes.
- **A URL with a scheme** (``s3://bucket/prefix``, ``gs://``, ``az://``, ``memory://name``...):
  `FsspecArtifactStore`. fsspec is imported on first use (~170 ms, never on the default path).
  The payload is serialized in memory first, so a failed serialization writes nothing; on an
  object store (s3, gcs, azure, memory) the object is then written by one put, which the store
  makes visible whole or not at all (S3: a PutObject, or a multipart upload that appears only
  when it completes), so there is no temp object to sweep; on a filesystem that writes in place
  (sftp, smb, ...), it is written to a temp name then moved. Credentials come from the store's
  own environment (AWS_* for s3, ...), never from the URL (the setting refuses a password).

The partition key is in every path and is validated (`valid_paper_key`), so no key can escape
the root. A store that cannot be reached or used is a `BACKEND_UNAVAILABLE` naming the URL
(without credentials); a scheme whose fsspec package is not installed is a `BAD_INPUT` saying
what to install.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError
from sheaf.core.files import write_atomic
from sheaf.core.lazy import lazy_module
from sheaf.core.models import valid_paper_key
from sheaf.core.settings import URL_SCHEME, redact_url

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

# imported on first use: the Retriever reads a title from here on the cold query path (pyarrow),
# and only a URL with a scheme needs fsspec (~170 ms)
if TYPE_CHECKING:
    import pyarrow as pa
else:
    pa = lazy_module("pyarrow")
if TYPE_CHECKING:
    import pyarrow.parquet as pq
else:
    pq = lazy_module("pyarrow.parquet")
fsspec = lazy_module("fsspec")

SUFFIXES = (".parquet", ".json")
#: a temp file of an interrupted local write (``.<KEY>.parquet.<random>``)
TMP_ARTIFACT = re.compile(r"^\.[A-Za-z0-9._-]+\.(parquet|json)\.[A-Za-z0-9_]+$")
#: fsspec protocols whose single put is atomic (an object appears whole or not at all)
ATOMIC_PUT = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "memory", "oci", "oss", "r2"})
#: the extra to install per scheme, for the error of a missing fsspec implementation
_PACKAGES = {"s3": "s3fs (pip install sheaf[cluster])", "s3a": "s3fs (pip install sheaf[cluster])",
             "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs", "abfss": "adlfs"}
_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*):[^/@\s]+@")


def _scrub(text: str) -> str:
    """`text` (a library's error message) with any ``user:password@`` of a URL in it replaced."""
    return redact_url(_CREDENTIALS.sub(r"\1:***@", text))


def _serialize(payload: pa.Table | dict[str, Any] | str) -> tuple[str, bytes]:
    """(suffix, bytes) of one payload: an Arrow table as Parquet, anything else as JSON."""
    if isinstance(payload, pa.Table):
        sink = pa.BufferOutputStream()
        pq.write_table(payload, sink)
        return ".parquet", sink.getvalue().to_pybytes()
    return ".json", json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8")


def _deserialize(suffix: str, data: bytes) -> pa.Table | dict[str, Any]:
    if suffix == ".parquet":
        return read_parquet(pa.BufferReader(data))
    return json.loads(data.decode("utf-8"))


def read_parquet(source: str | Path | pa.NativeFile) -> pa.Table:
    """One Parquet file as a table (schema metadata and all), by `ParquetFile.read`: the dataset
    layer of `pq.read_table` costs twice the read of a paper's small file (0.55 against 1.15 ms).

    Read on the calling thread (`use_threads=False`): an Arrow pool thread that drops the last
    reference to a reader over Python bytes while the interpreter exits aborts the process
    (SIGABRT after the command's output); one thread is also faster for files this small."""
    return pq.ParquetFile(source).read(use_threads=False)


def _holds(path: Path, data: bytes) -> bool:
    """Whether the file at `path` holds exactly `data` (a read of a paper's small file, ~0.02 ms
    here, where replacing it cost 1.2-2 ms: the new file, the rename, the old file's blocks freed)."""
    try:
        with open(path, "rb") as f:
            return os.fstat(f.fileno()).st_size == len(data) and f.read() == data
    except OSError:
        return False


def _check_key(key: str) -> None:
    if not valid_paper_key(key):
        raise ValueError(f"invalid paper key {key!r}")


def _check_name(name: str) -> None:
    """An asset folder or file name: one path segment."""
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"invalid artifact name {name!r}")


class ArtifactStore:
    """One paper's artifact per asset under a root; the operations every reader and writer uses.
    Subclasses provide the file primitives (`_get`, `_put`, `_rm`, `_list`, `_rows`)."""

    #: where the artifacts are, fit to show (a URL without credentials)
    location: str = ""
    remote: bool = False

    # --- primitives -----------------------------------------------------------------------

    def _join(self, *parts: str) -> str:
        raise NotImplementedError

    def _get(self, path: str) -> bytes | None:
        raise NotImplementedError

    def _put(self, path: str, data: bytes) -> None:
        raise NotImplementedError

    def _rm(self, path: str) -> bool:
        raise NotImplementedError

    def _list(self, path: str, *, dirs: bool) -> list[str]:
        raise NotImplementedError

    def _rows(self, path: str) -> int | None:
        raise NotImplementedError

    # --- per-paper operations ---------------------------------------------------------------

    def path(self, asset: str, key: str, suffix: str) -> str:
        """Path (or URL) of one paper's artifact; refuses keys that could escape the root."""
        _check_key(key)
        _check_name(asset)
        return self._join(asset, f"{key}{suffix}")

    def show(self, asset: str, key: str, suffix: str) -> str:
        """One artifact's location fit to show."""
        return redact_url(str(self.path(asset, key, suffix)))

    def write(self, asset: str, key: str, payload: pa.Table | dict[str, Any] | str) -> str:
        """Write one paper's payload atomically (and drop its artifact of the other format);
        returns its path."""
        _check_key(key)
        suffix = ".parquet" if isinstance(payload, pa.Table) else ".json"
        path = self.path(asset, key, suffix)
        self._write(path, payload)
        for other in SUFFIXES:
            if other != suffix:
                self._rm(self.path(asset, key, other))
        return path

    def _write(self, path: str, payload: pa.Table | dict[str, Any] | str) -> None:
        self._put(path, _serialize(payload)[1])

    def read(self, asset: str, key: str) -> pa.Table | dict[str, Any] | None:
        """One paper's payload, or None when it has none."""
        for suffix in SUFFIXES:
            data = self._get(self.path(asset, key, suffix))
            if data is not None:
                return _deserialize(suffix, data)
        return None

    def read_file(self, asset: str, name: str) -> pa.Table | dict[str, Any]:
        """One artifact file by name (``KEY.parquet``); FileNotFoundError when it is gone."""
        _check_name(asset)
        _check_name(name)
        data = self._get(self._join(asset, name))
        if data is None:
            raise FileNotFoundError(self._join(asset, name))
        return _deserialize(".parquet" if name.endswith(".parquet") else ".json", data)

    def rows(self, asset: str, key: str) -> int | None:
        """The row count of one paper's Parquet artifact, from its footer (no column is read), or
        None when it has none."""
        return self._rows(self.path(asset, key, ".parquet"))

    def exists(self, asset: str, key: str, suffix: str) -> bool:
        return self.path(asset, key, suffix).rsplit("/", 1)[-1] in self.names(asset)

    def delete(self, asset: str, key: str) -> list[str]:
        """Delete one paper's artifact of one asset (either format); returns what was deleted."""
        return [p for p in (self.path(asset, key, s) for s in SUFFIXES) if self._rm(p)]

    def delete_paper(self, key: str) -> list[str]:
        """Delete every artifact of one paper across all assets; returns what was deleted."""
        _check_key(key)
        gone: list[str] = []
        for asset in self.assets():
            gone += self.delete(asset, key)
        return gone

    def remove(self, asset: str, name: str) -> bool:
        """Delete one file of an asset's folder by name (an orphan or a leftover)."""
        _check_name(asset)
        _check_name(name)
        return self._rm(self._join(asset, name))

    def assets(self) -> list[str]:
        """The asset folders present, sorted."""
        return sorted(self._list("", dirs=True))

    def names(self, asset: str) -> set[str]:
        """The file names in one asset's folder (empty when it has none)."""
        _check_name(asset)
        return set(self._list(asset, dirs=False))

    def sweep_temp(self) -> list[str]:
        """Delete temp files of interrupted writes (a local folder only: an object store's put
        leaves none); call with the build lock held."""
        return []


class LocalArtifactStore(ArtifactStore):
    """A local folder: pathlib; a write is a temp file + `os.replace`, skipped when the file already
    holds the same bytes."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def path(self, asset: str, key: str, suffix: str) -> Path:  # type: ignore[override]
        _check_key(key)
        _check_name(asset)
        return self.root / asset / f"{key}{suffix}"

    def _join(self, *parts: str) -> Path:  # type: ignore[override]
        return self.root.joinpath(*parts)

    def _put(self, path: Path, data: bytes) -> None:  # type: ignore[override]
        if not _holds(path, data):  # the same bytes stay: a rebuild that changed nothing here writes nothing
            write_atomic(path, data)

    def _get(self, path: Path) -> bytes | None:  # type: ignore[override]
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def read(self, asset: str, key: str) -> pa.Table | dict[str, Any] | None:
        try:
            return read_parquet(self.path(asset, key, ".parquet"))
        except FileNotFoundError:
            pass
        try:
            return json.loads(self.path(asset, key, ".json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def _rm(self, path: Path) -> bool:  # type: ignore[override]
        try:
            path.unlink()
            return True
        except FileNotFoundError:
            return False

    def _list(self, path: str, *, dirs: bool) -> list[str]:
        try:
            with os.scandir(self.root / path if path else self.root) as it:
                return [e.name for e in it if e.is_dir() == dirs]
        except OSError:  # no folder yet (or unreadable): nothing in it
            return []

    def _rows(self, path: Path) -> int | None:  # type: ignore[override]
        return pq.read_metadata(path).num_rows if path.exists() else None

    def exists(self, asset: str, key: str, suffix: str) -> bool:
        return self.path(asset, key, suffix).exists()

    def delete(self, asset: str, key: str) -> list[Path]:  # type: ignore[override]
        return [p for p in (self.path(asset, key, s) for s in SUFFIXES) if self._rm(p)]

    def sweep_temp(self) -> list[str]:
        gone: list[str] = []
        if self.root.is_dir():
            for d in [self.root, *(p for p in self.root.iterdir() if p.is_dir())]:
                # the name first, and only a hidden name further (every temp name starts with a dot):
                # a stat of every artifact took 1.4 s at 10,000 papers, a Path and a match of each 0.33 s
                with os.scandir(d) as entries:
                    for e in entries:
                        n = e.name
                        if n[0] == "." and (TMP_ARTIFACT.match(n) or n.startswith(".stats.")) and e.is_file():
                            Path(e.path).unlink(missing_ok=True)
                            gone.append(e.path)
        return gone


class FsspecArtifactStore(ArtifactStore):
    """Any fsspec filesystem (object stores: one atomic put per artifact)."""

    remote = True

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.location = redact_url(self.url)
        with self._calls():  # no listings cache: other machines write to the same store
            self.fs, self.base = fsspec.core.url_to_fs(self.url, use_listings_cache=False)
        self.base = self.base.rstrip("/")
        protocol = self.fs.protocol
        self.protocol = protocol[0] if isinstance(protocol, (tuple, list)) else protocol
        self.atomic_put = self.protocol in ATOMIC_PUT

    @contextmanager
    def _calls(self) -> Iterator[None]:
        """A store failure as a SheafError naming the URL (never its credentials); a missing
        object stays FileNotFoundError for the caller."""
        try:
            yield
        except FileNotFoundError:
            raise
        except (ImportError, ValueError) as e:
            scheme = self.url.split("://", 1)[0].lower()
            if isinstance(e, ValueError) and "protocol" not in str(e).lower():
                raise
            need = _PACKAGES.get(scheme, f"the fsspec implementation of {scheme}://")
            raise SheafError("BAD_INPUT", f"no filesystem for the artifacts URL {self.location}: {scheme}:// "
                             f"needs {need}", {"artifacts": self.location, "scheme": scheme},
                             hint=f"install {need}, or set SHEAF_ARTIFACTS_URL to a local folder") from None
        except Exception as e:  # noqa: BLE001 - network, permission, credentials: one clear error
            text = _scrub(" ".join(str(e).split()))[:300]
            raise SheafError("BACKEND_UNAVAILABLE", f"the artifact store {self.location} cannot be used "
                             f"({type(e).__name__}: {text})", {"artifacts": self.location,
                                                               "problem": type(e).__name__},
                             hint="check the URL, the store's credentials (its own environment, e.g. "
                                  "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_ENDPOINT_URL for s3://) "
                                  "and the network") from None

    def _join(self, *parts: str) -> str:
        return "/".join([self.base, *(p for p in parts if p)])

    def show(self, asset: str, key: str, suffix: str) -> str:
        return redact_url(self.fs.unstrip_protocol(self.path(asset, key, suffix)))

    def exists(self, asset: str, key: str, suffix: str) -> bool:
        with self._calls():
            return bool(self.fs.exists(self.path(asset, key, suffix)))

    def _get(self, path: str) -> bytes | None:
        try:
            with self._calls():
                return bytes(self.fs.cat_file(path))
        except FileNotFoundError:
            return None

    def _put(self, path: str, data: bytes) -> None:
        p = path
        with self._calls():
            if self.atomic_put:
                self.fs.pipe_file(p, data)
                return
            head, _, name = p.rpartition("/")
            tmp = f"{head}/.{name}.{os.urandom(6).hex()}"
            self.fs.makedirs(head, exist_ok=True)  # a filesystem with real folders
            try:
                self.fs.pipe_file(tmp, data)
                self.fs.mv(tmp, p)
            except BaseException:
                with suppress(Exception):  # the temp object may not exist
                    self.fs.rm_file(tmp)
                raise

    def _rm(self, path: str) -> bool:
        try:
            with self._calls():
                if not self.fs.exists(path):  # S3 deletes a missing key without a word: say what went
                    return False
                self.fs.rm_file(path)
            return True
        except FileNotFoundError:
            return False

    def _list(self, path: str, *, dirs: bool) -> list[str]:
        where = self._join(path)
        try:
            with self._calls():
                self.fs.invalidate_cache(where)  # other machines write too: never a cached listing
                entries = self.fs.ls(where, detail=True)
        except FileNotFoundError:
            return []
        want = "directory" if dirs else "file"
        return [e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == want]

    def _rows(self, path: str) -> int | None:
        try:
            with self._calls(), self.fs.open(path, "rb") as f:
                return int(pq.read_metadata(f).num_rows)
        except FileNotFoundError:
            return None


def artifact_store(root: ArtifactStore | Path | str) -> ArtifactStore:
    """The store at `root`: a local folder (a path, or ``file://PATH``) or an fsspec URL."""
    if isinstance(root, ArtifactStore):
        return root
    text = str(root)
    if isinstance(root, Path) or not URL_SCHEME.match(text):
        return LocalArtifactStore(Path(root))
    if text.startswith("file://"):
        return LocalArtifactStore(Path(text.removeprefix("file://")))
    return FsspecArtifactStore(text)


def open_artifacts(settings: Settings) -> ArtifactStore:
    """The configured artifact store (SHEAF_ARTIFACTS_URL; unset: ``<home>/artifacts``)."""
    if getattr(settings, "artifacts_remote", False):
        return FsspecArtifactStore(str(settings.artifacts_url))
    return LocalArtifactStore(settings.artifacts_dir)
