"""`sheaf mcp`'s pieces that need no server: the filters follow the requests, the token budget,
the loopback rule (the protocol itself: tests/cli/test_mcp.py)."""
from __future__ import annotations

import json

import pytest

from sheaf.cli.mcp_server import FILTERS, _fit, _render_units, check_http_host, estimate_tokens
from sheaf.core.envelope import SheafError
from sheaf.service.requests import RetrieveRequest, SearchRequest


def test_every_filter_of_the_requests_is_a_tool_input():
    # search's fields besides the query and the limit are its filters; retrieve has them all
    search_filters = set(SearchRequest.field_names()) - {"query", "limit"}
    assert set(FILTERS) == search_filters
    assert set(FILTERS) <= set(RetrieveRequest.field_names())
    for name, (_, default, doc) in FILTERS.items():
        assert doc and SearchRequest.from_dict({"query": "x", name: default})


def _answer(n: int, text_len: int) -> dict:
    return {"query": "q", "matches": [{"short_id": f"id{i:02d}", "paper": "P", "section_path": ["S"],
                                       "page_span": [1, 1], "kind": "body", "text": "w " * (text_len // 2)}
                                      for i in range(n)], "warnings": [], "next_actions": []}


@pytest.mark.parametrize("budget", [150, 400, 1000, 5000])
def test_the_budget_is_never_exceeded_and_what_is_left_out_is_named(budget):
    d = _fit(_answer(12, 400), budget, lambda x: _render_units("head", x), lambda m: m["short_id"], "get")
    assert d["tokens"] <= budget
    assert estimate_tokens(json.dumps(d, ensure_ascii=False, separators=(",", ":"))) <= budget
    assert estimate_tokens(_render_units("head", d)) <= budget
    kept = [m["short_id"] for m in d["matches"]]
    assert kept == [f"id{i:02d}" for i in range(len(kept))]  # best first
    if len(kept) < 12:
        assert d["left_out"]["count"] == 12 - len(kept)
        assert d["left_out"]["ids"] == [f"id{i:02d}" for i in range(len(kept), 12)]
    else:
        assert d["left_out"] is None


def test_a_budget_below_the_smallest_answer_is_bad_query():
    with pytest.raises(SheafError) as e:
        _fit(_answer(3, 100), 10, lambda x: _render_units("head", x), lambda m: m["short_id"], "get")
    assert e.value.code == "BAD_QUERY" and "max_tokens" in e.value.details["hint"]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.org"])
def test_http_binds_loopback_only(host):
    with pytest.raises(SheafError) as e:
        check_http_host(host)
    assert e.value.code == "BAD_QUERY"
    check_http_host("127.0.0.1")
    check_http_host("::1")
