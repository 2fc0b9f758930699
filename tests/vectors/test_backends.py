"""The build's embedding backend: measured once per machine with the real encoders, only backends whose
vectors agree with fp32 qualify, the record is reused until the machine changes, the settings win,
and a build whose backend changes re-embeds nothing."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from sheaf.core.envelope import SheafError
from sheaf.core.settings import get_settings
from sheaf.vectors.backend_choice import (
    AGREE_MIN_COSINE,
    FIRST_SWITCH_PASSAGES,
    MEASURE_MIN_PASSAGES,
    ONNX,
    PROBE_TEXTS,
    RECORD_FILE,
    TORCH_BF16,
    TORCH_FP32,
    TORCH_MARGIN,
    Measurement,
    break_even_passages,
    candidates_for,
    choose,
    load_record,
    machine_facts,
    measure,
    resolve,
    time_encoder,
)
from sheaf.vectors.backend_probe import encoders_of
from sheaf.vectors.embedder import Embedder

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

BF16_HERE = TORCH_BF16 in candidates_for(machine_facts("x"))
needs_bf16 = pytest.mark.skipif(not BF16_HERE, reason="this CPU has neither AMX nor AVX512-BF16")
#: A few probes, short and passage-like: enough to compare vectors and rates, cheap on 2 busy cores.
FEW = PROBE_TEXTS[5:15]
#: A CPU whose candidates include bf16 (as /proc/cpuinfo gives it): there a measurement can pay.
BF16_CPUINFO = "model name\t: Some CPU\nflags\t\t: fpu avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile\n"
#: Passages a first build encodes before it measures: the first switch point, and enough to pay a measurement.
SWITCH_PASSAGES = max(FIRST_SWITCH_PASSAGES, MEASURE_MIN_PASSAGES)


def real_measurer(embedder: Embedder, models_dir: Path | None, calls: list, texts=FEW, load_s: float = 0.0):
    """A measurement of this machine's real candidates (the session's torch model, the export in
    `models_dir`) on `texts`, counting its calls. `load_s`: the start-up recorded for torch, which in
    this process is already loaded (0: a switch pays at once)."""
    def measurer(facts):
        calls.append(facts)
        trials = measure(encoders_of(embedder, candidates_for(facts), models_dir), texts, rounds=1)
        return Measurement(facts, trials, choose(trials), load_s)
    return measurer


def favouring(m: Measurement, fast: Callable[[str], bool]) -> Measurement:
    """`m` (this machine's real trials) with the backends `fast` names measured the fastest, as a
    quiet machine would (a busy one may not), and the choice made again."""
    trials = {k: dataclasses.replace(t, rate=1e6 if fast(k) else t.rate) for k, t in m.trials.items()}
    return dataclasses.replace(m, trials=trials, chosen=choose(trials))


def measurable_cpu(monkeypatch) -> None:
    """The embedder sees this CPU with bf16 where it has none (AVX2 only, say): a measurement can pay
    there, so the tests of the switch run on any CPU (torch computes bf16 without native support, slowly)."""
    import sheaf.vectors.embedder as embedder_module

    if BF16_HERE:
        return
    real = embedder_module.machine_facts

    def with_bf16(key, device="cpu"):
        f = real(key, device)
        return dataclasses.replace(f, cpu_flags=f.cpu_flags + ("avx512_bf16",))

    monkeypatch.setattr(embedder_module, "machine_facts", with_bf16)


def forbid_child_measurement(monkeypatch, why: str) -> None:
    """A measurement in a child process fails the test with `why`."""
    import sheaf.vectors.embedder as embedder_module

    def no_child(*a, **k):
        raise AssertionError(why)

    monkeypatch.setattr(embedder_module, "measure_in_child", no_child)


def home_embedder(onnx_export: Path, tmp_path: Path, backend: str) -> tuple[Path, Embedder]:
    """A home holding the session's ONNX export, and an embedder of it on SHEAF_EMBED_BACKEND=`backend`."""
    from tests.kits.paths import link_onnx_export

    home = tmp_path / "home"
    link_onnx_export(onnx_export, home)
    return home, Embedder.from_settings(get_settings(environ={"SHEAF_EMBED_BACKEND": backend}, home=home))


def rotated(encode: Callable, cosine: float = 0.99):
    """An encoder that disagrees by construction: each of `encode`'s vectors turned by the angle whose
    cosine is `cosine` (towards a fixed direction, in the plane the two span), so every vector's cosine
    to the reference's is exactly `cosine` on any CPU: close (0.99), but below the bound."""
    def enc(texts):
        v = np.asarray(encode(texts), dtype=np.float64)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        e = np.random.default_rng(3).standard_normal(v.shape[1])
        u = e[None, :] - (v @ e)[:, None] * v  # the fixed direction, less its part along each vector
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        return (cosine * v + np.sqrt(1.0 - cosine ** 2) * u).astype(np.float32)
    return enc


def test_the_probe_set_is_fixed_short_and_long():
    from sheaf.vectors.backend_choice import _probe_texts

    assert _probe_texts() == PROBE_TEXTS and len(PROBE_TEXTS) == 48
    lengths = sorted(len(t.split()) for t in PROBE_TEXTS)
    assert lengths[0] == 0 and lengths[-1] > 200  # empty to longer than the model's window
    assert any("日本語" in t for t in PROBE_TEXTS) and any("±" in t for t in PROBE_TEXTS)


def test_a_backend_that_disagrees_is_refused_however_fast(embedder, tmp_path):
    """A backend whose vectors are turned off the reference's (cosine exactly 0.99 on every probe, by
    construction: the same verdict on any CPU) is measured like any other: below the bound, it never
    qualifies, even when it is the fastest; forcing it is a clear error."""
    fp32 = lambda t: embedder.torch_encode(embedder.load().model, t)  # noqa: E731
    trials = measure({TORCH_FP32: fp32, "turned": rotated(fp32, 0.99)}, FEW, rounds=1)
    bad = trials["turned"]
    assert not bad.agrees and bad.min_cosine == pytest.approx(0.99, abs=1e-5)
    assert bad.mean_cosine == pytest.approx(0.99, abs=1e-5)
    assert trials[TORCH_FP32].agrees and trials[TORCH_FP32].min_cosine >= 0.9999999
    fastest = {**trials, "turned": dataclasses.replace(bad, rate=1e9)}
    assert choose(fastest) == TORCH_FP32
    # the same refusal through the settings: SHEAF_EMBED_PRECISION=bf16 where bf16 disagrees
    facts = machine_facts("m", cpuinfo=BF16_CPUINFO)
    rec = Measurement(facts, {TORCH_FP32: trials[TORCH_FP32], TORCH_BF16: dataclasses.replace(bad, backend=TORCH_BF16)},
                      TORCH_FP32)
    with pytest.raises(SheafError) as e:
        resolve("auto", "bf16", facts, tmp_path / RECORD_FILE, lambda: rec)
    assert e.value.code == "BACKEND_UNAVAILABLE" and "disagree" in e.value.message
    assert "SHEAF_EMBED_PRECISION" in e.value.message and "Traceback" not in e.value.message
    # auto never picks it
    assert resolve("auto", "auto", facts, tmp_path / "other.json", lambda: rec).backend == TORCH_FP32


@needs_bf16
def test_bf16_and_the_export_agree_with_fp32_on_every_probe(embedder, onnx_export):
    calls: list = []
    m = real_measurer(embedder, onnx_export.parent, calls, texts=PROBE_TEXTS)(machine_facts(embedder.identity.key))
    assert set(m.trials) == {ONNX, TORCH_FP32, TORCH_BF16}
    for t in m.trials.values():
        assert t.agrees and t.min_cosine >= AGREE_MIN_COSINE and t.error is None, t


def test_the_record_is_reused_and_measured_again_when_the_machine_changes(embedder, tmp_path):
    calls: list = []
    measurer = real_measurer(embedder, None, calls, texts=FEW[:3])
    record = tmp_path / "models" / RECORD_FILE
    cpuinfo = "model name\t: Some CPU\nflags\t\t: fpu avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile\n"
    facts = machine_facts("k1", cpuinfo=cpuinfo)
    assert facts.cpu == "Some CPU" and facts.cpu_flags == ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
    first = resolve("torch", "auto", facts, record, lambda: measurer(facts))
    assert len(calls) == 1 and first.measured_now and load_record(record).facts == facts
    again = resolve("torch", "auto", facts, record, lambda: measurer(facts))
    assert len(calls) == 1 and not again.measured_now and again.backend == first.backend
    changed = [machine_facts("k1", cpuinfo=cpuinfo.replace(" avx512_bf16 amx_bf16", "")),  # other flags
               machine_facts("k1", cpuinfo=cpuinfo.replace("Some CPU", "Another CPU")),  # other model
               machine_facts("k1", cpuinfo=cpuinfo, versions=lambda name: "9.9" if name == "torch" else None),
               machine_facts("k2", cpuinfo=cpuinfo)]  # another model identity
    for i, other in enumerate(changed[1:], start=2):
        got = resolve("torch", "auto", other, record, lambda: measurer(other))
        assert len(calls) == i and got.measured_now and load_record(record).facts == other
    assert candidates_for(changed[0]) == [ONNX, TORCH_FP32]  # no bf16 without AMX / AVX512-BF16
    # without bf16, torch has fp32 alone to compute in: nothing to measure, the record is left as it is
    got = resolve("torch", "auto", changed[0], record, lambda: measurer(changed[0]))
    assert got.backend == TORCH_FP32 and not got.measured_now and len(calls) == 4
    assert load_record(record).facts == changed[-1]
    record.write_text("{not json")  # a damaged record is measured again, not an error
    assert resolve("torch", "auto", facts, record, lambda: measurer(facts)).measured_now and len(calls) == 5


def test_the_settings_win_over_the_measurement(embedder, onnx_export, tmp_path):
    from tests.kits.paths import link_onnx_export

    calls: list = []
    measurer = real_measurer(embedder, onnx_export.parent, calls)
    facts = machine_facts(embedder.identity.key)
    record = tmp_path / RECORD_FILE
    never = lambda: pytest.fail("measured although the settings decide")  # noqa: E731
    assert resolve("onnx", "auto", facts, record, never).backend == ONNX
    assert resolve("torch", "fp32", facts, record, never).backend == TORCH_FP32
    assert resolve("sentence-transformers", "fp32", facts, record, never).backend == TORCH_FP32
    m = measurer(facts)
    forced = dataclasses.replace(m, trials={**m.trials, TORCH_BF16: dataclasses.replace(
        m.trials[TORCH_FP32], backend=TORCH_BF16, rate=1e9)} if BF16_HERE else m.trials)
    # fp32 only, the export among the allowed: torch fp32 cannot pay its start-up, nothing is measured
    assert resolve("auto", "fp32", facts, record, never).backend == ONNX
    if BF16_HERE:
        assert resolve("torch", "auto", facts, record, lambda: forced).backend == TORCH_BF16  # measured
        assert resolve("torch", "bf16", facts, record, never).backend == TORCH_BF16  # the record, reused
        assert resolve("auto", "auto", facts, record, never).backend == TORCH_BF16
    with pytest.raises(SheafError) as e:
        resolve("onnx", "bf16", facts, record, never)
    assert e.value.code == "BAD_INPUT"
    # through the embedder: SHEAF_EMBED_BACKEND=onnx keeps the export however much it encodes
    home = tmp_path / "home"
    link_onnx_export(onnx_export, home)
    emb = Embedder.from_settings(get_settings(environ={"SHEAF_EMBED_BACKEND": "onnx"}, home=home))
    emb.measurer = measurer
    emb.encode([f"passage {i} about bone density" for i in range(200)])
    assert emb.backend == ONNX and len(calls) == 1 and emb.choice is None


def test_auto_starts_on_the_export_and_switches_once_it_pays(embedder, onnx_export, tmp_path, monkeypatch):
    """SHEAF_EMBED_BACKEND=auto: a few passages stay on the export and measure nothing; a large
    encode measures once (the record lands in the home) and moves to the chosen backend, with the
    same identity and the same vectors; the next embedder of the home reuses the record."""
    from tests.kits.paths import link_onnx_export

    measurable_cpu(monkeypatch)
    home = tmp_path / "home"
    link_onnx_export(onnx_export, home)
    calls: list = []
    settings = get_settings(environ={"SHEAF_EMBED_BACKEND": "auto"}, home=home)
    emb = Embedder.from_settings(settings)
    emb.measurer = real_measurer(embedder, onnx_export.parent, calls)
    few = [f"a short passage {i} on fracture risk" for i in range(8)]
    emb.encode(few)
    assert emb.backend == ONNX and calls == [] and not (home / "models" / RECORD_FILE).exists()
    many = [f"passage {i}: denosumab withdrawal and vertebral fractures in a cohort of {i} patients"
            for i in range(SWITCH_PASSAGES)]
    got = emb.encode(many)
    assert len(calls) == 1 and (home / "models" / RECORD_FILE).exists()
    chosen = emb.choice.backend
    assert emb.backend == chosen  # break-even 0 here (torch is loaded): the switch pays at once
    if BF16_HERE and chosen != TORCH_BF16:
        pytest.skip(f"{chosen} chosen over bf16 on this (busy) machine (a torch backend needs "
                    f"{TORCH_MARGIN}x the export's rate): {emb.choice.reason}")
    assert emb.identity == embedder.identity
    ref = embedder.encode(many)
    assert float(np.sum(ref * got, axis=1).min()) >= AGREE_MIN_COSINE
    nxt = Embedder.from_settings(settings)
    nxt.measurer = emb.measurer
    nxt.encode(many)
    assert len(calls) == 1 and nxt.backend == chosen


def test_a_group_that_reaches_the_switch_point_is_encoded_on_torch_from_its_first_batch(embedder, onnx_export,
                                                                                      tmp_path, monkeypatch):
    """`embed_papers` of a group of papers whose new passages reach the switch point: the switch is
    made before the group's first batch, so none of its passages is encoded on the slower export
    (before, the first 128 passages of a first build went through it batch by batch)."""
    import hashlib

    from sheaf.vectors.identity import Passage

    measurable_cpu(monkeypatch)
    _, emb = home_embedder(onnx_export, tmp_path, "auto")
    real = real_measurer(embedder, onnx_export.parent, [])
    emb.measurer = lambda facts: favouring(real(facts), lambda k: k != ONNX)
    papers = []
    for k in range(8):
        texts = [f"paper {k}, passage {i}: bone mineral density after denosumab in {k * 100 + i} women"
                 for i in range(SWITCH_PASSAGES // 8 + 1)]
        papers.append((f"P{k}", [Passage(f"u{k}#{i}", f"u{k}", f"P{k}", "body", i, 0, len(t), t,
                                         hashlib.sha256(t.encode()).hexdigest(), 24) for i, t in enumerate(texts)]))
    done = list(emb.embed_papers(papers))
    assert [key for key, _, _ in done] == [k for k, _ in papers]
    assert emb.backend == emb.choice.backend != ONNX
    assert emb._onnx_passages == 0  # every passage of the group on torch
    ref = embedder.encode([p.text for _, ps in papers for p in ps])
    got = np.concatenate([e.vectors for _, e, _ in done])
    assert float(np.sum(ref * got, axis=1).min()) >= AGREE_MIN_COSINE


def test_a_switch_closes_the_export_before_torch_loads(embedder, onnx_export, tmp_path, monkeypatch):
    """The export's onnxruntime session and torch are never in memory together (together they were
    a build's peak: 1.2 GB against 0.9 GB); when torch then fails to load, the export opens again
    and the encoding goes on there, with the same vectors."""
    from tests.kits.paths import link_onnx_export

    measurable_cpu(monkeypatch)
    home = tmp_path / "home"
    link_onnx_export(onnx_export, home)
    real = real_measurer(embedder, onnx_export.parent, [])

    def torch_wins(facts):
        return favouring(real(facts), lambda k: k != ONNX)

    many = [f"passage {i}: denosumab withdrawal and vertebral fractures in {i} patients"
            for i in range(SWITCH_PASSAGES)]
    ref = embedder.encode(many)
    for torch_loads in (False, True):
        emb = Embedder.from_settings(get_settings(environ={"SHEAF_EMBED_BACKEND": "auto"}, home=tmp_path / "home"))
        emb.measurer = torch_wins
        emb.encode(["a short passage on fracture risk"])
        export = emb.load().onnx
        sessions: list = []

        def load_torch(real_load=emb._load_sentence_transformers, torch_loads=torch_loads):
            sessions.append(export.session)
            if not torch_loads:
                raise SheafError("BACKEND_UNAVAILABLE", "torch is not installed here")
            return real_load()

        monkeypatch.setattr(emb, "_load_sentence_transformers", load_torch)
        got = emb.encode(many)
        assert sessions == [None]  # closed while torch loaded
        assert float(np.sum(ref * got, axis=1).min()) >= AGREE_MIN_COSINE
        if torch_loads:
            assert emb.backend == emb.choice.backend != ONNX
        else:
            assert emb.backend == ONNX and "torch is not installed here" in emb.backend_note
            assert export.session is not None  # opened again to encode


def test_a_backend_timed_beforehand_is_judged_with_the_others(embedder):
    """`measure`'s `timed`: a backend measured before the others were loaded (its best seconds and
    vectors, `time_encoder`) gets its trial beside theirs, compared with the same reference."""
    fp32 = lambda t: embedder.torch_encode(embedder.load().model, t)  # noqa: E731
    calls: list[int] = []

    def counted(texts):
        calls.append(len(texts))
        return fp32(texts)

    seconds, vectors = time_encoder(counted, FEW, rounds=2)
    assert calls == [4, len(FEW), len(FEW)] and vectors.shape == (len(FEW), embedder.identity.dimension)
    trials = measure({TORCH_FP32: fp32}, FEW, rounds=1,
                     timed={ONNX: (seconds, vectors), "turned": (seconds / 2, rotated(fp32, 0.99)(FEW))})
    assert set(trials) == {TORCH_FP32, ONNX, "turned"}
    assert trials[ONNX].agrees and trials[ONNX].rate == pytest.approx(len(FEW) / seconds, rel=0.01)
    assert not trials["turned"].agrees and trials["turned"].rate > trials[ONNX].rate


def test_the_first_measurement_times_the_export_on_the_builds_own_session(embedder, onnx_export, tmp_path,
                                                                         monkeypatch):
    """A home's first switch with no record (a CPU where a measurement can pay): the export's trial
    runs on the session the build was encoding with, before it closes and torch loads; no second
    onnxruntime session is opened beside torch (they were the first build's peak memory). The
    record holds every candidate's trial."""
    from functools import partial

    from sheaf.vectors import embedder as embedder_module

    measurable_cpu(monkeypatch)
    forbid_child_measurement(monkeypatch, "measured in a child on a CPU with bf16")
    # the real measurement on a few probes (every candidate, torch's bf16 too where it is emulated)
    monkeypatch.setattr(embedder_module, "measure", partial(measure, texts=FEW))
    monkeypatch.setattr(embedder_module, "time_encoder", partial(time_encoder, texts=FEW))
    home, emb = home_embedder(onnx_export, tmp_path, "auto")
    emb.encode(["a short passage on fracture risk"])
    export = emb.load().onnx
    opened: list = []
    real_load = embedder_module.OnnxQueryEncoder.load
    monkeypatch.setattr(embedder_module.OnnxQueryEncoder, "load",
                        classmethod(lambda cls, *a, **k: opened.append(1) or real_load(*a, **k)))
    sessions: list = []
    load_torch = emb._load_sentence_transformers
    monkeypatch.setattr(emb, "_load_sentence_transformers", lambda: sessions.append(export.session) or load_torch())
    emb.encode([f"passage {i}: bone mineral density after denosumab in {i} women" for i in range(SWITCH_PASSAGES)])
    assert sessions == [None]  # timed, then closed before torch loaded
    assert opened == []  # ... and none opened to measure beside torch
    rec = load_record(home / "models" / RECORD_FILE)
    assert set(rec.trials) == set(candidates_for(rec.facts)) and rec.trials[ONNX].agrees and rec.trials[ONNX].rate > 0
    assert emb.backend == rec.chosen


@needs_bf16
def test_the_first_switch_on_a_bf16_cpu_measures_with_the_torch_it_loads(embedder, onnx_export, tmp_path,
                                                                        monkeypatch):
    """A home's first build on a CPU with bf16 (no record yet): at the first switch point torch is
    loaded once, in the build's process, and the measurement runs with it (no child loading torch a
    second time); torch bf16 then encodes, and the record lands in the home."""

    forbid_child_measurement(monkeypatch, "measured in a child on a CPU with bf16")
    home, emb = home_embedder(onnx_export, tmp_path, "auto")
    real = real_measurer(embedder, onnx_export.parent, [])
    torch_loaded_when_measured = []

    def measurer(facts):
        torch_loaded_when_measured.append(emb.torch_load_s > 0)
        return favouring(real(facts), lambda k: k == TORCH_BF16)

    emb.measurer = measurer
    loads: list = []
    real_load = emb._load_sentence_transformers
    monkeypatch.setattr(emb, "_load_sentence_transformers", lambda: loads.append(1) or real_load())
    emb.encode([f"passage {i}: bone mineral density after denosumab in {i} women"
                for i in range(SWITCH_PASSAGES)])
    assert torch_loaded_when_measured == [True] and len(loads) == 1
    assert emb.backend == TORCH_BF16 and load_record(home / "models" / RECORD_FILE).chosen == TORCH_BF16


def test_a_stop_while_the_loaded_torch_is_measured_ends_the_wait(embedder, onnx_export, tmp_path, monkeypatch):
    """A measurement in the build's process (on a CPU with bf16, with the torch a home's first
    switch has just loaded; here an injected one, which takes the same path) runs under the build's
    stop check: a stop ends the wait there (the PaperForge plugin kills a build 5 s after asking it
    to stop), and no record is written."""
    import threading

    from sheaf.core.progress import StopRequested

    forbid_child_measurement(monkeypatch, "measured in a child on a CPU with bf16")
    measurable_cpu(monkeypatch)
    home, emb = home_embedder(onnx_export, tmp_path, "auto")
    started, release, finished = threading.Event(), threading.Event(), []

    def measurer(facts):  # a measurement that lasts until the test ends (or 20 s)
        started.set()
        release.wait(20)
        finished.append(1)
        raise RuntimeError("measurement abandoned")

    def stop() -> None:
        if started.is_set():
            raise StopRequested("stopped while the backends are measured")

    emb.measurer = measurer
    try:
        with pytest.raises(StopRequested):
            emb.encode([f"passage {i}: bone mineral density after denosumab in {i} women"
                        for i in range(SWITCH_PASSAGES)], between_batches=stop)
        assert started.is_set() and not finished  # raised while the measurement still ran
        assert load_record(home / "models" / RECORD_FILE) is None
    finally:
        release.set()


def test_an_embedder_on_torch_measures_with_its_own_model_not_a_child(onnx_export, tmp_path, monkeypatch):
    """SHEAF_EMBED_BACKEND=torch in a home without a record: the measurement runs on the model this
    process has just loaded (no child loading torch a second time, ~5-20 s and its memory); the
    record lands in the home with this process's torch start-up, and its choice is used."""
    forbid_child_measurement(monkeypatch, "measured in a child although torch is loaded here")
    measurable_cpu(monkeypatch)
    home, emb = home_embedder(onnx_export, tmp_path, "torch")
    emb.load()
    rec = load_record(home / "models" / RECORD_FILE)
    assert rec is not None and emb.choice is not None and emb.choice.measured_now
    assert set(rec.trials) == set(candidates_for(rec.facts)) and rec.trials[ONNX].agrees
    assert rec.torch_load_s == round(emb.torch_load_s, 2) > 0
    assert emb.backend == emb.choice.backend != ONNX  # torch from the start, in the measured precision


def test_break_even_of_a_switch(embedder):
    facts = machine_facts("m")
    t = measure({TORCH_FP32: lambda x: embedder.encode(list(x))}, FEW[:3], rounds=1)[TORCH_FP32]
    m = Measurement(facts, {ONNX: dataclasses.replace(t, backend=ONNX, rate=20.0),
                            TORCH_BF16: dataclasses.replace(t, backend=TORCH_BF16, rate=100.0)}, TORCH_BF16, 4.0)
    assert break_even_passages(m, TORCH_BF16) == pytest.approx(4.0 / (1 / 20 - 1 / 100))  # 100 passages
    assert break_even_passages(m, ONNX) == float("inf")


def test_agreement_on_real_passages(embedder, onnx_export, shared_data):
    """SciFact abstracts (title > text, as a paper's passages compose them): every backend this
    machine may choose gives vectors within the bound of fp32's for each of them."""
    lines = (shared_data / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:48]
    docs = [json.loads(x) for x in lines]
    texts = [embedder.compose(d["title"], d["text"]) for d in docs]
    calls: list = []
    m = real_measurer(embedder, onnx_export.parent, calls, texts=texts)(machine_facts(embedder.identity.key))
    assert ONNX in m.trials and (TORCH_BF16 in m.trials) == BF16_HERE
    for t in m.trials.values():
        assert t.agrees and t.min_cosine >= AGREE_MIN_COSINE, t


def test_a_build_whose_backend_changes_re_embeds_nothing(embedder, onnx_export, tmp_path, monkeypatch):
    """Built on the export, rebuilt in full on torch (bf16 where the CPU has it): every paper's
    vector step runs again on the other backend and finds all its vectors in the cache (one
    identity, one collection): nothing is encoded."""
    from pipelines.planning.events import latest_events
    from tests.kits.paths import link_onnx_export
    from tests.kits.pipeline import instance, new_home, run_cli

    h = new_home(tmp_path, ("L2YSNC8V", "W6TB4YRS")).apply(monkeypatch)
    link_onnx_export(onnx_export, h.home)
    monkeypatch.setenv("SHEAF_EMBED_BACKEND", "onnx")
    code, first = run_cli(["build", "--json"])
    assert code == 0 and first["data"]["embeddings_computed"] > 0
    precision = "bf16" if BF16_HERE else "fp32"
    if BF16_HERE:  # this machine's record, measured here with the real encoders (no child)
        facts = machine_facts(embedder.identity.key)
        measurer = real_measurer(embedder, onnx_export.parent, [], load_s=5.0)
        resolve("torch", "bf16", facts, h.home / "models" / RECORD_FILE, lambda: measurer(facts))
    monkeypatch.setenv("SHEAF_EMBED_BACKEND", "torch")
    monkeypatch.setenv("SHEAF_EMBED_PRECISION", precision)
    code, second = run_cli(["build", "--full", "--json"])
    assert code == 0, second
    assert second["data"]["embeddings_computed"] == 0
    assert {p["model_identity"] for p in second["data"]["papers"]} == {embedder.identity.key}
    events = latest_events(instance(), "vector_collections", partitions=["L2YSNC8V", "W6TB4YRS"])
    for key, ev in events.items():
        md = ev.metadata
        assert md["embed_backend"] == f"torch-{precision}" and md["embeddings_computed"] == 0, (key, md)
        assert md["embeddings_reused"] == md["passages"] > 0


def test_a_stop_during_the_switch_to_torch_is_not_kept_waiting():
    """The build's stop check runs while the backend is measured (a child process) and while torch
    loads (a thread): a stop there ends the wait at once instead of after the load (5.5 s for the
    PaperForge plugin's stop, past its 5 s grace, before)."""
    import time

    from sheaf.core.progress import while_polled as _while_polled

    class Stop(Exception):
        pass

    calls = []

    def poll():
        calls.append(1)
        if len(calls) >= 2:
            raise Stop

    t0 = time.monotonic()
    with pytest.raises(Stop):
        _while_polled(lambda: time.sleep(5), poll)
    assert time.monotonic() - t0 < 2
    assert _while_polled(lambda: 42, poll=None) == 42
