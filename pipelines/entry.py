"""The one entry of the CLI into the Dagster side (`sheaf build/status/doctor`).

Importing this module defines no asset yet (nor does `pipelines.build`): Dagster's own
warnings are silenced first, then the definitions are imported and built.
"""
from __future__ import annotations

from dagster import Definitions

from pipelines.build import ensure_dagster_home
from pipelines.dagster_private import quiet_dagster_warnings
from sheaf.core.settings import Settings


def dagster_side(settings: Settings) -> Definitions:
    """Quiet Dagster's warnings, make sure the Dagster home exists (DAGSTER_HOME set), and
    return the Definitions of `settings`' home and library."""
    quiet_dagster_warnings()
    # Imported only now: defining the assets emits the Beta/Preview warnings silenced above.
    from pipelines.definitions import build_definitions

    ensure_dagster_home(settings)
    return build_definitions(home=str(settings.home), library=str(settings.library))
