"""The ONNX export of an embedding model: where it lives, whether it is usable, and the encoder that
runs it (onnxruntime + tokenizers + numpy; never torch nor sentence-transformers)::

    <SHEAF_HOME>/models/<identity.key>/model.onnx
                                      /tokenizer.json
                                      /export.json   (format, the model identity, source files)

The build writes it (`sheaf.vectors.onnx_export`, torch); the build's embedder and the query
encoder (`sheaf.vectors.query_encoder`) read it. Mean pooling and L2 normalization are inside
the graph (as sentence-transformers pools); a text longer than the window is split as `split_offsets` splits it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError
from sheaf.core.files import write_atomic
from sheaf.core.lazy import lazy_module
from sheaf.vectors.identity import (
    DEFAULT_OVERLAP,
    ModelIdentity,
    resolve_model_path,
    split_offsets,
)

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.core.settings import Settings

np = lazy_module("numpy")  # imported on first use: importing this module stays cheap
hashlib = lazy_module("hashlib")

__all__ = [
    "EXPORT_FORMAT", "MODEL_FILE", "TOKENIZER_FILE", "EXPORT_JSON", "OnnxQueryEncoder", "ExportStatus",
    "models_dir", "export_dir", "export_status", "find_export", "newest_export", "export_in_child",
    "sweep_unfinished",
]

#: 2: attention exported as plain operations (`sheaf.vectors.onnx_export._eager_attention`)
EXPORT_FORMAT = 2
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
EXPORT_JSON = "export.json"


# --- where exports live, and whether one is usable ----------------------------------------

def models_dir(settings: "Settings") -> Path:
    return Path(settings.home) / "models"


def export_dir(settings: "Settings", identity: ModelIdentity) -> Path:
    """``<SHEAF_HOME>/models/<identity.key>``."""
    return models_dir(settings) / identity.key


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_source_files(target: str) -> dict[str, dict[str, Any]]:
    """Size, mtime and sha256 of every file of a local model folder (``{}`` when the model is
    not a local folder): an export of a folder whose files changed is stale."""
    root = Path(target)
    if not root.is_dir():
        return {}
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts):
            st = p.stat()
            out[p.relative_to(root).as_posix()] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                                  "sha256": _sha256_file(p)}
    return out


def _source_changed(target: str, recorded: dict[str, dict[str, Any]],
                    moved: dict[str, int] | None = None) -> str | None:
    """Why the model files differ from those the export was made from (None: unchanged).
    Cheap when nothing changed (a stat per file); a file whose mtime moved is hashed, and when
    its bytes are the same its new mtime is put in `moved` (file -> mtime_ns)."""
    root = Path(target)
    for rel, rec in recorded.items():
        p = root / rel
        try:
            st = p.stat()
        except OSError:
            return f"model file {rel} is gone"
        if st.st_size != rec["size"]:
            return f"model file {rel} changed size"
        if st.st_mtime_ns != rec["mtime_ns"]:
            if _sha256_file(p) != rec["sha256"]:
                return f"model file {rel} changed"
            if moved is not None:
                moved[rel] = st.st_mtime_ns
    return None


def _restamp(path: Path, meta: dict[str, Any], moved: dict[str, int]) -> None:
    """Record the new mtimes of model files whose bytes did not change (a reinstalled package, a
    new virtualenv), so that the next check is a stat per file again instead of hashing the
    model's ~90 MB (~60 ms) in every query process and every build run. Best effort: a
    read-only home keeps hashing."""
    files = meta.get("source_files") or {}
    for rel, ns in moved.items():
        files[rel] = {**files[rel], "mtime_ns": ns}
    try:
        write_atomic(path / EXPORT_JSON, json.dumps(meta, indent=1, ensure_ascii=False).encode("utf-8"))
    except OSError:
        pass


@dataclass(frozen=True, slots=True)
class ExportStatus:
    """Whether the ONNX export in `path` may encode queries for `identity` (`reason` if not)."""

    path: Path
    usable: bool
    reason: str
    meta: dict[str, Any] | None = None


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / EXPORT_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def export_status(path: Path, identity: ModelIdentity, model: str | None = None) -> ExportStatus:
    """Check the export in `path` against the identity the index's collection was built with
    and (when given) the configured model name or path: same identity, same model, model
    files unchanged since the export, ONNX file complete. Never imports torch."""
    path = Path(path)
    meta = _read_meta(path)
    if meta is None:
        return ExportStatus(path, False, f"no ONNX export at {path}")
    if meta.get("format") != EXPORT_FORMAT:
        return ExportStatus(path, False, f"ONNX export format {meta.get('format')!r} is not "
                            f"{EXPORT_FORMAT}", meta)
    if meta.get("identity") != identity.to_dict():
        return ExportStatus(path, False, "the ONNX export was made from another model identity", meta)
    if model is not None:
        try:
            name, target = resolve_model_path(model)
        except SheafError as e:
            return ExportStatus(path, False, e.message, meta)
        if name != identity.name:
            return ExportStatus(path, False, f"the configured model {name!r} is not the export's "
                                f"{identity.name!r}", meta)
        moved: dict[str, int] = {}
        why = _source_changed(target, meta.get("source_files") or {}, moved)
        if why:
            return ExportStatus(path, False, f"{why} since the ONNX export", meta)
        if moved:
            _restamp(path, meta, moved)
    for key in ("onnx", "tokenizer"):
        rec = meta.get(key) or {}
        try:
            size = (path / rec["file"]).stat().st_size
        except (OSError, KeyError, TypeError):
            return ExportStatus(path, False, f"the ONNX export's {key} file is missing", meta)
        if size != rec.get("size"):
            return ExportStatus(path, False, f"the ONNX export's {key} file is incomplete", meta)
    return ExportStatus(path, True, "ok", meta)


# --- the encoder (onnxruntime + tokenizers + numpy only) -------------------------------------

def _session(path: Path, meta: dict[str, Any], threads: int | None) -> Any:
    """An onnxruntime session of the export's graph, on the CPU."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    # No busy-waiting pool threads after a run: on 2 cores they would steal the CPU from
    # the vector and full-text search that follow the encoding (measured: 2x slower).
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(str(path / meta["onnx"]["file"]), sess_options=so,
                                providers=["CPUExecutionProvider"])


