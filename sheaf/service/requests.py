"""Typed requests of the query commands (`search`, `retrieve`, `get`, `timeline`, `grep`): one
frozen dataclass per command, the CLI's options with the CLI's defaults, and the JSON form
the server reads (`to_dict` / `from_dict`). Light: stdlib and `sheaf.core` only (the CLI
imports this before every query).

Validation is by type and choice (an unknown field, a string where a number belongs, a mode
that does not exist: `SheafError("BAD_QUERY")`); ranges (``limit >= 1``, ...) are the
Retriever's to check, so a request refused there is refused the same way from every door.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, NamedTuple

from sheaf.core.defaults import DEFAULT_LIMIT, DEFAULT_PER_PAPER, DEFAULT_WINDOW, KINDS, MODES
from sheaf.core.envelope import SheafError

__all__ = ["SearchRequest", "RetrieveRequest", "GetRequest", "TimelineRequest", "GrepRequest",
           "PaperRequest", "QueryRequest", "REQUESTS", "SERVED_COMMANDS", "Outcome", "request_from_dict"]


class Outcome(NamedTuple):
    """What a command answers: its envelope and the process exit code that goes with it.
    `view`: in-memory objects behind the envelope for a readable rendering (never sent)."""

    envelope: dict[str, Any]
    exit_code: int = 0
    view: Any = None


# --- field kinds -------------------------------------------------------------------------------

_STR, _INT, _OPT_INT, _BOOL, _STRS, _STRS1 = "a string", "an integer", "an integer or null", "a boolean", \
    "a list of strings", "a non-empty list of strings"
_OPT_NUM = "a number or null"


def _bad(command: str, message: str, name: str | None = None) -> SheafError:
    details = {"command": command} | ({"field": name} if name else {})
    return SheafError("BAD_QUERY", message, details,
                      hint=f"see `sheaf {command} --help`; fields: {', '.join(REQUESTS[command].field_names())}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _checked(command: str, name: str, kind: str | tuple[str, ...], value: Any) -> Any:
    """`value` as the field holds it (a list becomes a tuple), or BAD_QUERY."""
    if isinstance(kind, tuple):  # a choice
        if isinstance(value, str) and value in kind:
            return value
        raise _bad(command, f"{name} must be one of {', '.join(kind)}, not {value!r}", name)
    if kind in (_STRS, _STRS1):
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value) \
                and (value or kind == _STRS):
            return tuple(value)
    elif kind == _STR and isinstance(value, str) or kind == _BOOL and isinstance(value, bool) \
            or kind == _INT and _is_int(value) or kind == _OPT_INT and (value is None or _is_int(value)):
        return value
    elif kind == _OPT_NUM and (value is None or isinstance(value, (int, float)) and not isinstance(value, bool)):
        return None if value is None else float(value)
    raise _bad(command, f"{name} must be {kind}, not {value!r}", name)


class _Request:
    """Shared behaviour of the request dataclasses (each declares `command` and `_kinds`)."""

    command: ClassVar[str]
    _kinds: ClassVar[dict[str, str | tuple[str, ...]]]

    def __post_init__(self) -> None:
        for name, kind in self._kinds.items():
            object.__setattr__(self, name, _checked(self.command, name, kind, getattr(self, name)))

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """The JSON body of ``POST /v1/<command>``."""
        out: dict[str, Any] = {}
        for name in self.field_names():
            value = getattr(self, name)
            out[name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Any:
        """The request a JSON body describes; absent fields take the CLI's defaults; an unknown,
        missing or ill-typed field: BAD_QUERY."""
        if not isinstance(data, dict):
            raise _bad(cls.command, f"a {cls.command} request must be a JSON object, not {type(data).__name__}")
        names = cls.field_names()
        unknown = sorted(str(k) for k in data if k not in names)
        if unknown:
            raise _bad(cls.command, f"unknown field(s) for {cls.command}: {', '.join(unknown)}", unknown[0])
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            raise _bad(cls.command, f"missing field(s) for {cls.command}: {', '.join(missing)}", missing[0])
        return cls(**data)


@dataclass(frozen=True)
class SearchRequest(_Request):
    """`sheaf search`: papers matching words in their metadata or full text (lexical)."""

    command: ClassVar[str] = "search"
    _kinds: ClassVar[dict[str, Any]] = {"query": _STR, "limit": _INT, "year_from": _OPT_INT,
                                        "year_to": _OPT_INT, "domain": _STRS, "author": _STRS,
                                        "collection": _STRS, "tag": _STRS, "kind": KINDS}
    query: str
    limit: int = DEFAULT_LIMIT
    year_from: int | None = None
    year_to: int | None = None
    domain: tuple[str, ...] = ()
    author: tuple[str, ...] = ()
    collection: tuple[str, ...] = ()
    tag: tuple[str, ...] = ()
    kind: str = "all"


@dataclass(frozen=True)
class RetrieveRequest(_Request):
    """`sheaf retrieve`: the best passages for a question (lexical, semantic or hybrid)."""

    command: ClassVar[str] = "retrieve"
    _kinds: ClassVar[dict[str, Any]] = {"query": _STR, "mode": MODES, "limit": _INT, "per_paper": _INT,
                                        "paper": _STRS, "kind": KINDS, "full": _BOOL, "year_from": _OPT_INT,
                                        "year_to": _OPT_INT, "domain": _STRS, "author": _STRS,
                                        "collection": _STRS, "tag": _STRS, "min_score": _OPT_NUM}
    query: str
    mode: str = "hybrid"
    limit: int = DEFAULT_LIMIT
    per_paper: int = DEFAULT_PER_PAPER
    paper: tuple[str, ...] = ()
    kind: str = "all"
    full: bool = False
    year_from: int | None = None
    year_to: int | None = None
    domain: tuple[str, ...] = ()
    author: tuple[str, ...] = ()
    collection: tuple[str, ...] = ()
    tag: tuple[str, ...] = ()
    min_score: float | None = None


@dataclass(frozen=True)
class GetRequest(_Request):
    """`sheaf get`: whole units by short id."""

    command: ClassVar[str] = "get"
    _kinds: ClassVar[dict[str, Any]] = {"ids": _STRS1}
    ids: tuple[str, ...]


@dataclass(frozen=True)
class TimelineRequest(_Request):
    """`sheaf timeline`: the units before and after one, in reading order."""

    command: ClassVar[str] = "timeline"
    _kinds: ClassVar[dict[str, Any]] = {"id": _STR, "window": _INT}
    id: str
    window: int = DEFAULT_WINDOW


@dataclass(frozen=True)
class GrepRequest(_Request):
    """`sheaf grep`: every occurrence of a term or code, verbatim, with offsets."""

    command: ClassVar[str] = "grep"
    _kinds: ClassVar[dict[str, Any]] = {"term": _STR, "paper": _STRS, "kind": KINDS}
    term: str
    paper: tuple[str, ...] = ()
    kind: str = "all"


@dataclass(frozen=True)
class PaperRequest(_Request):
    """A paper's metadata and section outline (`sheaf mcp`'s ``sheaf://paper/{key}`` resource;
    not a command of the CLI or of `sheaf serve`)."""

    command: ClassVar[str] = "paper"
    _kinds: ClassVar[dict[str, Any]] = {"key": _STR}
    key: str


QueryRequest = SearchRequest | RetrieveRequest | GetRequest | TimelineRequest | GrepRequest | PaperRequest

#: command name -> its request class
REQUESTS: dict[str, type] = {c.command: c for c in (SearchRequest, RetrieveRequest, GetRequest,
                                                     TimelineRequest, GrepRequest)}

#: The commands a running `sheaf serve` answers.
SERVED_COMMANDS = tuple(REQUESTS)


def request_from_dict(command: str, data: Any) -> QueryRequest:
    """The typed request of `command` from its JSON body (BAD_QUERY for a command that is not
    a query command, or a body that does not fit)."""
    cls = REQUESTS.get(command)  # the served commands only
    if cls is None:
        raise SheafError("BAD_QUERY", f"not a query command: {command!r}", {"command": command},
                         hint=f"one of {', '.join(SERVED_COMMANDS)}")
    return cls.from_dict(data)
