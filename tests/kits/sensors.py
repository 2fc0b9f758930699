"""Dagster sensors driven by hand in tests: a tick of the library sensor and what the daemon
does with its result."""
from __future__ import annotations

from dagster import DagsterInstance, SensorResult, build_sensor_context

from tests.kits.pipeline import Home


def sheaf_config(h: Home):
    from pipelines.resources import SheafConfig

    return SheafConfig(home=str(h.home), library=str(h.library))


def sense(h: Home, inst: DagsterInstance):
    from pipelines.automation.sensors import library_discovery_sensor

    # closed after the tick: an open context leaves the instance's defs-state storage set for the
    # process, and every Definitions built after the instance is gone fails on its dead weakref
    with build_sensor_context(instance=inst, resources={"sheaf": sheaf_config(h)}) as ctx:
        return library_discovery_sensor(ctx)


def apply_sensor_result(inst: DagsterInstance, result: SensorResult) -> None:
    """What the sensor daemon does with a SensorResult (partitions first, then events)."""
    for req in result.dynamic_partitions_requests:
        if type(req).__name__ == "AddDynamicPartitionsRequest":
            inst.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        else:
            for k in req.partition_keys:
                inst.delete_dynamic_partition(req.partitions_def_name, k)
    for ev in result.asset_events:
        inst.report_runless_asset_event(ev)
