"""One settings object for every path and knob, read from the environment (prefix `SHEAF_`) and
validated in one place.

`Settings` is a frozen dataclass; each field's metadata names its environment variable's
meaning and its check. `get_settings()` reads the ``SHEAF_*`` variables (names matched
case-insensitively; an exactly upper-case name wins; an empty value counts as unset), applies
explicit overrides, converts and checks every field, and raises ``BAD_INPUT`` naming the
variable, the value and what is allowed. Every command reads its settings through it, so a bad
value fails the same way everywhere, before any work starts.

Why not pydantic-settings: importing it costs ~160 ms here, more than a whole cold
`sheaf search` may take, so the query path needed a second reader of the same variables (three
field lists in all). One plain class keeps one list and costs nothing to import.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from sheaf.core import home_record
from sheaf.core.envelope import SheafError

ENV_PREFIX = "SHEAF_"
EMBED_BACKENDS = ("auto", "onnx", "torch", "sentence-transformers")
EMBED_PRECISIONS = ("auto", "fp32", "bf16", "fp16")


def _setting(default: Any, doc: str, *, kind: type | None = None, check: Callable[[Any], str | None] | None = None,
             optional: bool = False) -> Any:
    if kind is None:
        kind = Path if isinstance(default, Path) else type(default)
    return field(default=default, metadata={"doc": doc, "kind": kind,
                                            "check": check, "optional": optional})


def _at_least(n: int) -> Callable[[int], str | None]:
    return lambda v: None if v >= n else f"an integer >= {n}"


def _one_of(*choices: str) -> Callable[[str], str | None]:
    return lambda v: None if v in choices else "one of " + ", ".join(choices)


_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def _device(v: str) -> str | None:
    return None if _DEVICE.match(v) else "auto, cpu, cuda, cuda:N or mps"


_CRON_FIELD = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*$")
_CRON_NAMES = re.compile(r"^[a-z]{3}(-[a-z]{3})?(,[a-z]{3}(-[a-z]{3})?)*$")
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


def _cron(v: str) -> str | None:
    """A standard five-field cron expression (numbers, ranges, steps, lists; month and weekday
    names), or a problem description."""
    allowed = "a cron expression of five fields (minute hour day month weekday), e.g. '0 2 * * *'"
    parts = v.split()
    if len(parts) != 5:
        return allowed
    for part, (lo, hi) in zip(parts, _CRON_RANGES):
        low = part.lower()
        if _CRON_NAMES.match(low) and (lo, hi) in ((1, 12), (0, 7)):
            continue
        if not _CRON_FIELD.match(part):
            return allowed
        for n in re.findall(r"\d+", re.sub(r"/\d+", "", part)):
            if not lo <= int(n) <= hi:
                return allowed
    return None


INDEX_URL_SCHEMES = ("postgresql://", "postgres://", "sqlite:")


def _index_url(v: str) -> str | None:
    return None if v.startswith(INDEX_URL_SCHEMES) else "a postgresql://... or sqlite:PATH URL"


#: A URL with a scheme (``s3://``, ``memory://``, ``file://``); anything else is a local path.
URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _artifacts_url(v: str) -> str | None:
    """A local folder, ``file://PATH`` or an fsspec URL (``s3://bucket/prefix``) without a password."""
    if URL_SCHEME.match(v) and redact_url(v) != v:
        return ("a folder or a URL without a password (give the store's credentials through its own "
                "environment, e.g. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for s3://)")
    return None


def redact_url(url: str) -> str:
    """`url` fit to show: a password (``user:secret@``, ``password=``) replaced by ``***``."""
    out = re.sub(r"^([a-z][a-z0-9+.-]*://[^/@:?#]*):[^/@?#]+@", r"\1:***@", url, flags=re.IGNORECASE)
    return re.sub(r"(?i)(\bpassword=)[^&\s]*", r"\1***", out)


