"""The embedder: passages that never truncate, and vectors from a content-addressed cache or the model.

- `Embedder.build_passages` (`sheaf.vectors.passages`) splits a unit whose text is longer than
  the model's window into overlapping passages, each with a short context prefix; nothing is
  cut off silently.
- `Embedder.embed` looks every passage up in the content-addressed cache (model identity,
  sha256 of the passage text) and encodes only the misses: rebuilding an unchanged paper
  encodes nothing; changing one paragraph encodes only that paragraph's passages.

torch and sentence-transformers are imported lazily, on the first call that needs the model;
importing this module is cheap (numpy only).
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.allocator import release_freed_memory
from sheaf.core.envelope import SheafError
from sheaf.core.lazy import lazy_module
from sheaf.core.progress import StopRequested, while_polled
from sheaf.core.settings import get_settings
from sheaf.vectors.backend_choice import (
    FIRST_SWITCH_PASSAGES,
    MEASURE_MIN_PASSAGES,
    ONNX,
    PRECISION,
    RECORD_FILE,
    Choice,
    MachineFacts,
    Measurement,
    break_even_passages,
    candidates_for,
    choose,
    load_record,
    machine_facts,
    measure,
    measure_in_child,
    needs_measurement,
    resolve,
    save_record,
    time_encoder,
)
from sheaf.vectors.identity import (
    CONTEXT_CAP,
    CONTEXT_SEP,
    DEFAULT_MODEL,
    DEFAULT_OVERLAP,
    PASSAGE_TEMPLATE,
    EmbeddedPassages,
    ModelIdentity,
    Passage,
    QueryVector,
    resolve_model_path,
    word_local,
)
from sheaf.vectors.machine_cache import MachineCache, cache_dir, open_cache
from sheaf.vectors.onnx import OnnxQueryEncoder, export_in_child, find_export
from sheaf.vectors.passages import PassageBuilder

np = lazy_module("numpy")  # imported on first use: the lexical query path never needs it
hashlib = lazy_module("hashlib")  # its OpenSSL backend costs ~3-5 ms to load

if TYPE_CHECKING:  # pragma: no cover
    from sheaf.core.settings import Settings
    from sheaf.vectors.cache import EmbeddingCache

__all__ = ["Embedder", "paper_first_batches"]

_ENCODE_CHUNK = 4096  # texts per model.encode call (it sorts by length within a call)
#: Passages per model call at most on a CPU, onnxruntime's and torch's: measured on 2 cores, 16
#: encodes faster than 32 (onnxruntime ~15%; torch fp32 22%, bf16 5%) and pads less.
_CPU_BATCH = 16
#: Torch on a CPU pads each batch to a multiple of this many tokens: a few batch shapes instead
#: of one for every length, so oneDNN compiles and caches few kernels (bf16, 3,000 passages:
#: 0.75 GB peak against 0.99, 105 passages/s against 95; vectors within cosine 1e-7 of unpadded).
_PAD_MULTIPLE = 32
#: Torch calls between two `release_freed_memory` (its cost is a few ms and the pages given back
#: are faulted in again: every 4th call kept 3,000 passages at 0.98 GB peak against 1.2, at the
#: same rate within the noise; every call, 0.9 GB and ~9% slower).
_TRIM_EVERY = 4


def _pad_to_multiple(st_model: Any, multiple: int) -> None:
    """Make sentence-transformers pad each batch to a multiple of `multiple` tokens (its first
    module's text processing arguments; the attention mask keeps the vectors those of the text)."""
    first = st_model[0] if len(st_model) else None
    kwargs = getattr(first, "processing_kwargs", None)
    if isinstance(kwargs, dict):
        kwargs.setdefault("text", {})["pad_to_multiple_of"] = multiple


def _weights_sha256(st_model: Any) -> str:
    """sha256 over the model's state dict (names, shapes, dtypes, bytes), in name order."""
    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(st_model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(name.encode("utf-8"))
        h.update(f"{tuple(t.shape)}|{t.dtype}".encode("ascii"))
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass(slots=True)
class _Loaded:
    model: Any  # the SentenceTransformer, or None when the ONNX export encodes
    tokenizer: Any  # a private tokenizers.Tokenizer: no truncation, no padding
    identity: ModelIdentity
    n_special: int
    onnx: Any = None  # a sheaf.vectors.query_encoder.OnnxQueryEncoder: encodes instead of `model`
    #: `identity.word_local` of the tokenizer: a passage cut between words is counted from the
    #: unit's own tokens, not tokenized again
    word_local: bool = False
    precision: str = "fp32"  # what `model` computes in: fp32 | bf16 | fp16 (torch.autocast)

    def __post_init__(self) -> None:
        self.word_local = word_local(self.tokenizer.to_str())

    @property
    def backend(self) -> str:
        return ONNX if self.onnx is not None else f"torch-{self.precision}"


#: In `paper_first_batches`, a text of a later paper competes for a batch of the current paper's
#: texts as if it were this much shorter: enough that the current paper finishes early (the
#: build reports it done), little enough that batches stay of similar lengths (measured on
#: 18 real papers: 1.5% more padded tokens than one length sort of the whole group;
#: the first paper of a group done after half the group's batches instead of all of them).
_OTHER_PAPER_DISCOUNT = 0.2


def paper_first_batches(owners: Sequence[int], lengths: Sequence[int], step: int) -> list[list[int]]:
    """Batches (lists of text indices) that encode the texts of paper 0 first, then paper 1's,
    ...: each batch starts at the longest text left of the earliest paper with texts left and is
    topped up with texts no longer than it, nearest in length first, the current paper's ahead of
    a later paper's of nearly the same length (`_OTHER_PAPER_DISCOUNT`). So papers finish one
    after another while a batch still holds texts of similar lengths (little padding).
    `owners[i]`: the paper of text i (0-based, in the papers' order); `lengths[i]`: its tokens."""
    left = sorted(range(len(owners)), key=lambda i: (-lengths[i], owners[i], i))
    batches: list[list[int]] = []
    while left:
        paper = min(owners[i] for i in left)
        head = next(i for i in left if owners[i] == paper)
        fits = [i for i in left if lengths[i] <= lengths[head]]
        fits.sort(key=lambda i: (-lengths[i] * (1.0 if owners[i] == paper else 1.0 - _OTHER_PAPER_DISCOUNT), i))
        batch = [head] + [i for i in fits if i != head][:step - 1]
        taken = set(batch)
        left = [i for i in left if i not in taken]
        batches.append(batch)
    return batches


#: Passages per forward pass: SHEAF_EMBED_BATCH_SIZE's default, and what a GPU gets instead of it.
DEFAULT_BATCH = 32
GPU_BATCH = 128


def gpu_present() -> str | None:
    """The GPU `SHEAF_EMBED_DEVICE=auto` picks, found without importing torch: an NVIDIA device
    node (``cuda``) or Apple silicon (``mps``); None on a CPU-only machine."""
    if Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia/gpus").is_dir():
        return "cuda"
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return "mps"
    return None


@dataclass
class Embedder(PassageBuilder):
    """Loads one sentence-transformers model (offline, lazily) and embeds passages and queries.

    `encoded_count` counts passages (texts) actually run through the model, `model_calls`
    the calls to ``model.encode``: tests and benchmarks read them to prove the cache works.

    The backend (`sheaf.vectors.backend_choice`; ``SHEAF_EMBED_BACKEND``, ``SHEAF_EMBED_PRECISION``):

    - ``auto`` (the default) on a CPU, with `models_dir` set (`from_settings` sets
      ``<SHEAF_HOME>/models``): the ONNX export of the model there (onnxruntime + tokenizers, no
      torch; linked at a home's first build from the machine cache, `cache_dir`, where a child
      process exports it once per machine): loading takes ~0.5 s instead of
      ~5 s for torch + sentence-transformers, which is most of the cost of a build of a few
      changed papers. Once the passages to encode reach the point where loading torch pays back
      (`FIRST_SWITCH_PASSAGES`, then the break-even of this machine's measurement), the embedder
      switches to the backend this machine's measurement chose (torch bf16 on a CPU with AMX:
      ~4x the export's rate here), if it is not the export itself. Every backend it may choose
      agrees with the fp32 reference on the probe set, so the identity and vectors are the same.
    - ``onnx``: the export only. ``torch`` (or ``sentence-transformers``): torch from the start,
      in the measured precision (``SHEAF_EMBED_PRECISION=auto``) or the one set.
    - On a GPU: torch, fp32 or fp16 as measured.

    `measurer`: how a measurement is made when neither `models_dir` nor the machine cache has a
    record made on these facts (default: with the torch model this process has loaded, when it
    has; on a CPU with bf16, torch is loaded first to measure with it, as it will all but surely
    encode; else `measure_in_child`, so this process loads torch only to use it). Nothing is
    measured where a measurement cannot change the choice (`backends.unmeasured_choice`: a CPU
    without bf16 and no GPU keeps the export) nor before `MEASURE_MIN_PASSAGES` passages.
    """

    model_name: str = DEFAULT_MODEL
    batch_size: int = 32
    overlap_tokens: int = DEFAULT_OVERLAP
    #: auto | cpu | cuda | cuda:N | mps (`SHEAF_EMBED_DEVICE`); `resolved_device` says what ran.
    device: str = "auto"
    resolved_device: str | None = None
    #: Threads the encoder computes on (`SHEAF_EMBED_THREADS`); None: the runtime's default, every core.
    #: A build's worker gets its share of the cores, so N workers do not each spread over all of them.
    threads: int | None = None
    encoded_count: int = 0
    model_calls: int = 0
    models_dir: str | None = None  # where ONNX exports and the backend record live; None: torch only
    #: The per-user machine cache (`sheaf.vectors.machine_cache`; `from_settings`: SHEAF_CACHE_DIR or the
    #: platform's cache folder) the export and the backend record are made in once per machine and
    #: linked from into `models_dir`; None: `models_dir` makes its own.
    cache_dir: str | None = None
    #: Why the machine cache is not used, when it was wanted (a build warns of it once)
    cache_note: str | None = None
    backend_note: str | None = None  # why the ONNX backend is not used, when it was wanted
    #: auto | onnx | torch | sentence-transformers (`SHEAF_EMBED_BACKEND`)
    backend_setting: str = "auto"
    #: auto | fp32 | bf16 | fp16 (`SHEAF_EMBED_PRECISION`)
    precision: str = "auto"
    measurer: Callable[[MachineFacts], Measurement] | None = field(default=None, repr=False)
    choice: Choice | None = None  # the measured choice, once made
    _loaded: _Loaded | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _switch_after: float = field(default=float("inf"), repr=False)  # see `_maybe_switch`
    _onnx_passages: int = field(default=0, repr=False)
    #: the export timed on the probe set with the build's own session before torch loads (`_maybe_switch`)
    _onnx_timed: tuple[float, Any] | None = field(default=None, repr=False)
    _export_thread: threading.Thread | None = field(default=None, repr=False)  # `export_ahead`'s
    _torch_calls: int = field(default=0, repr=False)
    _cache: MachineCache | None = field(default=None, repr=False)
    _cache_opened: bool = field(default=False, repr=False)
    #: Seconds torch + sentence-transformers + the model took to load in this process (0: not loaded)
    torch_load_s: float = 0.0

    @classmethod
    def from_settings(cls, settings: "Settings | None" = None, *, threads: int | None = None) -> "Embedder":
        """An embedder configured by `settings` (model name or path, batch size, overlap, threads,
        backend and precision; `threads` given here wins over the setting)."""
        if settings is None:
            settings = get_settings()
        return cls(model_name=settings.embedding_model, batch_size=settings.embed_batch_size,
                   overlap_tokens=settings.embed_overlap_tokens, device=getattr(settings, "embed_device", "auto"),
                   models_dir=str(Path(settings.home) / "models"),
                   cache_dir=str(cache_dir(getattr(settings, "cache_dir", None))),
                   backend_setting=getattr(settings, "embed_backend", "auto"),
                   precision=getattr(settings, "embed_precision", "auto"),
                   threads=threads or getattr(settings, "embed_threads", 0) or None)

    # --- loading ------------------------------------------------------------------------

    def load(self, poll: Callable[[], None] | None = None) -> _Loaded:
        """Load the model (once): offline; compute its identity. On a CPU with `models_dir` and
        the backend ``auto`` or ``onnx``: the ONNX export when a usable one is there or can be made,
        else torch (see the class docstring). `poll` (a build's stop check) is called while it
        loads, exports or measures; what it raises ends the wait (the load is dropped)."""
        if self._loaded is not None:
            return self._loaded
        with self._lock:
            if self._loaded is not None:
                return self._loaded
            self.resolved_device = self.device if self.device != "auto" else (gpu_present() or "cpu")
            if self.batch_size == DEFAULT_BATCH:  # SHEAF_EMBED_BATCH_SIZE overrides
                # a GPU is fed larger batches, a CPU smaller ones
                self.batch_size = GPU_BATCH if self.resolved_device != "cpu" else _CPU_BATCH
            if self._export_first(self.resolved_device):  # the export runs on the CPU
                self._loaded = self._load_export(poll)
                if self._loaded is not None and self.backend_setting == "auto":
                    self._switch_after = FIRST_SWITCH_PASSAGES
            if self._loaded is None:
                ld = while_polled(self._load_sentence_transformers, poll)
                ld.precision = self._torch_precision(ld, poll)
                self._loaded = ld
            return self._loaded

    def _export_first(self, device: str | None) -> bool:
        """Whether `load` starts on the ONNX export: a home's models folder, the CPU, and a backend
        and precision the export can serve."""
        return (self.models_dir is not None and device == "cpu" and self.backend_setting in ("auto", ONNX)
                and self.precision in ("auto", "fp32"))

    def export_ahead(self) -> threading.Thread | None:
        """Start making this home's ONNX export now, in the background, when `load` would make it
        (a home without a usable export, on the CPU, the backend ``auto`` or ``onnx``): a thread
        that waits on the export's child process (`_load_export`'s way: linked from the machine
        cache, made there first when missing). A build calls it before parsing, so that the ~9 s
        export runs beside the parse instead of after it. `load` waits for the thread, then takes what
        it made; a failed export is left for `load` to try again and report. None (nothing started) when there is nothing to make."""
        device = self.device if self.device != "auto" else (gpu_present() or "cpu")
        if self._loaded is not None or not self._export_first(device):
            return None
        home = Path(self.models_dir or "")
        if find_export(home, self.model_name) is not None:
            return None

        def make() -> None:
            try:
                self._make_export(home)
            except Exception:  # noqa: BLE001 - `load` makes it again and says why
                logging.getLogger("sheaf.vectors").debug("export ahead failed", exc_info=True)

        thread = threading.Thread(target=make, name="sheaf-export-ahead", daemon=True)
        thread.start()
        self._export_thread = thread
        return thread

    # --- the backend choice (sheaf.vectors.backend_choice) ---------------------------------------

    @property
    def record_path(self) -> Path | None:
        """Where this machine's backend measurement is cached: ``<models_dir>/embed-backend.json``."""
        return Path(self.models_dir) / RECORD_FILE if self.models_dir is not None else None

    def machine_cache(self) -> MachineCache | None:
        """The machine cache (`cache_dir`), opened once; None without one, or when its folder cannot
        be written (then `cache_note` says why, and the home makes its own export and record)."""
        if not self._cache_opened:
            self._cache_opened = True
            if self.cache_dir is not None and self.models_dir is not None:
                self._cache, why = open_cache(Path(self.cache_dir))
                if why:
                    self._cache_off(why)
        return self._cache

    def _cache_off(self, why: str) -> None:
        """Go on without the machine cache, with one warning (logged, and `backend_note` once loaded)."""
        self._cache = None
        if self.cache_note is None:
            self.cache_note = (f"{why}: the ONNX export and the backend record are made in this home instead "
                               "(set SHEAF_CACHE_DIR to a folder that can be written)")
            logging.getLogger("sheaf.vectors").warning("%s", self.cache_note)

    def _facts(self, identity: ModelIdentity) -> MachineFacts:
        return machine_facts(identity.key, self.resolved_device or "cpu")

    def _has_record(self, facts: MachineFacts) -> bool:
        """Whether a record measured on `facts` is at hand: the home's, or the machine cache's (then
        copied into the home, where `resolve` reads it)."""
        if self.record_path is None:
            return False
        rec = load_record(self.record_path)
        if rec is not None and rec.facts == facts:
            return True
        cache = self.machine_cache()
        rec = cache.load_record(facts) if cache is not None else None
        if rec is None:
            return False
        save_record(self.record_path, rec)
        return True

    def _measure_shared(self, facts: MachineFacts, poll: Callable[[], None] | None = None,
                        ld: _Loaded | None = None) -> Measurement:
        """`_measure`, under the machine cache's lock for `facts` and kept there: of two builds at once
        one measures, the other waits and takes its record."""
        cache = self.machine_cache()
        if cache is None:
            return self._measure(facts, poll, ld)
        try:
            with cache.measuring(facts, poll):
                rec = cache.load_record(facts)
                if rec is None:
                    rec = self._measure(facts, poll, ld)
                    cache.save_record(rec)
                return rec
        except OSError as e:  # the cache went away under us: measure here, as without one
            self._cache_off(f"the machine cache {cache.root} failed ({e})")
            return self._measure(facts, poll, ld)

    def _measure(self, facts: MachineFacts, poll: Callable[[], None] | None = None,
                 ld: _Loaded | None = None) -> Measurement:
        """This machine's measurement: by `measurer` when one is given; with torch already loaded
        here (`ld` has the model), with it (no second torch in a child: ~5-20 s and its memory
        saved); else in a child process, so that this process loads torch only when torch is chosen."""
        if self.measurer is None and (ld is None or ld.model is None):
            return measure_in_child(self.model_name, self.models_dir, self.resolved_device or "cpu", self.threads,
                                    poll=poll)
        measure = self.measurer or partial(self.measure_backends, ld)
        # seconds of encoding in this process: a stop must not wait for them
        return while_polled(partial(measure, facts), poll)

    def backend_encoders(self, ld: _Loaded, backends: Sequence[str], models_dir: Path | None = None
                         ) -> dict[str, Callable[[Sequence[str]], Any]]:
        """Backend name → encode function for `backends`, with `ld`'s torch model (and the ONNX export
        of its identity in `models_dir`, default this embedder's: no export, no ONNX candidate)."""
        models_dir = models_dir if models_dir is not None else (Path(self.models_dir) if self.models_dir else None)
        out: dict[str, Callable[[Sequence[str]], Any]] = {}
        for b in backends:
            if b == ONNX:
                found = find_export(Path(models_dir), self.model_name) if models_dir is not None else None
                if found is None:
                    continue
                enc = OnnxQueryEncoder.load(found, overlap_tokens=self.overlap_tokens, threads=self.threads)
                if enc.identity != ld.identity:
                    continue
                out[b] = lambda texts, enc=enc: self._onnx_encode(enc, list(texts))
            else:
                out[b] = lambda texts, p=PRECISION[b]: self.torch_encode(ld.model, texts, p)
        return out

    def measure_backends(self, ld: _Loaded, facts: MachineFacts, models_dir: Path | None = None) -> Measurement:
        """`measure` every candidate of `facts` on the probe set with `ld`'s loaded torch model (the
        export from `models_dir`, default this embedder's; or its trial already timed on the build's
        own session, `_onnx_timed`), and `choose`; the start-up a switch costs is this process's
        torch load (`torch_load_s`)."""
        candidates = candidates_for(facts)
        timed = ({ONNX: self._onnx_timed} if self._onnx_timed is not None and ONNX in candidates and models_dir is None
                 else None)
        trials = measure(self.backend_encoders(ld, [b for b in candidates if not (timed and b in timed)], models_dir),
                         timed=timed)
        self._onnx_timed = None
        return Measurement(facts, trials, choose(trials), round(self.torch_load_s, 2),
                           dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))

    def _choose(self, identity: ModelIdentity, poll: Callable[[], None] | None = None,
                ld: _Loaded | None = None) -> Choice:
        facts = self._facts(identity)
        setting = self._setting()
        if needs_measurement(setting, self.precision, facts):
            self._has_record(facts)  # the machine cache's record, into the home
        self.choice = resolve(setting, self.precision, facts, self.record_path,
                              lambda: self._measure_shared(facts, poll, ld))
        return self.choice

    def _setting(self) -> str:
        return "torch" if self.backend_setting == "sentence-transformers" else self.backend_setting

    def _torch_precision(self, ld: _Loaded, poll: Callable[[], None] | None = None) -> str:
        """The precision torch computes in when it is loaded from the start: fp32 without a home or
        when the settings say so; else the measured choice (a reduced precision that disagrees is
        refused: `resolve`)."""
        if self.precision == "fp32" or (self.models_dir is None and self.precision == "auto"):
            return "fp32"
        choice = self._choose(ld.identity, poll, ld=ld)
        return PRECISION[choice.backend] if choice.backend != ONNX else "fp32"

    def _maybe_switch(self, pending: int, poll: Callable[[], None] | None = None) -> None:
        """On the ONNX export with the backend ``auto``: once `pending` (passages encoded on it so
        far and those about to be) reaches the point where loading torch pays back, switch to the
        measured choice if it is a torch backend (the first time: the record is read, or made:
        `_measure_after_loading`). `poll` (a build's stop check) is called while measuring and
        loading; it raises to stop."""
        with self._lock:
            ld = self._loaded
            if ld is None or ld.onnx is None or pending < self._switch_after:
                return
            choice = None
            if self.choice is None:
                facts = self._facts(ld.identity)
                if (pending < MEASURE_MIN_PASSAGES and needs_measurement(self._setting(), self.precision, facts)
                        and not self._has_record(facts)):
                    self._switch_after = MEASURE_MIN_PASSAGES  # a first measurement could not pay back yet
                    return
            if self.choice is not None or not self._measure_after_loading(ld.identity):
                try:
                    choice = self.choice or self._choose(ld.identity, poll)
                except SheafError as e:
                    self.backend_note = f"the embedding backend could not be measured ({e.message}); staying on onnx"
                    self._switch_after = float("inf")
                    return
                if choice.backend == ONNX or choice.measurement is None:
                    self._switch_after = float("inf")
                    return
                self._switch_after = break_even_passages(choice.measurement, choice.backend)
                if pending < self._switch_after:
                    return
            self._switch_after = float("inf")
            if choice is None and self.measurer is None:
                # The export's trial of the measurement, on the build's own session before it closes:
                # measured with torch loaded, a second session beside torch was the first build's
                # peak (1.45 GB against 0.93 GB for torch alone, on a CPU with bf16).
                try:
                    self._onnx_timed = while_polled(
                        lambda: time_encoder(lambda texts: self._onnx_encode(ld.onnx, list(texts))), poll)
                except StopRequested:
                    raise
                except Exception:  # noqa: BLE001 - measured with torch, as before
                    self._onnx_timed = None
            # The export's session is closed before torch loads (it opens again if torch is not
            # used): the two together were a build's peak memory, 1.2 GB against 0.9 GB for torch alone.
            ld.onnx.close()
            try:
                st = while_polled(self._load_sentence_transformers, poll)
                if choice is None:  # measured now, with the torch just loaded
                    choice = self._choose(ld.identity, poll, ld=st)
            except SheafError as e:
                self.backend_note = f"torch not usable ({e.message}); staying on onnx"
                return
            if choice.backend == ONNX:
                return
            if st.identity != ld.identity:  # the export is checked against the model files: never expected
                self.backend_note = f"{choice.backend} loaded another model identity than the export's; staying on onnx"
                return
            st.precision = PRECISION[choice.backend]
            self._loaded = st

    def _ahead(self, n: int, poll: Callable[[], None] | None = None) -> _Loaded:
        """Before `n` passages are encoded (one call, or a group encoded over many calls): on the
        export, switch now if they reach the switch point (`_maybe_switch`), so that a first build's
        first group is not encoded on the slower export batch by batch. The model loaded then."""
        ld = self.load()
        if ld.onnx is not None and self._onnx_passages + n >= self._switch_after:
            self._maybe_switch(self._onnx_passages + n, poll)
            ld = self.load()
        return ld

    def _measure_after_loading(self, identity: ModelIdentity) -> bool:
        """Whether this machine's first measurement loads torch in this process and measures with it,
        instead of in a child: where a reduced precision is a candidate (a CPU with AMX or
        AVX512-BF16) and the precision is left to the measurement, torch all but surely wins, and
        the child would load torch a second time (measured here: 8.7 s with torch loaded against
        18.9 s in a child, then ~5 s to load torch for the build)."""
        if self.precision != "auto" or self.record_path is None:
            return False
        facts = self._facts(identity)
        if all(PRECISION[b] == "fp32" for b in candidates_for(facts)):
            return False
        if not needs_measurement(self._setting(), self.precision, facts):
            return False
        return not self._has_record(facts)

    def _load_export(self, poll: Callable[[], None] | None = None) -> _Loaded | None:
        """The usable ONNX export of the configured model in `models_dir`, loaded; or None. With
        none there yet (a home's first build), it is linked from the machine cache (`machine_cache`),
        where the model is exported first if this machine has no export of it yet, in a process of
        its own (`export_in_child`), so this process never imports torch; without a usable cache,
        into `models_dir` itself. If that fails, None (and sentence-transformers, which the build
        then exports from, `ensure_onnx_export`)."""
        home = Path(self.models_dir or "")
        try:
            ahead, self._export_thread = self._export_thread, None
            if ahead is not None:  # the export started before the parse: its result, not a second try
                while_polled(ahead.join, poll)
            found = self._make_export(home, poll)
            enc = while_polled(lambda: OnnxQueryEncoder.load(found, overlap_tokens=self.overlap_tokens,
                                                             threads=self.threads), poll)
        except StopRequested:
            raise
        except Exception as e:  # noqa: BLE001 - an unusable export: sentence-transformers, then re-export
            self.backend_note = f"ONNX export unusable ({type(e).__name__}: {e})"
            return None
        self.backend_note = self.cache_note
        return _Loaded(None, enc.split_tokenizer, enc.identity, enc.n_special, enc)

    def _make_export(self, home: Path, poll: Callable[[], None] | None = None) -> Path:
        """The usable export in the models folder `home`: there already, linked from the machine
        cache (made there first when missing), or, without a usable cache, made in `home`; each
        in a process of its own (`export_in_child`)."""
        found = find_export(home, self.model_name)
        if found is None:
            found = self._export_via_cache(home, poll)
        if found is None:
            found = export_in_child(self.model_name, home, poll=poll)
        return found

    def _export_via_cache(self, home: Path, poll: Callable[[], None] | None = None) -> Path | None:
        """The export linked into the models folder `home` from the machine cache (made there by
        `export_in_child` when missing); None without a usable cache (`cache_note` says why)."""
        cache = self.machine_cache()
        if cache is None:
            return None
        try:
            return cache.ensure_export(self.model_name, home,
                                       lambda entry: export_in_child(self.model_name, entry, poll=poll), poll)
        except OSError as e:  # e.g. the disk of the cache filled up: the home makes its own
            self._cache_off(f"the machine cache {cache.root} failed ({e})")
            return None

    def _load_sentence_transformers(self) -> _Loaded:
        """sentence-transformers (torch) on CPU, offline (its seconds: `torch_load_s`)."""
        t0 = time.perf_counter()
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        name, target = resolve_model_path(self.model_name)
        try:
            import tokenizers
            from sentence_transformers import SentenceTransformer
        except ImportError as e:  # pragma: no cover
            raise SheafError("BACKEND_UNAVAILABLE", f"sentence-transformers unavailable: {e}") from e
        device = self.resolved_device or "cpu"
        if device != "cpu":
            import torch

            usable = torch.cuda.is_available() if device.startswith("cuda") else torch.backends.mps.is_available()
            if not usable:
                raise SheafError("BACKEND_UNAVAILABLE", f"embedding device {device!r} is not usable here "
                                 f"(torch {torch.__version__} sees no {device.split(':')[0].upper()} device)",
                                 {"device": device, "setting": "SHEAF_EMBED_DEVICE"},
                                 hint="set SHEAF_EMBED_DEVICE=cpu (or auto) or install a torch build for this GPU")
        if self.threads:  # torch's pool is the process's: this process embeds for this embedder alone
            import torch

            torch.set_num_threads(self.threads)
        # transformers draws a "Loading weights" bar on stderr, where a build's caller (the
        # PaperForge plugin) reads any line as a warning
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        try:
            model = SentenceTransformer(target, device=device)
        except Exception as e:
            raise SheafError(
                "BACKEND_UNAVAILABLE", f"cannot load embedding model {self.model_name!r} "
                f"offline: {e}", {"model": self.model_name, "resolved": target},
                hint="set SHEAF_EMBEDDING_MODEL to a local sentence-transformers folder") from e
        if device == "cpu":
            _pad_to_multiple(model, _PAD_MULTIPLE)
        hf_tok = model.tokenizer
        backend = getattr(hf_tok, "backend_tokenizer", None)
        if backend is None:
            raise SheafError("BACKEND_UNAVAILABLE", f"model {self.model_name!r} has no fast "
                             "tokenizer; passages cannot be measured", {"model": self.model_name})
        tok = tokenizers.Tokenizer.from_str(backend.to_str())
        tok.no_truncation()
        tok.no_padding()
        n_special = int(hf_tok.num_special_tokens_to_add(pair=False))
        dim_fn = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        max_tokens = int(model.max_seq_length)
        if max_tokens <= n_special + CONTEXT_CAP + 2 * self.overlap_tokens:
            raise SheafError("BACKEND_UNAVAILABLE", f"model window of {max_tokens} tokens is "
                             "too small for the passage context and overlap",
                             {"model": self.model_name})
        identity = ModelIdentity(
            name=name, weights_sha256=_weights_sha256(model), dimension=int(dim_fn()),
            normalize=True, max_tokens=max_tokens,
            passage_template=f"{PASSAGE_TEMPLATE}|sep={CONTEXT_SEP}|cap={CONTEXT_CAP}")
        self.torch_load_s = time.perf_counter() - t0
        return _Loaded(model, tok, identity, n_special)

    @property
    def identity(self) -> ModelIdentity:
        return self.load().identity

    # --- encoding -----------------------------------------------------------------------

    @property
    def backend(self) -> str:
        """``onnx``, ``torch-fp32``, ``torch-bf16`` or ``torch-fp16``: what `encode` runs now (loads
        the model; a build on ``auto`` may switch from the export to torch as it goes)."""
        return self.load().backend

    def _onnx_encode(self, enc: Any, texts: list[str], between_batches: Callable[[], None] | None = None) -> np.ndarray:
        """Batches of `batch_size` texts of similar length (as sentence-transformers sorts
        them), so little padding; rows back in the input order. `between_batches` is called
        before each batch (a build's stop check: it raises to stop)."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), enc.identity.dimension), np.float32)
        step = min(self.batch_size, _CPU_BATCH)
        for i in range(0, len(order), step):
            if between_batches is not None:
                between_batches()
            idx = order[i:i + step]
            out[idx] = enc.encode_texts([texts[j] for j in idx])
        return out

    def encode_with_sentence_transformers(self, texts: Sequence[str]) -> np.ndarray:
        """`encode` through sentence-transformers whatever the backend (the export's reference)."""
        ld = self.load()
        model = ld.model if ld.model is not None else self._load_sentence_transformers().model
        return np.asarray(model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                       convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)

    def torch_encode(self, model: Any, texts: Sequence[str], precision: str = "fp32") -> np.ndarray:
        """sentence-transformers' `encode` of `texts`, L2-normalized float32: in fp32 as the model
        computes by default, or inside ``torch.autocast`` in bf16 / fp16 (normalized in fp32)."""
        if precision == "fp32":
            return np.asarray(model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                           convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)
        import torch

        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        device_type = (self.resolved_device or "cpu").split(":")[0]
        with torch.inference_mode(), torch.autocast(device_type, dtype=dtype):
            v = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=False,
                             convert_to_tensor=True, show_progress_bar=False)
        v = v.float().cpu().numpy()
        n = np.linalg.norm(v, axis=1, keepdims=True)
        return (v / np.where(n > 0, n, 1.0)).astype(np.float32)

    def encode(self, texts: Sequence[str], between_batches: Callable[[], None] | None = None) -> np.ndarray:
        """Encode texts with the model (no cache), L2-normalized float32; counts them.
        `between_batches`: called before each batch of the model (ONNX) or each call of a few
        batches (torch); it raises to stop the encoding there (a build's stop)."""
        ld = self.load()
        if not texts:
            return np.zeros((0, ld.identity.dimension), np.float32)
        ld = self._ahead(len(texts), between_batches)
        chunks = []
        size = _ENCODE_CHUNK if between_batches is None or ld.onnx is not None else 4 * self.batch_size
        for i in range(0, len(texts), size):
            part = list(texts[i:i + size])
            if ld.onnx is not None:
                vecs = self._onnx_encode(ld.onnx, part, between_batches)
                self._onnx_passages += len(part)
            else:
                if between_batches is not None:
                    between_batches()
                vecs = self.torch_encode(ld.model, part, ld.precision)
                self._torch_calls += 1
                if self._torch_calls % _TRIM_EVERY == 0:
                    release_freed_memory()
            self.model_calls += 1
            self.encoded_count += len(part)
            chunks.append(np.asarray(vecs, dtype=np.float32))
        return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]

    def embed(self, passages: Sequence[Passage], cache: EmbeddingCache | None = None,
              between_batches: Callable[[], None] | None = None) -> EmbeddedPassages:
        """Vectors for `passages`: from `cache` (content-addressed: model identity + sha256 of the
        passage text) where present, the rest encoded in one batched pass (duplicate texts once)
        and written back to it. The index's cache (`IndexBackend.embedding_cache()`) commits its
        writes on its own: call this outside any write transaction of the index.
        `between_batches`: see `encode` (what it raises leaves the cache as it was)."""
        ident = self.identity
        passages = tuple(passages)
        shas = [p.text_sha256 for p in passages]
        found: dict[str, np.ndarray] = {}
        if cache is not None and passages:
            found = cache.get(ident, set(shas))
        todo: dict[str, str] = {}
        for p in passages:
            if p.text_sha256 not in found:
                todo.setdefault(p.text_sha256, p.text)
        fresh: dict[str, np.ndarray] = {}
        if todo:
            keys = list(todo)
            vecs = self.encode([todo[k] for k in keys], between_batches)
            fresh = dict(zip(keys, vecs))
            if cache is not None:
                cache.put(ident, fresh)
        matrix = np.zeros((len(passages), ident.dimension), np.float32)
        for i, s in enumerate(shas):
            matrix[i] = found[s] if s in found else fresh[s]
        return EmbeddedPassages(ident, passages, matrix, encoded=len(fresh), fresh=frozenset(fresh))

    def embed_papers(self, papers: Sequence[tuple[str, Sequence[Passage]]], cache: EmbeddingCache | None = None,
                     between_batches: Callable[[], None] | None = None
                     ) -> Iterator[tuple[str, EmbeddedPassages, float]]:
        """`embed` of several papers' passages, handed out paper by paper in their order as soon
        as each one's vectors are all there: (key, its passages embedded, seconds spent on it).
        One cache read for all; the texts to encode are batched across the papers
        (`paper_first_batches`: similar lengths, the first paper's texts first), so the papers
        finish one after another, not all at the end. A text new to several papers counts as
        encoded for the first of them. The cache gets the vectors encoded so far each time a
        paper is handed out (outside any write transaction of the index, as `embed`);
        `between_batches`: see `encode` (what it raises ends the encoding there)."""
        ident = self.identity
        found: dict[str, np.ndarray] = {}
        if cache is not None:
            found = cache.get(ident, {p.text_sha256 for _, ps in papers for p in ps})
        todo: dict[str, tuple[str, int, int]] = {}  # sha -> (text, first paper, tokens)
        for n, (_, ps) in enumerate(papers):
            for p in ps:
                if p.text_sha256 not in found:
                    todo.setdefault(p.text_sha256, (p.text, n, p.n_tokens))
        shas = list(todo)
        self._ahead(len(shas), between_batches)  # the backend for all of them (and the device's batch size)
        step = self.batch_size
        batches = iter(paper_first_batches([todo[s][1] for s in shas], [todo[s][2] for s in shas], step))
        fresh: dict[str, np.ndarray] = {}
        unsaved: dict[str, np.ndarray] = {}
        for n, (key, ps) in enumerate(papers):
            t0 = time.perf_counter()
            need = {p.text_sha256 for p in ps if p.text_sha256 not in found}
            while not need <= fresh.keys():
                batch = [shas[i] for i in next(batches)]
                vecs = self.encode([todo[s][0] for s in batch], between_batches)
                new = dict(zip(batch, vecs))
                fresh.update(new)
                unsaved.update(new)
            if cache is not None and unsaved:
                cache.put(ident, unsaved)
                unsaved = {}
            matrix = np.zeros((len(ps), ident.dimension), np.float32)
            for i, p in enumerate(ps):
                matrix[i] = found[p.text_sha256] if p.text_sha256 in found else fresh[p.text_sha256]
            mine = frozenset(s for s in need if todo[s][1] == n)
            yield key, EmbeddedPassages(ident, tuple(ps), matrix, encoded=len(mine), fresh=mine), \
                time.perf_counter() - t0

    def embed_query(self, text: str) -> QueryVector:
        """A query vector. A query longer than the window is not truncated: its windows are
        embedded and averaged (then re-normalized), and `windows` says how many there were."""
        ld = self.load()
        budget = ld.identity.max_tokens - ld.n_special
        spans = self.split_spans(text, budget) or [(0, len(text))]
        vecs = self.encode([text[a:b] for a, b in spans])
        v = vecs.mean(axis=0)
        norm = float(np.linalg.norm(v))
        if norm > 0:
            v = v / norm
        return QueryVector(ld.identity, v.astype(np.float32), text, windows=len(spans))
