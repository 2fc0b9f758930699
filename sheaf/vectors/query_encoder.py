"""A light query encoder: the embedding model exported to ONNX, run with onnxruntime + tokenizers.

Encoding a query through sentence-transformers means importing torch (~4 s cold). When a
model's vectors are built, the build also exports that model to ONNX (mean pooling and L2
normalization inside the graph, DESIGN §6), next to the tokenizer and a small JSON naming
the model identity it was exported from::

    <SHEAF_HOME>/models/<identity.key>/model.onnx
                                      /tokenizer.json
                                      /export.json

`query_vector` encodes a query with that export when it exists and matches the identity
(and the model files it came from are unchanged); otherwise it falls back to
sentence-transformers (`Embedder.embed_query`) and says so in a warning. Either way a query
longer than the model's window is split into windows exactly as `Embedder.embed_query`
splits it (`sheaf.vectors.embed.split_offsets`), whose vectors are averaged and re-normalized.

Importing this module, `OnnxQueryEncoder` and the ONNX path of `query_vector` use only
onnxruntime, tokenizers and numpy: never torch nor sentence-transformers (a test checks
``sys.modules``). `export_onnx` / `ensure_onnx_export` (build side) use torch.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sheaf.vectors.embed import DEFAULT_OVERLAP, ModelIdentity, QueryVector, resolve_model_path, split_offsets
from sheaf.core.envelope import SheafError

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.vectors.embed import Embedder
    from sheaf.core.settings import Settings

__all__ = [
    "EXPORT_FORMAT", "FALLBACK_WARNING", "OnnxQueryEncoder", "ExportStatus", "models_dir",
    "export_dir", "export_status", "export_onnx", "ensure_onnx_export", "export_to_models_dir",
    "find_export", "link_export", "query_vector", "clear_caches",
]

EXPORT_FORMAT = 1
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
EXPORT_JSON = "export.json"
FALLBACK_WARNING = ("ONNX query encoder missing or stale; used sentence-transformers (slower cold "
                    "start); run sheaf build to export it")
#: The export is checked against sentence-transformers on these texts (plus a long one and a
#: padded batch) before it is installed; below this cosine it is refused.
VERIFY_MIN_COSINE = 0.9999
_VERIFY_TEXTS = ("", "SPG-302 in aged mice", "bone mineral density after denosumab withdrawal",
                 "日本語の検索クエリ 和中文检索", "Müller–Lenz naïve µm ± 5 °C")


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


def _source_files(target: str) -> dict[str, dict[str, Any]]:
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


def _source_changed(target: str, recorded: dict[str, dict[str, Any]]) -> str | None:
    """Why the model files differ from those the export was made from (None: unchanged).
    Cheap when nothing changed (a stat per file); a file whose mtime moved is hashed."""
    root = Path(target)
    for rel, rec in recorded.items():
        p = root / rel
        try:
            st = p.stat()
        except OSError:
            return f"model file {rel} is gone"
        if st.st_size != rec["size"]:
            return f"model file {rel} changed size"
        if st.st_mtime_ns != rec["mtime_ns"] and _sha256_file(p) != rec["sha256"]:
            return f"model file {rel} changed"
    return None


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
        why = _source_changed(target, meta.get("source_files") or {})
        if why:
            return ExportStatus(path, False, f"{why} since the ONNX export", meta)
    for key in ("onnx", "tokenizer"):
        rec = meta.get(key) or {}
        try:
            size = (path / rec["file"]).stat().st_size
        except (OSError, KeyError, TypeError):
            return ExportStatus(path, False, f"the ONNX export's {key} file is missing", meta)
        if size != rec.get("size"):
            return ExportStatus(path, False, f"the ONNX export's {key} file is incomplete", meta)
    return ExportStatus(path, True, "ok", meta)


#: Seconds a checked export status is reused by `query_vector` (0: checked on every query).
#: A warm server sets 2: the check (the export's record, the model's files) costs about 1 ms,
#: a query there about 20.
STATUS_TTL_SECONDS = 0.0
_STATUS: dict[tuple[str, str, str | None], tuple[float, ExportStatus]] = {}


def _export_status_recent(path: Path, identity: ModelIdentity, model: str | None) -> ExportStatus:
    """`export_status`, or its answer of less than `STATUS_TTL_SECONDS` ago."""
    if STATUS_TTL_SECONDS <= 0:
        return export_status(path, identity, model)
    key = (str(path), identity.key, model)
    now = time.monotonic()
    hit = _STATUS.get(key)
    if hit is not None and now - hit[0] < STATUS_TTL_SECONDS:
        return hit[1]
    status = export_status(path, identity, model)
    _STATUS[key] = (now, status)
    return status


# --- the encoder (onnxruntime + tokenizers + numpy only) -------------------------------------

class OnnxQueryEncoder:
    """Encodes queries with an exported model: tokenizers for word pieces, onnxruntime for the
    graph (transformer + pooling + L2 norm). Thread-safe (onnxruntime sessions are)."""

    def __init__(self, path: Path, meta: dict[str, Any], session: Any, split_tokenizer: Any,
                 model_tokenizer: Any, overlap_tokens: int = DEFAULT_OVERLAP) -> None:
        self.path = Path(path)
        self.meta = meta
        self.identity = ModelIdentity(**meta["identity"])
        self.session = session
        self.n_special = int(meta["n_special"])
        self.input_names = list(meta["input_names"])
        self.overlap_tokens = overlap_tokens
        self._split_tok = split_tokenizer  # no truncation, no padding: measures windows
        self._model_tok = model_tokenizer  # truncation to the window, padding: model input

    @classmethod
    def load(cls, path: str | Path, *, overlap_tokens: int = DEFAULT_OVERLAP,
             threads: int | None = None) -> "OnnxQueryEncoder":
        """Load an export folder (no identity check: see `export_status`)."""
        import onnxruntime as ort
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
        so = ort.SessionOptions()
        so.log_severity_level = 3
        # No busy-waiting pool threads after a run: on 2 cores they would steal the CPU from
        # the vector and full-text search that follow the encoding (measured: 2x slower).
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.add_session_config_entry("session.inter_op.allow_spinning", "0")
        if threads:
            so.intra_op_num_threads = threads
        session = ort.InferenceSession(str(path / meta["onnx"]["file"]), sess_options=so,
                                       providers=["CPUExecutionProvider"])
        return cls(path, meta, session, split_tok, model_tok, overlap_tokens)

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


# --- query vectors: ONNX when possible, else sentence-transformers --------------------------

_LOCK = threading.Lock()
_ONNX: dict[tuple[str, int], tuple[tuple[int, int], OnnxQueryEncoder]] = {}
_EMBEDDERS: dict[tuple[str, int, int], "Embedder"] = {}


def clear_caches() -> None:
    """Forget loaded encoders (tests; a server reloading its model)."""
    with _LOCK:
        _ONNX.clear()
        _EMBEDDERS.clear()
        _STATUS.clear()


def _onnx_encoder(path: Path, overlap: int) -> OnnxQueryEncoder:
    st = (path / EXPORT_JSON).stat()
    stamp = (st.st_mtime_ns, st.st_size)
    key = (str(path.resolve()), overlap)
    with _LOCK:
        hit = _ONNX.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
    enc = OnnxQueryEncoder.load(path, overlap_tokens=overlap)
    with _LOCK:
        _ONNX[key] = (stamp, enc)
    return enc


def _embedder(settings: Any) -> "Embedder":
    from sheaf.vectors.embed import Embedder

    key = (settings.embedding_model, int(settings.embed_batch_size), int(settings.embed_overlap_tokens))
    with _LOCK:
        emb = _EMBEDDERS.get(key)
        if emb is None:
            emb = _EMBEDDERS[key] = Embedder(model_name=key[0], batch_size=key[1], overlap_tokens=key[2])
    return emb


def _newest_export(root: Path, model: str) -> ModelIdentity | None:
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


def _find_export(settings: "Settings") -> ModelIdentity | None:
    """Without an identity: the newest export made from the configured model, if any."""
    return _newest_export(models_dir(settings), settings.embedding_model)


def find_export(root: Path, model: str) -> Path | None:
    """The folder of a usable export (`export_status`) of `model` in the models folder
    `root`, or None. Never imports torch: the build's embedder loads from it."""
    ident = _newest_export(root, model)
    if ident is None:
        return None
    status = export_status(Path(root) / ident.key, ident, model)
    return status.path if status.usable else None


