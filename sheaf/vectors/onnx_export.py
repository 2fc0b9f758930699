"""The build side of the light query encoder: export the embedding model to ONNX (torch), verify
it against sentence-transformers, and install it in ``<SHEAF_HOME>/models/<identity.key>``
(the layout `sheaf.vectors.query_encoder` reads), linked there from the per-user machine cache
(`sheaf.vectors.machine_cache`), where it is made once per machine."""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sheaf.core.envelope import SheafError
from sheaf.vectors.embedder import Embedder
from sheaf.vectors.identity import resolve_model_path
from sheaf.vectors.machine_cache import cache_dir, link_into, open_cache
from sheaf.vectors.onnx import (
    EXPORT_FORMAT,
    EXPORT_JSON,
    MODEL_FILE,
    TOKENIZER_FILE,
    OnnxQueryEncoder,
    export_status,
    model_source_files,
    models_dir,
    sweep_unfinished,
)

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.core.settings import Settings


#: The export is checked against sentence-transformers on these texts (plus a long one and a
#: padded batch) before it is installed; below this cosine it is refused.
VERIFY_MIN_COSINE = 0.9999


_VERIFY_TEXTS = ("", "SPG-302 in aged mice", "bone mineral density after denosumab withdrawal",
                 "日本語の検索クエリ 和中文检索", "Müller–Lenz naïve µm ± 5 °C")


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


@contextlib.contextmanager
def _eager_attention(hf: Any) -> Iterator[str | None]:
    """Trace the model with its attention written out as plain operations (transformers' "eager"
    implementation) instead of torch's fused scaled-dot-product call, then put the model back as it
    was (the build may go on encoding with it on torch). Yields the implementation exported.

    Measured here (AMD EPYC, 2 cores, onnxruntime 1.32, 320 SciFact abstracts in length-sorted
    batches of 16): the export of the fused call runs at 21.4-23.2 passages/s on 2 threads and
    12.4-12.9 on one; the eager export at 26.5-27.3 and 13.7-13.8, the same vectors (cosine
    0.999999 to each other). onnxruntime's transformer optimizer on top of it (fused Attention,
    SkipLayerNormalization, BiasGelu) added nothing measurable, so it is not run."""
    setter = getattr(hf, "set_attn_implementation", None)
    before = getattr(getattr(hf, "config", None), "_attn_implementation", None)
    if setter is None or before in (None, "eager"):
        yield before
        return
    try:
        setter("eager")
    except Exception:  # noqa: BLE001 - a model without an eager path: export it as it is
        yield before
        return
    try:
        yield "eager"
    finally:
        setter(before)


def _torch_onnx_export(module: Any, args: tuple[Any, ...], names: list[str], out: Path, seq_max: int) -> bool:
    """Write `module` as ONNX to `out` with dynamic batch and sequence axes, weights in the one
    file; returns whether the torch.export-based (dynamo) exporter wrote it.

    TorchScript's exporter first: measured here (torch 2.13) it writes the same model (cosine
    0.9999999 to the dynamo export's vectors on 384 SciFact abstracts, the same onnxruntime
    speed: onnxruntime optimizes either graph as it loads it) in 1.7 s at an 826 MB peak,
    against ~10 s and 1,087 MB for the dynamo exporter, which the first build's memory goal
    cannot afford. It is deprecated in torch: where it is gone or fails, the dynamo exporter."""
    import torch

    with torch.no_grad(), _quiet():
        try:
            torch.onnx.export(module, args, str(out), input_names=names, output_names=["sentence_embedding"],
                              dynamo=False, dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names},
                              opset_version=17)
            return False
        except Exception:  # noqa: BLE001 - no TorchScript exporter in this torch, or it cannot trace the model
            out.unlink(missing_ok=True)
        batch = torch.export.Dim("batch", max=65536)
        seq = torch.export.Dim("sequence", max=seq_max)
        torch.onnx.export(module, args, str(out), input_names=names, output_names=["sentence_embedding"],
                          dynamo=True, dynamic_shapes={n: {0: batch, 1: seq} for n in names},
                          external_data=False, optimize=True, verbose=False)
        return True


