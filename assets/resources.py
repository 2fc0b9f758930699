"""The Dagster resource carrying Sheaf's settings into assets."""
from __future__ import annotations

from dagster import ConfigurableResource

from sheaf.settings import Settings, get_settings


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
