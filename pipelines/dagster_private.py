"""The module that dagster.yaml files written by earlier Sheaf versions name for their storages.
`sheaf` rewrites such a file on its next command (`ensure_dagster_home`); until then a
`dagster dev` on that home still finds its storages here."""
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