def export_onnx(embedder_or_model_name: "Embedder | str", out_dir: str | Path) -> Path:
    """Export the model to ONNX in `out_dir` (model.onnx, tokenizer.json, export.json) and
    return `out_dir` (`_torch_onnx_export`: dynamic batch and sequence axes, weights in the one
    .onnx file). The folder is replaced atomically (written beside it, verified against
    sentence-transformers, then renamed)."""
    import torch

    embedder = (Embedder(model_name=embedder_or_model_name, device="cpu")
                if isinstance(embedder_or_model_name, str) else embedder_or_model_name)
    ld = embedder.load()
    identity = ld.identity
    st_model = ld.model
    hf_tok = st_model.tokenizer
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    sweep_unfinished(out_dir.parent)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    t0 = time.perf_counter()
    try:
        module, names, mode = _export_module(st_model)
        sample = hf_tok(["a query", "a somewhat longer second query text"], padding=True,
                        return_tensors="pt")
        args = tuple(sample[n] for n in names)
        seq_max = int(getattr(module.m.config, "max_position_embeddings", identity.max_tokens))
        with _eager_attention(module.m) as attention:
            dynamo = _torch_onnx_export(module, args, names, tmp / MODEL_FILE, seq_max)
        backend = hf_tok.backend_tokenizer
        (tmp / TOKENIZER_FILE).write_text(backend.to_str(), encoding="utf-8")
        name, target = resolve_model_path(embedder.model_name)
        meta: dict[str, Any] = {
            "format": EXPORT_FORMAT,
            "identity": identity.to_dict(),
            "identity_key": identity.key,
            "model": {"configured": embedder.model_name, "name": name, "path": target},
            "source_files": model_source_files(target),
            "onnx": {"file": MODEL_FILE, "size": (tmp / MODEL_FILE).stat().st_size},
            "tokenizer": {"file": TOKENIZER_FILE, "size": (tmp / TOKENIZER_FILE).stat().st_size},
            "n_special": int(ld.n_special),
            "pad_id": int(hf_tok.pad_token_id if hf_tok.pad_token_id is not None else 0),
            "pad_token": str(hf_tok.pad_token or "[PAD]"),
            "input_names": names,
            "pooling": mode,
            "normalize": True,
            "exporter": {"torch": torch.__version__, "dynamo": dynamo, "attention": attention},
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
    return out_dir


def link_export(export: Path, home: Path) -> Path:
    """Put an export folder into ``<home>/models`` as hard links (a copy where the file system
    cannot link), published whole (`sheaf.vectors.machine_cache.link_into`): another home of the
    same model then needs no export of its own (~18 s)."""
    return link_into(Path(export), Path(home) / "models")


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
    """The build's hook: the export of `embedder`'s model in ``<SHEAF_HOME>/models`` (a no-op when a
    usable one is there), linked from the machine cache (``SHEAF_CACHE_DIR`` or the platform's
    cache folder: `sheaf.vectors.machine_cache`), where this process exports it if this machine
    has none yet; with a cache folder that cannot be written, exported into the home itself.
    Returns (folder, exported now)."""
    root = models_dir(settings)
    identity = embedder.identity
    path = root / identity.key
    if export_status(path, identity, embedder.model_name).usable:
        return path, False
    cache, _ = open_cache(cache_dir(getattr(settings, "cache_dir", None)))
    if cache is not None:
        made: list[bool] = []

        def make(entry: Path) -> Path:
            got, now = export_to_models_dir(embedder, entry)
            made.append(now)
            return got

        try:
            return cache.ensure_export(embedder.model_name, root, make), any(made)
        except OSError:  # the cache failed part way: the home makes its own
            pass
    return export_to_models_dir(embedder, root)


def main(argv: list[str] | None = None) -> int:
    """``python -m sheaf.vectors.onnx_export MODEL MODELS_DIR``: `export_to_models_dir` of MODEL
    into MODELS_DIR, in a process of its own (`sheaf.vectors.onnx.export_in_child`: the build
    that asks never imports torch); prints ``{"path": ..., "exported": ...}``."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m sheaf.vectors.onnx_export")
    ap.add_argument("model")
    ap.add_argument("models_dir", type=Path)
    a = ap.parse_args(argv)
    try:
        path, made = export_to_models_dir(Embedder(model_name=a.model, device="cpu"), a.models_dir)
    except SheafError as e:
        print(f"{e.code}: {e.message}", file=sys.stderr)
        return 2
    print(json.dumps({"path": str(path), "exported": made}))
    return 0


if __name__ == "__main__":  # pragma: no cover - run by export_in_child
    raise SystemExit(main())
