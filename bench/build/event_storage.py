"""What a home's Dagster events database holds, per paper: its pages and their payload by table
and index (SQLite's `dbstat`), the events' text by kind, the share of it that is Sheaf's own
metadata, and what would be left with none (the floor of 13 Dagster events a paper).

    .venv/bin/python -m bench.build.event_storage HOME [--papers N]

HOME is a Sheaf home (its `dagster_home/history/event_log.db` is read, read-only); N defaults to
the papers' partitions it holds. Results: docs/benchmarks.md, "Dagster's event storage".
"""
from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path
from typing import Any


def _metadata_len(event: dict[str, Any]) -> int:
    """Characters of Sheaf's metadata in one serialised event (a materialization's or an
    observation's metadata entries, a check evaluation's metadata)."""
    data = ((event.get("dagster_event") or {}).get("event_specific_data") or {})
    inner = data.get("materialization") or data.get("asset_observation")
    if inner is not None:
        return len(json.dumps(inner.get("metadata_entries") or []))
    if data.get("__class__") == "AssetCheckEvaluation":
        return len(json.dumps(data.get("metadata") or {}))
    return 0


def measure(db: Path, papers: int | None = None) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        n = papers or conn.execute("SELECT count(*) FROM dynamic_partitions WHERE partitions_def_name = 'papers'"
                                   ).fetchone()[0]
        kb = lambda b: round(b / max(n, 1) / 1000, 2)  # noqa: E731 - bytes a paper, in KB
        tables = {name: {"pages_kb": kb(pg), "payload_kb": kb(pay), "unused_kb": kb(un)}
                  for name, pg, pay, un in conn.execute(
                      "SELECT name, sum(pgsize), sum(payload), sum(unused) FROM dbstat GROUP BY name ORDER BY 2 DESC")
                  if pg > 0}
        kinds: dict[str, list[int]] = {}
        text = meta = 0
        for kind, ev in conn.execute("SELECT dagster_event_type, event FROM event_logs"):
            k = kinds.setdefault(kind or "", [0, 0])
            k[0] += 1
            k[1] += len(ev)
            text += len(ev)
            meta += _metadata_len(json.loads(ev))
        checks = conn.execute("SELECT count(*), coalesce(sum(length(evaluation_event)), 0) FROM asset_check_executions"
                              ).fetchone()
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    total = sum(t["pages_kb"] for t in tables.values())
    payload = sum(t["payload_kb"] for t in tables.values())
    return {
        "papers": n, "page_size": page_size, "file_kb_per_paper": round(total, 2),
        "payload_kb_per_paper": round(payload, 2),
        "events_text_kb_per_paper": kb(text), "sheaf_metadata_kb_per_paper": kb(meta),
        "check_executions_text_kb_per_paper": kb(checks[1]),
        "payload_without_sheaf_metadata_kb_per_paper": round(payload - meta / max(n, 1) / 1000, 2),
        "events_per_paper": {k: round(c / max(n, 1), 2) for k, (c, _) in sorted(kinds.items())},
        "event_chars": {k: round(b / max(c, 1)) for k, (c, b) in sorted(kinds.items())},
        "tables": tables,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("home", type=Path)
    ap.add_argument("--papers", type=int, default=None)
    a = ap.parse_args()
    print(json.dumps(measure(a.home / "dagster_home" / "history" / "event_log.db", a.papers), indent=1))


if __name__ == "__main__":
    main()
