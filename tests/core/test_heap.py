"""`sheaf.core.heap`: the Dagster side's objects are imported out of the collector's way, and the
console script exits without a last scan of every object. Each case runs in a fresh interpreter:
what is measured is a process's collector, which the test process's own imports would blur."""
from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Records every collection of the collector in `seen` (generation, objects scanned is not
#: exposed: the count of collections and the generation are).
PROBE = """
import gc, json, sys
seen = []
gc.callbacks.append(lambda phase, info: phase == "start" and seen.append(info["generation"]))
"""


def _run(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE + code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_dagster_side_is_imported_without_a_collection_and_left_out_of_later_ones():
    got = _run("""
from sheaf.service import builds
start = len(seen)
builds._pipelines()
during = seen[start:]
frozen = gc.get_freeze_count()
builds._pipelines()  # imports nothing new: freezes nothing more
garbage = [[] for _ in range(1000)]
for g in garbage: g.append(g)  # cycles made after the import
del garbage, g
again = gc.get_freeze_count()
print(json.dumps({"during": during, "frozen": frozen, "again": again, "enabled": gc.isenabled(),
                  "collected": gc.collect(), "dagster": "dagster" in sys.modules}))
""")
    assert got["dagster"]
    assert got["during"] == [], "the collector ran while the Dagster side was imported"
    assert got["frozen"] > 100_000, "the imported objects are not in the permanent generation"
    assert got["again"] == got["frozen"], "a later call froze the garbage made since"
    assert got["enabled"], "the collector is left paused"
    assert got["collected"] >= 1000, "garbage made after the import is no longer collected"


def test_a_block_that_raises_still_restores_the_collector():
    got = _run("""
from sheaf.core.heap import long_lived_imports
try:
    with long_lived_imports():
        import json as _j  # already imported: nothing new
        raise ValueError("boom")
except ValueError:
    pass
print(json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
""")
    assert got == {"enabled": True, "frozen": 0}


def test_the_console_script_exits_with_the_heap_frozen_and_mains_exit_code():
    got = _run("""
from sheaf.cli import app
sys.argv = ["sheaf", "search"]  # a usage error: exit code 2, printed on stderr
try:
    app.console()
except SystemExit as e:
    print(json.dumps({"code": e.code, "frozen": gc.get_freeze_count()}))
""")
    assert got["code"] == 2
    assert got["frozen"] > 0
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["sheaf"] == "sheaf.cli.app:console"
    assert (ROOT / "sheaf" / "__main__.py").read_text().count("console()") == 1