@dataclass(frozen=True, slots=True)
class Settings:
    """Where Sheaf reads and writes, and the knobs of each stage."""

    home: Path = _setting(Path("data"), "where artifacts/, index/sheaf.db and dagster_home/ live")
    library: Path = _setting(Path("data/sample-library"), "the library folder")
    zotero_base_dir: Path | None = _setting(None, "a Zotero library's base directory for linked files (default: "
                                            "from Zotero's prefs.js)", kind=Path, optional=True)
    zotero_libraries: str = _setting("all", "which libraries of a Zotero data directory to index: all, user, or a "
                                     "comma list of user, group ids and group names",
                                     check=lambda v: None if v.strip() else "all, user, or a comma list")
    unit_token_cap: int = _setting(1000, "body units are split into parts past this many tokens",
                                   check=_at_least(1))
    nightly_cron: str = _setting("0 2 * * *", "the nightly rebuild schedule (UTC)", check=_cron)
    papers_per_run: int = _setting(200, "papers per run of a backfill, the nightly rebuild and `sheaf build` (with "
                                        "Celery or Kubernetes workers: fewer, so that runs spread over them)",
                                   check=_at_least(1))
    discovery_interval_seconds: int = _setting(60, "how often the discovery sensor scans the library (dagster dev)",
                                               check=_at_least(1))
    automation_interval_seconds: int = _setting(30, "how often the automation sensor evaluates (dagster dev)",
                                                check=_at_least(1))
    embedding_model: str = _setting("all-MiniLM-L6-v2", "a model name or a local sentence-transformers folder",
                                    check=lambda v: None if v.strip() else "a model name or folder")
    embed_batch_size: int = _setting(32, "passages per forward pass", check=_at_least(1))
    embed_overlap_tokens: int = _setting(32, "word pieces shared by consecutive passages of one unit",
                                         check=_at_least(0))
    embed_backend: str = _setting("auto", "auto (the ONNX export, then for a large encode the fastest backend "
                                  "that gives the same vectors, measured once per machine) | onnx | torch "
                                  "(sentence-transformers: the same)", check=_one_of(*EMBED_BACKENDS))
    embed_precision: str = _setting("auto", "auto (measured: a reduced precision only where its vectors agree "
                                    "with fp32) | fp32 | bf16 | fp16 (torch only)", check=_one_of(*EMBED_PRECISIONS))
    embed_device: str = _setting("auto", "auto (a GPU when the machine has one) | cpu | cuda | cuda:N | mps",
                                 check=_device)
    embed_threads: int = _setting(0, "threads the embedder computes on (0: every core; `sheaf build --workers N` "
                                  "gives each worker its share of the cores)", check=_at_least(0))
    ocr: str = _setting("auto", "auto (read the PDF pages without a usable text layer, scans, by OCR) | force "
                        "(every page of every PDF) | off", check=_one_of("auto", "force", "off"))
    cache_dir: Path | None = _setting(None, "the per-user machine cache: the embedding model's ONNX export and "
                                      "the backend measurement, the OCR of scanned pages, made once per machine "
                                      "and shared by every home "
                                      "(default: the platform's cache folder, ~/.cache/sheaf on Linux)", kind=Path,
                                      optional=True)
    index_file: Path | None = _setting(None, "the index file (default <home>/index/sheaf.db)", kind=Path,
                                       optional=True)
    index_url: str | None = _setting(None, "the index as a URL: unset (or sqlite:PATH) the SQLite file, "
                                     "postgresql://user@host:port/db the Postgres backend", kind=str,
                                     optional=True, check=lambda v: _index_url(v))
    artifacts_url: str | None = _setting(None, "where the per-paper artifacts live: unset <home>/artifacts; a "
                                         "folder or file://PATH; an fsspec URL such as s3://bucket/prefix "
                                         "(pip install sheaf[cluster]) or memory://name", kind=str,
                                         optional=True, check=lambda v: _artifacts_url(v))
    sqlite_busy_timeout_ms: int = _setting(10_000, "how long a SQLite writer waits for a lock",
                                           check=_at_least(0))
    dagster_storage: str = _setting("sheaf", "sheaf (Dagster's SQLite storages with Sheaf's batched writes and kept-open "
                                    "connections) | stock (Dagster's own classes on the same files: slower, for a "
                                    "Dagster release Sheaf's subclasses do not know yet)", check=_one_of("sheaf", "stock"))
    build_workers: int = _setting(1, "processes `sheaf build` builds papers in (more than 1 needs the Postgres "
                                  "index: SHEAF_INDEX_URL)", check=_at_least(1))
    #: How `library` was chosen: given (an override: --library, a vault), environment
    #: (SHEAF_LIBRARY), recorded (the home's `home.json`) or default. Not read from the environment.
    library_source: str = field(default=home_record.DEFAULT, metadata={"internal": True})

    @property
    def artifacts_remote(self) -> bool:
        """True when `artifacts_url` (SHEAF_ARTIFACTS_URL) names a store other than a local folder."""
        return bool(self.artifacts_url) and bool(URL_SCHEME.match(self.artifacts_url or "")) \
            and not (self.artifacts_url or "").startswith("file://")

    @property
    def artifacts_dir(self) -> Path:
        """This machine's artifacts folder: the artifacts themselves (SHEAF_ARTIFACTS_URL unset:
        `<home>/artifacts`; a folder or ``file://PATH``: that folder); with an object-store URL only
        this machine's caches (the library scan's file stats), the artifacts being in the store."""
        url = self.artifacts_url
        if url and not self.artifacts_remote:
            return Path(url.removeprefix("file://")).expanduser()
        return self.home / "artifacts"

    @property
    def artifacts_root(self) -> str:
        """Where the artifact store opens: the absolute local folder, or the store's URL."""
        return str(self.artifacts_url) if self.artifacts_remote else str(self.artifacts_dir.resolve())

    @property
    def artifacts_location(self) -> str:
        """Where the artifacts are, fit to show."""
        return redact_url(str(self.artifacts_url)) if self.artifacts_remote else str(self.artifacts_dir)

    @property
    def index_path(self) -> Path:
        """The index file: ``sqlite:PATH`` of `index_url` (SHEAF_INDEX_URL), else `index_file`
        (SHEAF_INDEX_FILE) if set, else `<home>/index/sheaf.db`."""
        if self.index_url and self.index_url.startswith("sqlite:"):
            return Path(self.index_url[len("sqlite:"):]).expanduser()
        return self.index_file if self.index_file is not None else self.home / "index" / "sheaf.db"

    @property
    def index_backend(self) -> str:
        """"postgres" when `index_url` (SHEAF_INDEX_URL) names a Postgres database, else "sqlite"."""
        return "postgres" if self.index_url and not self.index_url.startswith("sqlite:") else "sqlite"

    @property
    def index_location(self) -> str:
        """Where the index is, fit to show (a Postgres URL without its password)."""
        return redact_url(self.index_url) if self.index_url and self.index_backend == "postgres" else str(self.index_path)

    @property
    def dagster_home(self) -> Path:
        env = os.environ.get("DAGSTER_HOME")
        return Path(env) if env else (self.home / "dagster_home").resolve()


