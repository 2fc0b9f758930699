"""The module the dagster.yaml of earlier Sheaf versions names for its storages (a home whose file
Sheaf wrote is rewritten on its next command; a file the user keeps still finds them here)."""
from typing import Any

from pipelines.dagster_internals import postgres_storage
from pipelines.dagster_internals.sqlite_storage import (
    SheafEventLogStorage,
    SheafRunStorage,
    SheafShardedEventLogStorage,
)

__all__ = ["SheafEventLogStorage", "SheafRunStorage", "SheafShardedEventLogStorage"]


def __getattr__(name: str) -> Any:
    return getattr(postgres_storage, name)  # the Postgres storages, made on first use
