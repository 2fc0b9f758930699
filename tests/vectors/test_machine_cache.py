"""The per-user machine cache (`sheaf.vectors.machine_cache`): a home's first build pays the ONNX export
and the backend measurement only where this machine has never paid them; the entries are keyed by
what they depend on, made once when two builds race, and an unwritable cache folder leaves the home
to make its own, with a warning. And nothing is measured where a measurement cannot pay."""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from sheaf.core.settings import get_settings
from sheaf.vectors.backend_choice import (
    FIRST_SWITCH_PASSAGES,
    MEASURE_MIN_PASSAGES,
    ONNX,
    RECORD_FILE,
    TORCH_BF16,
    TORCH_FP16,
    TORCH_FP32,
    Measurement,
    Trial,
    load_record,
    machine_facts,
    needs_measurement,
    resolve,
)
from sheaf.vectors.embedder import Embedder
from sheaf.vectors.identity import ModelIdentity
from sheaf.vectors.machine_cache import MachineCache, cache_dir, default_cache_dir, link_into, open_cache
from sheaf.vectors.onnx import EXPORT_FORMAT, EXPORT_JSON, find_export, model_source_files

BF16_CPU = "model name\t: Some CPU\nflags\t\t: fpu avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX2_CPU = "model name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n"
VERSIONS = {"torch": "2.13.0", "transformers": "5.25.0", "sentence-transformers": "6.3.0", "onnx": "1.23.2",
            "onnxruntime": "1.32.0"}


def never(*a, **k):
    raise AssertionError("a child process was started")


def on_cpu(monkeypatch, cpuinfo: str) -> None:
    """The embedder sees a machine with this /proc/cpuinfo (and no GPU): the same test on any CPU."""
    import sheaf.vectors.embedder as embedder_module

    real = embedder_module.machine_facts
    monkeypatch.setattr(embedder_module, "machine_facts", lambda key, device="cpu": real(key, device, cpuinfo=cpuinfo))


def texts(n: int, tag: str = "") -> list[str]:
    return [f"passage {i}{tag}: bone density" for i in range(n)]


def record_choosing(facts, chosen: str = ONNX) -> Measurement:
    """A measurement on `facts` in which `chosen` is the fastest (every backend agrees)."""
    trials = {b: Trial(b, 100.0 if b == chosen else 10.0, 1.0, 1.0, True) for b in (ONNX, TORCH_FP32, TORCH_BF16)}
    return Measurement(facts, trials, chosen, 5.0, "2026-01-01T00:00:00+00:00")


# --- a model folder and an "export" of it that need no torch -----------------------------------------

def tiny_model(root: Path, weights: bytes = b"w" * 64) -> Path:
    model = root / "tiny-model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text('{"hidden_size": 4}')
    (model / "model.safetensors").write_bytes(weights)
    return model


def fake_export(models_root: Path, model: Path) -> Path:
    """What `export_in_child` leaves for `model` in `models_root`, made in a moment: an export folder
    that `find_export` takes as usable (the identity, the model's files, the graph and tokenizer)."""
    ident = ModelIdentity(model.name, "0" * 64, 4, True, 256, "t")
    out = Path(models_root) / ident.key
    tmp = Path(models_root) / f".{ident.key}.tmp-{os.getpid()}-1"
    tmp.mkdir(parents=True)
    (tmp / "model.onnx").write_bytes(b"graph" * 100)
    (tmp / "tokenizer.json").write_text("{}")
    meta = {"format": EXPORT_FORMAT, "identity": ident.to_dict(), "identity_key": ident.key,
            "source_files": model_source_files(str(model)),
            "onnx": {"file": "model.onnx", "size": 500}, "tokenizer": {"file": "tokenizer.json", "size": 2}}
    (tmp / EXPORT_JSON).write_text(json.dumps(meta))
    os.replace(tmp, out)
    return out


# --- where the cache is ------------------------------------------------------------------------------

