"""What the Dagster UI shows of each paper: its identity (title, first author, year), its
state as a check verdict with the reason, and the library's papers as one table.

Pure functions over facts computed elsewhere (`pipelines.planning.statuses.PaperStatus`, the library's
metadata exports): the `paper_up_to_date` check, the `library_status` asset and the chain's
per-paper metadata call them.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from pipelines.planning.plan import PaperStatus
from sheaf.library.metadata import export_files_metadata

#: Table rows: papers that need work first, then the built ones.
STATE_ORDER = {"failed": 0, "unreadable": 1, "stale": 2, "missing": 3, "built": 4}
#: Papers listed in the UI table (the counts cover all of them).
TABLE_ROWS = 500
_TEXT = 160
_TITLE = 300  # a title longer than this is bad metadata: cut, not shown whole


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1].rstrip() + "…"


def identities(metadata_files: Iterable[str | Path], keys: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
    """{paper key: {"title", "first_author", "year"}} from the library's metadata exports
    (papers the export does not list are left out; an unreadable export gives nothing);
    `keys`: only those papers."""
    try:
        load = export_files_metadata(list(metadata_files), keys=None if keys is None else set(keys))
    except Exception:  # noqa: BLE001 - identity is decoration: never fail a step over it
        return {}
    return {m.key: {"title": m.title, "first_author": m.first_author, "year": m.year} for m in load.papers}


def titles_of(events: Mapping[str, Any]) -> dict[str, str]:
    """{paper: title} from the papers' latest `ocr_blocks` materializations (`EventInfo`s, whose
    metadata holds the paper's identity), where they have one."""
    return {k: str(e.metadata["title"]) for k, e in events.items() if e.metadata.get("title")}


def identity_metadata(identity: Mapping[str, Any] | None) -> dict[str, Any]:
    """A paper's identity as materialization metadata (only the fields it has)."""
    return {k: v for k, v in (identity or {}).items() if v not in (None, "")}


def reason_text(st: PaperStatus) -> str:
    """Why a paper needs work, in one line ("OCR changed", "model changed: A → B",
    "code changed: structure_tree", "failed: <error>", "missing: never built"); "" when built."""
    if st.state == "built":
        return ""
    if st.state in ("failed", "unreadable"):
        retry = f" (rebuilt next: {'; '.join(st.reasons)})" if st.reasons else ""
        return f"{st.state}: {st.error}{retry}"
    if st.state == "missing":
        return "missing: " + "; ".join(r.removeprefix("missing: ") for r in st.reasons) if st.reasons else "missing"
    return "; ".join(st.reasons)


def verdict(st: PaperStatus) -> tuple[bool, str]:
    """(passed, description) of the `paper_up_to_date` check for one paper."""
    return (True, "up to date") if st.state == "built" else (False, reason_text(st))


def _iso(ts: float | None) -> str:
    return "" if ts is None else datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M")


def paper_label(identity: Mapping[str, Any] | None) -> str:
    """'Title (First Author, Year)', whichever of them the paper's metadata has; "" for none."""
    ident = identity or {}
    title = _short(str(ident.get("title") or ""), _TITLE)
    by = ", ".join(str(v) for v in (ident.get("first_author"), ident.get("year")) if v not in (None, ""))
    return f"{title} ({by})" if title and by else title or by


#: The table's columns. The UI draws the table as wide as its cells' words need and wraps the
#: rest (the header row does not wrap), inside a panel that scrolls sideways past its width: so
#: a few short-headed columns, one of them the paper whole ('Title (First Author, Year)', wrapped
#: rather than cut), and the build time without seconds or zone (UTC, in the column's description).
STATUS_COLUMNS = (
    TableColumn("state", description="built, stale, missing, unreadable (its file cannot be read) or failed"),
    TableColumn("key", description="the paper's key (its partition)"),
    TableColumn("why", description="why the paper needs work (empty when built)"),
    TableColumn("paper", description="title (first author, year)"),
    TableColumn("last_built", description="when its chain last finished, UTC"),
)


def table_rows(statuses: Mapping[str, PaperStatus]) -> list[PaperStatus]:
    """The papers the table lists (`TABLE_ROWS` at most): those needing work first, by key."""
    return sorted(statuses.values(), key=lambda s: (STATE_ORDER.get(s.state, 9), s.key))[:TABLE_ROWS]


def status_table(statuses: Mapping[str, PaperStatus], ids: Mapping[str, Mapping[str, Any]],
                 last_built: Mapping[str, float]) -> Any:
    """The papers by state as a `MetadataValue.table` (`STATUS_COLUMNS`), those needing work first."""
    records = [TableRecord({"state": st.state, "key": st.key, "why": reason_text(st)[:_TEXT],
                            "paper": paper_label(ids.get(st.key)), "last_built": _iso(last_built.get(st.key))})
               for st in table_rows(statuses)]
    return MetadataValue.table(records=records, schema=TableSchema(columns=list(STATUS_COLUMNS)))


def state_counts(statuses: Iterable[PaperStatus]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for st in statuses:
        counts[st.state] = counts.get(st.state, 0) + 1
    return counts
