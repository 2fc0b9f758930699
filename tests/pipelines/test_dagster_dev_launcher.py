"""`scripts/dagster-dev` (the documented launcher of `dagster dev`) started in the background by
a shell, as a script does: SIGTERM stops it and every process it started within seconds (a plain
`dagster dev &` inherits SIGINT ignored, copies that onto SIGTERM and ignores both)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from tests.kits.pipeline import ROOT, env_for_subprocess, new_home

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.e2e]
LAUNCHER = ROOT / "scripts" / "dagster-dev"


def _launcher():
    loader = importlib.machinery.SourceFileLoader("dagster_dev_launcher", str(LAUNCHER))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_background_dagster_dev_stops_with_its_whole_tree(tmp_path, monkeypatch, sig):
    home = new_home(tmp_path / "h", ("L2YSNC8V",)).apply(monkeypatch)
    env = {**env_for_subprocess(home), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    port, log = _port(), tmp_path / "dev.log"
    # a non-interactive shell's background job: SIGINT ignored, the shell gone at once
    out = subprocess.run(["bash", "-c", f"'{LAUNCHER}' -h 127.0.0.1 -p {port} -w workspace.yaml >'{log}' 2>&1 & "
                          "echo $!"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    pid = int(out.stdout.strip())
    mod = _launcher()
    try:
        end = time.time() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                    break
            except OSError:
                assert time.time() < end and mod._alive(pid), log.read_text()[-3000:]
                time.sleep(1)
        time.sleep(3)  # the daemon and the code server started too
        tree = [pid, *mod.descendants(pid)]
        assert len(tree) >= 3, tree  # the launcher, dagster dev, its webserver/daemon/code server
        os.kill(pid, sig)
        end = time.time() + 20
        while time.time() < end and any(mod._alive(p) for p in tree):
            time.sleep(0.2)
        assert not [p for p in tree if mod._alive(p)], log.read_text()[-3000:]
    finally:
        for p in [pid, *mod.descendants(pid)]:
            if mod._alive(p):
                os.kill(p, signal.SIGKILL)
