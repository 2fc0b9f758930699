"""The chain's first step reads each paper's source where discovery found it: the `ocr_result`
observation a build records for a changed paper names its source (relative to the library or the
home, so a moved home keeps it) and its identity, and `ocr_blocks` takes them from there instead
of discovering the library again. A source that is not there any more, or an observation that
names none, is found by discovering those papers alone."""
from __future__ import annotations

import pytest

from tests.kits.pipeline import Home, built_base, clone, edit_markdown, instance, run_cli, search

PAPER = "L2YSNC8V"


@pytest.fixture
def home(tmp_path_factory, tmp_path, monkeypatch) -> Home:
    base, _ = built_base(tmp_path_factory)
    return clone(base, tmp_path / "h").apply(monkeypatch)


@pytest.fixture
def discoveries(monkeypatch) -> list:
    """The papers each of `ocr_blocks`' discoveries of the library asked for."""
    import pipelines.planning.sources as sources

    calls: list = []
    real = sources.discover_library

    def counted(settings, keys=None, **kw):
        calls.append(sorted(keys) if keys is not None else None)
        return real(settings, keys=keys, **kw)

    monkeypatch.setattr(sources, "discover_library", counted)
    return calls


def _build() -> dict:
    code, env = run_cli(["build", "--json"])
    assert code == 0, env
    return env["data"]


def test_an_edited_paper_is_read_from_its_observed_source(home, discoveries):
    edit_markdown(home.papers / PAPER / "paper.md", "A new paragraph about quokka burrows.")
    _build()
    assert discoveries == []  # no discovery of the library inside the run
    assert search(home, "quokka") == [PAPER]
    from pipelines.planning.events import latest_events

    with instance() as inst:
        seen = latest_events(inst, "ocr_result", "observation", [PAPER])[PAPER].metadata
        built = latest_events(inst, "ocr_blocks", "materialization", [PAPER])[PAPER].metadata
    assert seen["source"] == f"lib:papers/{PAPER}"
    assert built["title"] and built["title"] == seen["title"]  # the identity the UI shows, from the observation


@pytest.mark.parametrize("source", [None, "lib:papers/MOVEDAWAY"], ids=["no source", "moved"])
def test_a_paper_whose_observed_source_is_not_there_is_discovered_alone(home, discoveries, source):
    """An observation made by the UI's "Observe sources" (or an earlier Sheaf) names no source; a
    source can have moved since it was observed."""
    from dagster import AssetObservation

    edit_markdown(home.papers / PAPER / "paper.md", "A new paragraph about wombat burrows.")
    _build()
    discoveries.clear()
    edit_markdown(home.papers / PAPER / "paper.md", "A paragraph about echidna spines.")
    from pipelines.planning.events import latest_observed_versions
    from sheaf.formats import source_hash

    new_hash = source_hash(home.papers / PAPER, PAPER)[2]
    with instance() as inst:
        assert latest_observed_versions(inst)[PAPER] != new_hash
        inst.report_runless_asset_event(AssetObservation(
            asset_key="ocr_result", partition=PAPER, tags={"dagster/data_version": new_hash},
            metadata={} if source is None else {"source": source}))
    code, env = run_cli(["build", "--json", "--paper", PAPER, "--full"])
    assert code == 0, env
    assert discoveries == [[PAPER]]
    assert search(home, "echidna") == [PAPER]
