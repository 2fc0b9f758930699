"""`sheaf mcp`'s answers to arguments that do not fit, through the SDK's own client over stdio (a
real subprocess): each a tool error (BAD_QUERY) in the tool's own words (`limit must be an
integer >= 1`), never a CLI flag or the validation library's text and URL; an argument a tool
does not have is refused, and every input schema says so (`additionalProperties: false`).
Arguments are checked before the index is opened: an unbuilt home serves these tests."""
from __future__ import annotations

import re
import sys
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.kits.pipeline import ROOT, env_for_subprocess, new_home

#: (tool, arguments, the error's message exactly)
REFUSED = [
    ("retrieve", {"query": "soil", "limit": 0}, "limit must be an integer >= 1, not 0"),
    ("retrieve", {"query": "soil", "limit": "many"}, "limit must be an integer >= 1, not 'many'"),
    ("retrieve", {"query": "soil", "per_paper": -1}, "per_paper must be an integer >= 0, not -1"),
    ("retrieve", {"query": "soil", "max_tokens": 0}, "max_tokens must be an integer >= 1, not 0"),
    ("retrieve", {"query": "soil", "mode": "psychic"}, "mode must be one of lexical, semantic, hybrid, not 'psychic'"),
    ("retrieve", {"query": "soil", "full": "maybe"}, "full must be a boolean, not 'maybe'"),
    ("retrieve", {"query": "soil", "year_from": "recent"}, "year_from must be an integer or null, not 'recent'"),
    ("retrieve", {"query": "soil", "paper": "W6TB4YRS"}, "paper must be a list of strings, not 'W6TB4YRS'"),
    ("retrieve", {}, "retrieve needs query (query: a string)"),
    ("retrieve", {"query": "soil", "bogus": 1}, "unknown argument for retrieve: bogus"),
    ("search", {"query": "soil", "per_paper": 2, "zzz": True}, "unknown arguments for search: per_paper, zzz"),
    ("search", {"query": "soil", "limit": 0}, "limit must be an integer >= 1, not 0"),
    ("get", {"ids": []}, "ids must be a non-empty list of strings, not []"),
    ("get", {}, "get needs ids (ids: a non-empty list of strings)"),
    ("timeline", {"id": "abcd", "window": -2}, "window must be an integer >= 0, not -2"),
    ("grep", {"term": "SPG-302", "limit": 3}, "unknown argument for grep: limit"),
    ("status", {"verbose": True}, "unknown argument for status: verbose"),
    ("stop", {"timeout": 0}, "timeout must be a number > 0, not 0"),
]


def _params(env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "sheaf", "mcp"],
                                 env={**env, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))


def test_bad_and_unknown_arguments_are_tool_errors_in_the_tools_words(tmp_path):
    env = env_for_subprocess(new_home(tmp_path / "h", ()))
    seen: dict[int, Any] = {}

    async def main() -> None:
        with anyio.fail_after(120):
            await talk()

    async def talk() -> None:
        async with Client(_params(env)) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            for t in tools.values():
                assert t.input_schema.get("additionalProperties") is False, t.name
            props = tools["retrieve"].input_schema["properties"]
            assert props["limit"]["minimum"] == 1 and props["per_paper"]["minimum"] == 0
            for i, (name, args, _) in enumerate(REFUSED):
                seen[i] = await c.call_tool(name, args)
            assert (await c.list_tools()).tools  # still serving

    anyio.run(main)
    for i, (name, args, message) in enumerate(REFUSED):
        res = seen[i]
        text = res.content[0].text
        assert res.is_error, (name, args, text)
        err = res.structured_content["error"]
        assert err["code"] == "BAD_QUERY", (name, args, err)
        assert err["message"] == message, (name, args, err["message"])
        assert text.startswith(f"BAD_QUERY: {err['message']}\nhint: "), text
        assert err["hint"] and name in err["hint"] and "tools/list" in err["hint"], err
        assert "pydantic" not in text.lower() and "http" not in text and "validation error" not in text, text
        assert not re.search(r"--[a-z]", text) and "sheaf " not in text, text  # no CLI flag, no CLI command
