"""`sheaf mcp`'s pieces that need no server: the filters follow the requests, the token budget,
the loopback rule, layer 1's one line per unit, CLI words turned into the tools' (the protocol
itself: tests/serve/test_mcp.py and tests/serve/test_mcp_arguments.py)."""
from __future__ import annotations

import json

import pytest

from sheaf.core.envelope import SheafError
from sheaf.serve.mcp_server import (
    FILTERS,
    SECTION_MAX,
    SUMMARY_MAX,
    _fit,
    _render_units,
    brief,
    check_http_host,
    estimate_tokens,
    in_tool_terms,
)
from sheaf.service.requests import RetrieveRequest, SearchRequest


def test_every_filter_of_the_requests_is_a_tool_input():
    # search's fields besides the query, the limit and the unit kind are its filters; retrieve has them all
    search_filters = set(SearchRequest.field_names()) - {"query", "limit", "kind"}
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


def _match(**kw) -> dict:
    text = ("Soil respiration rose by a third under experimental warming in every plot, while microbial "
            "biomass fell; the effect faded after three years as the labile carbon pool was depleted.")
    return {"short_id": "316e8e08", "zotero_key": "W6TB4YRS", "section_path": ["2 Materials and methods",
            "2.1 Study sites and the experimental warming of the plots"], "page_span": [3, 4], "source": "body",
            "score": 0.1818181818, "summary": text[:110], "text": text, "title": "A long title", "year": 2020,
            **kw}


def test_layer_one_is_one_compact_line_per_unit():
    b = brief(_match(), "warming soil respiration")
    assert set(b) == {"short_id", "paper", "page", "section", "summary", "score"}  # body: no kind
    assert b["paper"] == "W6TB4YRS" and b["page"] == 3 and b["score"] == 0.1818
    assert b["section"].startswith("2.1 Study sites") and len(b["section"]) <= SECTION_MAX
    assert 0 < len(b["summary"]) <= SUMMARY_MAX and "warming" in b["summary"]
    fig = brief(_match(source="figure", page_span=None, section_path=[], score=None), "warming")
    assert fig["kind"] == "figure" and "page" not in fig and "score" not in fig and fig["section"] == ""
    d = {"matches": [b, fig], "warnings": [], "next_actions": []}
    lines = _render_units("2 units", d).splitlines()
    assert lines[0] == "2 units" and len(lines) == 3  # a line per unit, nothing below it
    assert lines[1] == f"[316e8e08] W6TB4YRS p.3 · {b['section']} · {b['summary']} · 0.1818"
    assert lines[2] == f"[316e8e08] W6TB4YRS · (no section) · figure · {fig['summary']}"


def test_cli_words_become_the_tools_words():
    assert in_tool_terms("--limit must be an integer >= 1, not 0") == "limit must be an integer >= 1, not 0"
    assert in_tool_terms("3 of the 10 asked for: --per-paper 2 left out 4 more units of K (--per-paper 0 "
                         "shows every unit)") == ("3 of the 10 asked for: per_paper=2 left out 4 more units of K "
                                                  "(per_paper=0 shows every unit)")
    assert in_tool_terms("sheaf get SHORT_ID... for whole units; sheaf timeline SHORT_ID for context") == \
        "get SHORT_ID... for whole units; timeline SHORT_ID for context"
    assert in_tool_terms("`sheaf retrieve QUERY --paper KEY` gives its passages") == \
        "`retrieve QUERY paper=KEY` gives its passages"
    assert in_tool_terms("run `sheaf build --full`") == "run `sheaf build --full`"  # not a query tool's words
