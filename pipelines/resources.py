"""Dagster resources: Sheaf's settings (`sheaf`) and the embedding model (`embedder`).

The `embedder` resource is an `Embedder` made for each run from the `sheaf` settings; the
model itself loads lazily, on the first passage the run embeds, and belongs to the run (no
process-wide cache). `sheaf build` passes one pre-built embedder to all of its in-process
runs (`execute_in_process(resources={"embedder": ...})`), so the model loads at most once per
build.
"""

from dagster import ConfigurableResource, InitResourceContext, ResourceDefinition

from sheaf.core.settings import Settings, get_settings
from sheaf.vectors.embedder import Embedder


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

    def embedder(self) -> Embedder:
        """A new embedder of these settings (the model loads on its first use; nothing is
        cached here: runs get theirs from the `embedder` resource)."""
        return Embedder.from_settings(self.settings())


def _make_embedder(context: InitResourceContext) -> Embedder:
    return Embedder.from_settings(context.resources.sheaf.settings())


#: The configured embedding model for one run (built from the `sheaf` resource's settings).
embedder_resource = ResourceDefinition(
    resource_fn=_make_embedder, required_resource_keys={"sheaf"},
    description="The configured embedding model (SHEAF_EMBEDDING_MODEL); it loads on the run's first embed.")
