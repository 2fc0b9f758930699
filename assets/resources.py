"""Dagster resources: Sheaf's settings, and the embedding model (loaded once per process)."""

from dagster import ConfigurableResource

from sheaf.core.settings import Settings, get_settings

_EMBEDDERS: dict[tuple, object] = {}


class SheafConfig(ConfigurableResource):
    """Paths and knobs; empty fields fall back to the SHEAF_* environment settings."""

    home: str = ""
    library: str = ""

    def settings(self) -> Settings:
        overrides: dict[str, object] = {}
        if self.home:
            overrides["home"] = self.home
        if self.library:
            overrides["library"] = self.library
        return get_settings(**overrides)

    def embedder(self):
        """The configured embedder, shared by every step of this process (model loads once)."""
        from sheaf.vectors.embedder import Embedder

        s = self.settings()
        key = (s.embedding_model, s.embed_batch_size, s.embed_overlap_tokens, s.embed_backend, str(s.home))
        if key not in _EMBEDDERS:
            _EMBEDDERS[key] = Embedder.from_settings(s)
        return _EMBEDDERS[key]
