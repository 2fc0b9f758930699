"""The one entry of the CLI into the Dagster side (`sheaf build/status/doctor`).

Importing this module defines no asset yet (nor does `pipelines.build.command`): Dagster's own
warnings are silenced first, then the definitions are imported and built.
"""
from __future__ import annotations

from dagster import DagsterInstance, Definitions

from pipelines.build.runs import dagster_env, ensure_dagster_home
from pipelines.dagster_internals.steps import quiet_dagster_warnings
from sheaf.core.settings import Settings


def _definitions(settings: Settings) -> Definitions:
    quiet_dagster_warnings()
    # Imported only now: defining the assets emits the Beta/Preview warnings silenced above.
    from pipelines.definitions import build_definitions

    return build_definitions(home=str(settings.home), library=str(settings.library))


def open_for_build(settings: Settings) -> Definitions:
    """Quiet Dagster's warnings, make sure the Dagster home exists (DAGSTER_HOME set), and
    return the Definitions of `settings`' home and library."""
    defs = _definitions(settings)
    ensure_dagster_home(settings)
    return defs


def open_read_only(settings: Settings) -> tuple[Definitions, DagsterInstance, bool]:
    """The Definitions and an instance for a read-only command (`sheaf status`, `sheaf doctor`
    without --repair), creating nothing on disk: (defs, instance, built) where `built` is
    False when the Dagster home does not exist yet (then the instance is an empty, in-memory
    one: every paper reads as never built)."""
    defs = _definitions(settings)
    home = settings.dagster_home
    if not home.is_dir():
        return defs, DagsterInstance.ephemeral(), False
    dagster_env(settings)
    return defs, DagsterInstance.get(), True
