"""Sheaf's Dagster home on disk: the dagster.yaml it writes.
"""
from __future__ import annotations


#: The first line of a dagster.yaml Sheaf wrote (a file without it is the user's and left alone).
YAML_HEADER = "# Written by sheaf"


def dagster_yaml(sharded: bool = False) -> str:
    """Sheaf's dagster.yaml: one writer at a time for the index pool, no telemetry, and the event
    log storage of `pipelines.dagster_private` (Dagster's SQLite storage with engines kept open;
    `sharded`: Dagster's per-run layout, for a home that already holds one)."""
    cls = "SheafShardedEventLogStorage" if sharded else "SheafEventLogStorage"
    return (f"{YAML_HEADER}: one writer at a time for the SQLite index pool; Dagster's SQLite event\n"
            "# log with its connections kept open (pipelines/dagster_private.py). Rewritten by sheaf\n"
            "# while this header stays; delete the header to keep your own edits.\n"
            "concurrency:\n  pools:\n    default_limit: 1\n"
            "telemetry:\n  enabled: false\n"
            f"event_log_storage:\n  module: pipelines.dagster_private\n  class: {cls}\n"
            "run_storage:\n  module: pipelines.dagster_private\n  class: SheafRunStorage\n")
