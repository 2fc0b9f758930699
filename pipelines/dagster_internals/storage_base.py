"""What Sheaf's SQLite and Postgres storages share: a run's partitions read once, a table's
existence asked once, and how a batch of events is recognised."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from dagster import DagsterEventType


def known_table(storage: Any, table_name: str, ask: Any) -> bool:
    """Whether the storage's database has the table, asked (`ask`) until the answer is yes: a
    table, once there, stays."""
    known = storage.__dict__.setdefault("_sheaf_tables", set())
    if table_name not in known and ask(table_name):
        known.add(table_name)
    return table_name in known


class PartitionsSnapshot:
    """A run resolves its range of papers against one read of the dynamic partitions.

    Dagster turns a run's partition range into keys by reading every key of the partitions
    definition, again at each step, input and output: 68 reads for one run of the chain, each
    of the whole library (10,000 rows at 10,000 papers: 2.2 s of a 100-paper run, a cost per
    paper that grew with the library). Inside `partitions_snapshot` the first read of a
    definition is kept and served to the rest; adding or deleting a partition through this
    storage drops it. Keys of a range do not move when another process adds papers (new keys
    go to the end), and a run that sees one list cannot resolve its range two ways."""

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        snapshot = self.__dict__.get("_sheaf_partitions")
        if snapshot is None:
            return super().get_dynamic_partitions(partitions_def_name)  # type: ignore[misc]
        if partitions_def_name not in snapshot:
            keys = super().get_dynamic_partitions(partitions_def_name)  # type: ignore[misc]
            snapshot[partitions_def_name] = tuple(keys)
        return list(snapshot[partitions_def_name])

    def _drop_snapshot(self) -> None:
        if self.__dict__.get("_sheaf_partitions") is not None:
            self.__dict__["_sheaf_partitions"] = {}

    def add_dynamic_partitions(self, partitions_def_name: str, partition_keys: Sequence[str]) -> None:
        self._drop_snapshot()
        super().add_dynamic_partitions(partitions_def_name, partition_keys)  # type: ignore[misc]

    def delete_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> None:
        self._drop_snapshot()
        super().delete_dynamic_partition(partitions_def_name, partition_key)  # type: ignore[misc]


@contextmanager
def partitions_snapshot(instance: Any) -> Iterator[None]:
    """Within the block, the instance's event log storage serves each partitions definition's keys
    from one read (`PartitionsSnapshot`; other storages read as before)."""
    storage = instance.event_log_storage
    if not isinstance(storage, PartitionsSnapshot) or storage.__dict__.get("_sheaf_partitions") is not None:
        yield
        return
    storage.__dict__["_sheaf_partitions"] = {}
    try:
        yield
    finally:
        storage.__dict__["_sheaf_partitions"] = None


def check_evaluations(events: Sequence[Any]) -> bool:
    """True for two or more evaluations of asset checks, all within a run."""
    return len(events) > 1 and all(e.is_dagster_event and e.run_id and e.dagster_event_type
                                   == DagsterEventType.ASSET_CHECK_EVALUATION for e in events)


def partition_evaluations(events: Sequence[Any]) -> bool:
    """`check_evaluations`, each of one partition (what `logcheck_evaluations` sends)."""
    return check_evaluations(events) and all(e.dagster_event.event_specific_data.partition is not None
                                              for e in events)


def one_kind_of_asset_event(events: Sequence[Any]) -> bool:
    """True for two or more events of one asset, all materializations or all observations (only
    then is the asset's row the last event's, as if they were stored one by one)."""
    if len(events) < 2 or not all(e.is_dagster_event and e.dagster_event.asset_key for e in events):
        return False
    kinds = {e.dagster_event_type for e in events}
    return len({e.dagster_event.asset_key for e in events}) == 1 and kinds in (
        {DagsterEventType.ASSET_MATERIALIZATION}, {DagsterEventType.ASSET_OBSERVATION})
