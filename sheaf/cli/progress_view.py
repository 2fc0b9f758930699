"""What `sheaf build` shows while it runs, from the build's human lines and structured events.

- `--events`: each event one NDJSON line on stdout (flushed at once, for the program reading
  it); the human lines go to stderr, plain.
- `--json`: nothing while it runs (the envelope comes at the end).
- a person at a terminal (stderr is a TTY): one rich progress bar on stderr (papers done /
  total, passages embedded, rate, ETA) with a line above it per failure or warning.
- otherwise (a log, a pipe): the plain lines, as before.
"""
from __future__ import annotations

import json
import sys
from typing import IO, Any

__all__ = ["BuildView", "event_line"]


def event_line(event: dict[str, Any]) -> str:
    """One NDJSON line (no newline) of a build event."""
    return json.dumps(event, ensure_ascii=False, default=str)


class BuildView:
    """Callbacks for `sheaf.service.pipeline.build`: `line(message)` and `event(dict)`; use it as
    a context manager (the bar is closed on exit)."""

    def __init__(self, *, json_only: bool = False, events: bool = False, stdout: IO[str] | None = None,
                 stderr: IO[str] | None = None, bar: bool | None = None) -> None:
        self.stdout, self.stderr = stdout or sys.stdout, stderr or sys.stderr
        self.json_only, self.events = json_only, events
        if bar is None:
            bar = not json_only and not events and _is_tty(self.stderr)
        self._bar = bar
        self._progress: Any = None
        self._task: Any = None

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
            print(message, file=self.stdout, flush=True)

    def event(self, event: dict[str, Any]) -> None:
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
            BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn,
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
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> "BuildView":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _is_tty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
