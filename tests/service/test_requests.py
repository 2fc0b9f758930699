"""The typed query requests: the CLI's options and defaults, the JSON round trip, and BAD_QUERY
for a body that does not fit (also as the server's answer to such a body)."""
from __future__ import annotations

import json

import pytest

from sheaf.cli.parser import build_parser, request_from_args
from sheaf.core.defaults import DEFAULT_LIMIT, DEFAULT_PER_PAPER, DEFAULT_WINDOW
from sheaf.core.envelope import SheafError
from sheaf.serve.server import answer
from sheaf.service.requests import (
    REQUESTS,
    SERVED_COMMANDS,
    GetRequest,
    GrepRequest,
    RetrieveRequest,
    SearchRequest,
    TimelineRequest,
    request_from_dict,
)

EXAMPLES = [
    SearchRequest("bone loss"),
    SearchRequest("QLN-482", limit=3, year_from=2020, year_to=2023, domain=("Medicine", "Biology")),
    RetrieveRequest("awake cough frequency"),
    RetrieveRequest("cough", mode="lexical", limit=30, per_paper=0, paper=("R4N8DWTE",), kind="object", full=True),
    GetRequest(("ab12", "cd34")),
    TimelineRequest("ab12"),
    TimelineRequest("ab12", window=0),
    GrepRequest("µm"),
    GrepRequest("QLN 482", paper=("R4N8DWTE", "QX7HK2MA")),
]


@pytest.mark.parametrize("req", EXAMPLES, ids=lambda r: f"{r.command}")
def test_round_trip(req):
    wire = json.loads(json.dumps(req.to_dict()))  # through JSON, as the client sends it
    assert type(req).from_dict(wire) == req
    assert request_from_dict(req.command, wire) == req
    assert set(wire) == set(type(req).field_names())


def test_one_request_per_served_command():
    assert tuple(REQUESTS) == SERVED_COMMANDS == ("search", "retrieve", "get", "timeline", "grep")
    assert all(REQUESTS[c].command == c for c in SERVED_COMMANDS)


def test_defaults_are_the_cli_defaults():
    p = build_parser()
    cases = {("search", "bone", "loss"): SearchRequest("bone loss", limit=DEFAULT_LIMIT),
             ("retrieve", "bone"): RetrieveRequest("bone", mode="hybrid", limit=DEFAULT_LIMIT,
                                                   per_paper=DEFAULT_PER_PAPER, kind="all", full=False),
             ("get", "a", "b"): GetRequest(("a", "b")),
             ("timeline", "a"): TimelineRequest("a", window=DEFAULT_WINDOW),
             ("grep", "QLN", "482"): GrepRequest("QLN 482")}
    for argv, expected in cases.items():
        assert request_from_args(p.parse_args(list(argv))) == expected
        assert REQUESTS[argv[0]].from_dict({k: v for k, v in expected.to_dict().items()
                                            if k in ("query", "ids", "id", "term")}) == expected
    full = p.parse_args(["retrieve", "x", "--mode", "lexical", "--limit", "3", "--per-paper", "0", "--paper", "A",
                         "--paper", "B", "--kind", "body", "--full"])
    assert request_from_args(full) == RetrieveRequest("x", mode="lexical", limit=3, per_paper=0, paper=("A", "B"),
                                                      kind="body", full=True)
    s = p.parse_args(["search", "x", "--year-from", "2001", "--year-to", "2002", "--domain", "D"])
    assert request_from_args(s) == SearchRequest("x", year_from=2001, year_to=2002, domain=("D",))


BAD = [
    ("search", {"query": "x", "nope": 1}),            # unknown field
    ("search", {"query": "x", "json": True}),         # a CLI flag is not a request field
    ("search", {}),                                   # missing the query
    ("search", {"query": ["bone", "loss"]}),          # words are one string on the wire
    ("search", {"query": "x", "limit": "5"}),
    ("search", {"query": "x", "limit": True}),        # a bool is not an integer
    ("search", {"query": "x", "limit": 2.0}),
    ("search", {"query": "x", "year_from": "2020"}),
    ("search", {"query": "x", "domain": "Medicine"}),  # a list, not a string
    ("search", ["x"]),                                # not an object
    ("retrieve", {"query": "x", "mode": "fuzzy"}),
    ("retrieve", {"query": "x", "kind": "pdf"}),
    ("retrieve", {"query": "x", "full": 1}),
    ("retrieve", {"query": "x", "paper": [1, 2]}),
    ("get", {"ids": []}),
    ("get", {"ids": "ab12"}),
    ("timeline", {"id": "ab12", "window": None}),
    ("grep", {"term": None}),
    ("parse", {"path": "x"}),                         # not a query command
]


@pytest.mark.parametrize("command,body", BAD, ids=[f"{c}-{i}" for i, (c, _) in enumerate(BAD)])
def test_bad_fields_are_bad_query(command, body):
    with pytest.raises(SheafError) as ei:
        request_from_dict(command, body)
    assert ei.value.code == "BAD_QUERY" and ei.value.details["hint"]
    out = answer(command, body, retrievers=lambda: pytest.fail("a refused request opens no index"))
    assert out.exit_code == 2 and out.envelope["ok"] is False
    assert out.envelope["command"] == command and out.envelope["error"]["code"] == "BAD_QUERY"


def test_constructor_checks_types_too():
    with pytest.raises(SheafError):
        RetrieveRequest("x", mode="fuzzy")
    with pytest.raises(SheafError):
        SearchRequest(None)  # type: ignore[arg-type]
    assert SearchRequest("x", domain=["A"]).domain == ("A",)  # a list is kept as a tuple (hashable)
    hash(SearchRequest("x", domain=["A"]))
