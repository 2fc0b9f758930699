"""Every use of a private Dagster API lives here, so an upgrade has one place to check."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def deferred_interrupts() -> Iterator[list[bool]]:
    """Hold back Ctrl-C while the block runs (one paper); afterwards `flag[0]` tells whether
    one arrived, so the caller can stop at the paper boundary instead of mid-transaction."""
    from dagster._utils.interrupts import capture_interrupts, check_captured_interrupt

    flag = [False]
    with capture_interrupts():
        try:
            yield flag
        finally:
            flag[0] = check_captured_interrupt()
