"""Which backend the build's embedder encodes on: the fastest one that gives the same vectors here.

Candidates (`candidates_for`): the ONNX export (fp32, onnxruntime; the CPU only), sentence-transformers
on torch in fp32 (the reference every other candidate is compared with), in bf16 under
``torch.autocast`` on a CPU with AMX or AVX512-BF16, and in fp16 on a GPU (CUDA, Apple's MPS).

`measure` runs each candidate on a fixed probe set (`PROBE_TEXTS`, alternated, best of the
rounds) and compares its vectors with the fp32 reference's: a candidate qualifies only if every
probe's cosine is at least `AGREE_MIN_COSINE`. A qualifying candidate computes the model identity's
vectors (nothing is re-embedded when the choice changes); one that disagrees is never used.
`choose` picks the fastest qualifying candidate. The `Measurement` is cached in the home
(`RECORD_FILE`) with the facts it was measured on (`MachineFacts`: CPU model and flags, cores,
device, torch / onnxruntime / sentence-transformers versions, model identity) and measured again
when any of them differs (`resolve`). The settings `SHEAF_EMBED_BACKEND` and `SHEAF_EMBED_PRECISION`
override the choice (`resolve`); a non-fp32 precision still has to agree. Nothing is measured where
a measurement cannot change the choice (`unmeasured_choice`: only fp32 backends, the export among
them), nor for fewer passages than it could pay back (`MEASURE_MIN_PASSAGES`). The record is also
kept in the per-user machine cache (`sheaf.vectors.machine_cache`), so another home of the machine
reuses it.

Nothing here imports torch or onnxruntime: the encoders are passed in (`measure`), and so is the
function that measures (`resolve`), so that the build's process decides from the record alone.
"""
from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sheaf.core.envelope import SheafError
from sheaf.core.files import write_atomic
from sheaf.core.lazy import lazy_module
from sheaf.vectors.onnx import run_polled

np = lazy_module("numpy")

__all__ = [
    "AGREE_MIN_COSINE", "BACKENDS", "MachineFacts", "Measurement", "PROBE_TEXTS", "RECORD_FILE", "Trial",
    "Choice", "MEASURE_MIN_PASSAGES", "break_even_passages", "candidates_for", "choose", "load_record",
    "machine_facts", "measure", "measure_in_child", "time_encoder", "needs_measurement", "resolve", "save_record",
    "unmeasured_choice", "wanted",
]

ONNX = "onnx"
TORCH_FP32 = "torch-fp32"
TORCH_BF16 = "torch-bf16"
TORCH_FP16 = "torch-fp16"
BACKENDS = (ONNX, TORCH_FP32, TORCH_BF16, TORCH_FP16)
#: The precision (SHEAF_EMBED_PRECISION) of each backend.
PRECISION = {ONNX: "fp32", TORCH_FP32: "fp32", TORCH_BF16: "bf16", TORCH_FP16: "fp16"}
REFERENCE = TORCH_FP32
#: Every probe's vector within this cosine of the fp32 reference's, or the backend is not used
#: (the ONNX export is held to the same bound when it is made).
AGREE_MIN_COSINE = 0.9999
#: A torch backend is chosen over the ONNX export only when it is at least this much faster on
#: the probe set: torch costs its start-up (the break-even below) and memory, and two rates
#: measured on a busy machine differ by a few percent from run to run.
TORCH_MARGIN = 1.1
#: Passages the ONNX export encodes before the record is read (or made): below it a build never
#: loads torch (a no-op or an edit of a few papers keeps its ~0.5 s start).
FIRST_SWITCH_PASSAGES = 128
#: Passages to encode (those encoded so far and those about to be) below which a first measurement
#: of this machine (no record yet, here or in the machine cache) cannot pay back, so none is made and
#: the build stays on the export. Counted in passages, not seconds, so that a busy machine decides
#: as a quiet one does. Where a measurement can pay (a CPU with bf16, ~4x the export's rate; a GPU)
#: it costs ~9 s with the torch the build then keeps, ~5 s of it torch's start-up: at the export's
#: ~10 passages/s on 2 cores a 4x backend saves 0.075 s a passage, ~180 passages to break even; on
#: more cores both sides scale alike. Twice the first switch point keeps a small library (the sample
#: library's 183 passages) on the export.
MEASURE_MIN_PASSAGES = 2 * FIRST_SWITCH_PASSAGES
RECORD_FILE = "embed-backend.json"
#: 2: measured against the export of format 2 (faster: a record of format 1 undersold it)
RECORD_FORMAT = 2
#: The CPU flags a backend's speed depends on (recorded; a change measures again).
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8",
             "asimd", "bf16", "sve")
