"""Query text → query vector, the one way retrieval embeds a query.

A `QueryEncoder` belongs to whoever answers queries (a CLI command, a warm server, an
evaluation run, a test session) and is passed to the Retriever; it keeps what it loaded (the
ONNX session, or the embedder) for its own lifetime, so nothing is cached in module globals.

It encodes with the ONNX export of the collection's identity (`sheaf.vectors.onnx`: onnxruntime +
tokenizers, no torch) when ``<SHEAF_HOME>/models/<identity.key>`` holds a usable export made
from the configured model, and otherwise with the `Embedder` (sentence-transformers), saying so
in a warning. The fallback's vector carries the configured model's actual identity, so a model
that changed since the build is still refused by the vector search (``MODEL_CHANGED``). Either
way a query longer than the model's window is split into windows exactly as passages are
(`sheaf.vectors.identity.split_offsets`), whose vectors are averaged and re-normalized.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sheaf.vectors.embedder import Embedder
from sheaf.vectors.identity import ModelIdentity, QueryVector, resolve_model_path
from sheaf.vectors.onnx import (
    EXPORT_JSON,
    ExportStatus,
    OnnxQueryEncoder,
    export_dir,
    export_status,
    models_dir,
    newest_export,
)

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

__all__ = ["FALLBACK_WARNING", "QueryEncoder"]

FALLBACK_WARNING = ("ONNX query encoder missing or stale; used sentence-transformers (slower cold "
                    "start); run sheaf build to export it")


class QueryEncoder:
    """Embeds queries for the collection a Retriever searches (see the module docstring).

    `settings`: home (where exports live), embedding_model, embed_batch_size,
    embed_overlap_tokens. `embedder`: an already loaded `Embedder` to use for every query
    instead (a test session or an evaluation that loaded the model once). `status_ttl`: seconds
    a checked export status is reused (a warm server: 2; the check reads the export's record and
    stats the model's files, ~1 ms). Thread-safe."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None, status_ttl: float = 0.0) -> None:
        self.settings = settings
        self.status_ttl = status_ttl
        self._given = embedder
        self._embedder: Embedder | None = embedder
        self._onnx: dict[str, tuple[tuple[int, int], OnnxQueryEncoder]] = {}
        self._status: dict[tuple[str, str], tuple[float, ExportStatus]] = {}
        self._lock = threading.Lock()
        self.loads = 0  # ONNX sessions this encoder loaded (tests and the server's health read it)

    @property
    def model_name(self) -> str:
        """The configured model's canonical name."""
        return resolve_model_path(self.settings.embedding_model)[0]

    def _export_status(self, identity: ModelIdentity) -> ExportStatus:
        path = export_dir(self.settings, identity)
        if self.status_ttl <= 0:
            return export_status(path, identity, self.settings.embedding_model)
        key = (str(path), identity.key)
        now = time.monotonic()
        with self._lock:
            hit = self._status.get(key)
        if hit is not None and now - hit[0] < self.status_ttl:
            return hit[1]
        status = export_status(path, identity, self.settings.embedding_model)
        with self._lock:
            self._status[key] = (now, status)
        return status

    def _onnx_encoder(self, path: Path) -> OnnxQueryEncoder:
        st = (path / EXPORT_JSON).stat()
        stamp = (st.st_mtime_ns, st.st_size)
        key = str(path.resolve())
        with self._lock:
            hit = self._onnx.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        enc = OnnxQueryEncoder.load(path, overlap_tokens=int(self.settings.embed_overlap_tokens))
        with self._lock:
            self._onnx[key] = (stamp, enc)
            self.loads += 1
        return enc

    def embedder(self) -> Embedder:
        """The embedder of the fallback path (created on first use; the model loads on first encode)."""
        with self._lock:
            if self._embedder is None:
                s = self.settings
                self._embedder = Embedder(model_name=s.embedding_model, batch_size=int(s.embed_batch_size),
                                          overlap_tokens=int(s.embed_overlap_tokens), device="cpu")
            return self._embedder

    def encode(self, text: str, identity: ModelIdentity | None = None) -> tuple[QueryVector, list[str]]:
        """The query's vector for the collection of `identity` (normally read from the index),
        and warnings. `identity=None`: the newest export of the configured model, if any."""
        if self._given is not None:
            qv, warnings = self._given.embed_query(text), []
        else:
            qv, warnings = self._encode(text, identity)
        if qv.windows > 1:
            warnings.append(f"the query is longer than the model's window ({qv.identity.max_tokens} word "
                            f"pieces): its {qv.windows} windows were embedded and averaged")
        return qv, warnings

    def _encode(self, text: str, identity: ModelIdentity | None) -> tuple[QueryVector, list[str]]:
        if identity is None:
            identity = newest_export(models_dir(self.settings), self.settings.embedding_model)
        if identity is not None:
            status = self._export_status(identity)
            if status.usable:
                try:
                    vec, windows = self._onnx_encoder(status.path).encode_query(text)
                    return QueryVector(identity, vec, text, windows=windows), []
                except Exception as e:  # noqa: BLE001 - a broken export degrades to the slow path
                    reason = f"ONNX encoder failed: {type(e).__name__}: {e}"
            else:
                reason = status.reason
        else:
            reason = "no ONNX export of the configured model"
        return self.embedder().embed_query(text), [f"{FALLBACK_WARNING} ({reason})"]
