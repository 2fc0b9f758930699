"""OCR of the pages a PDF's text layer cannot give: scanned pages, picture-only pages, pages
whose fonts carry no Unicode map. Each such page is rendered (pypdfium2) and read by RapidOCR
(PP-OCRv6 detection and recognition on onnxruntime, models shipped inside its wheel and named
here by path, so nothing is ever downloaded). Its text lines come back as the text layer's own
`Line`s, so reading order, paragraphs, roles and page furniture are found exactly as for a
born-digital page.

A page's OCR is kept in the machine cache (``<cache>/ocr/<identity>/<pdf sha-256>/<page>.json``,
written atomically): it depends only on the PDF's bytes and the engine's identity (RapidOCR's
version, the model files' SHA-256, the settings below), so it is computed once per machine and
survives every rebuild of the stages after it. A new PDF or a new engine is a new entry.
The engine's identity itself is hashed once per machine (``<cache>/ocr/engine.json``): the
parse's code version carries it, so every build and status needs it.

`SHEAF_OCR`: ``auto`` (the default) reads the pages that need it, ``force`` every page, ``off``
none (a scanned PDF then stays without text, as before).
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.files import write_atomic
from sheaf.core.progress import StopRequested, check_stop, phase
from sheaf.core.user_cache import cache_dir
from sheaf.formats.pdf.ocr_int8 import RECIPE, int8_model

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

OCR_MODES = ("auto", "off", "force")
#: Rendering scale (72 dpi x 2 = 144 dpi): measured in `bench/parse/ocr.py` against born-digital text
#: layers; a higher scale costs detection time and finds no more words.
SCALE = 2.0
#: The longest side a page is rendered at, in pixels: a scan whose page claims a poster's size
#: (1 pt a pixel of a 200 dpi scanner) is rendered smaller than `SCALE`.
MAX_SIDE = 2400
#: A page read upright with a lower mean score is read turned a quarter too (a sideways scan).
TURN_SCORE = 0.8
#: Lines RapidOCR scores below this are dropped (its own default).
MIN_SCORE = 0.5
#: A detected line's box is the font size that set it plus this many points (detection on the
#: page at full resolution; measured on born-digital pages set in 8 to 24 pt): the size that
#: typography then compares with the body.
BOX_PAD = 2.0
#: The longest side detection sees, in pixels: a whole A4 or Letter page at `SCALE` (a smaller one
#: saves a third of a second a page and makes the boxes' heights too coarse to tell sizes apart).
DETECT_SIDE = 2000
#: What the cached entries are made of; bump when their shape changes.
CACHE_FORMAT = "1"  # {"turn": quarter turns, "lines": [[text, x0, top, x1, bottom, score, height, ink], ...]}
_MODELS = {"det": "PP-OCRv6_det_small.onnx", "rec": "PP-OCRv6_rec_small.onnx",
           "cls": "ch_ppocr_mobile_v2.0_cls_mobile.onnx"}


@dataclass(frozen=True, slots=True)
class OcrLine:
    """One line of text as OCR read it: its box in points from the page's top-left, its score, and
    the height of the line itself (a scan's lines are often skewed: their upright box is taller)."""

    text: str
    x0: float
    top: float
    x1: float
    bottom: float
    score: float
    height: float
    ink: float = 0.0  # the share of dark pixels in its box: bold type has more (a weight OCR does not report)


def models_dir() -> Path | None:
    """RapidOCR's bundled model folder, found without importing it; None when it is not installed."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("rapidocr")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "models"
    return folder if all((folder / name).is_file() for name in _MODELS.values()) else None


def _engine_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rapidocr")
    except PackageNotFoundError:
        return "?"


_IDENTITIES: dict[str, str] = {}
_MEMOS: set[Path] = set()  # the memo files this process has read or written


def engine_identity(folder: Path, memo: Path | None = None, rec: str = "fp32") -> str:
    """16 hex digits naming the engine: RapidOCR's version, each model file's SHA-256, the
    settings that change what it reads (scale, score floor, detection size, box padding), and the
    recognition model's form (`rec`: "fp32", or the int8 recipe it is made by).

    Hashing the models (31 MB) costs ~0.1 s, which every build and status would pay, the no-op
    ones included (the identity is part of the parse's code version). So it is hashed once per
    process, and once per machine where `memo` (a file in the machine cache) can keep it: it is
    used while the files' names, sizes and modification times are the ones it was made from."""
    files = sorted(_MODELS.values())
    key = json.dumps({"engine": "rapidocr", "version": _engine_version(), "scale": SCALE, "min_score": MIN_SCORE,
                      "box_pad": BOX_PAD, "detect_side": DETECT_SIDE, "max_side": MAX_SIDE, "turn_score": TURN_SCORE,
                      "format": CACHE_FORMAT, "rec": rec, "folder": str(folder),
                      "files": [[n, (st := (folder / n).stat()).st_size, st.st_mtime_ns] for n in files]},
                     sort_keys=True)
    kept = _read_memo(memo) if memo is not None and memo not in _MEMOS else {}
    ident = _IDENTITIES.get(key) or kept.get(key)
    if ident is None:
        h = hashlib.sha256(json.dumps({k: v for k, v in json.loads(key).items() if k not in ("folder", "files")},
                                      sort_keys=True).encode())
        for name in files:
            h.update(name.encode())
            h.update(hashlib.sha256((folder / name).read_bytes()).digest())
        ident = h.hexdigest()[:16]
    _IDENTITIES[key] = ident
    if memo is not None and memo not in _MEMOS:
        if kept.get(key) != ident:
            try:
                write_atomic(memo, json.dumps({key: ident}).encode())
            except OSError:
                pass  # a cache that cannot be written only costs the hashing again
        _MEMOS.add(memo)
    return ident


def _read_memo(memo: Path | None) -> dict[str, str]:
    if memo is None:
        return {}
    try:
        kept = json.loads(memo.read_bytes())
        return kept if isinstance(kept, dict) else {}
    except (OSError, ValueError):
        return {}


@dataclass(frozen=True, slots=True)
class OcrPage:
    """What OCR read on a page: its lines, and the quarter turns (anticlockwise, 0-3) the page
    was read at (its coordinates are the turned page's)."""

    lines: list[OcrLine]
    turn: int = 0


@dataclass(slots=True)
class PageOcr:
    """The OCR a PDF parse may call: its mode, its cache folder (None: no cache) and, once a page
    needs it, the engine (loaded on first use, kept for the object's life)."""

    mode: str = "auto"
    cache: Path | None = None
    threads: int = 0  # onnxruntime's threads (0: every core)
    #: The recognition model: "int8" (made once in the cache from the fp32 one: `ocr_int8`; without
    #: a cache the fp32 model reads) or "fp32".
    precision: str = "int8"
    _engine: Any = field(default=None, repr=False)
    _folder: Path | None = field(default=None, repr=False)
    _problem: str | None = field(default=None, repr=False)
    #: Why the fp32 model reads where int8 was asked for (the int8 model could not be made), once loaded.
    fallback: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in OCR_MODES:
            raise ValueError(f"SHEAF_OCR must be one of {', '.join(OCR_MODES)}, not {self.mode!r}")
        if self.precision not in ("int8", "fp32"):
            raise ValueError(f"OCR precision must be int8 or fp32, not {self.precision!r}")
        if self.mode != "off":
            self._folder = models_dir()
            if self._folder is None:
                self._problem = "OCR unavailable: the rapidocr package is not installed (pip install rapidocr)"

    @property
    def enabled(self) -> bool:
        return self.mode != "off" and self._folder is not None

    @property
    def problem(self) -> str | None:
        """Why pages that need OCR cannot have it, when OCR is on but cannot run."""
        return self._problem

    @property
    def code_version(self) -> str:
        """What the blocks of a PDF depend on here: "" when OCR is off (nothing), else the mode and
        the engine's identity. It joins the parse's code version, so a new engine rebuilds."""
        if self.mode == "off":
            return ""
        if self._folder is None:
            return f"{self.mode}:unavailable"
        return f"{self.mode}:{self._identity()}"

    def read_pages(self, pdf_sha: str, pages: Sequence[int], render: Callable[[int], tuple[Any, float]],
                   label: str = "") -> dict[int, OcrPage]:
        """{page index: what OCR read there} for `pages` (0-based), from the cache or read now.
        `render(i)` gives page i as an RGB array and the scale it was rendered at (pixels per
        point). A stop asked for is honoured between pages."""
        out: dict[int, OcrPage] = {}
        todo = []
        for i in pages:
            cached = self._cached(pdf_sha, i)
            if cached is None:
                todo.append(i)
            else:
                out[i] = cached
        start = time.monotonic()
        for n, i in enumerate(todo):
            check_stop()
            where = f"OCR {label + ' ' if label else ''}page {i + 1} ({n + 1}/{len(todo)}"
            if n:
                rate = n / max(1e-6, time.monotonic() - start)
                phase(f"{where}, {rate:.2f} pages/s, ETA {round((len(todo) - n) / rate)} s)")
            else:
                phase(where + ")")
            image, scale = render(i)
            out[i] = self.read_page(image, scale)
            self._store(pdf_sha, i, out[i])
        return out

    def read_page(self, image: Any, scale: float = SCALE) -> OcrPage:
        """One rendered page read, turned a quarter first when its text runs up or down (a
        landscape scan, a book scanned sideways): the reading with the most confident text wins."""
        lines = self.read_image(image, scale)
        upright = sum(ln.x1 - ln.x0 >= ln.bottom - ln.top for ln in lines)
        if len(lines) >= 3 and upright >= 0.6 * len(lines) and _confidence(lines) >= TURN_SCORE:
            return OcrPage(lines, 0)
        import numpy as np

        best = OcrPage(lines, 0)
        for turn in (1, 3):  # quarter turns anticlockwise: text running up, then down, reads left to right
            turned = self.read_image(np.ascontiguousarray(np.rot90(image, k=turn)), scale)
            if _weight(turned) > _weight(best.lines):
                best = OcrPage(turned, turn)
        return best

    def read_image(self, image: Any, scale: float = SCALE) -> list[OcrLine]:
        """The text lines of one rendered page (an RGB array, `scale` pixels per point), top to bottom."""
        result = self._load()(image)
        if result.boxes is None or result.txts is None:
            return []
        gray = image.min(axis=2) if getattr(image, "ndim", 2) == 3 else image
        lines = []
        for box, text, score in zip(result.boxes, result.txts, result.scores):
            text = " ".join(str(text).split())
            if not text or float(score) < MIN_SCORE:
                continue
            xs = [float(p[0]) / scale for p in box]
            ys = [float(p[1]) / scale for p in box]
            # corners clockwise from the top left: the left and right edges' mean length
            height = (_dist(xs[0], ys[0], xs[3], ys[3]) + _dist(xs[1], ys[1], xs[2], ys[2])) / 2
            box_px = gray[max(0, int(min(ys) * scale)):int(max(ys) * scale) + 1,
                          max(0, int(min(xs) * scale)):int(max(xs) * scale) + 1]
            ink = float((box_px < 128).mean()) if box_px.size else 0.0
            lines.append(OcrLine(text, min(xs), min(ys), max(xs), max(ys), round(float(score), 4), round(height, 2),
                                 round(ink, 4)))
        return lines

    @property
    def rec_form(self) -> str:
        """The recognition model this engine reads with: the int8 recipe, or "fp32"."""
        return RECIPE if self.precision == "int8" and self.cache is not None else "fp32"

    def _load(self) -> Any:
        if self._engine is None:
            assert self._folder is not None
            rec = self._folder / _MODELS["rec"]
            if self.rec_form != "fp32":
                fp32 = rec
                try:
                    rec = int8_model(fp32, self.cache, lambda: self._loaded(self._make_engine(fp32)), SCALE,
                                     poll=check_stop)
                except StopRequested:
                    raise
                except Exception as e:  # noqa: BLE001 - a cache that cannot hold it, a failed quantizer: fp32 reads
                    self.fallback = (f"OCR read with the fp32 model: its int8 model could not be made in "
                                     f"{self.cache / 'models'} ({type(e).__name__}: {e})")
                    rec = fp32
            self._engine = self._make_engine(rec)
        return self._engine

    @staticmethod
    def _loaded(engine: Any) -> Any:
        """`engine` with its detector and recognizer loaded (RapidOCR loads them on first use, through
        these two methods of its own; calibration calls the two models apart)."""
        engine._load_det_model()
        engine._load_rec_model()
        return engine

    def _make_engine(self, rec: Path) -> Any:
        from rapidocr import RapidOCR

        f = self._folder
        assert f is not None
        return RapidOCR(params={
            "Det.model_path": str(f / _MODELS["det"]), "Rec.model_path": str(rec),
            "Cls.model_path": str(f / _MODELS["cls"]), "Global.use_cls": False, "Global.log_level": "error",
            "Global.text_score": MIN_SCORE, "Det.limit_type": "max", "Det.limit_side_len": DETECT_SIDE,
            "Rec.rec_batch_num": 1,  # each line at its own width: no padding (faster here than batches)
            "EngineConfig.onnxruntime.intra_op_num_threads": self.threads or -1,
        })

    def _identity(self) -> str:
        assert self._folder is not None
        return engine_identity(self._folder, self.cache / "engine.json" if self.cache is not None else None,
                               self.rec_form)

    def _entry(self, pdf_sha: str, page: int) -> Path | None:
        if self.cache is None or self._folder is None:
            return None
        return self.cache / self._identity() / pdf_sha[:2] / pdf_sha / f"{page}.json"

    def _cached(self, pdf_sha: str, page: int) -> OcrPage | None:
        path = self._entry(pdf_sha, page)
        if path is None:
            return None
        try:
            entry = json.loads(path.read_bytes())
            lines = [OcrLine(str(r[0]), *(float(v) for v in r[1:8])) for r in entry["lines"]]
            return OcrPage(lines, int(entry.get("turn", 0)))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None  # absent or damaged: read again

    def _store(self, pdf_sha: str, page: int, read: OcrPage) -> None:
        path = self._entry(pdf_sha, page)
        if path is None:
            return
        data = {"format": CACHE_FORMAT, "turn": read.turn,
                "lines": [[ln.text, round(ln.x0, 2), round(ln.top, 2), round(ln.x1, 2), round(ln.bottom, 2), ln.score,
                           ln.height, ln.ink] for ln in read.lines]}
        try:
            write_atomic(path, json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        except OSError:
            pass  # a cache that cannot be written only costs reading the page again next time


def _confidence(lines: list[OcrLine]) -> float:
    """The mean score of a page's lines, weighed by their length."""
    n = sum(len(ln.text) for ln in lines)
    return sum(ln.score * len(ln.text) for ln in lines) / n if n else 0.0


def _weight(lines: list[OcrLine]) -> float:
    """Characters read with confidence: what decides between a page's readings."""
    return sum(len(ln.text) * ln.score ** 4 for ln in lines)


def _dist(x0: float, y0: float, x1: float, y1: float) -> float:
    return ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5


def page_ocr(mode: str, cache_root: Path | None, threads: int = 0) -> PageOcr:
    """The `PageOcr` of a build: `mode` (SHEAF_OCR), its cache in `<cache_root>/ocr`."""
    return PageOcr(mode=mode, cache=(cache_root / "ocr") if cache_root is not None else None, threads=threads)


def from_settings(settings: Settings) -> PageOcr:
    """The `PageOcr` a home's settings ask for: SHEAF_OCR, the machine cache (SHEAF_CACHE_DIR),
    the embedder's thread count (a worker of `sheaf build --workers N` keeps to its share)."""
    return page_ocr(settings.ocr, cache_dir(settings.cache_dir), settings.embed_threads)


def ocr_metadata(paper: Any) -> dict[str, Any]:
    """What a parsed paper's blocks say of OCR: {"ocr_pages": pages read by OCR} when any were."""
    pages = {b.page for b in paper.blocks if b.source_format == "ocr"}
    return {"ocr_pages": len(pages)} if pages else {}
