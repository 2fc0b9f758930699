"""`sheaf mcp`: the SDK's own client starts the server over stdio (a real subprocess, the real
protocol) on a built sample library: the tools, their schemas and structured answers, the
budget and the layers, concurrent calls, bad arguments, an unbuilt home, a rebuild between two
calls, build/stop refused without --allow-build; streamable HTTP on loopback only."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.kits.pipeline import BASE_PAPERS, ROOT, built_base, clone, env_for_subprocess, new_home

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

TOOLS = {"search", "retrieve", "get", "timeline", "grep", "status", "build", "stop"}
NEW_PAPER = "QX7HK2MA"  # in the sample library, not in the base home


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    home, _ = built_base(tmp_path_factory)
    return home


def params(env: dict[str, str], *args: str) -> StdioServerParameters:
    env = {**env, "PYTHONPATH": str(ROOT)}
    return StdioServerParameters(command=sys.executable, args=["-m", "sheaf", "mcp", *args], env=env, cwd=str(ROOT))


def run(main: Any, timeout: float = 240) -> Any:
    async def guarded() -> Any:
        with anyio.fail_after(timeout):
            return await main()
    return anyio.run(guarded)


def structured(res: Any, schema: dict[str, Any]) -> dict[str, Any]:
    assert not res.is_error, res.content
    jsonschema.validate(res.structured_content, schema)
    return res.structured_content


def tokens(text: str) -> int:
    return -(-len(text) // 4)


def check_budget(res: Any) -> dict[str, Any]:
    d = res.structured_content
    assert d["tokens"] <= d["max_tokens"]
    assert tokens(json.dumps(d, ensure_ascii=False, separators=(",", ":"))) <= d["max_tokens"]
    assert tokens(res.content[0].text) <= d["max_tokens"]
    return d


def tool_error(res: Any, code: str) -> dict[str, Any]:
    assert res.is_error, res
    err = res.structured_content["error"]
    assert err["code"] == code, err
    assert res.content[0].text.startswith(f"{code}: ")
    return err


def test_tools_schemas_layers_budget_and_errors(base):
    env = env_for_subprocess(base)

    async def main() -> None:
        async with Client(params(env)) as c:
            listed = (await c.list_tools()).tools
            tools = {t.name: t for t in listed}
            assert set(tools) == TOOLS
            schemas = {n: t.output_schema for n, t in tools.items()}
            for t in listed:
                assert len(t.description) > 80, t.name  # an agent chooses by it
                assert t.output_schema and t.output_schema["type"] == "object"
                jsonschema.Draft202012Validator.check_schema(t.input_schema)
            props = tools["retrieve"].input_schema["properties"]
            for name in ("query", "mode", "limit", "per_paper", "paper", "kind", "full", "min_score", "max_tokens",
                         "year_from", "year_to", "author", "collection", "domain"):
                assert name in props, name
            assert props["mode"]["enum"] == ["lexical", "semantic", "hybrid"]
            assert tools["retrieve"].input_schema["required"] == ["query"]
            assert set(tools["search"].input_schema["properties"]) >= {"query", "limit", "year_from", "author"}
            assert tools["get"].input_schema["required"] == ["ids"]
            assert tools["timeline"].input_schema["required"] == ["id"]
            assert tools["status"].annotations.read_only_hint and not tools["build"].annotations.read_only_hint

            # layer 1: one compact line per unit (short id, paper, page, section leaf, summary, score), no text
            r1 = await c.call_tool("retrieve", {"query": "soil microbial community", "limit": 6, "per_paper": 0})
            d1 = structured(r1, schemas["retrieve"])
            check_budget(r1)
            assert d1["mode"] == "hybrid" and d1["count"] == len(d1["matches"]) > 0
            lines = r1.content[0].text.splitlines()
            for u, line in zip(d1["matches"], lines[1:]):
                assert set(u) <= {"short_id", "paper", "page", "section", "kind", "summary", "score"}, u
                assert u["short_id"] and u["paper"] in BASE_PAPERS and u["score"] is not None
                assert 0 < len(u["summary"]) <= 80 and u.get("kind", "figure") in ("backmatter", "figure", "table", "note", "annotation")
                assert line.startswith(f"[{u['short_id']}] {u['paper']}") and u["summary"] in line, line
                assert line.endswith(f" · {u['score']:.4g}"), line
            assert not [x for x in lines[1:d1["count"] + 1] if not x.startswith("[")]  # nothing between them
            for said in d1["warnings"] + d1["next_actions"]:  # the tools' words, not the CLI's
                assert "--" not in said and "sheaf get" not in said and "sheaf timeline" not in said, said
            ids = [u["short_id"] for u in d1["matches"]]

            # the deep layer only when asked, and many more tokens
            rf = await c.call_tool("retrieve", {"query": "soil microbial community", "limit": 6, "per_paper": 0,
                                                "full": True, "max_tokens": 100_000})
            df = structured(rf, schemas["retrieve"])
            assert [u["short_id"] for u in df["matches"]] == ids
            assert all(u["text"] for u in df["matches"]) and df["tokens"] > 2 * d1["tokens"]

            # a budget never exceeded; what is left out is named, best first kept
            rb = await c.call_tool("retrieve", {"query": "soil microbial community", "limit": 6, "per_paper": 0,
                                                "full": True, "max_tokens": 600})
            db = structured(rb, schemas["retrieve"])
            check_budget(rb)
            assert db["left_out"]["count"] > 0 and db["count"] + db["left_out"]["count"] == len(ids)
            assert [u["short_id"] for u in db["matches"]] + db["left_out"]["ids"] == ids
            tool_error(await c.call_tool("retrieve", {"query": "soil", "max_tokens": 5}), "BAD_QUERY")

            # layer 2: get the chosen units in full
            rg = await c.call_tool("get", {"ids": ids[:3] + ["nosuch"]})
            dg = structured(rg, schemas["get"])
            check_budget(rg)
            assert [u["short_id"] for u in dg["matches"]] == ids[:3] and dg["missing"] == ["nosuch"]
            assert [u["text"] for u in dg["matches"]] == [u["text"] for u in df["matches"][:3]]
            assert dg["tokens"] < df["tokens"]

            # layer 3: the units around one, in reading order
            rt = await c.call_tool("timeline", {"id": ids[0], "window": 1})
            dt = structured(rt, schemas["timeline"])
            assert dt["anchor"] == ids[0] and 0 in [u["offset"] for u in dt["matches"]]
            assert [u["offset"] for u in dt["matches"]] == sorted(u["offset"] for u in dt["matches"])

            rs = await c.call_tool("search", {"query": "soil", "limit": 3})
            ds = structured(rs, schemas["search"])
            assert 0 < ds["count"] <= 3 and all(m["zotero_key"] and m["summary"] for m in ds["matches"])
            assert (await c.call_tool("search", {"query": "soil", "year_from": 2100})).structured_content["count"] == 0

            word = dg["matches"][0]["text"].split()[0].strip(".,;:()")
            rgr = await c.call_tool("grep", {"term": word})
            dgr = structured(rgr, schemas["grep"])
            assert dgr["count"] > 0 and all(word.lower() in m["span"].lower() for m in dgr["matches"])
            # every unit kind on every query tool: this library has no Zotero notes
            for tool in ("search", "retrieve", "grep"):
                assert tools[tool].input_schema["properties"]["kind"]["enum"] == [
                    "body", "object", "note", "annotation", "backmatter", "all"], tool
            assert (await c.call_tool("grep", {"term": word, "kind": "note"})).structured_content["count"] == 0
            assert (await c.call_tool("grep", {"term": word, "kind": "body"})).structured_content["count"] > 0
            assert (await c.call_tool("search", {"query": "soil", "kind": "note"})).structured_content["count"] == 0

            rst = await c.call_tool("status", {})
            dst = structured(rst, schemas["status"])
            assert dst["fresh"] is True and dst["states"] == {"built": len(BASE_PAPERS)}

            # the paper resource: metadata and outline
            templates = (await c.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["sheaf://paper/{key}"]
            key = d1["matches"][0]["paper"]
            res = await c.read_resource(f"sheaf://paper/{key}")
            outline = json.loads(res.contents[0].text)
            assert outline["paper"]["zotero_key"] == key and outline["sections"]
            assert ids[0] in [s["first_short_id"] for s in outline["sections"]] or outline["units"] > 1
            assert sum(s["units"] for s in outline["sections"]) == outline["units"]

            # concurrent calls, each its own service request
            results: dict[int, Any] = {}

            async def one(i: int, q: str) -> None:
                results[i] = await c.call_tool("retrieve", {"query": q, "limit": 3, "mode": "hybrid"})

            queries = ["soil microbial community", "temperature", "sampling design", "species richness"] * 2
            async with anyio.create_task_group() as tg:
                for i, q in enumerate(queries):
                    tg.start_soon(one, i, q)
            for i, q in enumerate(queries):
                assert structured(results[i], schemas["retrieve"])["query"] == q
            assert results[0].structured_content["matches"] == results[4].structured_content["matches"]

            # bad arguments: tool errors in the tools' words (tests/serve/test_mcp_arguments.py), the server stays up
            err = tool_error(await c.call_tool("retrieve", {"query": "soil", "limit": "many"}), "BAD_QUERY")
            assert err["message"] == "limit must be an integer >= 1, not 'many'" and "input schema" in err["hint"]
            assert "query" in tool_error(await c.call_tool("retrieve", {}), "BAD_QUERY")["message"]
            tool_error(await c.call_tool("get", {"ids": []}), "BAD_QUERY")
            tool_error(await c.call_tool("retrieve", {"query": "soil", "mode": "psychic"}), "BAD_QUERY")
            tool_error(await c.call_tool("retrieve", {"query": "soil", "limit": 0}), "BAD_QUERY")
            tool_error(await c.call_tool("retrieve", {"query": "soil", "paper": ["NOSUCHKEY"]}), "NOT_FOUND")
            tool_error(await c.call_tool("timeline", {"id": "zzzz"}), "NOT_FOUND")
            assert "retrieve" in tool_error(await c.call_tool("nosuchtool", {}), "BAD_QUERY")["hint"]
            with pytest.raises(Exception):
                await c.read_resource("sheaf://paper/NOSUCHKEY")
            again = await c.call_tool("retrieve", {"query": "soil microbial community", "limit": 6, "per_paper": 0})
            assert [u["short_id"] for u in structured(again, schemas["retrieve"])["matches"]] == ids

            # build and stop write: refused without --allow-build
            for name in ("build", "stop"):
                err = tool_error(await c.call_tool(name, {}), "BAD_QUERY")
                assert "--allow-build" in err["message"] and err["hint"]

    run(main)


def test_unbuilt_home_is_a_tool_error_with_its_code(tmp_path):
    home = new_home(tmp_path / "h", ())
    env = env_for_subprocess(home)

    async def main() -> None:
        async with Client(params(env)) as c:
            for name, args in (("retrieve", {"query": "soil"}), ("search", {"query": "soil"}),
                               ("get", {"ids": ["abcd"]})):
                err = tool_error(await c.call_tool(name, args), "INDEX_NOT_FOUND")
                assert "sheaf build" in err["hint"]
            st = await c.call_tool("status", {})
            assert not st.is_error and st.structured_content["fresh"] is False  # no build yet: a verdict
            assert (await c.list_tools()).tools  # still serving

    run(main)


def test_rebuild_between_two_calls_is_seen(base, tmp_path):
    home = clone(base, tmp_path / "h")
    env = env_for_subprocess(home)

    async def main() -> None:
        async with Client(params(env, "--allow-build")) as c:
            ask = {"query": "the", "paper": [NEW_PAPER], "mode": "lexical"}
            before = await c.call_tool("retrieve", ask)  # its metadata is known, it has no units yet
            assert not before.is_error and before.structured_content["count"] == 0, before.content
            stop = await c.call_tool("stop", {})
            assert not stop.is_error and stop.structured_content["outcome"] == "idle"
            home.add_paper(NEW_PAPER)
            b = await c.call_tool("build", {})
            assert not b.is_error and b.structured_content["started"], b.content
            deadline = time.monotonic() + 200
            while True:
                st = (await c.call_tool("status", {})).structured_content
                if st["fresh"]:
                    break
                assert time.monotonic() < deadline, (st, Path(b.structured_content["log"]).read_text()[-3000:])
                await anyio.sleep(1.0)
            assert st["states"] == {"built": len(BASE_PAPERS) + 1}
            after = await c.call_tool("retrieve", ask)
            assert not after.is_error, after.content
            assert {u["paper"] for u in after.structured_content["matches"]} == {NEW_PAPER}

    run(main, timeout=300)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_refuses_a_non_loopback_bind_and_serves_on_loopback(base):
    env = {**env_for_subprocess(base), "PYTHONPATH": str(ROOT)}
    for host in ("0.0.0.0", "192.168.1.10"):
        p = subprocess.run([sys.executable, "-m", "sheaf", "mcp", "--http", "--host", host], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "loopback" in p.stderr and "BAD_QUERY" in p.stderr, p.stderr
        assert p.stdout == ""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sheaf", "mcp", "--http", "--port", str(port)], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
                time.sleep(0.3)

        async def main() -> None:
            async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                assert {t.name for t in (await c.list_tools()).tools} == TOOLS
                r = await c.call_tool("retrieve", {"query": "soil", "limit": 2})
                assert not r.is_error and r.structured_content["count"] == 2

        run(main, timeout=120)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