def query_vector(text: str, settings: "Settings | Any",
                 identity: ModelIdentity | None = None) -> tuple[QueryVector, list[str]]:
    """The query's vector for the collection of `identity` (normally read from the index's
    ``meta``), and warnings. `settings`: `Settings` or the query path's `QuerySettings`
    (home, embedding_model, embed_overlap_tokens for the windows of a long query).

    ONNX (onnxruntime + tokenizers, no torch) when ``<home>/models/<identity.key>`` holds a
    usable export of that very identity made from the configured model; otherwise
    sentence-transformers, with `FALLBACK_WARNING`. The fallback's vector carries the
    configured model's actual identity, so a model that changed since the build is still
    refused by `vector_search` (``MODEL_CHANGED``). `identity=None`: the newest export of the
    configured model, if any.
    """
    overlap = int(settings.embed_overlap_tokens)
    if identity is None:
        identity = _find_export(settings)
    if identity is not None:
        status = _export_status_recent(export_dir(settings, identity), identity, settings.embedding_model)
        if status.usable:
            try:
                vec, windows = _onnx_encoder(status.path, overlap).encode_query(text)
                return QueryVector(identity, vec, text, windows=windows), []
            except Exception as e:  # noqa: BLE001 - a broken export degrades to the slow path
                reason = f"ONNX encoder failed: {type(e).__name__}: {e}"
        else:
            reason = status.reason
    else:
        reason = "no ONNX export of the configured model"
    qv = _embedder(settings).embed_query(text)
    return qv, [f"{FALLBACK_WARNING} ({reason})"]


