"""A home belongs to one library: after `sheaf build --library L` a plain command uses L (and
says so), another library is refused before anything is scanned or written, and only
`--switch-library` gives the home a new one. The trap this guards: a plain `sheaf build` in a
Zotero home once built the bundled sample library and dropped every Zotero paper."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sheaf.core import home_record
from sheaf.core.envelope import SheafError
from sheaf.core.settings import check_home_library, get_settings, record_home_library
from tests.kits.pipeline import SAMPLE, Home, built_base, clone, index_counts, make_library, run_cli

pytestmark = pytest.mark.slow


def _home_only(h: Home, mp: pytest.MonkeyPatch) -> None:
    """The environment of a user who set SHEAF_HOME once and names no library."""
    for k in ("SHEAF_INDEX_FILE", "SHEAF_EMBEDDING_MODEL", "SHEAF_LIBRARY"):
        mp.delenv(k, raising=False)
    mp.setenv("SHEAF_HOME", str(h.home))
    mp.setenv("DAGSTER_HOME", str(h.dagster_home))


def _all_counts(h: Home, keys) -> dict[str, dict[str, int]]:
    return {k: index_counts(h, k) for k in keys}


@pytest.fixture()
def home(tmp_path_factory, tmp_path) -> Home:
    base, _ = built_base(tmp_path_factory)
    return clone(base, tmp_path / "copy")


def test_the_first_build_records_the_library(home):
    rec = json.loads((home.home / "home.json").read_text())
    assert Path(rec["library_relative"]) == Path("../library")
    assert rec["layout"] == "plain"


def test_a_plain_build_uses_the_recorded_library_and_drops_nothing(home, monkeypatch, capsys):
    with monkeypatch.context() as mp:
        _home_only(home, mp)
        keys = sorted(p.name for p in home.papers.iterdir())
        before = _all_counts(home, keys)
        code, st = run_cli(["status", "--json"])
        assert code == 0, st
        assert st["data"]["library_source"] == "recorded"
        assert Path(st["data"]["library"]) == home.library
        assert set(st["data"]["states"]) == {"built"}, st["data"]["states"]
        code, env = run_cli(["build", "--json"])
        assert code == 0, env
        assert env["data"]["library_source"] == "recorded"
        from sheaf.cli.app import main

        capsys.readouterr()
        assert main(["status"]) == 0
        said = capsys.readouterr().err
        assert f"library: {home.library} (recorded by the home" in said, said
        assert not env["data"]["sync"].get("removed"), env["data"]["sync"]
        assert _all_counts(home, keys) == before


def test_another_library_is_refused_and_nothing_changes(home, monkeypatch):
    record = (home.home / "home.json").read_bytes()
    with monkeypatch.context() as mp:
        _home_only(home, mp)
        keys = sorted(p.name for p in home.papers.iterdir())
        before = _all_counts(home, keys)
        for argv in (["build", "--library", str(SAMPLE)], ["status", "--library", str(SAMPLE)],
                     ["doctor", "--repair", "--library", str(SAMPLE)]):
            code, env = run_cli([*argv, "--json"])
            assert code == 2, (argv, env)
            err = env["error"]
            assert err["code"] == "LIBRARY_MISMATCH", err
            assert Path(err["details"]["recorded_library"]) == home.library
            assert Path(err["details"]["library"]) == SAMPLE
            assert "--switch-library" in err["details"]["hint"]
        code, env = run_cli(["search", "protein", "--no-server", "--library", str(SAMPLE), "--json"])
        assert (code, env["error"]["code"]) == (2, "LIBRARY_MISMATCH"), env
        code, env = run_cli(["search", "the", "--no-server", "--library", str(home.library), "--json"])
        assert code == 0 and env["ok"], env
        mp.setenv("SHEAF_LIBRARY", str(SAMPLE))  # the same through the environment
        code, env = run_cli(["build", "--json"])
        assert (code, env["error"]["code"]) == (2, "LIBRARY_MISMATCH")
        assert "SHEAF_LIBRARY" in env["error"]["message"]
        assert _all_counts(home, keys) == before
    assert (home.home / "home.json").read_bytes() == record


def test_switch_library_records_the_new_library_and_drops_the_old_papers(home, monkeypatch, tmp_path):
    keys = sorted(p.name for p in home.papers.iterdir())
    kept = keys[:2]
    other = make_library(tmp_path / "other", tuple(kept))
    with monkeypatch.context() as mp:
        _home_only(home, mp)
        code, env = run_cli(["build", "--library", str(other), "--switch-library", "--json"])
        assert code == 0, env
        assert Path(env["data"]["switched_from"]) == home.library
        assert sorted(env["data"]["sync"]["removed"]) == keys[2:]
        code, st = run_cli(["status", "--json"])
        assert Path(st["data"]["library"]) == other
        assert sorted(p["paper_id"] for p in st["data"]["papers"]) == kept


def test_a_home_built_before_records_refuses_a_plain_build(home, monkeypatch):
    (home.home / "home.json").unlink()
    with monkeypatch.context() as mp:
        _home_only(home, mp)
        keys = sorted(p.name for p in home.papers.iterdir())
        before = _all_counts(home, keys)
        code, env = run_cli(["build", "--json"])
        assert (code, env["error"]["code"]) == (2, "LIBRARY_MISMATCH"), env
        assert "--library" in env["error"]["details"]["hint"]
        assert _all_counts(home, keys) == before
        code, env = run_cli(["build", "--library", str(home.library), "--json"])  # named once: recorded
        assert code == 0, env
        assert home_record.read_record(home.home).names(home.library)


def test_settings_read_the_record_and_a_damaged_record_is_named(tmp_path):
    lib, other, h = tmp_path / "lib", tmp_path / "other", tmp_path / "home"
    lib.mkdir()
    other.mkdir()
    assert get_settings({}, home=h).library_source == "default"
    record_home_library(get_settings({}, home=h, library=lib), "plain")
    s = get_settings({}, home=h)
    assert (s.library, s.library_source) == (lib, "recorded")
    assert get_settings({"SHEAF_LIBRARY": str(lib)}, home=h).library_source == "environment"
    with pytest.raises(SheafError) as e:
        check_home_library(get_settings({"SHEAF_LIBRARY": str(other)}, home=h))
    assert e.value.code == "LIBRARY_MISMATCH"
    (h / "home.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(SheafError) as e:
        get_settings({}, home=h)
    assert e.value.code == "BAD_INPUT" and str(h / "home.json") in e.value.message


def test_a_vault_moved_elsewhere_keeps_its_library(tmp_path):
    vault = tmp_path / "vault"
    vhome = vault / "System" / "PaperForge" / "sheaf"
    vhome.mkdir(parents=True)
    record_home_library(get_settings({}, home=vhome, library=vault), "paperforge")
    shutil.copytree(vault, tmp_path / "moved")  # the old vault stays: the moved one is still its own
    moved = tmp_path / "moved"
    mhome = moved / "System" / "PaperForge" / "sheaf"
    assert get_settings({}, home=mhome).library == moved
    check_home_library(get_settings({}, home=mhome, library=moved))  # no LIBRARY_MISMATCH
