"""`sheaf build | status | doctor`: the commands over the Dagster side.

Every function takes the settings and the Definitions (`definitions(settings)` makes them).
Each function imports `pipelines` (and so Dagster) when it runs, the Dagster side being reached
only inside these commands: `sheaf search` never loads it.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import SheafError, ok
from sheaf.core.progress import stop_on_sigterm
from sheaf.ingest.library import discover
from sheaf.service.build_state import verdict
from sheaf.service.requests import Outcome
from sheaf.store.sqlite.index import collections, open_index
from sheaf.store.sqlite.reader import counts

if TYPE_CHECKING:  # pragma: no cover
    from dagster import Definitions

__all__ = ["definitions", "build", "status", "doctor", "index_probe", "status_dict", "stop", "build_state"]

Progress = Callable[[str], None]
Events = Callable[[dict[str, Any]], None]


def _pipelines() -> Any:
    """The Dagster side (`pipelines`), imported when one of these commands runs, never before."""
    import pipelines.build, pipelines.doctor, pipelines.entry, pipelines.live, pipelines.planner, pipelines.record, pipelines.state  # noqa: E401,E501

    return pipelines


def _quiet(message: str) -> None:
    pass


def definitions(settings: Any) -> Definitions:
    """The Definitions of `settings`' home and library (Dagster's warnings quieted, its home made)."""
    pipelines = _pipelines()

    return pipelines.entry.dagster_side(settings)


def status_dict(st: Any) -> dict[str, Any]:
    return {"paper_id": st.key, "state": st.state, "reasons": st.reasons, "error": st.error, **st.metadata}


def build(settings: Any, defs: Any, *, papers: list[str] | None = None, full: bool = False,
          progress: Progress = _quiet, events: Events | None = None) -> Outcome:
    """Discover, then build every missing or stale paper (`view`: the `BuildReport`; exit 130
    when interrupted, 1 when a paper failed). `events`: the structured progress
    (`pipelines.live`: start, progress per paper, warnings). SIGTERM (`sheaf stop`) stops it
    at the next paper boundary, as the first Ctrl-C does."""
    pipelines = _pipelines()

    if not settings.library.is_dir():
        raise SheafError("NOT_FOUND", f"library folder not found: {settings.library}",
                         {"library": str(settings.library)}, hint="pass --library PATH or set SHEAF_LIBRARY")
    with stop_on_sigterm():
        rep = pipelines.build.build(settings, defs, papers=papers or None, full=full, progress=progress,
                                    events=events)
    states: dict[str, int] = {}
    for st in rep.statuses.values():
        states[st.state] = states.get(st.state, 0) + 1
    data = {"library": str(settings.library), "sync": rep.sync, "planned": rep.planned, "runs": rep.runs,
            "papers": [status_dict(s) for s in rep.statuses.values()], "states": states,
            "embeddings_computed": rep.embeddings_computed, "seconds": rep.seconds, "interrupted": rep.interrupted,
            "plan": rep.plan}
    failed = [k for k, s in rep.statuses.items() if s.state == "failed"]
    env = ok("build", data, count=len(rep.planned),
             warnings=[f"{k}: {rep.statuses[k].error}" for k in failed],
             next_actions=["fix the failed papers' OCR output and run `sheaf build` again"] if failed else [])
    return Outcome(env, 130 if rep.interrupted else (1 if failed else 0), rep)


def status(settings: Any, defs: Any) -> Outcome:
    """Per paper: built / stale (why) / missing / failed, coverage and the index probe (`view`:
    the statuses by key)."""
    pipelines = _pipelines()

    instance = pipelines.build.get_instance(settings)
    chain = pipelines.planner.chain_of(defs)
    record = pipelines.record.load_record(instance, chain)  # current: no paper's events are read
    observed = record.versions if record is not None else pipelines.state.latest_observed_versions(instance)
    keys = list(instance.get_dynamic_partitions("papers"))
    statuses, _ = pipelines.record.statuses_from(instance, chain, keys, observed, record)
    library = discover(settings.library).papers if settings.library.is_dir() else ()
    coverage = {"library": len(library), "partitions": len(statuses),
                "parsed": sum(1 for s in statuses.values() if s.metadata.get("body_units") is not None),
                "built": sum(1 for s in statuses.values() if s.state == "built")}
    probe = index_probe(settings)
    coverage.update({k: probe[k] for k in ("indexed", "embedded") if k in probe})
    actions = ["run `sheaf build`"] if any(s.state != "built" for s in statuses.values()) or \
        coverage["library"] > coverage["partitions"] else []
    live = pipelines.live.build_state(settings, instance)
    env = ok("status", {"papers": [status_dict(s) for s in statuses.values()], "coverage": coverage,
                        "index": probe, "build_state": live,
                        **verdict((s.state for s in statuses.values()), coverage, probe, live)},
             count=len(statuses), next_actions=actions)
    return Outcome(env, 0, statuses)


def index_probe(settings: Any) -> dict[str, Any]:
    """Can the index be opened, and can a vector query run against the current model's collection?"""
    if not settings.index_path.exists():
        return {"path": str(settings.index_path), "exists": False, "problem": "no index yet"}
    try:
        conn = open_index(settings=settings, readonly=True)
    except SheafError as e:
        return {"path": str(settings.index_path), "exists": True, "problem": f"{e.code}: {e.message}"}
    except Exception as e:  # noqa: BLE001 - a file SQLite cannot read: what the probe reports
        return {"path": str(settings.index_path), "exists": True, "problem": f"unreadable index: {e}",
                "hint": "run `sheaf build --full` (it moves a damaged file aside) or `sheaf doctor`"}
    try:
        try:
            c = counts(conn)
        except Exception as e:  # noqa: BLE001 - a damaged or missing table: reported, not raised
            return {"path": str(settings.index_path), "exists": True, "problem": f"index damaged: {e}",
                    "vectors_queryable": False, "hint": "run `sheaf doctor --repair` or `sheaf build --full`"}
        out: dict[str, Any] = {"path": str(settings.index_path), "exists": True,
                               "indexed": conn.execute("SELECT count(DISTINCT paper_id) FROM body_units").fetchone()[0]}
        cols = collections(conn)
        out["collections"] = {k: v.name for k, v in cols.items()}
        embedded = 0
        for ident in cols.values():
            try:
                probe = json.dumps([1.0] + [0.0] * (ident.dimension - 1))
                conn.execute(f"SELECT passage_rowid, distance FROM {ident.vec_table} "
                             "WHERE embedding MATCH ? AND k = 1", (probe,)).fetchall()
                embedded = max(embedded, conn.execute(
                    f"SELECT count(DISTINCT paper_id) FROM {ident.passages_table}").fetchone()[0])
                out["vectors_queryable"] = True
            except Exception as e:  # noqa: BLE001 - a damaged vec table is what the probe reports
                out["problem"] = f"vector table {ident.vec_table} unreadable: {e}"
                out["vectors_queryable"] = False
        out["embedded"] = embedded
        out["rows"] = c
        return out
    finally:
        conn.close()


