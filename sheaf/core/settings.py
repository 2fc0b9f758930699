"""One settings object for every path and knob (env prefix `SHEAF_`); no module-level getenv.

`Settings` (pydantic-settings) is the settings object. Importing pydantic-settings costs
~140 ms, more than a whole cold `sheaf search` may take, so it is imported only when
`Settings` is first used (`get_settings()`, or `from sheaf.core.settings import Settings`),
and the query path reads its few settings through `query_settings()`: the same names, the
same defaults (`DEFAULTS`) and the same path rules (`index_path_for`, `artifacts_dir_for`),
read from the environment without pydantic.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

ENV_PREFIX = "SHEAF_"

#: Every setting's default: the one source of truth for `Settings` and `query_settings()`.
DEFAULTS: dict[str, Any] = {
    "home": Path("data"),  # SHEAF_HOME: artifacts/, index/sheaf.db, dagster_home/
    "library": Path("data/sample-library"),  # SHEAF_LIBRARY
    "unit_token_cap": 1000,  # SHEAF_UNIT_TOKEN_CAP: body units split past this
    "nightly_cron": "0 2 * * *",  # SHEAF_NIGHTLY_CRON: when the nightly rebuild runs (UTC)
    "embedding_model": "all-MiniLM-L6-v2",  # SHEAF_EMBEDDING_MODEL: name or local path
    "embed_batch_size": 32,  # SHEAF_EMBED_BATCH_SIZE: passages per forward pass (2 cores: 16-32)
    "embed_overlap_tokens": 32,  # SHEAF_EMBED_OVERLAP_TOKENS: shared by consecutive passages
    "embed_backend": "onnx",  # SHEAF_EMBED_BACKEND: onnx (exported once, no torch after) | sentence-transformers
    "index_file": None,  # SHEAF_INDEX_FILE: overrides <home>/index/sheaf.db
    "sqlite_busy_timeout_ms": 10_000,  # SHEAF_SQLITE_BUSY_TIMEOUT_MS
}


def index_path_for(home: Path, index_file: Path | None) -> Path:
    """The index file: `index_file` (SHEAF_INDEX_FILE) if set, else `<home>/index/sheaf.db`."""
    return index_file if index_file is not None else home / "index" / "sheaf.db"


def artifacts_dir_for(home: Path) -> Path:
    return home / "artifacts"


if TYPE_CHECKING:  # pragma: no cover
    from pydantic_settings import BaseSettings

    class Settings(BaseSettings):
        home: Path
        library: Path
        unit_token_cap: int
        nightly_cron: str
        embedding_model: str
        embed_batch_size: int
        embed_overlap_tokens: int
        embed_backend: str
        index_file: Path | None
        sqlite_busy_timeout_ms: int

        @property
        def artifacts_dir(self) -> Path: ...
        @property
        def index_path(self) -> Path: ...
        @property
        def dagster_home(self) -> Path: ...


def _make_settings_class() -> type:
    from typing import Literal

    from pydantic_settings import BaseSettings, SettingsConfigDict

    class Settings(BaseSettings):
        """Where Sheaf reads and writes, and the knobs of each stage (defaults: `DEFAULTS`)."""

        model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", env_ignore_empty=True)

        home: Path = DEFAULTS["home"]
        library: Path = DEFAULTS["library"]
        unit_token_cap: int = DEFAULTS["unit_token_cap"]
        nightly_cron: str = DEFAULTS["nightly_cron"]
        embedding_model: str = DEFAULTS["embedding_model"]
        embed_batch_size: int = DEFAULTS["embed_batch_size"]
        embed_overlap_tokens: int = DEFAULTS["embed_overlap_tokens"]
        embed_backend: Literal["onnx", "sentence-transformers"] = DEFAULTS["embed_backend"]
        index_file: Path | None = DEFAULTS["index_file"]
        sqlite_busy_timeout_ms: int = DEFAULTS["sqlite_busy_timeout_ms"]

        @property
        def artifacts_dir(self) -> Path:
            return artifacts_dir_for(self.home)

        @property
        def index_path(self) -> Path:
            return index_path_for(self.home, self.index_file)

        @property
        def dagster_home(self) -> Path:
            env = os.environ.get("DAGSTER_HOME")
            return Path(env) if env else (self.home / "dagster_home").resolve()

    Settings.__qualname__ = "Settings"  # importable (and picklable) as sheaf.core.settings.Settings
    Settings.__module__ = __name__
    return Settings


def __getattr__(name: str) -> Any:
    if name == "Settings":
        cls = _make_settings_class()
        globals()["Settings"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_settings(**overrides: object) -> "Settings":
    """Fresh settings from the environment, with explicit overrides winning."""
    cls = globals().get("Settings") or __getattr__("Settings")
    return cls(**overrides)  # type: ignore[arg-type]


# --- the query path: no pydantic ---------------------------------------------------------------

def _sheaf_env() -> dict[str, str]:
    """The ``SHEAF_*`` variables, names lowercased (pydantic-settings reads them
    case-insensitively); an exactly upper-case name wins over other spellings."""
    found: dict[str, str] = {}
    for k, v in os.environ.items():
        if k[:6].upper() == ENV_PREFIX and (k.isupper() or k.lower() not in found):
            found[k.lower()] = v
    return found


@dataclass(frozen=True, slots=True)
class QuerySettings:
    """The settings the query commands read (`search`, `retrieve`, `get`, `timeline`, `grep`)."""

    home: Path
    library: Path
    index_file: Path | None
    sqlite_busy_timeout_ms: int
    embedding_model: str
    embed_batch_size: int = DEFAULTS["embed_batch_size"]
    embed_overlap_tokens: int = DEFAULTS["embed_overlap_tokens"]

    @property
    def artifacts_dir(self) -> Path:
        return artifacts_dir_for(self.home)

    @property
    def index_path(self) -> Path:
        return index_path_for(self.home, self.index_file)


def query_settings(**overrides: Any) -> QuerySettings:
    """`QuerySettings` from the environment (same variables and defaults as `Settings`),
    without importing pydantic; explicit overrides win."""
    env = _sheaf_env()

    def get(name: str) -> Any:
        if name in overrides:
            return overrides[name]
        raw = env.get((ENV_PREFIX + name).lower()) or None  # empty counts as unset (env_ignore_empty)
        default = DEFAULTS[name]
        if raw is None:
            return default
        if name in ("home", "library", "index_file"):
            return Path(raw)
        if isinstance(default, int):
            try:
                return int(raw.strip())
            except ValueError:
                from sheaf.core.envelope import SheafError
                raise SheafError("BAD_INPUT", f"{ENV_PREFIX}{name.upper()} must be an integer, not {raw!r}",
                                 {"variable": ENV_PREFIX + name.upper()}) from None
        return raw

    return QuerySettings(home=Path(get("home")), library=Path(get("library")),
                         index_file=None if get("index_file") is None else Path(get("index_file")),
                         sqlite_busy_timeout_ms=int(get("sqlite_busy_timeout_ms")),
                         embedding_model=str(get("embedding_model")),
                         embed_batch_size=int(get("embed_batch_size")),
                         embed_overlap_tokens=int(get("embed_overlap_tokens")))
