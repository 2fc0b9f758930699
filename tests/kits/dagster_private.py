"""Dagster's private names that tests need, in one place: Sheaf's own code reaches Dagster's
private API only through `pipelines.dagster_internals`, and tests only through this module
(`tests/test_layers.py` checks both). Each name says what a test does with it."""
from __future__ import annotations

import sys

from dagster._core.definitions.partitions.subset import DefaultPartitionsSubset
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log import sql_event_log
from dagster._core.storage.event_log.base import PartitionKeyFilter
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
from dagster._core.test_utils import create_run_for_test

__all__ = ["AssetCheckExecutionRecordStatus", "DefaultPartitionsSubset", "HANDLE_NEW_EVENT", "InstanceRef",
           "PartitionKeyFilter", "SqlEventLogStorage", "create_run_for_test", "instance_context_left_open", "sql_event_log"]

#: Where a kill test stops a run between two of its Dagster events.
HANDLE_NEW_EVENT = "dagster._core.instance:DagsterInstance.handle_new_event"


def instance_context_left_open() -> bool:
    """True, and the context closed, when a test left a Dagster instance's context open (its
    defs-state storage still set for the process)."""
    base = sys.modules.get("dagster._core.storage.defs_state.base")
    if base is None or base.DefsStateStorage.get() is None:
        return False
    base._current_storage.set(None)
    return True
