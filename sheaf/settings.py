"""One settings object for every path and knob (env prefix `SHEAF_`); no module-level getenv."""
from __future__ import annotations

import os
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Where Sheaf reads and writes, and the knobs of each stage."""

    model_config = SettingsConfigDict(env_prefix="SHEAF_", extra="ignore")

    home: Path = Path("data")  # SHEAF_HOME: artifacts/, index/sheaf.db, dagster_home/
    library: Path = Path("data/sample-library")  # SHEAF_LIBRARY
    unit_token_cap: int = 1000  # SHEAF_UNIT_TOKEN_CAP: body units split past this
    nightly_cron: str = "0 2 * * *"  # SHEAF_NIGHTLY_CRON: when the nightly rebuild runs (UTC)
    embedding_model: str = "all-MiniLM-L6-v2"  # SHEAF_EMBEDDING_MODEL: name or local path
    embed_batch_size: int = 32  # SHEAF_EMBED_BATCH_SIZE: passages per forward pass (2 cores: 16-32)
    embed_overlap_tokens: int = 32  # SHEAF_EMBED_OVERLAP_TOKENS: shared by consecutive passages
    index_file: Path | None = None  # SHEAF_INDEX_FILE: overrides <home>/index/sheaf.db
    sqlite_busy_timeout_ms: int = 10_000  # SHEAF_SQLITE_BUSY_TIMEOUT_MS

    @property
    def artifacts_dir(self) -> Path:
        return self.home / "artifacts"

    @property
    def index_path(self) -> Path:
        return self.index_file if self.index_file is not None else self.home / "index" / "sheaf.db"

    @property
    def dagster_home(self) -> Path:
        env = os.environ.get("DAGSTER_HOME")
        return Path(env) if env else (self.home / "dagster_home").resolve()


def get_settings(**overrides: object) -> Settings:
    """Fresh settings from the environment, with explicit overrides winning."""
    return Settings(**overrides)  # type: ignore[arg-type]
