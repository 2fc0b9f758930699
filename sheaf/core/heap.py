"""The cyclic garbage collector and the objects a Sheaf process keeps for its whole life.

Importing the Dagster side (`pipelines`, and Dagster with it) makes ~295,000 objects that live
until the process ends: classes, functions, schemas. CPython's collector scans every one of them
again at each full collection, and once more when the interpreter exits. On a one-paper edit of a
10,000-paper library the collector took 0.8-0.9 s of `sheaf build`'s 3.6-4.4 s, and the exit
0.6 s more.

Two remedies, both CPython's documented ones (`gc.freeze`):

- `long_lived_imports`: the block's imports run with the collector paused (they make objects,
  never garbage worth a scan), then every object the process holds moves to the permanent
  generation the collector skips. Garbage made later is collected as before.
- `quick_exit`: a process about to exit freezes what it holds, so the interpreter's last
  collections scan nothing. `atexit` handlers still run, standard streams are still flushed and
  objects outside reference cycles are still freed as their modules are torn down; the memory of
  the cycles goes back with the process. Only for a process of its own (the console script),
  never a library call a caller's process goes on after.
"""
from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from sheaf.core.progress import abandoned_work

__all__ = ["quick_exit", "long_lived_imports"]


@contextmanager
def long_lived_imports() -> Iterator[None]:
    """Run the block's imports with the collector paused; when they imported anything, freeze
    what the process holds (`gc.freeze`). A block that imports nothing new (the modules are
    already loaded) changes nothing, so a process that calls it often (a server, the tests)
    freezes once, not its later garbage."""
    before = len(sys.modules)
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if len(sys.modules) != before:
            gc.freeze()
        if enabled:
            gc.enable()


def quick_exit(code: int) -> int:
    """`code`, once the process's objects are frozen: for `sys.exit(quick_exit(main()))` in a
    process's own entry point (the interpreter's exit then skips the scan of every object). When a
    stop left a load or import running, which the interpreter's exit would wait for, the process
    exits here, with `code`, its output flushed."""
    gc.freeze()
    if abandoned_work():  # a load or import a stop left running: the interpreter's exit would wait for it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