def variable(name: str) -> str:
    """The environment variable of a settings field: ``unit_token_cap`` → ``SHEAF_UNIT_TOKEN_CAP``."""
    return ENV_PREFIX + name.upper()


def _sheaf_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``SHEAF_*`` variables, names lowercased; an exactly upper-case name wins over other
    spellings; empty values count as unset."""
    found: dict[str, str] = {}
    for k, v in environ.items():
        if k[:6].upper() == ENV_PREFIX and v != "" and (k.isupper() or k.lower() not in found):
            found[k.lower()] = v
    return found


def _convert(name: str, raw: Any, meta: Mapping[str, Any]) -> Any:
    kind = meta["kind"]
    if raw is None and meta["optional"]:
        return None
    problem = None
    value: Any = raw
    if kind is int:
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            problem = "an integer"
        else:
            try:
                value = int(raw.strip()) if isinstance(raw, str) else raw
            except ValueError:
                problem = "an integer"
    elif kind is Path:
        value = Path(raw).expanduser() if isinstance(raw, (str, os.PathLike)) else raw
        if not isinstance(value, Path) or not str(value).strip():
            problem = "a path"
    else:
        value = str(raw).strip()
    if problem is None and meta["check"] is not None:
        problem = meta["check"](value)
    if problem is not None:
        var = variable(name)
        shown = redact_url(str(raw)) if name in ("index_url", "artifacts_url") else raw  # never a password
        raise SheafError("BAD_INPUT", f"{var} must be {problem}, not {shown!r}",
                         {"variable": var, "value": str(shown), "allowed": problem},
                         hint=f"fix or unset {var}")
    return value


def get_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from the environment (`environ`, default `os.environ`), explicit overrides
    winning; every value converted and checked (``BAD_INPUT`` names the variable)."""
    env = _sheaf_env(os.environ if environ is None else environ)
    known = {f.name: f for f in fields(Settings)}
    unknown = set(overrides) - set(known)
    if unknown:
        raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for name, f in known.items():
        if f.metadata.get("internal"):
            continue
        if name in overrides and overrides[name] is not None and overrides[name] != "":
            raw = overrides[name]
        else:
            raw = env.get(variable(name).lower())
        if raw is None:
            raw = f.default if f.default is not MISSING else None
            if raw is None:
                values[name] = None
                continue
        values[name] = _convert(name, raw, f.metadata)
    values["library_source"] = _library_source(values, overrides, env)
    settings = Settings(**values)
    _check_combination(settings)
    return settings


