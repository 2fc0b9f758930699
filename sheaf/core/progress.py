"""Process-wide progress listener and stop flag for long builds (no Dagster import).

`sheaf build` installs a listener (per-paper progress) and turns the first Ctrl-C, and every
SIGTERM (what `sheaf stop` sends to the build lock's holder), into a stop request, which the
per-paper loop honours at the next paper boundary: nothing is interrupted mid-paper.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Listener = Callable[[str, str, dict[str, Any]], None]

_listener: Listener | None = None
_phase: list[Callable[[str], None]] = []  # the phase listeners installed, outermost first
_stop = threading.Event()
_reason = ["Ctrl-C"]
_scopes = [0]  # depth of `stop_on_sigterm` blocks: a stop asked for inside one outlives a nested build


class StopRequested(Exception):
    """Raised at a paper boundary after the user asked the build to stop."""


def notify(step: str, paper: str, metadata: dict[str, Any]) -> None:
    """Tell the listener (if any) that `paper` finished `step`."""
    if _listener is not None:
        _listener(step, paper, metadata)


def phase(text: str) -> None:
    """Say what the build is doing now ("scanning the library", "parse 3/37", "loading the
    embedding model") to the phase listener, if any: what a piped build's heartbeat line says
    (`sheaf.cli.progress_view`)."""
    for listener in list(_phase):
        listener(text)


@contextmanager
def phase_listener(listener: Callable[[str], None]) -> Iterator[None]:
    """Add `listener` to those `phase` tells, for the duration of the block."""
    _phase.append(listener)
    try:
        yield
    finally:
        _phase.remove(listener)


def stop_requested() -> bool:
    return _stop.is_set()


def stop_reason() -> str:
    """Who asked for the stop ("Ctrl-C", "`sheaf stop` (SIGTERM)", ...)."""
    return _reason[0]


def check_stop() -> None:
    """Raise StopRequested when a stop was asked for (call between papers)."""
    if _stop.is_set():
        raise StopRequested(f"stopped at a paper boundary ({_reason[0]})")


#: Name of the threads `while_polled` runs work on: one still alive at the process's exit was
#: abandoned by a stop (`sheaf.core.heap.exit_code` then ends the process without waiting for it).
POLLED_THREAD = "sheaf-polled"


def while_polled(work: Callable[[], Any], poll: Callable[[], None] | None) -> Any:
    """`work()` (a model load, an import), run on a thread of its own while `poll` is called every
    quarter second (a build's stop check, which raises to stop: the work is then left to finish in
    the background and its result dropped); without `poll`, plainly."""
    if poll is None:
        return work()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as e:  # noqa: BLE001 - handed back to the waiting thread
            box["error"] = e

    t = threading.Thread(target=run, name=POLLED_THREAD, daemon=True)
    t.start()
    while t.is_alive():
        t.join(0.25)
        if t.is_alive():
            poll()
    if "error" in box:
        raise box["error"]
    return box["value"]


def abandoned_work() -> bool:
    """Whether work `while_polled` left behind on a stop is still running."""
    return any(t.name == POLLED_THREAD and t.is_alive() for t in threading.enumerate())


def _on_sigterm(signum: int, frame: Any) -> None:
    request_stop("`sheaf stop` (SIGTERM)")


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """For a whole build (sync and plan included): SIGTERM asks for a stop at the next paper
    boundary instead of killing the process. Only in the main thread (signals are delivered
    there); elsewhere a no-op."""
    in_main = threading.current_thread() is threading.main_thread()
    if not _scopes[0]:
        _stop.clear()
    _scopes[0] += 1
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    try:
        yield
    finally:
        _scopes[0] -= 1
        if in_main and previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if not _scopes[0]:
            _stop.clear()


@contextmanager
def interactive_build(listener: Listener | None) -> Iterator[None]:
    """Install `listener` and the signal handlers (first Ctrl-C: stop at the next paper
    boundary, second: interrupt at once; SIGTERM: stop at the next paper boundary) for the
    duration of a build."""
    global _listener
    if not _scopes[0]:
        _stop.clear()
    previous_listener = _listener
    _listener = listener
    previous_handlers: dict[int, Any] = {}
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        def on_sigint(signum: int, frame: Any) -> None:
            if _stop.is_set():
                raise KeyboardInterrupt
            request_stop("Ctrl-C")

        previous_handlers[signal.SIGINT] = signal.signal(signal.SIGINT, on_sigint)
        previous_handlers[signal.SIGTERM] = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        _listener = previous_listener
        for sig, handler in previous_handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
        if not _scopes[0]:
            _stop.clear()


def request_stop(reason: str = "Ctrl-C") -> None:
    """Ask the running build to stop at the next paper boundary (signal handlers, a stdin
    reader of the PaperForge entry, tests)."""
    if not _stop.is_set():
        _reason[0] = reason
    _stop.set()
