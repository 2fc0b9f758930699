"""Deployment configs checked by Dagster's own schemas (deploy/ and the homes' dagster.yaml)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def instance_config_errors(folder: str, filename: str = "dagster.yaml") -> list[str]:
    """What Dagster finds wrong in an instance config file (`folder`/`filename`): its schema
    (`dagster_instance_config`, as `DagsterInstance.get()` loads it) and, for each section naming
    a class (run coordinator, run launcher, storages, compute logs), that class's own config schema.
    Nothing connects and no environment variable is read (``{env: NAME}`` is checked for shape)."""
    from dagster._config import validate_config
    from dagster._core.errors import DagsterInvalidConfigError
    from dagster._core.instance.config import dagster_instance_config
    from dagster._serdes.config_class import class_from_code_pointer

    try:
        config, _ = dagster_instance_config(folder, filename)
    except DagsterInvalidConfigError as e:
        return [str(e)]
    errors: list[str] = []
    for section, value in config.items():
        if isinstance(value, Mapping) and "module" in value and "class" in value:
            try:
                klass = class_from_code_pointer(value["module"], value["class"])
            except Exception as e:  # noqa: BLE001 - a module or class that does not import
                errors.append(f"{section}: {e}")
                continue
            result = validate_config(klass.config_type(), value.get("config") or {})
            errors += [f"{section} ({value['class']}): {e.message}" for e in result.errors or []]
    return errors


def executor_config_errors(executor: Any, config: Mapping[str, Any]) -> list[str]:
    """What Dagster finds wrong in an executor's config (`execution: config:` of a run config)."""
    from dagster._config import validate_config

    result = validate_config(executor.config_schema.config_type, config)
    return [e.message for e in result.errors or []]
