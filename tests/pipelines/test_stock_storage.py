"""`SHEAF_DAGSTER_STORAGE=stock`: the chain on Dagster's own storage classes, with no Sheaf
subclass loaded, so that a Dagster upgrade that breaks the subclasses falls back with one setting.
A home built on Sheaf's storages switches to stock and back keeping its build history; on stock,
a no-op, an edit, a removal and `sheaf status` answer as they do on Sheaf's storages."""
from __future__ import annotations

import shutil

import pytest

from tests.kits.pipeline import (
    BASE_PAPERS,
    Home,
    artifacts_of,
    built_base,
    clone,
    edit_markdown,
    index_counts,
    instance,
    run_cli,
    search,
)


@pytest.fixture
def home(tmp_path_factory, tmp_path, monkeypatch) -> Home:
    base, _ = built_base(tmp_path_factory)
    h = clone(base, tmp_path / "h").apply(monkeypatch)
    monkeypatch.setenv("SHEAF_DAGSTER_STORAGE", "stock")
    return h


def _build() -> dict:
    code, env = run_cli(["build", "--json"])
    assert code == 0, env
    return env["data"]


def test_a_home_on_dagsters_stock_storages_builds_only_what_changed(home, monkeypatch):
    # switched to stock: the history is kept (nothing to rebuild), Dagster's own classes are loaded
    assert not _build()["planned"]
    yaml = (home.dagster_home / "dagster.yaml").read_text()
    assert "ConsolidatedSqliteEventLogStorage" in yaml and "pipelines" not in yaml
    inst = instance()
    assert type(inst.event_log_storage).__name__ == "ConsolidatedSqliteEventLogStorage"
    assert type(inst.run_storage).__name__ == "SqliteRunStorage"
    assert not type(inst.event_log_storage).__module__.startswith("pipelines")

    # an edit rebuilds that paper alone, and it is searchable
    edited, removed = BASE_PAPERS[0], BASE_PAPERS[1]
    edit_markdown(next((home.papers / edited).glob("*.md")), "A paragraph about quokkas.")
    data = _build()
    assert list(data["planned"]) == [edited], data["planned"]
    assert search(home, "quokkas") == [edited]

    # a removed paper leaves nothing behind
    shutil.rmtree(home.papers / removed)
    data = _build()
    assert removed in data["sync"]["removed"], data["sync"]
    assert removed not in instance().get_dynamic_partitions("papers")
    assert artifacts_of(home, removed) == []
    assert not any(v for k, v in index_counts(home, removed).items() if not k.startswith("papers"))  # units, passages

    # status: every paper up to date; a second build does nothing
    code, env = run_cli(["status", "--json"])
    assert code == 0 and {p["state"] for p in env["data"]["papers"]} == {"built"}, env["data"]
    assert not _build()["planned"]

    # and back to Sheaf's storages, with the history the stock ones wrote
    monkeypatch.setenv("SHEAF_DAGSTER_STORAGE", "sheaf")
    assert not _build()["planned"]
    assert "pipelines.dagster_internals.sqlite_storage" in (home.dagster_home / "dagster.yaml").read_text()


def test_a_bad_storage_setting_is_bad_input(home, monkeypatch):
    monkeypatch.setenv("SHEAF_DAGSTER_STORAGE", "fast")
    code, env = run_cli(["build", "--json"])
    assert code == 2 and env["error"]["code"] == "BAD_INPUT", env
    assert "SHEAF_DAGSTER_STORAGE" in env["error"]["message"]


@pytest.mark.parametrize("module", ["pipelines.dagster_internals.private", "pipelines.dagster_private"])
def test_a_dagster_yaml_naming_an_earlier_storage_module_still_loads(home, monkeypatch, module):
    """Earlier versions' dagster.yaml named the storages in another module: a file the user keeps
    (no Sheaf header) is left alone and still loads Sheaf's storages; one Sheaf wrote is brought
    up to date on the next command, keeping the history (nothing to rebuild)."""
    from pipelines.build.runs import ensure_dagster_home
    from pipelines.dagster_internals.home_files import YAML_HEADER, dagster_yaml
    from sheaf.core.settings import get_settings

    monkeypatch.setenv("SHEAF_DAGSTER_STORAGE", "sheaf")
    cfg = home.dagster_home / "dagster.yaml"
    earlier = dagster_yaml().replace("pipelines.dagster_internals.sqlite_storage", module)
    users_own = "\n".join(line for line in earlier.splitlines() if not line.startswith("#")) + "\n"
    cfg.write_text(users_own)
    ensure_dagster_home(get_settings())
    assert cfg.read_text() == users_own
    with instance() as inst:
        assert type(inst.event_log_storage).__name__ == "SheafEventLogStorage"
        assert type(inst.run_storage).__name__ == "SheafRunStorage"

    cfg.write_text(earlier)
    assert earlier.startswith(YAML_HEADER)
    assert not _build()["planned"]
    assert cfg.read_text() == dagster_yaml()
