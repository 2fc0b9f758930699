"""The one settings class: read from SHEAF_* once, every value checked, bad values named."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sheaf.core.envelope import SheafError
from sheaf.core.settings import Settings, describe, get_settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./data/home.json of a local build: the defaults themselves
    s = get_settings({})
    assert s == Settings()
    assert s.home == Path("data") and s.library == Path("data/sample-library")
    assert s.index_path == Path("data/index/sheaf.db") and s.artifacts_dir == Path("data/artifacts")
    assert (s.unit_token_cap, s.embed_backend, s.nightly_cron) == (1000, "auto", "0 2 * * *")


def test_environment_names_case_and_empty_values():
    env = {"SHEAF_HOME": "/h", "sheaf_home": "/lower", "SHEAF_INDEX_FILE": "", "Sheaf_Unit_Token_Cap": "7",
           "SHEAF_SQLITE_BUSY_TIMEOUT_MS": " 5 ", "OTHER": "x"}
    s = get_settings(env)
    assert s.home == Path("/h")  # the exactly upper-case spelling wins
    assert s.index_file is None and s.index_path == Path("/h/index/sheaf.db")  # empty = unset
    assert s.unit_token_cap == 7 and s.sqlite_busy_timeout_ms == 5
    assert get_settings({"sheaf_home": "/lower"}).home == Path("/lower")


def test_overrides_win_and_are_checked_too():
    s = get_settings({"SHEAF_HOME": "/env"}, home="/override", index_file=Path("/x/y.db"))
    assert s.home == Path("/override") and s.index_path == Path("/x/y.db")
    with pytest.raises(SheafError) as e:
        get_settings({}, unit_token_cap=0)
    assert e.value.code == "BAD_INPUT" and "SHEAF_UNIT_TOKEN_CAP" in e.value.message
    with pytest.raises(TypeError):
        get_settings({}, no_such_setting=1)


def test_a_reduced_precision_on_the_onnx_backend_is_bad_input():
    """Each valid alone, together they contradict each other: the export computes in fp32."""
    with pytest.raises(SheafError) as e:
        get_settings({"SHEAF_EMBED_BACKEND": "onnx", "SHEAF_EMBED_PRECISION": "bf16"})
    assert e.value.code == "BAD_INPUT" and "SHEAF_EMBED_PRECISION=bf16" in e.value.message
    assert "ONNX" in e.value.message and e.value.details["variable"] == "SHEAF_EMBED_PRECISION"
    for backend, precision in (("onnx", "fp32"), ("torch", "bf16"), ("auto", "fp16"), ("sentence-transformers", "auto")):
        s = get_settings({"SHEAF_EMBED_BACKEND": backend, "SHEAF_EMBED_PRECISION": precision})
        assert (s.embed_backend, s.embed_precision) == (backend, precision)


@pytest.mark.parametrize("var,value,allowed", [
    ("SHEAF_UNIT_TOKEN_CAP", "abc", "an integer"),
    ("SHEAF_UNIT_TOKEN_CAP", "-5", "an integer >= 1"),
    ("SHEAF_EMBED_BATCH_SIZE", "0", "an integer >= 1"),
    ("SHEAF_PAPERS_PER_RUN", "0", "an integer >= 1"),
    ("SHEAF_SQLITE_BUSY_TIMEOUT_MS", "abc", "an integer"),
    ("SHEAF_EMBED_BACKEND", "foo", "one of auto, onnx, torch, sentence-transformers"),
    ("SHEAF_EMBED_PRECISION", "fp8", "one of auto, fp32, bf16, fp16"),
    ("SHEAF_NIGHTLY_CRON", "bogus", "a cron expression"),
    ("SHEAF_NIGHTLY_CRON", "0 25 * * *", "a cron expression"),
    ("SHEAF_NIGHTLY_CRON", "61 2 * * *", "a cron expression"),
])
def test_bad_values_name_the_variable_the_value_and_what_is_allowed(var, value, allowed):
    with pytest.raises(SheafError) as e:
        get_settings({var: value})
    err = e.value
    assert err.code == "BAD_INPUT"
    assert var in err.message and repr(value) in err.message and allowed in err.message, err.message
    assert err.details["variable"] == var and err.details["value"] == value


@pytest.mark.parametrize("cron", ["0 2 * * *", "*/15 * * * *", "0 0 1,15 * mon-fri", "30 4 * jan sun", "0 22 * * 1-5"])
def test_valid_cron_expressions_pass(cron):
    assert get_settings({"SHEAF_NIGHTLY_CRON": cron}).nightly_cron == cron


def test_every_setting_is_described():
    rows = describe()
    assert {r["variable"] for r in rows} >= {"SHEAF_HOME", "SHEAF_LIBRARY", "SHEAF_UNIT_TOKEN_CAP",
                                             "SHEAF_NIGHTLY_CRON", "SHEAF_EMBEDDING_MODEL", "SHEAF_EMBED_BACKEND",
                                             "SHEAF_INDEX_FILE", "SHEAF_SQLITE_BUSY_TIMEOUT_MS", "SHEAF_ARTIFACTS_URL"}
    assert all(r["meaning"] for r in rows)


def test_reading_settings_imports_no_pydantic():
    code = ("import sys; from sheaf.core.settings import get_settings; get_settings(); "
            "bad = [m for m in ('pydantic', 'pydantic_settings', 'numpy') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_index_url_selects_the_backend_and_never_shows_a_password():
    from sheaf.core.settings import redact_url

    assert get_settings({}).index_backend == "sqlite"
    s = get_settings({"SHEAF_INDEX_URL": "postgresql://sheaf:s3cret@db.lab:5433/papers?sslmode=require"})
    assert s.index_backend == "postgres" and "s3cret" not in s.index_location
    assert s.index_location == "postgresql://sheaf:***@db.lab:5433/papers?sslmode=require"
    assert redact_url("postgresql://u@h/db?password=pw&x=1") == "postgresql://u@h/db?password=***&x=1"
    assert redact_url("postgresql://postgres:@/db?host=/tmp/s") == "postgresql://postgres:@/db?host=/tmp/s"
    f = get_settings({"SHEAF_INDEX_URL": "sqlite:/tmp/other.db"})
    assert f.index_backend == "sqlite" and str(f.index_path) == "/tmp/other.db"
    with pytest.raises(SheafError) as e:
        get_settings({"SHEAF_INDEX_URL": "mysql://root:hunter2@h/db"})
    assert e.value.code == "BAD_INPUT" and "hunter2" not in str(e.value.message) + str(e.value.details)
