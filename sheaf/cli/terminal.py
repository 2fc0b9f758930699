"""The terminal's width, without importing shutil (with the bz2/lzma/zlib it pulls in: ~3 ms of
a cold `sheaf search`)."""
from __future__ import annotations

import os
import sys


def terminal_columns(fallback: int) -> int:
    """`shutil.get_terminal_size((fallback, 24)).columns`."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = fallback
        columns = columns or fallback
    return columns
