"""A stop from the PaperForge plugin (`PAPERFORGE_STOP` on the build's stdin, the child killed 5 s
later) wherever the build is: while Python and Dagster import, while the build plans, while the
model is exported and loaded. Each settles inside the grace: exit 130, the stream ended by
`cancelled`, stderr empty, no run left unfinished (none the next build would call "died"),
no export child left behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kits.pipeline import BASE_PAPERS, make_library

pytestmark = [pytest.mark.slow]

GRACE_S = 5.0


def _children(pid: int) -> list[str]:
    """Command lines of the processes whose parent is `pid`."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append((d / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue
    return out


def _start(vault: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), PYTHONUTF8="1", PYTHONIOENCODING="utf-8",
               SHEAF_CACHE_DIR=str(vault.parent / "machine-cache"))  # a machine with no export made yet
    return subprocess.Popen([sys.executable, "-m", "sheaf.paperforge", "--vault", str(vault), "embed", "build",
                             "--force"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=vault, text=True)


def _stop_when(proc: subprocess.Popen, ready, limit: float = 240.0) -> tuple[float, str, str]:
    """Wait until `ready()`, write the plugin's stop; (seconds to exit after it, stdout, stderr)."""
    deadline = time.monotonic() + limit
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the moment to stop never came"
        time.sleep(0.05)
    t0 = time.monotonic()
    proc.stdin.write("PAPERFORGE_STOP\n")
    proc.stdin.flush()
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return time.monotonic() - t0, out, err


def _assert_canceled(vault: Path, settle: float, out: str, err: str, code: int) -> None:
    print(f"settled {settle:.2f} s after the stop, exit {code}")
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert code == 130 and err == "", (code, err)
    assert settle < GRACE_S, settle
    assert events[-1]["event"] == "cancelled" and all(e["schema_version"] == 1 for e in events), events
    from pipelines.build.command import get_instance
    from sheaf.paperforge.shapes import vault_settings

    settings = vault_settings(vault)
    if settings.dagster_home.is_dir():
        from dagster import DagsterRunStatus

        runs = get_instance(settings).get_runs()
        assert all(r.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.CANCELED) for r in runs), \
            [(r.job_name, r.status) for r in runs]


@pytest.fixture
def vault(tmp_path, monkeypatch):
    for k in [k for k in os.environ if k.startswith(("SHEAF_", "DAGSTER_"))]:
        monkeypatch.delenv(k)
    return make_library(tmp_path / "vault", BASE_PAPERS[:2])


def test_a_stop_while_the_build_starts_up(vault):
    proc = _start(vault)
    t0 = time.monotonic()
    settle, out, err = _stop_when(proc, lambda: time.monotonic() - t0 > 0.3)
    _assert_canceled(vault, settle, out, err, proc.returncode)


def test_a_stop_while_the_build_plans(vault):
    proc = _start(vault)
    home = vault / "System" / "PaperForge" / "sheaf"
    settle, out, err = _stop_when(proc, lambda: (home / "dagster_home").is_dir())
    _assert_canceled(vault, settle, out, err, proc.returncode)


def test_a_stop_while_the_model_is_exported(vault):
    """A home's first build exports the model in a child process (tens of seconds): the stop ends
    it there; the export publishes nothing half-made."""
    proc = _start(vault)
    settle, out, err = _stop_when(proc, lambda: any("onnx_export" in c for c in _children(proc.pid)))
    _assert_canceled(vault, settle, out, err, proc.returncode)
    models = vault / "System" / "PaperForge" / "sheaf" / "models"
    assert not [p for p in models.rglob("export.json")] if models.is_dir() else True
    assert not [p.name for p in models.iterdir() if p.name.startswith(".")] if models.is_dir() else True
    assert not _children(proc.pid)
