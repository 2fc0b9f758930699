"""What `sheaf build` shows while it runs, from the build's human lines and structured events.

- `--events`: each event one NDJSON line on stdout (flushed at once, for the program reading
  it); the human lines go to stderr, plain.
- `--json`: nothing while it runs (the envelope comes at the end).
- a person at a terminal (stderr is a TTY): one rich progress bar on stderr (papers done /
  total, passages embedded, rate, ETA) with a line above it per failure or warning.
- otherwise (a log, a pipe): the plain lines, and a heartbeat line (the phase, papers done,
  seconds) after every `HEARTBEAT` seconds without one, so a log never goes silent for minutes
  while a step parses or embeds a batch of papers. The phase ("scanning the library",
  "planning", "parse 3/37", "loading the embedding model", "embed 5/37") is what the build says
  through `sheaf.core.progress.phase`, which the view listens to while it is open.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import ExitStack
from typing import IO, Any

from sheaf.core.progress import phase_listener

__all__ = ["BuildView", "event_line", "HEARTBEAT"]

#: Seconds of silence after which a piped build prints a heartbeat line.
HEARTBEAT = 10.0


def event_line(event: dict[str, Any]) -> str:
    """One NDJSON line (no newline) of a build event."""
    return json.dumps(event, ensure_ascii=False, default=str)


class BuildView:
    """Callbacks for `sheaf.service.builds.build`: `line(message)` and `event(dict)`; use it as
    a context manager (the bar is closed on exit)."""

    def __init__(self, *, json_only: bool = False, events: bool = False, stdout: IO[str] | None = None,
                 stderr: IO[str] | None = None, bar: bool | None = None, heartbeat: float = HEARTBEAT) -> None:
        self.stdout, self.stderr = stdout or sys.stdout, stderr or sys.stderr
        self.json_only, self.events = json_only, events
        if bar is None:
            bar = not json_only and not events and _is_tty(self.stderr)
        self._bar = bar
        self._progress: Any = None
        self._task: Any = None
        self._said_at = self._began = time.monotonic()
        self._done, self._total = 0, 0
        self._phase = "starting"
        self._stack = ExitStack()
        self._quit = threading.Event()
        self._lock = threading.Lock()
        self._beat: threading.Thread | None = None
        if not bar and not json_only and not events and heartbeat > 0:
            self._beat = threading.Thread(target=self._heartbeat, args=(heartbeat,), name="sheaf-heartbeat",
                                          daemon=True)

    # --- the callbacks -------------------------------------------------------------------------

    def line(self, message: str) -> None:
        if self.json_only and not self.events:
            return
        if self.events:
            print(message, file=self.stderr, flush=True)
        elif self._progress is not None:
            if not message.startswith("✓"):  # the bar stands for the per-paper lines
                self._progress.console.print(message, markup=False, highlight=False)
        else:
            self._print(message)

    def _print(self, message: str) -> None:
        with self._lock:
            print(message, file=self.stdout, flush=True)
            self._said_at = time.monotonic()

    def _heartbeat(self, every: float) -> None:
        while not self._quit.wait(min(every, 1.0)):
            if time.monotonic() - self._said_at >= every:
                done = f"; {self._done} of {self._total} papers done" if self._total else ""
                self._print(f"… still building: {self._phase}{done} ({time.monotonic() - self._began:.0f} s)")

    def phase(self, text: str) -> None:
        """What the build is doing now (`sheaf.core.progress.phase`), for the heartbeat."""
        self._phase = text

    def event(self, event: dict[str, Any]) -> None:
        if event.get("event") == "start":
            self._total = int(event.get("total") or 0)
        elif event.get("event") == "progress":
            self._done = int(event.get("current") or 0)
        if self.events:
            self.stdout.write(event_line(event) + "\n")
            self.stdout.flush()
            return
        if not self._bar:
            return
        kind = event.get("event")
        if kind == "start" and event.get("total"):
            self._start(int(event["total"]))
        elif kind == "progress" and self._progress is not None:
            self._progress.update(self._task, completed=int(event["current"]),
                                  embedded=int(event.get("embeddings_computed") or 0),
                                  paper=str(event.get("item_id") or ""))
        elif kind == "warning" and self._progress is not None and "item_id" in event:
            self._progress.console.print(f"✗ {event['message']}", markup=False, highlight=False)

    # --- the bar ------------------------------------------------------------------------------

    def _start(self, total: int) -> None:
        from rich.console import Console  # only for a person's terminal: not in a program's process
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.text import Text

        class RateColumn(ProgressColumn):
            def render(self, task: Any) -> Text:
                speed = task.finished_speed or task.speed
                return Text("" if not speed else f"{speed:.2f} papers/s")

        self.close()
        self._progress = Progress(
            TextColumn("building"), BarColumn(), MofNCompleteColumn(), TextColumn("papers"),
            TextColumn("· {task.fields[embedded]} passages embedded"), RateColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[paper]}"),
            console=Console(file=self.stderr, force_terminal=True), transient=False)
        self._task = self._progress.add_task("build", total=total, embedded=0, paper="")
        self._progress.start()

    def close(self) -> None:
        self._stack.close()
        self._quit.set()
        if self._beat is not None and self._beat.is_alive():
            self._beat.join()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> "BuildView":
        self._stack.enter_context(phase_listener(self.phase))
        if self._beat is not None:
            self._beat.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _is_tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
