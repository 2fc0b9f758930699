"""The CLI and the server answer a request with the same envelope (apart from who served it):
both run the one service function per command, locally on a Retriever the CLI opens, in the
server on one leased from its pool. In one process, over a `SheafServer` on a thread."""
from __future__ import annotations

import http.client
import json
import threading

import pytest

from sheaf.cli.app import main
from sheaf.core.settings import get_settings
from sheaf.search.retriever import Retriever
from sheaf.serve.client import try_server
from sheaf.serve.server import SheafServer
from sheaf.service.queries import run_query
from sheaf.service.requests import GetRequest, GrepRequest, RetrieveRequest, SearchRequest, TimelineRequest
from tests.kits.papers import without_engines

pytestmark = pytest.mark.slow

CODE_PAPER = "R4N8DWTE"


@pytest.fixture()
def server(sample_index, tmp_path, monkeypatch):
    """A `SheafServer` for the sample index (no accelerators: the request path is under test),
    its discovery file written, serving on a thread."""
    for k, v in {"SHEAF_INDEX_FILE": str(sample_index.path), "SHEAF_HOME": str(tmp_path / "home"),
                 "SHEAF_LIBRARY": str(sample_index.library)}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SHEAF_EMBEDDING_MODEL", raising=False)
    srv = SheafServer(get_settings())
    srv.write_discovery()
    t = threading.Thread(target=srv.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        t.join(10)
        srv.close()


def _requests(short_ids: list[str]) -> list:
    reqs: list = [SearchRequest("QLN-482"), SearchRequest("results", limit=3, year_from=2022, year_to=2023),
                  SearchRequest("zebra"), SearchRequest("***"), GrepRequest("QLN 482"),
                  GrepRequest("QLN-482", paper=(CODE_PAPER,)), GrepRequest("x", paper=("NOSUCH99",)),
                  GetRequest((*short_ids[:2], "nosuchid")), GetRequest(("zzzz",)),
                  TimelineRequest(short_ids[0], window=1), TimelineRequest("nope"),
                  RetrieveRequest("cough", mode="lexical", limit=0)]
    for mode in ("lexical", "semantic", "hybrid"):
        reqs += [RetrieveRequest("awake cough frequency", mode=mode),
                 RetrieveRequest("cough", mode=mode, kind="object", per_paper=0, full=True, limit=3)]
    return reqs


def test_cli_and_server_return_the_same_envelope(server, capsys):
    settings = get_settings()
    local = lambda: Retriever.open(settings)  # noqa: E731 - the CLI's own source of Retrievers
    first = run_query(RetrieveRequest("awake cough frequency", mode="lexical", limit=3), local)
    short_ids = [m["short_id"] for m in first.envelope["data"]["matches"]]
    before = dict(server._counts)
    errors = 0
    for req in _requests(short_ids):
        here = run_query(req, local)
        served = try_server(req, settings)
        assert served is not None, req
        assert served.exit_code == here.exit_code, req
        if here.envelope["ok"]:
            assert here.envelope["data"]["engines"]["served_by"] == "local"
            assert served.envelope["data"]["engines"]["served_by"] == "server"
        else:
            errors += 1
        assert without_engines(served.envelope) == without_engines(here.envelope), req
        if getattr(req, "limit", 1) < 1:
            continue  # the CLI's parser refuses it before any service runs
        # the CLI prints the same envelope, asking the server or not
        capsys.readouterr()
        argv = _argv(req)
        code_served = main(argv + ["--json"])
        out_served = json.loads(capsys.readouterr().out)
        code_local = main(argv + ["--json", "--no-server"])
        out_local = json.loads(capsys.readouterr().out)
        # the server may answer from memory by now (its copies load in the background): engines aside
        assert (code_served, without_engines(out_served)) == (served.exit_code, without_engines(served.envelope)), argv
        assert (code_local, out_local) == (here.exit_code, here.envelope), argv
    assert errors >= 5  # the error envelopes are compared too
    assert sum(server._counts.values()) - sum(before.values()) == 2 * len(_requests(short_ids)) - 1


def _argv(req) -> list[str]:
    """The command line that makes `req` (its non-default fields as flags)."""
    d = req.to_dict()
    positional = {"query": [d.get("query")], "ids": d.get("ids"), "id": [d.get("id")], "term": [d.get("term")]}
    argv = [req.command]
    for name, value in d.items():
        if name in positional:
            argv += positional[name]
        elif value == type(req).__dataclass_fields__[name].default or value == []:
            continue
        elif isinstance(value, list):
            for v in value:
                argv += [f"--{name.replace('_', '-')}", v]
        elif value is True:
            argv.append(f"--{name.replace('_', '-')}")
        else:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


def test_server_refuses_a_body_that_does_not_fit(server):
    info = json.loads(server.discovery.read_text())
    for body in ({"query": "x", "json": True}, {"query": ["x"]}, {"query": "x", "limit": "3"}, [1]):
        c = http.client.HTTPConnection(info["host"], info["port"], timeout=10)
        c.request("POST", "/v1/search", body=json.dumps(body), headers={"X-Sheaf-Token": info["token"]})
        r = c.getresponse()
        env = json.loads(r.read())
        c.close()
        assert r.status == 200 and r.getheader("X-Sheaf-Exit") == "2", body
        assert env["ok"] is False and env["command"] == "search" and env["error"]["code"] == "BAD_QUERY"