def doctor(settings: Any, defs: Any, *, repair: bool = False, progress: Progress = _quiet) -> Outcome:
    """Cross-check library ↔ partitions ↔ artifacts ↔ index ↔ materialization metadata; with
    `repair`, fix the drift and check again (`view`: the diagnoses before and after; exit 1 while
    an issue remains)."""
    pipelines = _pipelines()

    instance = pipelines.build.get_instance(settings)
    found = pipelines.doctor.diagnose(settings, defs, instance)
    data: dict[str, Any] = {"library": str(settings.library), "before": found.to_dict()}
    final = found
    if repair and found.issues:
        data["repaired"] = pipelines.doctor.repair(settings, defs, instance, found, progress=progress)
        final = pipelines.doctor.diagnose(settings, defs, instance)
        data["after"] = final.to_dict()
    remaining = [i for i in final.issues if i.kind not in ("invalid_key", "build_running")]
    env = ok("doctor", {**data, "issues": [i.to_dict() for i in final.issues]}, count=len(final.issues),
             warnings=[f"{i.paper + ': ' if i.paper else ''}{i.kind}: {i.detail}" for i in remaining],
             next_actions=["run `sheaf doctor --repair`"] if remaining and not repair else [])
    return Outcome(env, 1 if remaining else 0, (found, final))


def build_state(settings: Any) -> dict[str, Any]:
    """The live state of the build of `settings`' home (`pipelines.live.build_state`), without
    loading the Definitions: what a program polling a running build asks for."""
    pipelines = _pipelines()

    return pipelines.live.build_state(settings, pipelines.build.get_instance(settings))


def stop(settings: Any, *, timeout: float = 300.0, progress: Progress = _quiet) -> Outcome:
    """`sheaf stop`: ask the running build to stop at the next paper boundary and wait until it
    has (its run canceled, exit 130 on its side). Nothing running: a no-op answer (exit 0); a
    build that died: its runs marked failed; still running after `timeout`: TIMEOUT."""
    pipelines = _pipelines()

    instance = pipelines.build.get_instance(settings)
    try:
        res = pipelines.live.stop_build(settings, instance, timeout=timeout, say=progress)
    except PermissionError as e:
        raise SheafError("BACKEND_UNAVAILABLE", f"not allowed to signal the build process: {e}",
                         {"home": str(settings.home)}, hint="run `sheaf stop` as the user who started the build")
    except ProcessLookupError:  # it ended between the lock probe and the signal
        res = {"outcome": "stopped", "pid": None, "runs": [], "waited_s": 0.0, "process_died": False}
    if res["outcome"] == "timeout":
        raise SheafError("TIMEOUT", f"the build (pid {res['pid']}) is still running after {timeout:g} s",
                         {"pid": res["pid"], "waited_s": res["waited_s"]},
                         hint="it stops after the paper it is on; run `sheaf stop` again, or wait")
    messages = {"idle": "no build is running; nothing to stop",
                "died": f"no build is running; the runs of a build that died (pid {res['pid']}) were marked failed",
                "stopped": f"the build (pid {res['pid']}) stopped at a paper boundary"}
    data = {**res, "stopped": res["outcome"] == "stopped", "message": messages[res["outcome"]],
            "build_state": pipelines.live.build_state(settings, instance)}
    nxt = ["run `sheaf build` to carry on with what is left"] if res["outcome"] in ("stopped", "died") else []
    return Outcome(ok("stop", data, count=len(res["runs"]), next_actions=nxt), 0, res)
