"""`sheaf build | status | doctor`: the commands over the Dagster side.

Each function imports `pipelines` (and so Dagster) when it needs it, the Dagster side being
reached only inside these commands: `sheaf search` never loads it. `sheaf build` and `sheaf
status` first ask the no-op proof (`pipelines.planning.noop`, which loads no Dagster) whether nothing
changed since the last recorded plan; when it proves so they answer without loading Dagster at
all, with the same envelope.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sheaf.core import home_record
from sheaf.core.envelope import SheafError, ok
from sheaf.core.heap import long_lived_imports
from sheaf.core.models import UNREADABLE_FIX, paper_key_problem
from sheaf.core.progress import StopRequested, check_stop, stop_on_sigterm, while_polled
from sheaf.core.settings import check_home_library, record_home_library, where
from sheaf.library.discover import layout_of
from sheaf.service.build_state import verdict
from sheaf.service.requests import Outcome
from sheaf.store.select import check_backend, open_backend, probe_index_file

if TYPE_CHECKING:  # pragma: no cover
    from dagster import Definitions

    from sheaf.core.settings import Settings

__all__ = ["definitions", "build", "status", "doctor", "index_probe", "status_dict", "stop", "build_state"]

Progress = Callable[[str], None]
Events = Callable[[dict[str, Any]], None]


def _pipelines(poll: Callable[[], None] | None = None) -> Any:
    """The Dagster side (`pipelines`), imported when one of these commands runs, never before
    (as objects the process keeps: `sheaf.core.heap`). `poll`: a build's stop check, called while
    Dagster imports (seconds on a busy machine); what it raises ends the wait."""
    def load() -> Any:
        with long_lived_imports():
            import pipelines.build.command, pipelines.build.doctor, pipelines.entry, pipelines.build.live, pipelines.planning.statuses, pipelines.planning.recorded_plan, pipelines.planning.events, pipelines.build.sync  # noqa: E401,E501,I001

        return pipelines

    return while_polled(load, poll)


def _light() -> Any:
    """The Dagster-free part of the Dagster side: the no-op proof (`pipelines.planning.noop`) and the plain
    types and crash-safety helpers it uses, imported when build, status or build_state runs,
    before they know whether they need Dagster at all."""
    import pipelines.planning.noop, pipelines.planning.plan, pipelines.build_lock  # noqa: E401,I001

    return pipelines


def _quiet(message: str) -> None:
    pass


def definitions(settings: Settings) -> Definitions:
    """The Definitions of `settings`' home and library (Dagster's warnings quieted, its home made)."""
    pipelines = _pipelines()

    return pipelines.entry.open_for_build(settings)


def status_dict(st: Any) -> dict[str, Any]:
    out = {"paper_id": st.key, "state": st.state, "reasons": st.reasons, "error": st.error, **st.metadata}
    if st.state == "unreadable":
        out["fix"] = UNREADABLE_FIX
    return out


def build(settings: Settings, defs: Any = None, *, papers: list[str] | None = None, full: bool = False,
          progress: Progress = _quiet, events: Events | None = None, exact_progress: bool = True,
          switch_library: bool = False) -> Outcome:
    """Discover, then build every missing or stale paper (`view`: the `BuildReport`; exit 130
    when interrupted, 1 when a paper failed). `events`: the structured progress
    (`pipelines.build.live`: start, progress per paper, warnings). SIGTERM (`sheaf stop`) stops it
    at the next paper boundary, as the first Ctrl-C does. `defs`: the Definitions to build
    with (default: `definitions(settings)`, made only when the no-op proof does not hold).
    `exact_progress`: a program reads `events`, so the progress another process polls
    (`sheaf status`) is written before each event; False (a person or one envelope): at most
    once a second, which saves a run-storage write a paper. The home's first build records its
    library; a build given another library is refused (``LIBRARY_MISMATCH``) unless
    `switch_library`, which records the new one (the old library's papers are then dropped)."""
    _require_library(settings, "sheaf build", check_home=False)  # record_home_library checks it
    _light().build_lock.check_workers(settings, settings.build_workers)  # before the no-op proof answers
    _, switched_from = record_home_library(settings, layout_of(settings.library), switch=switch_library)
    if switched_from:
        progress(f"switched the home {settings.home} from the library {switched_from} to {settings.library}")
    with stop_on_sigterm():
        try:
            check_stop()
            quick = defs is None and not papers and not full
            rep, proof = _light().planning.noop.quick_build(settings, progress, events) if quick else (None, None)
            why = proof.why if proof is not None else ""
            if rep is None:
                pipelines = _pipelines(check_stop)
                check_stop()
                defs = defs if defs is not None else definitions(settings)
                check_stop()
                rep = pipelines.build.command.build(settings, defs, papers=papers or None, full=full,
                                                    progress=progress, events=events,
                                                    workers=settings.build_workers,
                                                    scan=proof.scan if proof else None,
                                                    record=proof.record if proof else None,
                                                    exact_progress=exact_progress,
                                                    load_definitions=pipelines.entry.open_for_build)
                if why:
                    rep.plan["no_op_proof"] = why
        except StopRequested:  # before the build took its lock: nothing written, no run started
            progress("interrupted before the build began: nothing was changed")
            rep = _light().planning.plan.BuildReport({}, {}, [], {}, interrupted=True, plan={"stopped": "before planning"})
    states: dict[str, int] = {}
    for st in rep.statuses.values():
        states[st.state] = states.get(st.state, 0) + 1
    data = {"library": str(settings.library), "library_source": settings.library_source,
            **({"switched_from": switched_from} if switched_from else {}), "sync": rep.sync, "planned": rep.planned, "runs": rep.runs,
            "papers": [status_dict(s) for s in rep.statuses.values()], "states": states,
            "embeddings_computed": rep.embeddings_computed, "seconds": rep.seconds, "interrupted": rep.interrupted,
            "plan": rep.plan}
    failed = [k for k, s in rep.statuses.items() if s.state == "failed"]
    unreadable = [k for k, s in rep.statuses.items() if s.state == "unreadable"]
    died = rep.plan.get("workers_died") or []
    env = ok("build", data, count=len(rep.planned),
             warnings=[f"{k}: {rep.statuses[k].error}" for k in failed]
             + [f"{k}: unreadable: {rep.statuses[k].error}" for k in unreadable]
             + [f"worker pid {d['pid']} died (exit {d['exit']}); its papers are left to the next build" for d in died],
             next_actions=(["fix the failed papers' OCR output and run `sheaf build` again"] if failed else [])
             + ([_unreadable_action(len(unreadable))] if unreadable else [])
             + (["run `sheaf build` again to rebuild the papers of the worker that died"] if died else []))
    # An unreadable file is the paper's state, not a failed build: exit 1 is for a failure (a bug).
    return Outcome(env, 130 if rep.interrupted else (1 if failed or died else 0), rep)


def _unreadable_action(n: int) -> str:
    return (f"{n} {_papers(n)} unreadable (searchable by their metadata only): {UNREADABLE_FIX}; "
            "`sheaf status` names each file and why")


def _require_library(settings: Settings, command: str, *, check_home: bool = True) -> None:
    """The library folder exists and is the home's own (`sheaf.core.home_record`), else the
    error that says which and what to do: before anything is scanned or written."""
    if not settings.library.is_dir():
        recorded = settings.library_source == home_record.RECORDED
        raise SheafError("NOT_FOUND", f"library folder not found: {settings.library} "
                         f"(looked at {where(settings, 'library')})",
                         {"library": str(settings.library.absolute())},
                         hint="the home's library has moved or is gone: pass --library NEW_PATH --switch-library"
                         if recorded else "pass --library PATH or set SHEAF_LIBRARY to your library folder")
    if check_home:
        check_home_library(settings, command)


def library_line(settings: Settings) -> str | None:
    """The one line that says a command uses the home's recorded library (None otherwise)."""
    if settings.library_source != home_record.RECORDED:
        return None
    return f"library: {settings.library} (recorded by the home {settings.home}; --library to name another)"


def _papers(n: int) -> str:
    return "paper" if n == 1 else "papers"


def _status_actions(states: dict[str, int], statuses: dict[str, Any], skipped: list[dict[str, str]],
                    built_before: bool) -> list[str]:
    """What to do next, most useful first (the text view ends with these)."""
    acts: list[str] = []
    todo = {k: states.get(k, 0) for k in ("missing", "stale", "removed")}
    retry = sum(1 for st in statuses.values() if st.state in ("failed", "unreadable") and st.reasons)
    if not built_before:
        acts.append(f"no build yet in this home: run `sheaf build` to build the {todo['missing']} papers")
    elif any(todo.values()) or retry:
        what = [f"{n} {k}" for k, n in (("missing", todo["missing"]), ("stale", todo["stale"]),
                                         ("changed failed", retry)) if n]
        parts = [f"build {' and '.join(what)} {_papers(sum((todo['missing'], todo['stale'], retry)))}"] if what else []
        parts += [f"drop {todo['removed']} removed {_papers(todo['removed'])}"] if todo["removed"] else []
        acts.append(f"run `sheaf build` to {' and '.join(parts)}")
    waiting = sum(1 for st in statuses.values() if st.state == "unreadable" and not st.reasons)
    if waiting:
        acts.append(_unreadable_action(waiting))
    if sum(1 for st in statuses.values() if st.state == "failed" and not st.reasons):
        acts.append("fix the failed papers' files (`sheaf parse <paper folder>` shows why), then run `sheaf build`")
    if skipped:
        acts.append("rename the skipped folders to the paper's Zotero item key")
    return acts


def status(settings: Settings) -> Outcome:
    """Per paper of the library, read as the build's discovery reads it and without writing
    anything: built / stale (why) / missing / failed / removed, the skipped folders, coverage,
    the index probe and the next action (`view`: the statuses by key). No Dagster home yet:
    every paper is missing ("no build yet")."""
    _require_library(settings, "sheaf status")
    light = _light()
    proof = light.planning.noop.quick_status(settings)
    if proof.unchanged:  # nothing changed since the last recorded plan: no Dagster needed
        plan, built_before = proof.plan, True
        present = [p.key for p in plan.scan.discovery.papers]
        statuses = {k: proof.statuses[k] for k in present}  # in the library's order, as below
        live: dict[str, Any] = light.build_lock.idle_state()
        how = {"record": "current", "papers_read": 0, "dagster": False}
    else:
        pipelines = _pipelines()
        defs, instance, built_before = pipelines.entry.open_read_only(settings)
        chain = pipelines.planning.statuses.chain_of(defs)
        # The last build's record, while current (pipelines/planning/recorded_plan.py): no paper's events are read
        # for the papers whose OCR hash it holds; edited and new papers are read from their events.
        record = pipelines.planning.recorded_plan.load_record(instance, chain, proof.record) if built_before else None
        plan = pipelines.build.sync.plan_sync(instance, settings, observed=record.versions if record is not None else None,
                                        write_cache=False, scan=proof.scan)
        present = [p.key for p in plan.scan.discovery.papers]
        statuses, read = pipelines.planning.recorded_plan.statuses_from(instance, chain, present, plan.versions, record)
        # Index rows or artifacts that disagree with the event log: stale, as the next build plans them.
        pipelines.planning.statuses.apply_index_drift(settings, instance, statuses, chain)
        live = pipelines.build.live.build_state(settings, instance)
        how = {"record": "current" if record is not None else "none or stale", "papers_read": read, "dagster": True,
               "no_op_proof": proof.why}
    for key, problem in plan.errors.items():  # the build will fail it: say why now
        st = statuses[key]
        if st.state not in ("failed", "unreadable") or "OCR changed" in st.reasons:
            head = f"paper {key} ("
            if problem.startswith(head) and "): " in problem:  # the key is on the line already
                problem = problem.split("): ", 1)[1]
            st.reasons.append(f"cannot be read: {problem}")
    for key in plan.removed:
        statuses[key] = light.planning.plan.PaperStatus(
            key, "removed", ["removed from the library (run `sheaf build` to drop it from the index)"])
    skipped = [{"folder": name, "reason": f"not a valid paper key: {paper_key_problem(name)}"}
               for name in plan.invalid_keys]
    states: dict[str, int] = {}
    for st in statuses.values():
        states[st.state] = states.get(st.state, 0) + 1
    coverage = {"library": len(present), "partitions": len(present) - len(plan.added) + len(plan.removed),
                "parsed": sum(1 for s in statuses.values() if s.metadata.get("body_units") is not None),
                "built": states.get("built", 0)}
    probe = index_probe(settings)
    coverage.update({k: probe[k] for k in ("indexed", "embedded") if k in probe})
    disc = plan.scan.discovery
    metadata_only = [{"paper": k, "reason": r} for k, r in disc.metadata_only]
    data = {"library": str(settings.library), "library_source": settings.library_source, "layout": disc.layout,
            "home": str(settings.home),
            "built_before": built_before, "papers": [status_dict(s) for s in statuses.values()], "states": states,
            "skipped": skipped, "metadata_only": metadata_only, "coverage": coverage, "index": probe, "plan": how}
    data.update(build_state=live, **verdict((s.state for s in statuses.values()), coverage, probe, live))
    if not built_before:
        data["message"] = f"no build yet in the home {settings.home} ({where(settings, 'home')})"
    warnings = [f"{s['folder']!r} skipped: {s['reason']}" for s in skipped] + list(disc.notes)
    env = ok("status", data, count=len(statuses), warnings=warnings,
             next_actions=_status_actions(states, statuses, skipped, built_before))
    return Outcome(env, 0, statuses)


def _backend_probe(settings: Settings) -> dict[str, Any]:
    """`index_probe` of an index behind a server (Postgres): reachable, counts, collections probed."""
    where_ = settings.index_location
    try:
        index = open_backend(settings, readonly=True)
    except SheafError as e:
        out = {"path": where_, "backend": settings.index_backend, "exists": e.code != "INDEX_NOT_FOUND",
               "problem": f"{e.code}: {e.message}"}
        if e.details.get("hint"):
            out["hint"] = e.details["hint"]
        return out
    try:
        out: dict[str, Any] = {"path": where_, "backend": settings.index_backend, "exists": True,
                               "indexed": len(index.indexed_papers())}
        cols = index.collections()
        out["collections"] = {k: v.name for k, v in cols.items()}
        out["embedded"] = max((index.embedded_papers(i) for i in cols.values()), default=0)
        health = check_backend(settings)
        out["vectors_queryable"] = bool(cols) and not health.damaged_collections
        if health.damaged_collections:
            out["problem"] = health.message
        out["rows"] = index.counts()
        return out
    except SheafError as e:
        return {"path": where_, "backend": settings.index_backend, "exists": True, "problem": f"{e.code}: {e.message}"}
    finally:
        index.close()


def index_probe(settings: Settings) -> dict[str, Any]:
    """Can the index be opened, and can a vector query run against the current model's collection?"""
    if settings.index_backend != "sqlite":
        return _backend_probe(settings)
    return probe_index_file(settings)


def doctor(settings: Settings, *, repair: bool = False, progress: Progress = _quiet) -> Outcome:
    """Cross-check library ↔ partitions ↔ artifacts ↔ index ↔ materialization metadata; with
    `repair`, fix the drift and check again (`view`: the diagnoses before and after; exit 1 while
    an issue remains). Without `repair` it writes nothing (no Dagster home is made)."""
    check_home_library(settings, "sheaf doctor")  # a repair against another library would drop every paper
    pipelines = _pipelines()

    if repair:
        defs = definitions(settings)
        instance = pipelines.build.command.get_instance(settings)
    else:
        defs, instance, _ = pipelines.entry.open_read_only(settings)
    found = pipelines.build.doctor.diagnose(settings, defs, instance)
    data: dict[str, Any] = {"library": str(settings.library), "before": found.to_dict()}
    final = found
    if repair and found.issues:
        data["repaired"] = pipelines.build.doctor.repair(settings, defs, instance, found, progress=progress)
        final = pipelines.build.doctor.diagnose(settings, defs, instance)
        data["after"] = final.to_dict()
    remaining = [i for i in final.issues if i.kind not in ("invalid_key", "build_running")]
    env = ok("doctor", {**data, "issues": [i.to_dict() for i in final.issues]}, count=len(final.issues),
             warnings=[f"{i.paper + ': ' if i.paper else ''}{i.kind}: {i.detail}" for i in remaining],
             next_actions=["run `sheaf doctor --repair`"] if remaining and not repair else [])
    return Outcome(env, 1 if remaining else 0, (found, final))


def recorded_unreadable(settings: Settings) -> dict[str, str]:
    """{paper: reason} of the papers the last build found unreadable, read without Dagster and
    without scanning the library (`pipelines.planning.noop.recorded_unreadable`)."""
    return _light().planning.noop.recorded_unreadable(settings)


def build_state(settings: Settings) -> dict[str, Any]:
    """The live state of the build of `settings`' home (`pipelines.build.live.build_state`), without
    loading the Definitions: what a program polling a running build asks for. Idle with no
    unfinished run: answered without loading Dagster (`pipelines.planning.noop.idle_without_dagster`), and
    so is a running build (`pipelines.planning.noop.running_without_dagster`); writes nothing."""
    light = _light()
    if light.planning.noop.idle_without_dagster(settings):
        return light.build_lock.idle_state()
    running = light.planning.noop.running_without_dagster(settings)
    if running is not None:  # a running build, read from the Dagster home's files
        return running
    if not settings.dagster_home.is_dir() and light.build_lock.lock_holder(settings.home) is None:
        return light.build_lock.idle_state()  # nothing ever ran here; and a reader makes no Dagster home
    pipelines = _pipelines()

    return pipelines.build.live.build_state(settings, pipelines.build.command.get_instance(settings))


def stop(settings: Settings, *, timeout: float = 300.0, progress: Progress = _quiet) -> Outcome:
    """`sheaf stop`: ask the running build to stop at the next paper boundary and wait until it
    has (its run canceled, exit 130 on its side). Nothing running: a no-op answer (exit 0); a
    build that died: its runs marked failed; still running after `timeout`: TIMEOUT."""
    pipelines = _pipelines()

    instance = pipelines.build.command.get_instance(settings)
    try:
        res = pipelines.build.live.stop_build(settings, instance, timeout=timeout, say=progress)
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
            "build_state": pipelines.build.live.build_state(settings, instance)}
    nxt = ["run `sheaf build` to carry on with what is left"] if res["outcome"] in ("stopped", "died") else []
    return Outcome(ok("stop", data, count=len(res["runs"]), next_actions=nxt), 0, res)
