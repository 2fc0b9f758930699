"""The running build's progress tags (`pipelines.build.live.LiveProgress`) on a real instance: written
before each paper's event when a program reads the events, at most once a `TAG_EVERY` otherwise,
and never left behind: what a throttled write skipped is written when the run ends."""
from __future__ import annotations

import os
import uuid

import pytest
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus

import pipelines.build.live as live
from pipelines.build.live import LiveProgress

LAST = "vector_collections"


@pytest.fixture
def inst(tmp_path):
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        yield instance


def _run(inst) -> str:
    """A started run of this process, as `sheaf build` tags its runs."""
    run = DagsterRun(job_name="paper_chain", run_id=str(uuid.uuid4()), status=DagsterRunStatus.STARTED,
                     tags={"sheaf/pid": str(os.getpid())})
    inst.add_run(run)
    return run.run_id


def _finish(inst, run_id: str) -> None:
    inst.report_run_canceled(inst.get_run_by_id(run_id), message="finished (test)")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(live.time, "monotonic", c)
    return c


def _writes(inst, monkeypatch) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    real = inst.add_run_tags

    def counted(run_id, tags):
        out.append(dict(tags))
        return real(run_id, tags)

    monkeypatch.setattr(inst, "add_run_tags", counted)
    return out


def _current(inst, run_id: str) -> int:
    return int(inst.get_run_by_id(run_id).tags["sheaf/current"])


def test_a_program_reading_the_events_sees_the_tags_at_least_as_far(inst, clock):
    run_id = _run(inst)
    seen: list[tuple[int, int]] = []
    lp = LiveProgress(inst, 5, LAST, lambda e: seen.append((e["current"], _current(inst, run_id))), exact=True)
    for i in range(5):
        lp.paper(LAST, f"K{i}", {"passages": 1})
    assert seen == [(n, n) for n in range(1, 6)]


def test_without_a_program_the_tags_are_written_once_a_second_and_the_rest_at_the_runs_end(inst, clock, monkeypatch):
    first = _run(inst)
    writes = _writes(inst, monkeypatch)
    events: list[dict] = []
    lp = LiveProgress(inst, 6, LAST, events.append, exact=False)
    lp.paper(LAST, "K0", {})
    for i in range(1, 3):  # within the second: no write
        clock.now += 0.3
        lp.paper(LAST, f"K{i}", {})
    assert [w["sheaf/current"] for w in writes] == ["1"] and _current(inst, first) == 1
    clock.now += 0.5  # 1.1 s since the last write
    lp.paper(LAST, "K3", {"embeddings_computed": 4})
    assert _current(inst, first) == 4 and len(writes) == 2
    clock.now += 0.1
    lp.paper(LAST, "K4", {})  # throttled: left for the run's end
    assert _current(inst, first) == 4 and len(events) == 5
    _finish(inst, first)
    lp.new_run()  # the next run: what the last write left out goes to the run it belongs to
    tags = inst.get_run_by_id(first).tags
    # the counters it left out, and no paper named once the run is over (a run of many papers)
    assert (tags["sheaf/current"], tags["sheaf/current_paper"], tags["sheaf/embedded"]) == ("5", "", "4")
    second = _run(inst)
    clock.now += 0.1
    lp.paper(LAST, "K5", {})  # the run's only paper, throttled: no write found the run yet
    _finish(inst, second)
    lp.flush()  # after its last run ended: still that run's tags
    assert _current(inst, second) == 6 and len(writes) == 5
    assert inst.get_run_by_id(second).tags["sheaf/current_paper"] == "K5"
    lp.flush()
    assert len(writes) == 5  # nothing left: no write
    lp.end()  # the build's end: no finished run names a paper
    assert [inst.get_run_by_id(r).tags["sheaf/current_paper"] for r in (first, second)] == ["", ""]
    assert len(writes) == 6


@pytest.mark.slow
def test_papers_embedded_together_are_reported_one_by_one_as_encoded(tmp_path, monkeypatch, embedder, onnx_export):
    """A build whose papers' passages are embedded as one group (`EMBED_GROUP_PASSAGES`) reports
    each paper when its own vectors are written: `current` steps 1, 2, 3, 4 and the model is
    still encoding between the first paper's event and the last's (not the whole group first,
    then four events at once)."""
    import dataclasses

    from pipelines.build.command import build
    from tests.kits.paths import link_onnx_export
    from tests.kits.pipeline import BASE_PAPERS, definitions, new_home

    home = new_home(tmp_path / "h").apply(monkeypatch)
    link_onnx_export(onnx_export, home.home)  # the build exports no query encoder of its own
    emb = dataclasses.replace(embedder, batch_size=8)  # the loaded model, in batches of 8
    seen: list[tuple[int, int]] = []

    def on_event(e: dict) -> None:
        if e["event"] == "progress":
            seen.append((e["current"], emb.model_calls))

    rep = build(home.settings(), definitions(), embedder=emb, events=on_event)
    assert not rep.interrupted and rep.embeddings_computed > 16
    assert [c for c, _ in seen] == list(range(1, len(BASE_PAPERS) + 1))
    calls = [n for _, n in seen]
    assert calls == sorted(calls) and calls[0] < calls[-1], seen


def test_a_build_says_each_phase_it_is_in(tmp_path_factory, tmp_path, monkeypatch):
    """What a piped build's heartbeat line names (`sheaf.core.progress.phase`): the scan, the plan,
    each step's papers n/N, the model load and the embedding, in that order."""
    from sheaf.core.progress import phase_listener
    from tests.kits.pipeline import built_base, clone, edit_markdown, run_cli

    base, _ = built_base(tmp_path_factory)
    home = clone(base, tmp_path / "b").apply(monkeypatch)
    edit_markdown(home.papers / "L2YSNC8V" / "paper.md", "A new paragraph about lichen thalli.")
    said: list[str] = []
    with phase_listener(said.append):
        code, env = run_cli(["build", "--json"])
    assert code == 0, env
    firsts = list(dict.fromkeys(p.split(" ")[0] for p in said))
    assert firsts[:2] == ["scanning", "planning"], said
    assert "parse 1/1" in said and "embed 1/1" in said, said
    assert said.index("loading the embedding model") < said.index("embedding") < said.index("embed 1/1")