# --- export (build side: torch) --------------------------------------------------------------

def _export_module(st_model: Any) -> tuple[Any, list[str], str]:
    """A torch module (input ids, mask[, token types]) → pooled, L2-normalized embedding,
    equivalent to the sentence-transformers pipeline; refuses pipelines it cannot mirror."""
    import torch

    mods = list(st_model)
    kinds = [type(m).__name__ for m in mods]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise SheafError("BACKEND_UNAVAILABLE", f"cannot export a model made of {kinds} to ONNX "
                         "(only Transformer + Pooling [+ Normalize])", {"modules": kinds})
    transformer, pooling = mods[0], mods[1]
    hf = getattr(transformer, "auto_model", None) or getattr(transformer, "model")
    mode = getattr(pooling, "pooling_mode", None)
    if mode is None:
        cfg = pooling.get_config_dict() if hasattr(pooling, "get_config_dict") else {}
        mode = "mean" if cfg.get("pooling_mode_mean_tokens") else (
            "cls" if cfg.get("pooling_mode_cls_token") else "other")
    mode = {"mean_tokens": "mean", "cls_token": "cls"}.get(mode, mode)
    if mode not in ("mean", "cls"):
        raise SheafError("BACKEND_UNAVAILABLE", f"cannot export pooling mode {mode!r} to ONNX",
                         {"pooling": mode})
    names = list(st_model.tokenizer.model_input_names)
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in names]

    def pool(h: Any, mask: Any) -> Any:
        if mode == "cls":
            v = h[:, 0]
        else:
            m = mask.unsqueeze(-1).to(h.dtype)
            v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(v, p=2.0, dim=1)

    if "token_type_ids" in names:
        class _Wrap(torch.nn.Module):
            def __init__(self, m: Any) -> None:
                super().__init__()
                self.m = m

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                out = self.m(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids)
                return pool(out[0], attention_mask)
    else:
        class _Wrap(torch.nn.Module):  # type: ignore[no-redef]
            def __init__(self, m: Any) -> None:
                super().__init__()
                self.m = m

            def forward(self, input_ids: Any, attention_mask: Any) -> Any:
                out = self.m(input_ids=input_ids, attention_mask=attention_mask)
                return pool(out[0], attention_mask)

    return _Wrap(hf).eval(), names, mode


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporter prints progress and emits warnings: keep a build's output clean."""
    import io
    import logging
    import warnings
    from contextlib import redirect_stderr, redirect_stdout

    buf = io.StringIO()
    prev = logging.root.manager.disable
    with warnings.catch_warnings(), redirect_stdout(buf), redirect_stderr(buf):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(prev)


def _verify(path: Path, embedder: "Embedder") -> dict[str, float]:
    """Cosine of the export's vectors to sentence-transformers' on a few texts (one longer
    than the window, and a padded batch); refuse the export below `VERIFY_MIN_COSINE`."""
    enc = OnnxQueryEncoder.load(path, overlap_tokens=embedder.overlap_tokens)
    texts = list(_VERIFY_TEXTS) + [" ".join(f"w{i} tibia" for i in range(400))]
    ref = embedder.encode_with_sentence_transformers(texts)
    got = np.concatenate([enc.encode_texts(texts[:3]), enc.encode_texts(texts[3:])])
    cos = np.sum(ref * got, axis=1)
    q_ref = embedder.encode_with_sentence_transformers(enc.windows(texts[-1])).mean(axis=0)
    q_ref = q_ref / float(np.linalg.norm(q_ref))
    q_cos = float(np.dot(q_ref, enc.encode(texts[-1])))
    worst = float(min(cos.min(), q_cos))
    if not worst >= VERIFY_MIN_COSINE:
        raise SheafError("BACKEND_UNAVAILABLE", f"ONNX export disagrees with sentence-transformers "
                         f"(cosine {worst:.6f} < {VERIFY_MIN_COSINE})", {"path": str(path)})
    return {"min_cosine": round(worst, 7), "max_abs_diff": float(np.abs(ref - got).max())}


