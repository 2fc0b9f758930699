"""The Dagster UI as a user sees it: `dagster-webserver` + `dagster-daemon` on 127.0.0.1 over a
built library (temp home), driven by a real headless Chromium (Debian's `chromium` through
playwright's `executable_path`: no browser download).

With automation paused, one paper is edited: the discovery sensor's tick observes it and its
run refreshes `library_status`, so that paper (and only it) reads as needing work with its
reason in the `paper_up_to_date` check's Partitions tab and in the library-status table. With
automation resumed it is rebuilt, and both read as built again. The screenshots it looks at
are saved into the test's temp folder, or into docs/img/ (docs/ui.md shows them) with
SHEAF_UPDATE_SCREENSHOTS=1, so a test run leaves the tree clean.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from dagster import AssetKey

from pipelines.dagster_internals.event_reads import check_partition_statuses
from pipelines.partitions import papers_partitions
from tests.kits.pipeline import BASE_PAPERS, CHAIN, ROOT, Home, built_base, clone, edit_markdown, env_for_subprocess

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    import playwright.sync_api  # noqa: F401
    HAVE_PLAYWRIGHT = True
except ImportError:  # pragma: no cover - the test extra installs it
    HAVE_PLAYWRIGHT = False

pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy, pytest.mark.e2e,
    pytest.mark.skipif(not CHROMIUM, reason="no Chromium installed (apt-get install chromium; .ci/run does)"),
    pytest.mark.skipif(not HAVE_PLAYWRIGHT, reason="playwright is not installed (pip install -e .[test])"),
]

EDITED = "L2YSNC8V"
IMG = ROOT / "docs" / "img"  # SHEAF_UPDATE_SCREENSHOTS=1: the screenshots docs/ui.md shows are rewritten
#: Without the background-networking flags Chromium's own connections are refused on a closed network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CHECK = ("vector_collections", "paper_up_to_date")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Servers:
    """The webserver and the daemon, each in its own process group (stopped by their ids)."""

    def __init__(self, home: Home, logs: Path) -> None:
        self.home = home
        self.env = env_for_subprocess(home)
        self.env.update(PYTHONPATH=str(ROOT), SHEAF_DISCOVERY_INTERVAL_SECONDS="5",
                        SHEAF_AUTOMATION_INTERVAL_SECONDS="5", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs = logs
        self.procs: list[subprocess.Popen] = []
        bindir = Path(sys.executable).parent
        self.web_cmd = [str(bindir / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(self.port),
                        "-w", "workspace.yaml"]
        self.daemon_cmd = [str(bindir / "dagster-daemon"), "run", "-w", "workspace.yaml"]

    def start(self, cmd: list[str], name: str) -> None:
        out = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.procs.append(subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def wait_web(self, timeout: float = 60) -> None:
        end = time.time() + timeout
        while time.time() < end:
            try:
                with urllib.request.urlopen(self.url + "/server_info", timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"webserver not up: {(self.logs / 'web.log').read_text()[-2000:]}")

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        req = urllib.request.Request(self.url + "/graphql", json.dumps({"query": query, "variables": variables or {}})
                                     .encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())["data"]

    def set_sensor(self, name: str, running: bool) -> None:
        sel = {"repositoryLocationName": "pipelines.definitions:defs", "repositoryName": "__repository__",
               "sensorName": name}
        if running:
            self.graphql("mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename } }", {"s": sel})
            return
        st = self.graphql("query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor { "
                          "sensorState { id selectorId } } } }", {"s": sel})["sensorOrError"]["sensorState"]
        self.graphql("mutation($o: String, $i: String) { stopSensor(jobOriginId: $o, jobSelectorId: $i) "
                     "{ __typename } }", {"o": st["id"], "i": st["selectorId"]})

    def launch_chain(self, partition: str) -> None:
        """Launch `paper_chain` over one paper, as Jobs → paper_chain → Materialize all does."""
        params = {"selector": {"repositoryLocationName": "pipelines.definitions:defs",
                               "repositoryName": "__repository__", "jobName": "paper_chain"},
                  "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]},
                  "runConfigData": {}, "mode": "default"}
        res = self.graphql("mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename "
                           "... on PythonError { message } } }", {"p": params})
        assert res["launchRun"]["__typename"] == "LaunchRunSuccess", res

    def launch_backfill(self, partitions: list[str]) -> None:
        """A backfill of the chain's assets over `partitions`, as the asset graph's Materialize
        does with several papers picked: runs over partition ranges (the backfill policy)."""
        params = {"assetSelection": [{"path": [a]} for a in CHAIN], "partitionNames": partitions}
        res = self.graphql("mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) "
                           "{ __typename ... on PythonError { message } } }", {"p": params})
        assert res["launchPartitionBackfill"]["__typename"] == "LaunchBackfillSuccess", res

    def launch_nightly_request(self, tags: dict[str, str]) -> None:
        """Launch `paper_chain` with the tags of a nightly run request (a one-paper range)."""
        params = {"selector": {"repositoryLocationName": "pipelines.definitions:defs",
                               "repositoryName": "__repository__", "jobName": "paper_chain"},
                  "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
                  "runConfigData": {}, "mode": "default"}
        res = self.graphql("mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename "
                           "... on PythonError { message } } }", {"p": params})
        assert res["launchRun"]["__typename"] == "LaunchRunSuccess", res

    def launch_job(self, job: str) -> None:
        """Launch `job` with no tags and no config, as its Launchpad's Launch Run does."""
        params = {"selector": {"repositoryLocationName": "pipelines.definitions:defs",
                               "repositoryName": "__repository__", "jobName": job},
                  "runConfigData": {}, "mode": "default"}
        res = self.graphql("mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename "
                           "... on PythonError { message } } }", {"p": params})
        assert res["launchRun"]["__typename"] == "LaunchRunSuccess", res

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _wait(what: str, cond, timeout: float, logs: Path) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(1)
    tail = (logs / "daemon.log").read_text(errors="replace")[-3000:]
    raise AssertionError(f"timed out waiting for {what}; daemon log:\n{tail}")