BF16_FLAGS = ("amx_bf16", "avx512_bf16")


# --- the probe set ----------------------------------------------------------------------------------

_WORDS = ("bone mineral density fracture risk cohort randomized trial placebo denosumab withdrawal "
          "vertebral osteoporosis hippocampus theta gamma coupling neurons synaptic plasticity "
          "soil moisture radar backscatter retrieval vegetation canopy lichen glacier elevation "
          "pollinator abundance transformer attention tokenization retrieval benchmark corpus "
          "lithium electrolyte cathode capacity degradation impedance alumina yttrium sintering "
          "creep grain boundary microstructure cytokine IL-6 TNF-α macrophage inflammation "
          "p < 0.05 95% CI hazard ratio mean ± SD n = 120 patients were enrolled and followed").split()


def _probe_texts() -> tuple[str, ...]:
    """Short, multilingual and symbol-laden texts, then passage-like texts of 12 to 240 words (some
    longer than the model's window), deterministic: the same on every machine."""
    fixed = ("", "SPG-302 in aged mice", "bone mineral density after denosumab withdrawal",
             "日本語の検索クエリ 和中文检索", "Müller–Lenz naïve µm ± 5 °C", "θ–γ coupling in CA1",
             "What is the effect of denosumab discontinuation on vertebral fractures?")
    out = list(fixed)
    n = len(_WORDS)
    for k in range(41):
        length = 12 + (k * 37) % 229
        words = [_WORDS[(k * 7 + j * 13 + (j * j) % 11) % n] for j in range(length)]
        sentences = [" ".join(words[i:i + 14]).capitalize() + "." for i in range(0, length, 14)]
        out.append(" ".join(sentences))
    return tuple(out)


#: 48 texts: what every candidate encodes, timed and compared with the reference.
PROBE_TEXTS = _probe_texts()


# --- the machine ----------------------------------------------------------------------------------

