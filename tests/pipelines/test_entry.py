"""`pipelines.entry.open_for_build`: the CLI's one way into the Dagster side."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.kits.pipeline import ROOT, new_home


def test_open_for_build_is_quiet_and_makes_the_dagster_home(tmp_path):
    h = new_home(tmp_path / "h", ())
    probe = (
        "import sys; from pipelines.entry import open_for_build; from sheaf.core.settings import get_settings\n"
        "assert 'assets.index' not in sys.modules  # importing the entry defines no asset\n"
        f"defs = open_for_build(get_settings(home={str(h.home)!r}, library={str(h.library)!r}))\n"
        "import os; print(os.environ['DAGSTER_HOME'], int('vector_collections' in "
        "{k.path[-1] for k in defs.resolve_all_asset_keys()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "SHEAF_HOME", "SHEAF_LIBRARY")}
    out = subprocess.run([sys.executable, "-W", "default", "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**env, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "BetaWarning" not in out.stderr and "PreviewWarning" not in out.stderr, out.stderr[-3000:]
    home, has_vectors = out.stdout.split()
    assert home == str(h.dagster_home) and (h.dagster_home / "dagster.yaml").is_file()
    assert has_vectors == "1"