class Browser:
    def __init__(self, pw, url: str, img: Path) -> None:
        self.img = img
        self.url = url
        self.ctx = pw.chromium.launch_persistent_context(
            tempfile.mkdtemp(prefix="sheaf-chromium-"), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1600, "height": 1000})
        self.page = self.ctx.new_page()

    def open(self, path: str) -> None:
        self.page.goto(self.url + path)
        self.page.wait_for_load_state("networkidle")

    def check_partitions(self, check: str = CHECK[1]) -> str:
        """A check of `vector_collections` (default paper_up_to_date): its Partitions tab (the
        check's own tab: the asset has one too)."""
        self.open(f"/assets/{CHECK[0]}?view=checks&checkDetail={check}")
        self.page.get_by_role("tab", name="Partitions").nth(1).click()
        self.page.get_by_text("Passed (").first.wait_for()
        return self.text()

    def text(self) -> str:
        self.page.wait_for_timeout(800)
        return self.page.inner_text("body")

    def shot(self, name: str) -> None:
        self.page.wait_for_timeout(500)
        self.page.screenshot(path=str(self.img / f"{name}.png"))


def _statuses(inst) -> dict[str, list[str]]:
    return check_partition_statuses(inst, *CHECK, papers_partitions)


def _status_rows(inst) -> dict[str, dict]:
    ev = inst.get_latest_materialization_event(AssetKey("library_status"))
    if ev is None or "papers_table" not in ev.asset_materialization.metadata:
        return {}
    return {r.data["key"]: r.data for r in ev.asset_materialization.metadata["papers_table"].records}


