"""`sheaf report`: the library-wide report over the built artifacts (DuckDB; no Dagster)."""
from __future__ import annotations

from typing import Any

from sheaf.core.envelope import SheafError, ok
from sheaf.core.settings import where
from sheaf.service.requests import Outcome
from sheaf.store.report import library_report_data, report_markdown

__all__ = ["report", "report_markdown"]


def report(settings: Any) -> Outcome:
    """The library-wide report over the built artifacts (`report_markdown` renders its data).
    No artifacts at all (nothing built in this home): INDEX_NOT_FOUND naming where it looked."""
    blocks = settings.artifacts_dir / "ocr_blocks"
    if not blocks.is_dir() or not any(blocks.glob("*.parquet")):
        raise SheafError("INDEX_NOT_FOUND", f"nothing is built in the home {settings.home} "
                         f"(looked at {where(settings, 'home')})",
                         {"home": str(settings.home.absolute()), "artifacts": str(settings.artifacts_dir.absolute())},
                         hint="run `sheaf build`, or point SHEAF_HOME at the folder holding a built home")
    data = library_report_data(settings.artifacts_dir)
    return Outcome(ok("report", data, count=data["papers"],
                      next_actions=[] if data["papers"] else ["run `sheaf build` first"]))