def _library_source(values: dict[str, Any], overrides: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """Where the library comes from; with none given, the home's recorded library replaces the
    default path in `values` (a home keeps its library: `sheaf.core.home_record`)."""
    if overrides.get("library") not in (None, ""):
        return home_record.GIVEN
    if env.get(variable("library").lower()) is not None:
        return home_record.ENVIRONMENT
    rec = home_record.read_record(values["home"])
    if rec is not None:
        values["library"] = rec.library
        return home_record.RECORDED
    return home_record.DEFAULT


def _check_combination(s: Settings) -> None:
    """Settings valid alone that contradict each other (``BAD_INPUT``)."""
    if s.embed_backend == "onnx" and s.embed_precision not in ("auto", "fp32"):
        raise SheafError("BAD_INPUT", f"SHEAF_EMBED_PRECISION={s.embed_precision} cannot run on the ONNX export "
                         "(SHEAF_EMBED_BACKEND=onnx computes in fp32)",
                         {"variable": "SHEAF_EMBED_PRECISION", "value": s.embed_precision, "allowed": "auto or fp32"},
                         hint="set SHEAF_EMBED_BACKEND=torch (or auto), or unset SHEAF_EMBED_PRECISION")


def _is_set(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    return _sheaf_env(os.environ if environ is None else environ).get(variable(name).lower())


#: Where a PaperForge vault's Sheaf home lives, relative to the vault (`python -m sheaf.paperforge`).
VAULT_HOME = Path("System/PaperForge/sheaf")


def where(settings: Settings, what: str, environ: Mapping[str, str] | None = None) -> str:
    """Where `what` ("index", "home" or "library") was looked for and why, for error messages:
    the absolute path, and which variable (or default) gave it, relative to which folder.

    >>> where(get_settings({}), "index")  # doctest: +SKIP
    "/tmp/data/index/sheaf.db: SHEAF_HOME is not set, so the home is ./data in the current folder (/tmp)"
    """
    path = {"index": settings.index_path, "home": settings.home, "library": settings.library}[what]
    cwd = os.getcwd()
    rel = f" in the current folder ({cwd})" if not Path(path).is_absolute() else ""
    if what == "index" and settings.index_file is not None:
        why = f"set by SHEAF_INDEX_FILE{rel}"
    elif what == "library" and settings.library_source == home_record.RECORDED:
        why = f"recorded as the library of the home {Path(settings.home).absolute()} in its {home_record.RECORD_NAME}"
    elif what == "library":
        why = (f"set by SHEAF_LIBRARY (or --library){rel}" if _is_set("library", environ) or
               settings.library != Path("data/sample-library")
               else f"SHEAF_LIBRARY is not set, so the library is ./data/sample-library{rel}")
    elif _is_set("home", environ):
        why = f"SHEAF_HOME={_is_set('home', environ)}{rel}"
    elif Path(settings.home) == Path(settings.library) / VAULT_HOME:
        why = f"the index home of the PaperForge vault {Path(settings.library).absolute()} (SHEAF_HOME is not set)"
    elif Path(settings.home) != Path("data"):
        why = f"the home this command was given (SHEAF_HOME is not set){rel}"
    else:
        why = f"SHEAF_HOME is not set, so the home is ./data{rel}"
    return f"{Path(path).absolute()}: {why}"


def describe() -> list[dict[str, Any]]:
    """Every setting: variable, default and meaning (for `--help` and the docs)."""
    return [{"variable": variable(f.name), "default": None if f.default is None else str(f.default),
             "meaning": f.metadata["doc"]} for f in fields(Settings) if not f.metadata.get("internal")]


def home_is_built(settings: Settings) -> bool:
    """True when the home holds something a build wrote (Dagster's home, artifacts or the index file)."""
    home = Path(settings.home)
    return any(p.exists() for p in (home / "dagster_home", settings.artifacts_dir, settings.index_path))


def check_home_library(settings: Settings, command: str = "this command") -> home_record.HomeRecord | None:
    """Refuse (``LIBRARY_MISMATCH``) a library that is not the home's own (`sheaf.core.home_record.check`):
    called before anything scans the library for a build, a status or a repair."""
    return home_record.check(settings.home, settings.library, settings.library_source,
                             built=home_is_built(settings), is_default_home=Path(settings.home) == Path("data"),
                             command=command)


def record_home_library(settings: Settings, layout: str, *, switch: bool = False,
                        command: str = "sheaf build") -> tuple[home_record.HomeRecord, str | None]:
    """Before a build: check the library against the home's record and write the record when
    the home has none (`switch`: replace a different one). Returns the record and, when the
    library was switched, the library it replaced."""
    rec = home_record.read_record(settings.home)
    if rec is not None and rec.names(settings.library):
        return rec, None
    if not switch:  # another library, or an unrecorded built home given none: LIBRARY_MISMATCH
        check_home_library(settings, command)
    new = home_record.write_record(settings.home, settings.library, layout)
    return new, (str(rec.library) if rec is not None else None)
