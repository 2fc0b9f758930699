"""The module that dagster.yaml files written by earlier Sheaf versions name for their storages.
`sheaf` rewrites such a file on its next command (`ensure_dagster_home`); until then a
`dagster dev` on that home still finds its storages here."""
from typing import Any

from pipelines.dagster_internals import private
from pipelines.dagster_internals.private import SheafEventLogStorage, SheafRunStorage, SheafShardedEventLogStorage

__all__ = ["SheafEventLogStorage", "SheafRunStorage", "SheafShardedEventLogStorage"]


def __getattr__(name: str) -> Any:
    return getattr(private, name)  # the Postgres storages, built on first use
