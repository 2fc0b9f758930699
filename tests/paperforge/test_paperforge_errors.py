"""What the PaperForge plugin can show of Sheaf's errors: Run Doctor (the plugin's only way out
of *Search backend unavailable*, run in the vault without `--vault`) says what is wrong with the
vault's index and how to fix it in the plugin, writes nothing, and no Dagster warning reaches
stderr (the plugin shows a build's stderr as "published with warning"); messages name the vault's
index home."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sheaf.paperforge.commands import main
from tests.kits.pipeline import BASE_PAPERS, make_library

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def vault(tmp_path, monkeypatch):
    for k in [k for k in os.environ if k.startswith(("SHEAF_", "DAGSTER_"))]:
        monkeypatch.delenv(k)
    v = make_library(tmp_path / "vault", BASE_PAPERS[:1])
    (v / "System" / "PaperForge").mkdir(parents=True)
    return v


def test_run_doctor_on_an_unbuilt_vault_says_build_it_and_writes_nothing(vault, monkeypatch, capsys):
    monkeypatch.chdir(vault)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    home = vault / "System" / "PaperForge" / "sheaf"
    assert out.splitlines()[0] == (f"no vector index yet in {home}: build it in PaperForge's settings "
                                   "(Smart Retrieval: Build vector index)"), out
    assert "unregistered_paper" not in out and not home.exists()


def test_a_corrupt_index_is_named_with_its_home_and_the_plugins_way_out(vault, monkeypatch, capsys):
    home = vault / "System" / "PaperForge" / "sheaf"
    (home / "index").mkdir(parents=True)
    (home / "index" / "sheaf.db").write_bytes(b"not a database")
    monkeypatch.chdir(vault)
    assert main(["doctor"]) == 1
    assert capsys.readouterr().out.startswith(f"the index in {home} cannot be read")
    assert main(["--vault", str(vault), "search", "bone", "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert str(home) in err["message"] and "sheaf build" not in json.dumps(err), err
    assert sorted(p.name for p in home.iterdir()) == ["index"]  # nothing else written


def test_no_dagster_warning_reaches_stderr(vault):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS",)}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-m", "sheaf.paperforge", "doctor"], cwd=vault, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and r.stderr == "", r.stderr[-2000:]