class OnnxQueryEncoder:
    """Encodes queries with an exported model: tokenizers for word pieces, onnxruntime for the
    graph (transformer + pooling + L2 norm). Thread-safe (onnxruntime sessions are)."""

    def __init__(self, path: Path, meta: dict[str, Any], session: Any, split_tokenizer: Any,
                 model_tokenizer: Any, overlap_tokens: int = DEFAULT_OVERLAP, threads: int | None = None) -> None:
        self.path = Path(path)
        self.meta = meta
        self.identity = ModelIdentity(**meta["identity"])
        self.session = session
        self.threads = threads
        self.n_special = int(meta["n_special"])
        self.input_names = list(meta["input_names"])
        self.overlap_tokens = overlap_tokens
        self._split_tok = split_tokenizer  # no truncation, no padding: measures windows
        self._model_tok = model_tokenizer  # truncation to the window, padding: model input

    @classmethod
    def load(cls, path: str | Path, *, overlap_tokens: int = DEFAULT_OVERLAP,
             threads: int | None = None) -> "OnnxQueryEncoder":
        """Load an export folder (no identity check: see `export_status`)."""
        import tokenizers

        path = Path(path)
        meta = _read_meta(path)
        if meta is None:
            raise SheafError("BACKEND_UNAVAILABLE", f"no ONNX export at {path}", {"path": str(path)},
                             hint="run sheaf build to export the query encoder")
        tok_json = (path / meta["tokenizer"]["file"]).read_text(encoding="utf-8")
        split_tok = tokenizers.Tokenizer.from_str(tok_json)
        split_tok.no_truncation()
        split_tok.no_padding()
        model_tok = tokenizers.Tokenizer.from_str(tok_json)
        max_tokens = int(meta["identity"]["max_tokens"])
        model_tok.enable_truncation(max_length=max_tokens, strategy="longest_first", direction="right")
        model_tok.enable_padding(pad_id=int(meta["pad_id"]), pad_token=meta["pad_token"],
                                 pad_type_id=0, direction="right")
        return cls(path, meta, _session(path, meta, threads), split_tok, model_tok, overlap_tokens, threads)

    def close(self) -> None:
        """Drop the onnxruntime session and its memory (~300 MB after a build's batches); the
        tokenizers stay. The next `encode_texts` opens it again."""
        self.session = None

    @property
    def split_tokenizer(self) -> Any:
        """The tokenizer without truncation or padding (measures passages and windows)."""
        return self._split_tok

    def windows(self, text: str) -> list[str]:
        """The query's windows, as `Embedder.embed_query` cuts them."""
        budget = self.identity.max_tokens - self.n_special
        enc = self._split_tok.encode(text, add_special_tokens=False)
        spans = split_offsets(enc.offsets, budget, self.overlap_tokens) or [(0, len(text))]
        return [text[a:b] for a, b in spans]

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalized vector per text (truncated to the window, as sentence-transformers
        does), float32 (n, dimension)."""
        if not texts:
            return np.zeros((0, self.identity.dimension), np.float32)
        encs = self._model_tok.encode_batch([t.strip() for t in texts], add_special_tokens=True)
        cols = {"input_ids": [e.ids for e in encs], "attention_mask": [e.attention_mask for e in encs],
                "token_type_ids": [e.type_ids for e in encs]}
        feed = {name: np.asarray(cols[name], dtype=np.int64) for name in self.input_names}
        if self.session is None:
            self.session = _session(self.path, self.meta, self.threads)
        out = self.session.run(None, feed)[0]
        return np.asarray(out, dtype=np.float32)

    def encode_query(self, text: str) -> tuple[np.ndarray, int]:
        """(vector, windows): windows longer than the model's are averaged, then re-normalized."""
        parts = self.windows(text)
        v = self.encode_texts(parts).mean(axis=0)
        norm = float(np.linalg.norm(v))
        if norm > 0:
            v = v / norm
        return v.astype(np.float32), len(parts)

    def encode(self, text: str) -> np.ndarray:
        """The query's vector (float32, (dimension,))."""
        return self.encode_query(text)[0]


