"""Process-wide progress listener and stop flag for long builds (no Dagster import).

`sheaf build` installs a listener (per-paper progress lines) and turns the first Ctrl-C into
a stop request, which the per-paper loop honours at the next paper boundary.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Listener = Callable[[str, str, dict[str, Any]], None]

_listener: Listener | None = None
_stop = threading.Event()


class StopRequested(Exception):
    """Raised at a paper boundary after the user asked the build to stop."""


def notify(step: str, paper: str, metadata: dict[str, Any]) -> None:
    """Tell the listener (if any) that `paper` finished `step`."""
    if _listener is not None:
        _listener(step, paper, metadata)


def stop_requested() -> bool:
    return _stop.is_set()


def check_stop() -> None:
    """Raise StopRequested when a stop was asked for (call between papers)."""
    if _stop.is_set():
        raise StopRequested("stopped at a paper boundary (Ctrl-C)")


@contextmanager
def interactive_build(listener: Listener | None) -> Iterator[None]:
    """Install `listener` and a SIGINT handler (first Ctrl-C: stop at the next paper boundary;
    second: interrupt at once) for the duration of a build."""
    global _listener
    _stop.clear()
    previous_listener = _listener
    _listener = listener
    previous_handler = None
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        def on_sigint(signum: int, frame: Any) -> None:
            if _stop.is_set():
                raise KeyboardInterrupt
            _stop.set()

        previous_handler = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        _listener = previous_listener
        if in_main and previous_handler is not None:
            signal.signal(signal.SIGINT, previous_handler)
        _stop.clear()


def request_stop() -> None:
    """Ask the running build to stop at the next paper boundary (tests, signal handlers)."""
    _stop.set()
