"""The embedding cache's contract (the index provides one: `IndexBackend.embedding_cache`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from sheaf.vectors.identity import ModelIdentity


class EmbeddingCache(Protocol):
    """Vectors by (model identity, sha256 of the passage text): what `Embedder.embed` reads
    before encoding and writes after. The index provides one (`IndexBackend.embedding_cache`)."""

    def get(self, identity: ModelIdentity, shas: set[str]) -> dict[str, np.ndarray]: ...

    def put(self, identity: ModelIdentity, vectors: dict[str, np.ndarray]) -> None: ...