@pytest.fixture
def served(tmp_path_factory, tmp_path, monkeypatch):
    base, _ = built_base(tmp_path_factory)
    home = clone(base, tmp_path / "h").apply(monkeypatch)
    servers = Servers(home, tmp_path)
    try:
        yield home, servers
    finally:
        servers.stop()


def test_an_edited_paper_reads_as_needing_work_in_the_ui_until_rebuilt(served):
    from dagster import DagsterInstance
    from playwright.sync_api import sync_playwright

    home, srv = served
    inst = DagsterInstance.get()
    img = IMG if os.environ.get("SHEAF_UPDATE_SCREENSHOTS") == "1" else srv.logs / "img"
    img.mkdir(parents=True, exist_ok=True)
    others = sorted(set(BASE_PAPERS) - {EDITED})
    srv.start(srv.web_cmd, "web")
    srv.wait_web()
    srv.set_sensor("sheaf_automation", running=False)  # automation paused, before the daemon starts
    srv.graphql("mutation { setNuxSeen }")  # no "Join the Dagster community" dialog over the pages
    edit_markdown(home.papers / EDITED / "paper.md", "A new paragraph about lichen thalli.")
    srv.start(srv.daemon_cmd, "daemon")
    _wait("the discovery sensor's status run", lambda: _statuses(inst).get("FAILED") == [EDITED]
          and EDITED in _status_rows(inst), 90, srv.logs)
    rows = _status_rows(inst)
    assert rows[EDITED]["state"] == "stale" and rows[EDITED]["why"] == "OCR changed"

    with sync_playwright() as pw:
        b = Browser(pw, srv.url, img)
        try:
            _browse(b, srv, inst, others)
        except Exception:
            b.page.screenshot(path=str(srv.logs / "failure.png"))
            print(f"failure screenshot: {srv.logs / 'failure.png'}")
            raise
        finally:
            b.ctx.close()


