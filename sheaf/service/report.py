"""`sheaf report`: the library-wide report over the built artifacts (DuckDB; no Dagster)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from sheaf.core.envelope import SheafError, ok
from sheaf.core.settings import where
from sheaf.service.requests import Outcome
from sheaf.store.artifact_store import open_artifacts
from sheaf.store.library_report import library_report_data, report_markdown

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

__all__ = ["report", "report_markdown"]


def report(settings: Settings) -> Outcome:
    """The library-wide report over the built artifacts (`report_markdown` renders its data).
    No artifacts at all (nothing built in this home): INDEX_NOT_FOUND naming where it looked."""
    store = open_artifacts(settings)
    if not any(n.endswith(".parquet") and not n.startswith(".") for n in store.names("ocr_blocks")):
        shown = store.location if store.remote else str(settings.artifacts_dir.absolute())
        msg = (f"nothing is built in the artifact store {shown} (SHEAF_ARTIFACTS_URL)" if store.remote else
               f"nothing is built in the home {settings.home} (looked at {where(settings, 'home')})")
        raise SheafError("INDEX_NOT_FOUND", msg, {"home": str(settings.home.absolute()), "artifacts": shown},
                         hint="run `sheaf build`, or point SHEAF_HOME at the folder holding a built home")
    data = library_report_data(store)
    return Outcome(ok("report", data, count=data["papers"],
                      next_actions=[] if data["papers"] else ["run `sheaf build` first"]))
