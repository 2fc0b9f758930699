"""A query that starts with a dash is a query, never an option: on the PaperForge entry (the
plugin sends what the user typed as one argument right after `search` / `retrieve`: `-bone`,
`--limit`, `@--paper` as `retrieve --paper --deep`), and on the CLI after `--`, as the README
says. Through the plugin's own code: tests/paperforge/test_paperforge_plugin.py."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from sheaf.cli.parser import build_parser
from sheaf.paperforge.commands import _parse, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, query, options", [
    (["--vault", "V", "search", "-bone", "--json"], ["-bone"], {"limit": 10}),
    (["--vault", "V", "search", "--limit", "--json"], ["--limit"], {"limit": 10}),
    (["--vault", "V", "search", "--json", "--json"], ["--json"], {}),
    (["--vault", "V", "retrieve", "--paper", "--deep", "--json"], ["--paper"], {"deep": True, "paper": []}),
    (["--vault", "V", "retrieve", "-x y", "--deep", "--json"], ["-x y"], {"deep": True}),
    (["--json", "search", "--year-from", "--json"], ["--year-from"], {"year_from": None}),
    # an option with its value is an option; `--` ends the options
    (["search", "--limit", "3", "bone"], ["bone"], {"limit": 3}),
    (["search", "--limit", "3", "--", "-bone"], ["-bone"], {"limit": 3}),
    (["search", "bone", "regeneration", "--json"], ["bone", "regeneration"], {}),
])
def test_the_word_after_search_or_retrieve_is_the_query(argv, query, options):
    args = _parse(argv)
    assert args.query == query
    assert bool(args.json or args.json_first) == ("--json" in argv[argv.index(query[0]) + 1:] or argv[0] == "--json")
    for k, v in options.items():
        assert getattr(args, k) == v, k


def test_a_dash_query_reaches_the_index_not_the_option_parser(tmp_path, monkeypatch, capsys):
    """Without an index the search fails for that reason (what Run Doctor explains), not as a
    command line argparse refused."""
    for k in [k for k in os.environ if k.startswith(("SHEAF_", "DAGSTER_"))]:
        monkeypatch.delenv(k)
    vault = tmp_path / "vault"
    (vault / "System" / "PaperForge").mkdir(parents=True)
    for argv in (["search", "-bone", "--json"], ["search", "--limit", "--json"],
                 ["retrieve", "--paper", "--deep", "--json"]):
        main(["--vault", str(vault), *argv])
        env = json.loads(capsys.readouterr().out)
        assert env["command"] == argv[0] and env["error"]["code"] == "INDEX_NOT_FOUND", (argv, env)


def test_the_cli_takes_a_dash_query_after_double_dash_and_the_readme_says_so():
    args = build_parser().parse_args(["search", "--", "-bone"])
    assert args.query == ["-bone"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"sheaf search -- -bone\s+#", readme), "README's command list shows `sheaf search -- -bone`"
