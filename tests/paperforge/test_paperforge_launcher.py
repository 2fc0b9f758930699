"""`sheaf-paperforge-python`, what PaperForge's "Python path" points at: the plugin's
`-m paperforge ...` answered by Sheaf, its version check answered with Sheaf's version (the
badge), anything else run on the interpreter as sent; PaperForge's own commands (sync, config,
dashboard, ...) refused with a message that says so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sheaf import __version__
from sheaf.paperforge.commands import VERSION_CHECK

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def launcher(tmp_path) -> Path:
    """The console script as pip writes it for `[project.scripts]`."""
    exe = tmp_path / "sheaf-paperforge-python"
    exe.write_text(f"#!{sys.executable}\nimport sys\nfrom sheaf.paperforge.commands import console_launcher\n"
                   "sys.exit(console_launcher())\n", encoding="utf-8")
    exe.chmod(0o755)
    return exe


def _run(exe: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SHEAF_")}, "PYTHONPATH": str(ROOT)}
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_the_version_check_gets_sheafs_version(launcher, tmp_path):
    for flags in ((), ("-I",)):  # managed-runtime's probe isolates the interpreter
        r = _run(launcher, *flags, "-c", VERSION_CHECK, cwd=tmp_path)
        assert r.returncode == 0 and r.stdout.strip() == f"{__version__} (Sheaf)", r


def test_dash_m_paperforge_is_sheafs_entry_and_the_rest_runs_as_sent(launcher, tmp_path):
    r = _run(launcher, "-m", "paperforge", "--vault", str(tmp_path), "auth", "status", "embedding", "--json",
             cwd=tmp_path)
    env = json.loads(r.stdout)
    assert r.returncode == 0 and env["ok"] and env["data"]["credentials"][0]["required"] is False
    r = _run(launcher, "-c", "import sys; print(sys.version_info[0])", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "3"
    r = _run(launcher, "-c", "import paperforge", cwd=tmp_path)  # no package named paperforge is installed
    assert r.returncode == 1 and "No module named 'paperforge'" in r.stderr


@pytest.mark.parametrize("argv", [["sync", "--json"], ["config", "set", "vector_db_api_model", "x", "--json"],
                                  ["dashboard", "--json"], ["memory", "restore-backup"], ["embed", "migrate", "--json"]])
def test_paperforges_own_commands_are_named_as_such(argv, tmp_path, capsys):
    from sheaf.paperforge.commands import main

    assert main(["--vault", str(tmp_path), *argv]) == 2
    env = json.loads(capsys.readouterr().out)
    own = " ".join(a for a in argv[:2] if not a.startswith("-") and a not in ("set",))
    assert env["error"]["code"] == "BAD_QUERY" and "PaperForge's own command" in env["error"]["message"], env
    assert f"`{own}`" in env["error"]["message"] and "search, retrieve" in env["error"]["message"]
    assert not (tmp_path / "System").exists()  # nothing written