def export_onnx(embedder_or_model_name: "Embedder | str", out_dir: str | Path) -> Path:
    """Export the model to ONNX in `out_dir` (model.onnx, tokenizer.json, export.json) and
    return `out_dir`. Uses the torch.export-based exporter (onnxscript), dynamic batch and
    sequence axes, weights in the one .onnx file. The folder is replaced atomically (written
    beside it, verified against sentence-transformers, then renamed)."""
    import torch

    from sheaf.vectors.embed import Embedder

    embedder = (Embedder(model_name=embedder_or_model_name)
                if isinstance(embedder_or_model_name, str) else embedder_or_model_name)
    ld = embedder.load()
    identity = ld.identity
    st_model = ld.model
    hf_tok = st_model.tokenizer
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    t0 = time.perf_counter()
    try:
        module, names, mode = _export_module(st_model)
        sample = hf_tok(["a query", "a somewhat longer second query text"], padding=True,
                        return_tensors="pt")
        args = tuple(sample[n] for n in names)
        batch = torch.export.Dim("batch", max=65536)
        seq = torch.export.Dim("sequence", max=int(getattr(module.m.config, "max_position_embeddings",
                                                           identity.max_tokens)))
        shapes = {n: {0: batch, 1: seq} for n in names}
        with torch.no_grad(), _quiet():
            torch.onnx.export(module, args, str(tmp / MODEL_FILE), input_names=names,
                              output_names=["sentence_embedding"], dynamo=True,
                              dynamic_shapes=shapes, external_data=False, optimize=True,
                              verbose=False)
        backend = hf_tok.backend_tokenizer
        (tmp / TOKENIZER_FILE).write_text(backend.to_str(), encoding="utf-8")
        name, target = resolve_model_path(embedder.model_name)
        meta: dict[str, Any] = {
            "format": EXPORT_FORMAT,
            "identity": identity.to_dict(),
            "identity_key": identity.key,
            "model": {"configured": embedder.model_name, "name": name, "path": target},
            "source_files": _source_files(target),
            "onnx": {"file": MODEL_FILE, "size": (tmp / MODEL_FILE).stat().st_size},
            "tokenizer": {"file": TOKENIZER_FILE, "size": (tmp / TOKENIZER_FILE).stat().st_size},
            "n_special": int(ld.n_special),
            "pad_id": int(hf_tok.pad_token_id if hf_tok.pad_token_id is not None else 0),
            "pad_token": str(hf_tok.pad_token or "[PAD]"),
            "input_names": names,
            "pooling": mode,
            "normalize": True,
            "exporter": {"torch": torch.__version__, "dynamo": True},
        }
        (tmp / EXPORT_JSON).write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
        meta["verified"] = _verify(tmp, embedder)
        meta["export_seconds"] = round(time.perf_counter() - t0, 2)
        meta["created"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        (tmp / EXPORT_JSON).write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}-{threading.get_ident()}"
        if out_dir.exists():
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    with _LOCK:
        for k in [k for k in _ONNX if k[0] == str(out_dir.resolve())]:
            del _ONNX[k]
    return out_dir


def link_export(export: Path, home: Path) -> Path:
    """Put an export folder into ``<home>/models`` as hard links (a copy where the file system
    cannot link): another home of the same model then needs no export of its own (~9 s)."""
    dest = Path(home) / "models" / Path(export).name
    dest.mkdir(parents=True, exist_ok=True)
    for p in Path(export).iterdir():
        if not (dest / p.name).exists():
            try:
                os.link(p, dest / p.name)
            except OSError:
                shutil.copy2(p, dest / p.name)
    return dest


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def export_to_models_dir(embedder: "Embedder", root: Path) -> tuple[Path, bool]:
    """Export `embedder`'s model into the models folder `root` unless a usable export of its
    identity is already there (then it costs a JSON read and a stat per model file). Returns
    (folder, exported now). Concurrent builds serialize on a lock file; the second finds it done."""
    identity = embedder.identity
    path = Path(root) / identity.key
    if export_status(path, identity, embedder.model_name).usable:
        return path, False
    with _file_lock(Path(root) / f".{identity.key}.lock"):
        if export_status(path, identity, embedder.model_name).usable:
            return path, False
        return export_onnx(embedder, path), True


def ensure_onnx_export(embedder: "Embedder", settings: "Settings") -> tuple[Path, bool]:
    """The build's hook: `export_to_models_dir` into ``<SHEAF_HOME>/models``."""
    return export_to_models_dir(embedder, models_dir(settings))