def newest_export(root: Path, model: str) -> ModelIdentity | None:
    """The identity of the newest export in `root` made from `model` (name or path), if any."""
    try:
        name, _ = resolve_model_path(model)
    except SheafError:
        return None
    best: tuple[float, ModelIdentity] | None = None
    for meta_path in Path(root).glob(f"*/{EXPORT_JSON}"):
        meta = _read_meta(meta_path.parent)
        if not meta or meta.get("format") != EXPORT_FORMAT:
            continue
        try:
            ident = ModelIdentity(**meta["identity"])
        except (TypeError, KeyError):
            continue
        if ident.name == name and ident.key == meta_path.parent.name:
            m = meta_path.stat().st_mtime
            if best is None or m > best[0]:
                best = (m, ident)
    return best[1] if best else None


def find_export(root: Path, model: str) -> Path | None:
    """The folder of a usable export (`export_status`) of `model` in the models folder
    `root`, or None. Never imports torch: the build's embedder loads from it."""
    ident = newest_export(root, model)
    if ident is None:
        return None
    status = export_status(Path(root) / ident.key, ident, model)
    return status.path if status.usable else None


#: How long the export child may take (~10 s here: torch's import, the model, the export and its check).
EXPORT_TIMEOUT_S = 900


def run_polled(cmd: list[str], env: dict[str, str], timeout: float,
               poll: Callable[[], None] | None = None) -> Any:
    """`subprocess.run(cmd)` with its output captured, calling `poll` every quarter second while
    the child runs; what `poll` raises ends the child and goes on. `subprocess.TimeoutExpired`
    after `timeout` seconds (the child ended)."""
    import subprocess  # children only: kept off the query encoder's import (~0.8 ms)
    import time
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=0.25)
                return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    raise
                if poll is not None:
                    poll()
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def sweep_unfinished(root: Path) -> list[Path]:
    """Remove the folders an export left in the models folder `root` when its process was killed
    (a build stopped while it exported): ``.NAME.tmp-PID-THREAD`` and ``.NAME.old-PID-THREAD``,
    written beside the export until it is complete, whose process PID no longer runs. Returns
    those removed."""
    gone = []
    try:
        entries = list(Path(root).iterdir())
    except OSError:
        return gone
    for p in entries:
        m = re.fullmatch(r"\..+\.(?:tmp|old)-(\d+)-\d+", p.name)
        if m and p.is_dir() and not _running(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p)
    return gone


def export_in_child(model: str, root: Path, timeout: float = EXPORT_TIMEOUT_S,
                    poll: Callable[[], None] | None = None) -> Path:
    """Export `model` into the models folder `root` in a process of its own (``python -m
    sheaf.vectors.onnx_export``), so that the process asking (a build, which then embeds with the
    export) never imports torch: torch and the exporter take ~0.8 GB that the build would keep to
    its end. Returns the export's folder; `SheafError(BACKEND_UNAVAILABLE)` with the child's last
    words when it fails. `poll` is called while the child runs (a build's stop check): when it
    raises, the child is ended (the export publishes its folder only when complete) and the
    exception goes on."""
    import subprocess

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "sheaf.vectors.onnx_export", model, str(root)]
    sweep_unfinished(Path(root))
    try:
        r = run_polled(cmd, env, timeout, poll)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SheafError("BACKEND_UNAVAILABLE", f"exporting {model!r} to ONNX failed: {e}",
                         {"model": model, "models_dir": str(root)}) from e
    finally:  # a child ended part way (a stop, a timeout) leaves its unfinished folder
        sweep_unfinished(Path(root))
    found = find_export(Path(root), model) if r.returncode == 0 else None
    if found is None:
        last = (r.stderr or r.stdout or "").strip().splitlines()[-3:]
        raise SheafError("BACKEND_UNAVAILABLE", f"exporting {model!r} to ONNX failed (exit {r.returncode}): "
                         + " / ".join(last), {"model": model, "models_dir": str(root)})
    return found