def _browse(b: Browser, srv: Servers, inst, others: list[str]) -> None:
    if True:
        text = b.check_partitions()
        assert "Failed (1)" in text and f"Passed ({len(others)})" in text and "Missing (0)" in text
        b.page.locator(f"text={EDITED} >> visible=true").last.click()
        b.page.get_by_text("OCR changed").first.wait_for()
        b.shot("check-partitions-stale")

        b.open("/assets/library_status")
        b.page.get_by_text("OCR changed").first.wait_for()
        text = b.text()
        assert "stale" in text and "papers_table" in text
        assert all(r["paper"] in text for r in _status_rows(inst).values())  # each paper whole, not cut
        b.page.get_by_text("papers_table").first.scroll_into_view_if_needed()
        b.shot("library-status-stale")

        b.open("/runs")  # the base home's runs: `sheaf build`'s, with their launcher and partitions
        b.page.get_by_text("sheaf build on").first.wait_for()
        b.shot("runs")

        b.open("/automation")
        b.page.get_by_text("library_discovery_sensor").first.click()
        b.page.get_by_text("1 run requested").first.wait_for(timeout=15_000)
        b.shot("discovery-sensor-ticks")
        b.page.get_by_role("button", name="View logs").last.click()  # the oldest tick: the one that saw the edit
        b.page.get_by_text(f"changed {EDITED}: OCR").first.wait_for(timeout=15_000)
        assert "→" in b.text()
        b.shot("discovery-sensor-tick-log")

        # Automation resumed (it reacts to changes after it resumes: `eager()` does not rebuild an edit it
        # did not see) and the paper rerun as the launchpad does: paper_chain over that partition; then
        # automation refreshes library_status and library_report. The rerun waits for automation's first
        # tick: a rerun that ends before it is a change from before the resume (CI once launched, ran and
        # finished the run 2 s before the daemon's first tick, and automation never refreshed the status).
        daemon_log = srv.logs / "daemon.log"
        ticks = lambda: daemon_log.read_text(errors="replace").count(  # noqa: E731
            "Finished auto-materialization tick for sheaf_automation")
        before = ticks()
        srv.set_sensor("sheaf_automation", running=True)
        _wait("automation's first tick after it resumed", lambda: ticks() > before, 60, srv.logs)
        srv.launch_chain(EDITED)
        _wait("the rebuild and the status refresh",
              lambda: _statuses(inst) == {"SUCCEEDED": sorted(BASE_PAPERS)}
              and {r["state"] for r in _status_rows(inst).values()} == {"built"}, 120, srv.logs)
        text = b.check_partitions()
        assert f"Passed ({len(BASE_PAPERS)})" in text and "Failed (0)" in text
        b.shot("check-partitions-built")

        b.open("/assets/library_status")
        b.page.get_by_text("papers_table").first.wait_for()
        assert "OCR changed" not in b.text()
        b.shot("library-status-built")

        # Automation paused again: a backfill of two papers, then the nightly schedule's run of one
        # (a one-paper range). Each leaves every check Passed per partition (their results used to be
        # filed under no partition: "Skipped"), and library_status is refreshed after each run.
        srv.set_sensor("sheaf_automation", running=False)
        two = ["M3FJ9PLC", "W6TB4YRS"]  # MinerU papers, not adjacent: one one-paper range run each
        _rebuild_while_paused(b, srv, inst, two, lambda: srv.launch_backfill(two))
        _rebuild_while_paused(b, srv, inst, [EDITED], lambda: srv.launch_nightly_request(
            {"dagster/asset_partition_range_start": EDITED, "dagster/asset_partition_range_end": EDITED}))
        # rebuild_stale from its Launchpad, no keys picked: it rebuilds the edited paper, and only it
        _rebuild_while_paused(b, srv, inst, [EDITED], lambda: srv.launch_job("rebuild_stale"))
        runs = [r for r in inst.get_runs(limit=10) if r.tags.get("sheaf/launched_by", "").startswith("rebuild_stale")]
        assert [r.tags.get("dagster/partition") for r in runs] == [EDITED], [r.tags for r in runs]


def _all_checks(inst) -> dict[str, dict[str, list[str]]]:
    from assets.checks import ALL_CHECKS

    return {ck.name: check_partition_statuses(inst, ck.asset_key.path[-1], ck.name, papers_partitions)
            for chk in ALL_CHECKS for ck in chk.check_keys}


def _rebuild_while_paused(b: Browser, srv: Servers, inst, papers: list[str], launch) -> None:
    for k in papers:
        extra = f"An added paragraph of {k} about moss spores."
        md, cl = srv.home.papers / k / "paper.md", srv.home.papers / k / "content_list.json"
        if md.exists():
            edit_markdown(md, extra)
        else:
            blocks = json.loads(cl.read_text(encoding="utf-8"))
            near = blocks[len(blocks) // 2]
            blocks.insert(len(blocks) // 2, {"type": "text", "text": extra,
                                             "bbox": near.get("bbox", [0, 0, 1, 1]), "page_idx": near["page_idx"]})
            cl.write_text(json.dumps(blocks), encoding="utf-8")
    _wait("the edits seen", lambda: _statuses(inst).get("FAILED") == sorted(papers)
          and {k for k, r in _status_rows(inst).items() if r["state"] == "stale"} == set(papers), 90, srv.logs)
    launch()
    everything = {"SUCCEEDED": sorted(BASE_PAPERS)}
    _wait(f"the rebuild of {papers} and the status refresh (automation paused)",
          lambda: all(v == everything for v in _all_checks(inst).values())
          and {r["state"] for r in _status_rows(inst).values()} == {"built"}, 180, srv.logs)
    for check in ("paper_up_to_date", "vectors_match_passages"):
        text = b.check_partitions(check)
        assert f"Passed ({len(BASE_PAPERS)})" in text and "Failed (0)" in text, (check, text[-800:])
