"""The query commands, one implementation each: a typed request and a source of Retrievers in,
the envelope and its exit code out. The CLI passes a source that opens the index
(`Retriever.open`), the server one that lends from its `RetrieverPool`; both get the same
envelope, apart from ``data.engines.served_by``.

Light: nothing here imports the index code; the Retriever comes from the source.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from sheaf.core.envelope import SheafError, error, ok
from sheaf.service.requests import (
    GetRequest,
    GrepRequest,
    Outcome,
    PaperRequest,
    QueryRequest,
    RetrieveRequest,
    SearchRequest,
    TimelineRequest,
)

__all__ = ["RetrieverSource", "SERVED_BY", "search", "retrieve", "get", "timeline", "grep", "paper", "QUERIES",
           "run_query"]

#: A callable returning a context manager that yields a `sheaf.search.retriever.Retriever`
#: for one request (``Retriever.open`` itself is one: a Retriever closes on ``__exit__``).
RetrieverSource = Callable[[], AbstractContextManager[Any]]

#: Who ran the query: this process, or a running `sheaf serve`.
SERVED_BY = ("local", "server")


def _answer(command: str, retrievers: RetrieverSource, served_by: str,
            ask: Callable[[Any], Any]) -> Outcome:
    """Run `ask(retriever)` on a Retriever of `retrievers` → the command's envelope (exit 0), or
    its error envelope (exit 2) for a `SheafError`; anything else propagates (a bug: the CLI
    reports INTERNAL_ERROR, the server answers 500 and the client runs the query locally)."""
    assert served_by in SERVED_BY, served_by
    try:
        with retrievers() as r:
            res = ask(r)
    except SheafError as e:
        return Outcome(error(command, e.code, e.message, e.details), 2)
    engines = dict(res.data.get("engines") or {})  # the Retriever's own engine names, if it says
    engines["served_by"] = served_by
    return Outcome(ok(command, {**res.data, "engines": engines}, warnings=res.warnings,
                      next_actions=res.next_actions))


def search(req: SearchRequest, retrievers: RetrieverSource, *, served_by: str = "local") -> Outcome:
    return _answer(req.command, retrievers, served_by, lambda r: r.search(
        req.query, limit=req.limit, year_from=req.year_from, year_to=req.year_to,
        domains=list(req.domain) or None, authors=list(req.author) or None,
        collections=list(req.collection) or None, tags=list(req.tag) or None, kind=req.kind))


def retrieve(req: RetrieveRequest, retrievers: RetrieverSource, *, served_by: str = "local") -> Outcome:
    return _answer(req.command, retrievers, served_by, lambda r: r.retrieve(
        req.query, mode=req.mode, limit=req.limit, per_paper=req.per_paper, papers=list(req.paper) or None,
        kind=req.kind, full=req.full, year_from=req.year_from, year_to=req.year_to,
        domains=list(req.domain) or None, authors=list(req.author) or None,
        collections=list(req.collection) or None, tags=list(req.tag) or None, min_score=req.min_score))


def get(req: GetRequest, retrievers: RetrieverSource, *, served_by: str = "local") -> Outcome:
    return _answer(req.command, retrievers, served_by, lambda r: r.get(list(req.ids)))


def timeline(req: TimelineRequest, retrievers: RetrieverSource, *, served_by: str = "local") -> Outcome:
    return _answer(req.command, retrievers, served_by, lambda r: r.timeline(req.id, window=req.window))


def grep(req: GrepRequest, retrievers: RetrieverSource, *, served_by: str = "local") -> Outcome:
    return _answer(req.command, retrievers, served_by, lambda r: r.grep(
        req.term, papers=list(req.paper) or None, kind=req.kind))


def paper(req: PaperRequest, retrievers: RetrieverSource, *, served_by: str = "local") -> Outcome:
    return _answer(req.command, retrievers, served_by, lambda r: r.paper(req.key))


#: request class -> its implementation
QUERIES: dict[type, Callable[..., Outcome]] = {SearchRequest: search, RetrieveRequest: retrieve, GetRequest: get,
                                               TimelineRequest: timeline, GrepRequest: grep, PaperRequest: paper}


def run_query(req: QueryRequest, retrievers: RetrieverSource, *, served_by: str = "local") -> Outcome:
    """The envelope (and exit code) of any query request."""
    return QUERIES[type(req)](req, retrievers, served_by=served_by)
