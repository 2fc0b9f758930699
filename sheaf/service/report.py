"""`sheaf report`: the library-wide report over the built artifacts (DuckDB; no Dagster)."""
from __future__ import annotations

from typing import Any

from sheaf.core.envelope import ok
from sheaf.service.requests import Outcome
from sheaf.store.report import library_report_data, report_markdown

__all__ = ["report", "report_markdown"]


def report(settings: Any) -> Outcome:
    """The library-wide report over the built artifacts (`report_markdown` renders its data)."""
    data = library_report_data(settings.artifacts_dir)
    return Outcome(ok("report", data, count=data["papers"],
                      next_actions=[] if data["papers"] else ["run `sheaf build` first"]))