def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _gpu_name(device: str) -> str | None:
    """The NVIDIA GPU's model from the driver's /proc files (no torch), else None."""
    if not device.startswith("cuda"):
        return None
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            for line in info.read_text(encoding="utf-8").splitlines():
                if line.startswith("Model:"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            continue
    return None


@dataclass(frozen=True, slots=True)
class MachineFacts:
    """What a measurement was made on; any difference measures again."""

    cpu: str
    cpu_flags: tuple[str, ...]
    cores: int
    device: str  # cpu | cuda[:N] | mps, with the GPU's model where known
    torch: str | None
    onnxruntime: str | None
    sentence_transformers: str | None
    model: str  # the model identity's key

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cpu_flags": list(self.cpu_flags)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MachineFacts":
        return cls(**{**d, "cpu_flags": tuple(d["cpu_flags"])})


def machine_facts(model_key: str, device: str = "cpu", *, cpuinfo: str | None = None,
                  versions: Callable[[str], str | None] = _package_version) -> MachineFacts:
    """This machine's facts (`cpuinfo`: /proc/cpuinfo's text; `versions`: a distribution's
    version): read without importing torch, ~1 ms."""
    text = _cpuinfo() if cpuinfo is None else cpuinfo
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    gpu = _gpu_name(device)
    return MachineFacts(
        cpu=model or platform.processor() or platform.machine() or "?",
        cpu_flags=tuple(f for f in CPU_FLAGS if f in flags), cores=os.cpu_count() or 1,
        device=f"{device} ({gpu})" if gpu else device, torch=versions("torch"),
        onnxruntime=versions("onnxruntime"), sentence_transformers=versions("sentence-transformers"),
        model=model_key)


def candidates_for(facts: MachineFacts) -> list[str]:
    """The backends worth measuring on this machine: on a CPU the ONNX export and torch fp32, and
    torch bf16 where the CPU computes it natively (AMX, AVX512-BF16); on a GPU torch fp32 and fp16."""
    if facts.device.split()[0] != "cpu":
        return [TORCH_FP32, TORCH_FP16]
    out = [ONNX, TORCH_FP32]
    if any(f in facts.cpu_flags for f in BF16_FLAGS):
        out.append(TORCH_BF16)
    return out


# --- measuring --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Trial:
    """One backend on the probe set: passages a second (best round), agreement with the reference."""

    backend: str
    rate: float
    min_cosine: float
    mean_cosine: float
    agrees: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Measurement:
    """The trials of every candidate on one machine, the one chosen, and the seconds torch took to
    load (import and model) where it was measured: the start-up a switch to torch costs."""

    facts: MachineFacts
    trials: dict[str, Trial]
    chosen: str
    torch_load_s: float = 0.0
    measured_at: str = ""
    probe_texts: int = len(PROBE_TEXTS)

    def to_json(self) -> str:
        return json.dumps({"format": RECORD_FORMAT, "facts": self.facts.to_dict(),
                           "trials": {k: asdict(t) for k, t in self.trials.items()}, "chosen": self.chosen,
                           "torch_load_s": self.torch_load_s, "measured_at": self.measured_at,
                           "probe_texts": self.probe_texts}, indent=1, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Measurement":
        d = json.loads(text)
        if d.get("format") != RECORD_FORMAT:
            raise ValueError(f"record format {d.get('format')!r}")
        return cls(facts=MachineFacts.from_dict(d["facts"]),
                   trials={k: Trial(**t) for k, t in d["trials"].items()}, chosen=str(d["chosen"]),
                   torch_load_s=float(d.get("torch_load_s", 0.0)), measured_at=str(d.get("measured_at", "")),
                   probe_texts=int(d.get("probe_texts", 0)))

    def agreeing(self) -> list[str]:
        return [k for k, t in self.trials.items() if t.agrees]


def _normalized(v: Any) -> Any:
    v = np.asarray(v, dtype=np.float32)
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(n > 0, n, 1.0)


def time_encoder(enc: Callable[[Sequence[str]], Any], texts: Sequence[str] = PROBE_TEXTS, *, rounds: int = 2,
                 clock: Callable[[], float] = time.perf_counter) -> tuple[float, Any]:
    """(best seconds of `rounds` calls on `texts`, after a warm-up call on 4 of them; the vectors):
    one encoder timed as `measure` times each, for a backend measured before the others are loaded
    (`measure`'s `timed`)."""
    texts = list(texts)
    enc(texts[:4])
    best, vectors = float("inf"), None
    for _ in range(max(1, rounds)):
        t0 = clock()
        v = _normalized(enc(texts))
        best = min(best, max(clock() - t0, 1e-9))
        vectors = v if vectors is None else vectors
    return best, vectors


def measure(encoders: Mapping[str, Callable[[Sequence[str]], Any]], texts: Sequence[str] = PROBE_TEXTS, *,
            reference: str = REFERENCE, rounds: int = 2, clock: Callable[[], float] = time.perf_counter,
            min_cosine: float = AGREE_MIN_COSINE, timed: Mapping[str, tuple[float, Any]] | None = None
            ) -> dict[str, Trial]:
    """Each encoder (backend name → texts → vectors) on `texts`: one warm-up call, then `rounds`
    rounds, the encoders alternated within each (a busy machine slows them alike); its rate is its
    best round's. Its vectors are compared with `reference`'s probe by probe. An encoder that fails
    is a trial that does not agree, with its error. `timed`: backends measured beforehand on the
    same `texts` (`time_encoder`: best seconds, vectors), judged with the others."""
    if reference not in encoders:
        raise ValueError(f"the reference backend {reference!r} is not among the encoders")
    texts = list(texts)
    vectors: dict[str, Any] = {k: v for k, (_, v) in (timed or {}).items()}
    best: dict[str, float] = {k: s for k, (s, _) in (timed or {}).items()}
    errors: dict[str, str] = {}
    for name, enc in encoders.items():
        try:
            enc(texts[:4])
        except Exception as e:  # noqa: BLE001 - a backend that cannot run here is refused, not fatal
            errors[name] = f"{type(e).__name__}: {e}"
    for _ in range(max(1, rounds)):
        for name, enc in encoders.items():
            if name in errors:
                continue
            t0 = clock()
            try:
                v = _normalized(enc(texts))
            except Exception as e:  # noqa: BLE001
                errors[name] = f"{type(e).__name__}: {e}"
                continue
            dt = max(clock() - t0, 1e-9)
            best[name] = min(best.get(name, dt), dt)
            vectors.setdefault(name, v)
    if reference in errors:
        raise SheafError("BACKEND_UNAVAILABLE", f"the reference backend {reference} failed: {errors[reference]}",
                         {"backend": reference})
    ref = vectors[reference]
    out: dict[str, Trial] = {}
    for name in [*encoders, *(k for k in (timed or {}) if k not in encoders)]:
        if name in errors:
            out[name] = Trial(name, 0.0, 0.0, 0.0, False, errors[name])
            continue
        v = vectors[name]
        cos = np.sum(ref * v, axis=1) if v.shape == ref.shape else np.zeros(len(texts))
        lo, mean = float(cos.min()), float(cos.mean())
        out[name] = Trial(name, round(len(texts) / best[name], 2), round(lo, 7), round(mean, 7),
                          bool(lo >= min_cosine))
    return out


def choose(trials: Mapping[str, Trial], allowed: Sequence[str] | None = None) -> str:
    """The fastest agreeing backend of `allowed` (default: all): a torch backend over the ONNX export
    only when `TORCH_MARGIN` faster; the reference when none of them agrees."""
    pool = [t for k, t in trials.items() if t.agrees and (allowed is None or k in allowed)]
    if not pool:
        return REFERENCE
    fastest = max(pool, key=lambda t: t.rate)
    onnx = trials.get(ONNX)
    if onnx is not None and onnx in pool and fastest.backend != ONNX and fastest.rate < onnx.rate * TORCH_MARGIN:
        return ONNX
    return fastest.backend


def break_even_passages(m: Measurement, backend: str) -> float:
    """Passages to encode past which loading torch for `backend` pays back (its start-up against the
    time it saves on each passage over the ONNX export); infinite when it saves nothing."""
    onnx, other = m.trials.get(ONNX), m.trials.get(backend)
    if backend == ONNX or onnx is None or other is None or not onnx.rate or other.rate <= onnx.rate:
        return float("inf")
    return m.torch_load_s / (1.0 / onnx.rate - 1.0 / other.rate)


# --- the record in the home -----------------------------------------------------------------------

def load_record(path: Path) -> Measurement | None:
    """The measurement recorded at `path`; None when there is none or it cannot be read."""
    try:
        return Measurement.from_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_record(path: Path, m: Measurement) -> None:
    """Write the record atomically (best effort: a read-only home measures again next time)."""
    try:
        write_atomic(Path(path), m.to_json().encode("utf-8"))
    except OSError:
        pass


# --- the choice -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Choice:
    """The backend to encode on, why, and (for a backend chosen by measurement) the measurement."""

    backend: str
    reason: str
    measurement: Measurement | None = None
    measured_now: bool = False
    #: With the ONNX export loaded first: passages it encodes before switching to `backend` pays.
    switch_after: float = 0.0


def wanted(backend_setting: str, precision: str, device: str) -> tuple[list[str], bool]:
    """(the backends the settings allow, whether the choice among them needs a measurement).
    `backend_setting`: auto | onnx | torch | sentence-transformers (torch's former name);
    `precision`: auto | fp32 | bf16 | fp16; `device`: cpu | cuda[:N] | mps."""
    gpu = device != "cpu"
    if backend_setting == ONNX:
        if precision not in ("auto", "fp32"):
            raise SheafError("BAD_INPUT", f"SHEAF_EMBED_PRECISION={precision} cannot run on the ONNX export "
                             "(it computes in fp32)", {"variable": "SHEAF_EMBED_PRECISION", "value": precision},
                             hint="set SHEAF_EMBED_BACKEND=torch (or auto) or unset SHEAF_EMBED_PRECISION")
        return ([TORCH_FP32] if gpu else [ONNX]), False
    by_precision = {"fp32": TORCH_FP32, "bf16": TORCH_BF16, "fp16": TORCH_FP16}
    if precision != "auto":
        torch_one = by_precision[precision]
        if precision == "fp32":
            allowed = [TORCH_FP32] if backend_setting != "auto" or gpu else [ONNX, TORCH_FP32]
            return allowed, len(allowed) > 1
        return [torch_one], True  # a reduced precision must be shown to agree
    allowed = [TORCH_FP32, TORCH_BF16, TORCH_FP16]
    if backend_setting == "auto" and not gpu:
        allowed.insert(0, ONNX)
    return allowed, True


def unmeasured_choice(allowed: Sequence[str], precision: str, facts: MachineFacts) -> str | None:
    """The backend a measurement could not change, when there is one: of the backends `allowed`
    that this machine can run (`candidates_for`), the only one; or, when all of them compute in
    fp32 and the ONNX export is among them (a CPU without AMX or AVX512-BF16, no GPU), the export:
    torch fp32 computes the same and would have to beat it by `TORCH_MARGIN` after paying its
    start-up (measured on such CPUs: the export won every time, after 31-37 s of measuring).
    None when a measurement decides (or a reduced precision set by the settings must be shown to agree)."""
    if precision not in ("auto", "fp32"):
        return None
    runnable = candidates_for(facts)
    pool = [b for b in allowed if b in runnable]
    if len(pool) == 1:
        return pool[0]
    if ONNX in pool and all(PRECISION[b] == "fp32" for b in pool):
        return ONNX
    return None


def needs_measurement(backend_setting: str, precision: str, facts: MachineFacts) -> bool:
    """Whether `resolve` needs this machine's measurement (a record, or one made now) to choose."""
    allowed, needs = wanted(backend_setting, precision, facts.device.split()[0])
    return needs and unmeasured_choice(allowed, precision, facts) is None


def resolve(backend_setting: str, precision: str, facts: MachineFacts, record_path: Path | None,
            measure_now: Callable[[], Measurement]) -> Choice:
    """The backend the settings and this machine's measurement give. The record at `record_path` is
    used when it was measured on `facts`; else `measure_now()` measures (and it is saved). A backend
    forced by the settings wins; a reduced precision that disagrees with fp32 is refused
    (``BACKEND_UNAVAILABLE``)."""
    device = facts.device.split()[0]
    allowed, needs = wanted(backend_setting, precision, device)
    if not needs:
        return Choice(allowed[0], f"SHEAF_EMBED_BACKEND={backend_setting}")
    quick = unmeasured_choice(allowed, precision, facts)
    if quick is not None:
        return Choice(quick, f"not measured: the only backends this machine may choose compute in fp32 "
                      f"({facts.cpu}: no AMX or AVX512-BF16, no GPU)" if quick == ONNX else
                      f"not measured: {quick} is the only backend allowed that this machine runs")
    rec = load_record(record_path) if record_path is not None else None
    now = False
    if rec is None or rec.facts != facts:
        rec = measure_now()
        now = True
        if record_path is not None:
            save_record(record_path, rec)
    pool = [b for b in allowed if b in rec.trials]
    if precision not in ("auto", "fp32"):
        b = allowed[0]
        t = rec.trials.get(b)
        if t is None or not t.agrees:
            why = (t.error if t is not None and t.error else
                   f"its vectors disagree with fp32 (min cosine {t.min_cosine:.6f} < {AGREE_MIN_COSINE})"
                   if t is not None else "it was not measured on this machine")
            raise SheafError("BACKEND_UNAVAILABLE", f"SHEAF_EMBED_PRECISION={precision}: {b} is not usable here: {why}",
                             {"backend": b, "setting": "SHEAF_EMBED_PRECISION"},
                             hint="unset SHEAF_EMBED_PRECISION (auto uses only agreeing backends)")
        return Choice(b, f"SHEAF_EMBED_PRECISION={precision}", rec, now)
    b = choose(rec.trials, pool or [REFERENCE])
    if b not in pool and pool:
        b = REFERENCE if REFERENCE in pool else pool[0]
    rates = ", ".join(f"{k} {t.rate:.0f}/s" + ("" if t.agrees else " (disagrees)") for k, t in rec.trials.items())
    return Choice(b, f"measured on this machine: {rates}", rec, now)


#: How long the measuring child may take (~15 s here: torch's import, the model, the probe set).
MEASURE_TIMEOUT_S = 600


def measure_in_child(model: str, models_dir: str | None, device: str = "cpu", threads: int | None = None,
                     timeout: float = MEASURE_TIMEOUT_S, poll: Callable[[], None] | None = None) -> Measurement:
    """`sheaf.vectors.backend_probe` in a process of its own (``python -m``): the measurement of
    this machine's candidates for `model` (the ONNX export from `models_dir`), so that the process
    asking loads torch only when torch is chosen. `SheafError(BACKEND_UNAVAILABLE)` when it fails.
    `poll` is called while the child runs (a build's stop check): when it raises, the child is
    ended and the exception goes on."""
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "sheaf.vectors.backend_probe", model, "--device", device]
    if models_dir:
        cmd += ["--models-dir", str(models_dir)]
    if threads:
        cmd += ["--threads", str(threads)]
    try:
        r = run_polled(cmd, env, timeout, poll)
    except OSError as e:
        raise SheafError("BACKEND_UNAVAILABLE", f"measuring the embedding backends of {model!r} failed: {e}",
                         {"model": model}) from e
    except subprocess.TimeoutExpired:
        raise SheafError("BACKEND_UNAVAILABLE", f"measuring the embedding backends of {model!r} "
                         f"took over {timeout:.0f} s", {"model": model}) from None
    try:
        if r.returncode != 0:
            raise ValueError(r.returncode)
        return Measurement.from_json(r.stdout[r.stdout.index("{"):])
    except (ValueError, KeyError, TypeError):
        last = (r.stderr or r.stdout or "").strip().splitlines()[-3:]
        raise SheafError("BACKEND_UNAVAILABLE", f"measuring the embedding backends of {model!r} failed "
                         f"(exit {r.returncode}): " + " / ".join(last), {"model": model}) from None