def test_the_cache_folder_is_the_platforms_and_sheaf_cache_dir_moves_it(tmp_path, monkeypatch):
    assert default_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "sheaf"
    assert default_cache_dir({}) == Path.home() / ".cache" / "sheaf"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir(None) == tmp_path / "xdg" / "sheaf"  # platformdirs on Linux honours XDG_CACHE_HOME
    assert cache_dir(tmp_path / "elsewhere") == tmp_path / "elsewhere"
    s = get_settings(environ={"SHEAF_CACHE_DIR": str(tmp_path / "moved")}, home=tmp_path / "home")
    assert s.cache_dir == tmp_path / "moved"
    assert Embedder.from_settings(s).cache_dir == str(tmp_path / "moved")
    assert Embedder.from_settings(get_settings(environ={}, home=tmp_path)).cache_dir == str(tmp_path / "xdg" / "sheaf")
    assert Embedder().cache_dir is None  # an embedder built by hand: the home (or none) only


# --- the keys ------------------------------------------------------------------------------------------

def test_a_changed_model_or_library_version_is_a_new_cache_key(tmp_path):
    model = tiny_model(tmp_path / "a")
    cache = MachineCache(tmp_path / "cache", VERSIONS)
    key, payload = cache.export_key(str(model))
    assert cache.export_key(str(model))[0] == key and payload["libraries"] == VERSIONS
    assert cache.export_root(str(model)) == tmp_path / "cache" / "onnx" / key
    # a model file's bytes (same size), or a file more
    (model / "model.safetensors").write_bytes(b"v" * 64)
    changed = cache.export_key(str(model))[0]
    assert changed != key
    (model / "vocab.txt").write_text("[PAD]")
    assert cache.export_key(str(model))[0] not in (key, changed)
    # another version of any library the export depends on
    base = cache.export_key(str(model))[0]
    for lib in VERSIONS:
        other = MachineCache(cache.root, {**VERSIONS, lib: "99.0"})
        assert other.export_key(str(model))[0] != base, lib
    # the record: by the facts it was measured on (CPU flags, CPU model, model identity) and the versions
    facts = machine_facts("k1", cpuinfo=BF16_CPU)
    path = cache.record_path(facts)
    assert path.parent == cache.root / "backends" and cache.record_path(facts) == path
    for other in (machine_facts("k1", cpuinfo=AVX2_CPU), machine_facts("k2", cpuinfo=BF16_CPU),
                  machine_facts("k1", cpuinfo=BF16_CPU.replace("Some CPU", "Another CPU"))):
        assert cache.record_path(other) != path
    assert MachineCache(cache.root, {**VERSIONS, "onnxruntime": "1.33.0"}).record_path(facts) != path
    rec = record_choosing(facts)
    cache.save_record(rec)
    assert cache.load_record(facts) == rec and cache.load_record(machine_facts("k2", cpuinfo=BF16_CPU)) is None


# --- a second home -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_second_home_reuses_the_cached_export_and_record_with_no_child(embedder, onnx_export, tmp_path,
                                                                         monkeypatch):
    """The first home of a machine exports the model into the machine cache (here: the session's export,
    as the child would leave it) and measures the backends once; the second home's first build links
    the export (hard links, the same files) and takes the record: no process is started, torch is not
    loaded, nothing is measured."""
    import subprocess

    import sheaf.vectors.embedder as embedder_module

    on_cpu(monkeypatch, BF16_CPU)  # a CPU where a measurement can pay, whatever runs the test
    exports: list[Path] = []

    def export_child(model, root, poll=None, **k):
        exports.append(Path(root))
        return link_into(onnx_export, root)

    monkeypatch.setattr(embedder_module, "export_in_child", export_child)
    measured: list = []
    settings1 = get_settings(environ={"SHEAF_EMBED_BACKEND": "auto"}, home=tmp_path / "home1")
    first = Embedder.from_settings(settings1)
    first.measurer = lambda facts: measured.append(facts) or record_choosing(facts, ONNX)
    monkeypatch.setattr(first, "_load_sentence_transformers", embedder.load)  # torch, already loaded here
    first.encode(texts(MEASURE_MIN_PASSAGES))
    cache = first.machine_cache()
    assert cache is not None and cache.root == Path(os.environ["SHEAF_CACHE_DIR"])
    assert exports == [cache.export_root(first.model_name)] and len(measured) == 1
    assert first.backend == ONNX and first.choice.measured_now and first.backend_note is None
    assert cache.load_record(measured[0]) is not None

    # the second home: any child process, torch load or measurement fails the test
    monkeypatch.setattr(subprocess, "Popen", never)
    monkeypatch.setattr(embedder_module, "export_in_child", never)
    monkeypatch.setattr(embedder_module, "measure_in_child", never)
    home2 = tmp_path / "home2"
    second = Embedder.from_settings(get_settings(environ={"SHEAF_EMBED_BACKEND": "auto"}, home=home2))
    monkeypatch.setattr(second, "_load_sentence_transformers", never)
    second.encode(texts(MEASURE_MIN_PASSAGES, " again"))
    assert second.backend == ONNX and second.backend_note is None
    assert second.choice is not None and not second.choice.measured_now and second.choice.backend == ONNX
    linked = home2 / "models" / embedder.identity.key
    assert find_export(home2 / "models", second.model_name) == linked
    for name in ("model.onnx", "tokenizer.json"):
        assert os.path.samefile(linked / name, cache.export_root(second.model_name) / linked.name / name)
    assert load_record(home2 / "models" / RECORD_FILE) == cache.load_record(measured[0])
    assert not [p for p in (home2 / "models").iterdir() if p.name.startswith(".")]  # no temp folder left


