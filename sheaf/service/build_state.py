"""The per-library verdict of `sheaf status`: is the index fresh, does it need a build?

Computed from what status already has (no Dagster here): every paper's state and the library's
coverage. `needs_rebuild`: a plain `sheaf build` has work to do (a paper not built, a paper
of the library not yet a partition) or the index is unusable; `fresh`: none of that, and no
build is running.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["verdict"]


def verdict(states: Iterable[str], coverage: dict[str, Any], probe: dict[str, Any],
            build_state: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"fresh", "needs_rebuild", "verdict_reasons"} of one library."""
    counts: dict[str, int] = {}
    for s in states:
        counts[s] = counts.get(s, 0) + 1
    reasons = [f"{n} paper{'s' * (n != 1)} {s}" for s, n in sorted(counts.items()) if s not in ("built", "unreadable")]
    new = int(coverage.get("library", 0)) - int(coverage.get("partitions", 0))
    if new > 0:
        reasons.append(f"{new} paper{'s' * (new != 1)} of the library not built yet")
    if probe.get("problem"):
        reasons.append(f"index: {probe['problem']}")
    needs = bool(reasons)
    if counts.get("unreadable"):  # fresh all the same: no build can read those files
        n = counts["unreadable"]
        reasons.append(f"{n} paper{'s' * (n != 1)} unreadable (replace the file; a rebuild cannot help)")
    running = bool(build_state and build_state.get("status") in ("running", "stopping"))
    if running:
        reasons.append(f"a build is {build_state['status']}")  # type: ignore[index]
    return {"fresh": not needs and not running, "needs_rebuild": needs, "verdict_reasons": reasons}
