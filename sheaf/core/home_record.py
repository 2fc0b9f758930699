"""A home belongs to one library: `<home>/home.json` records the library a home was built from.

The first build of a home writes the record (the library's absolute path and its layout). From
then on every command that is not given a library (no ``--library``, no ``SHEAF_LIBRARY``) uses
the recorded one (`sheaf.core.settings.get_settings` reads it), so a later plain ``sheaf build``
can never mistake the bundled sample library's default path for the user's library and drop
the user's papers from the index. A command that names another library for a recorded home is
refused (``LIBRARY_MISMATCH``) before anything is scanned or written; ``sheaf build
--switch-library`` is the one way to give a home a new library.

A home built before homes recorded their library (an index, no record) is trusted with a
library only when the command names it (it is then recorded), or when both the home and the
library are the defaults (``./data`` and the bundled sample library: the README's first command).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sheaf.core.envelope import SheafError

RECORD_NAME = "home.json"
RECORD_VERSION = 1

#: How a setting's library was chosen (``Settings.library_source``).
GIVEN = "given"          # --library, the PaperForge vault, an explicit override
ENVIRONMENT = "environment"  # SHEAF_LIBRARY
RECORDED = "recorded"    # <home>/home.json
DEFAULT = "default"      # the bundled sample library's default path


@dataclass(frozen=True, slots=True)
class HomeRecord:
    """What `<home>/home.json` says: the library's absolute path, the same path relative to the
    home (a home inside its library, as a PaperForge vault's, or a home and library moved
    together stay matched), and the library's layout."""

    recorded: Path  # the absolute path, as recorded
    relative: Path | None  # the library relative to the home, as recorded
    layout: str
    recorded_at: str
    path: Path  # the record file itself

    @property
    def candidates(self) -> tuple[Path, ...]:
        """The folders the record may name: the library relative to the home's place now (a home
        and library moved or copied together, a PaperForge vault's home inside the vault), then
        the absolute path as recorded."""
        if self.relative is None:
            return (self.recorded,)
        rel = absolute(self.path.parent / self.relative)
        return (rel,) if rel == self.recorded else (rel, self.recorded)

    @property
    def library(self) -> Path:
        """The recorded library: the first candidate that exists (the absolute path when none does)."""
        return next((c for c in self.candidates if c.is_dir()), self.recorded)

    def names(self, library: Path | str) -> bool:
        """True when `library` is the recorded library (any candidate)."""
        return any(same_library(c, library) for c in self.candidates)

    def to_dict(self) -> dict[str, Any]:
        return {"library": str(self.library), "layout": self.layout, "recorded_at": self.recorded_at,
                "record": str(self.path)}


def record_path(home: Path | str) -> Path:
    return Path(home) / RECORD_NAME


def read_record(home: Path | str) -> HomeRecord | None:
    """The home's record, or None when it has none. A record that cannot be read is a
    ``BAD_INPUT`` naming the file (never a silent fallback to the default library)."""
    path = record_path(home)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SheafError("BAD_INPUT", f"the home's library record {path} cannot be read: {e.strerror or e}",
                         {"record": str(path)}, hint=f"fix its permissions, or delete {path} and run "
                         "`sheaf build --library PATH` with the home's library") from None
    try:
        data = json.loads(raw)
        library, rel = data["library"], data.get("library_relative")
        if not isinstance(library, str) or not library:
            raise ValueError("no library path")
        return HomeRecord(Path(library), Path(rel) if isinstance(rel, str) and rel else None,
                          str(data.get("layout") or ""), str(data.get("recorded_at") or ""), path)
    except (ValueError, KeyError, TypeError) as e:
        raise SheafError("BAD_INPUT", f"the home's library record {path} is damaged ({e})",
                         {"record": str(path)}, hint=f"delete {path} and run `sheaf build --library PATH` "
                         "with the home's library") from None


def write_record(home: Path | str, library: Path | str, layout: str) -> HomeRecord:
    """Record `library` as the home's library (atomically: a temporary file, then a rename)."""
    path = record_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    lib = absolute(library)
    rel = Path(os.path.relpath(lib, absolute(path.parent)))
    rec = HomeRecord(lib, rel, layout, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), path)
    body = {"version": RECORD_VERSION, "library": str(lib), "library_relative": str(rel), "layout": layout,
            "recorded_at": rec.recorded_at}
    tmp = path.with_name(f".{RECORD_NAME}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return rec


def absolute(path: Path | str) -> Path:
    """`path` made absolute and normalized without resolving links (a library reached through a
    link is recorded as the user named it)."""
    return Path(os.path.normpath(os.path.abspath(os.path.expanduser(str(path)))))


def same_library(a: Path | str, b: Path | str) -> bool:
    """True when `a` and `b` name the same folder (the same path, or the same folder on disk)."""
    pa, pb = absolute(a), absolute(b)
    if pa == pb:
        return True
    try:
        return os.path.samefile(pa, pb)
    except OSError:
        return False


def mismatch(home: Path | str, record: HomeRecord, library: Path | str, how: str) -> SheafError:
    """The ``LIBRARY_MISMATCH`` error: the home, both libraries, and the two ways out."""
    lib = absolute(library)
    return SheafError(
        "LIBRARY_MISMATCH",
        f"the home {absolute(home)} holds the index of {record.library}, not of {lib} ({how})",
        {"home": str(absolute(home)), "recorded_library": str(record.library), "library": str(lib),
         "record": str(record.path)},
        hint="leave out --library (and SHEAF_LIBRARY) to use the recorded library; pass --switch-library "
             "to rebuild this home from the new library; or set SHEAF_HOME to another folder for it")


def unrecorded(home: Path | str, library: Path | str) -> SheafError:
    """The error of a home built before homes recorded their library, given no library."""
    return SheafError(
        "LIBRARY_MISMATCH",
        f"the home {absolute(home)} holds an index but does not record which library it was built from, "
        f"and no library was named (the default would be {absolute(library)})",
        {"home": str(absolute(home)), "library": str(absolute(library)), "record": str(record_path(home))},
        hint="run `sheaf build --library PATH` once with the library this home was built from: "
             "it is recorded, and later commands use it")


def check(home: Path | str, library: Path | str, source: str, *, built: bool, is_default_home: bool,
          command: str = "this command") -> HomeRecord | None:
    """Refuse (``LIBRARY_MISMATCH``) a library that is not the home's: a recorded home given
    another library, or an unrecorded home that holds an index given no library at all (except
    the default home with the default library). Returns the record (None when there is none)."""
    rec = read_record(home)
    if rec is not None:
        if not rec.names(library):
            how = {"environment": "set by SHEAF_LIBRARY", "given": "given to " + command}.get(source, source)
            raise mismatch(home, rec, library, how)
        return rec
    if built and source == DEFAULT and not is_default_home:
        raise unrecorded(home, library)
    return None