def test_a_home_links_whole_and_copies_across_devices(tmp_path, monkeypatch):
    import errno

    import sheaf.vectors.machine_cache as mc

    model = tiny_model(tmp_path)
    export = fake_export(tmp_path / "cache", model)
    dest = link_into(export, tmp_path / "home" / "models")
    assert os.path.samefile(dest / "model.onnx", export / "model.onnx")
    assert link_into(export, tmp_path / "home" / "models") == dest  # already there: left as it is

    def cross_device(*a, **k):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(mc.os, "link", cross_device)
    other = link_into(export, tmp_path / "other" / "models")
    assert not os.path.samefile(other / "model.onnx", export / "model.onnx")
    assert (other / "model.onnx").read_bytes() == (export / "model.onnx").read_bytes()
    assert find_export(tmp_path / "other" / "models", str(model)) == other


# --- two builds at once ----------------------------------------------------------------------------------

def _race(cache_root: str, model: str, home: str, go, counter: str) -> None:
    """One build's share of the race: wait for the start, then make or take the cache entry."""
    def make(entry: Path) -> Path:
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # a slow export: the other build arrives while it runs
        return fake_export(entry, Path(model))

    cache, why = open_cache(Path(cache_root))
    assert cache is not None, why
    go.wait(30)
    found = cache.ensure_export(model, Path(home) / "models", make)
    assert find_export(Path(home) / "models", model) == found


def test_two_builds_racing_for_the_entry_export_once(tmp_path):
    model = tiny_model(tmp_path)
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    counter = tmp_path / "exports.txt"
    procs = [ctx.Process(target=_race, args=(str(tmp_path / "cache"), str(model), str(tmp_path / f"home{i}"), go,
                                             str(counter)))
             for i in range(2)]
    for p in procs:
        p.start()
    time.sleep(0.3)
    go.set()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(counter.read_text().split()) == 1  # one export; the other build waited for it and linked
    exports = [p for p in (tmp_path / "cache" / "onnx").rglob(EXPORT_JSON)]
    assert len(exports) == 1
    for i in range(2):
        got = find_export(tmp_path / f"home{i}" / "models", str(model))
        assert got is not None and os.path.samefile(got / "model.onnx", exports[0].parent / "model.onnx")


def test_a_new_entry_prunes_entries_unused_for_a_month_and_homes_keep_their_links(tmp_path):
    import fcntl

    from sheaf.vectors.machine_cache import PRUNE_AFTER_DAYS

    model = tiny_model(tmp_path / "m")
    old_cache = MachineCache(tmp_path / "cache", {**VERSIONS, "torch": "2.12.0"})
    old_cache.ensure_export(str(model), tmp_path / "home-old" / "models", lambda e: fake_export(e, model))
    recent_cache = MachineCache(tmp_path / "cache", {**VERSIONS, "torch": "2.12.1"})
    recent_cache.ensure_export(str(model), tmp_path / "home-recent" / "models", lambda e: fake_export(e, model))
    busy_cache = MachineCache(tmp_path / "cache", {**VERSIONS, "torch": "2.11.0"})
    busy_cache.ensure_export(str(model), tmp_path / "home-busy" / "models", lambda e: fake_export(e, model))
    old, recent, busy = (c.export_root(str(model)) for c in (old_cache, recent_cache, busy_cache))
    month_ago = time.time() - (PRUNE_AFTER_DAYS + 1) * 86400
    for entry in (old, busy):
        os.utime(entry / "key.json", (month_ago, month_ago))
    # linking again is a use: the entry's stamp moves on
    busy_cache.ensure_export(str(model), tmp_path / "home-busy2" / "models", lambda e: fake_export(e, model))
    assert (busy / "key.json").stat().st_mtime > month_ago + 86400
    os.utime(busy / "key.json", (month_ago, month_ago))
    with open(tmp_path / "cache" / "onnx" / f".{busy.name}.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another build is linking it right now
        cache = MachineCache(tmp_path / "cache", VERSIONS)
        made = []
        cache.ensure_export(str(model), tmp_path / "home-new" / "models",
                            lambda e: made.append(e) or fake_export(e, model))
    assert made and not old.exists()
    assert recent.exists() and busy.exists() and cache.export_root(str(model)).exists()
    # the home that linked the pruned entry still has its export: hard links are its own files
    got = find_export(tmp_path / "home-old" / "models", str(model))
    assert got is not None and (got / "model.onnx").read_bytes()
    # an entry taken from the cache (not made) prunes nothing
    os.utime(recent / "key.json", (month_ago, month_ago))
    cache.ensure_export(str(model), tmp_path / "home-new2" / "models", lambda e: fake_export(e, model))
    assert recent.exists()
    assert [p.name for p in cache.prune(keep=cache.export_key(str(model))[0])] == sorted([busy.name, recent.name])


# --- never measure what cannot pay ----------------------------------------------------------------------

def test_a_cpu_without_bf16_and_no_gpu_measures_nothing(tmp_path):
    facts = machine_facts("k", cpuinfo=AVX2_CPU)
    record = tmp_path / RECORD_FILE
    fail = lambda: pytest.fail("measured on a CPU whose only candidates compute in fp32")  # noqa: E731
    for setting, precision, want in (("auto", "auto", ONNX), ("auto", "fp32", ONNX), ("torch", "auto", TORCH_FP32)):
        assert not needs_measurement(setting, precision, facts)
        got = resolve(setting, precision, facts, record, fail)
        assert got.backend == want and got.measurement is None and not got.measured_now
        assert "not measured" in got.reason
    assert not record.exists()
    # where a measurement can pay, it is made: bf16 on the CPU, or a GPU
    assert needs_measurement("auto", "auto", machine_facts("k", cpuinfo=BF16_CPU))
    gpu = dataclasses.replace(facts, device="cuda")
    assert needs_measurement("auto", "auto", gpu) and needs_measurement("torch", "auto", gpu)
    m = Measurement(gpu, {TORCH_FP32: Trial(TORCH_FP32, 100.0, 1.0, 1.0, True),
                          TORCH_FP16: Trial(TORCH_FP16, 300.0, 1.0, 1.0, True)}, TORCH_FP16)
    assert resolve("auto", "auto", gpu, record, lambda: m).backend == TORCH_FP16


@pytest.mark.slow
def test_a_first_build_on_a_cpu_without_bf16_starts_no_measurement(onnx_export, tmp_path, monkeypatch):
    """Through the build's embedder on `auto`: however many passages, it stays on the export and
    starts no measuring child (31-37 s on such a CPU, which chose the export every time)."""
    import subprocess

    import sheaf.vectors.embedder as embedder_module
    from tests.kits.paths import link_onnx_export

    on_cpu(monkeypatch, AVX2_CPU)
    link_onnx_export(onnx_export, tmp_path / "home")
    monkeypatch.setattr(subprocess, "Popen", never)
    monkeypatch.setattr(embedder_module, "measure_in_child", never)
    emb = Embedder.from_settings(get_settings(environ={"SHEAF_EMBED_BACKEND": "auto"}, home=tmp_path / "home"))
    emb.measurer = never
    monkeypatch.setattr(emb, "_load_sentence_transformers", never)
    emb.encode(texts(MEASURE_MIN_PASSAGES + 1))
    assert emb.backend == ONNX and emb.choice.backend == ONNX and emb.choice.measurement is None
    assert emb.backend_note is None and not (tmp_path / "home" / "models" / RECORD_FILE).exists()


@pytest.mark.slow
def test_fewer_passages_than_a_measurement_pays_back_measure_nothing(embedder, onnx_export, tmp_path, monkeypatch):
    """On a CPU with bf16 and no record yet: a build's passages below `MEASURE_MIN_PASSAGES` (counted,
    not timed) stay on the export without measuring; once they reach it, one measurement is made."""
    from tests.kits.paths import link_onnx_export

    on_cpu(monkeypatch, BF16_CPU)
    link_onnx_export(onnx_export, tmp_path / "home")
    emb = Embedder.from_settings(get_settings(environ={"SHEAF_EMBED_BACKEND": "auto"}, home=tmp_path / "home"))
    measured: list = []
    emb.measurer = lambda facts: measured.append(facts) or record_choosing(facts, ONNX)
    monkeypatch.setattr(emb, "_load_sentence_transformers", embedder.load)
    emb.encode(texts(FIRST_SWITCH_PASSAGES))  # past the first switch point, below the measurement's
    assert measured == [] and emb.backend == ONNX and emb.choice is None
    emb.encode(texts(MEASURE_MIN_PASSAGES - FIRST_SWITCH_PASSAGES, " more"))  # together they reach it
    assert len(measured) == 1 and emb.choice.measured_now and emb.backend == ONNX


# --- an unwritable cache folder ------------------------------------------------------------------------

def test_an_unwritable_cache_folder_falls_back_to_the_home_with_one_warning(tmp_path, monkeypatch, caplog):
    """SHEAF_CACHE_DIR under a regular file (no folder can be made there; root ignores permission
    bits, so a read-only folder would not do): the home exports and records for itself, as before the
    cache, and the build gets one warning saying why; it does not fail."""
    import sheaf.vectors.embedder as embedder_module

    model = tiny_model(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    bad = blocker / "cache"
    cache, why = open_cache(bad)
    assert cache is None and str(bad) in why
    exported_into: list[Path] = []

    def export_child(model_name, root, poll=None, **k):
        exported_into.append(Path(root))
        return fake_export(root, Path(model_name))

    monkeypatch.setattr(embedder_module, "export_in_child", export_child)
    settings = get_settings(environ={"SHEAF_CACHE_DIR": str(bad), "SHEAF_EMBEDDING_MODEL": str(model)},
                            home=tmp_path / "home")
    emb = Embedder.from_settings(settings)
    assert emb.machine_cache() is None and emb.machine_cache() is None
    assert emb.cache_note and "cannot be written" in emb.cache_note and str(bad) in emb.cache_note
    found = emb._export_via_cache(tmp_path / "home" / "models")
    assert found is None and exported_into == []
    # the embedder's load: exported into the home itself, and the note is the build's one warning
    loaded = []
    monkeypatch.setattr(embedder_module.OnnxQueryEncoder, "load",
                        lambda path, **k: loaded.append(Path(path)) or _FakeEncoder())
    assert emb._load_export() is not None
    assert exported_into == [tmp_path / "home" / "models"] and loaded[0].parent == tmp_path / "home" / "models"
    assert emb.backend_note == emb.cache_note
    # the record: kept in the home alone
    facts = machine_facts("k", cpuinfo=BF16_CPU)
    emb.measurer = lambda f: record_choosing(f, ONNX)
    assert emb._measure_shared(facts).facts == facts
    assert not bad.exists()
    warned = [r for r in caplog.records if r.levelname == "WARNING" and "cannot be written" in r.getMessage()]
    assert len(warned) == 1 and warned[0].name == "sheaf.vectors"


class _FakeEncoder:
    """Stands for a loaded export (what `_load_export` keeps of it)."""

    split_tokenizer = type("Tok", (), {"to_str": staticmethod(lambda: "{}")})()
    identity = ModelIdentity("tiny-model", "0" * 64, 4, True, 256, "t")
    n_special = 2
