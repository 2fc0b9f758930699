"""What every evaluation run shares: the modes, query vectors prefetched in batches, progress, and a
retriever's ranking of papers for one query in one mode."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sheaf.core.envelope import SheafError
from sheaf.core.settings import get_settings
from sheaf.eval.metrics import dedupe
from sheaf.vectors.identity import QueryVector

MODES = ("lexical", "semantic", "hybrid")
BEIR_DEPTH = 100  # papers ranked per query (recall@100)

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    pass


# --- query vectors: encode once, time it ---------------------------------------------------------

class QueryVectors:
    """The query encoder of an evaluation run (passed to its Retriever): each distinct query is
    embedded once (its encode time recorded), so every mode sees the same vector and the
    retrieval latency excludes the model."""

    def __init__(self, embedder: Any) -> None:
        self.model_name = embedder.model_name
        self._embedder = embedder
        self.vectors: dict[str, Any] = {}
        self.seconds: list[float] = []

    def prefetch(self, texts: Sequence[str], timed: int = 20, progress: Progress = quiet) -> None:
        """Vectors for many queries: the first `timed` one at a time (their encode latency is
        what `seconds` reports), the rest in batches (the same vectors, far faster)."""
        texts = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        for t in texts[:timed]:
            self.embed_query(t)
        rest = texts[timed:]
        if not rest:
            return
        ld = self._embedder.load()
        budget = ld.identity.max_tokens - ld.n_special
        short = [t for t in rest if len(ld.tokenizer.encode(t, add_special_tokens=False).ids) <= budget]
        tick = Ticker(progress, "query vectors", len(rest))
        for i in range(0, len(short), 256):
            chunk = short[i:i + 256]
            for t, v in zip(chunk, self._embedder.encode(chunk)):
                self.vectors[t] = QueryVector(ld.identity, v, t, windows=1)
            tick(i + len(chunk))
        for t in rest:  # longer than the window: averaged windows, as embed_query does
            if t not in self.vectors:
                self.vectors[t] = self._embedder.embed_query(t)

    def encode(self, text: str, identity: Any = None) -> tuple[Any, list[str]]:
        """`QueryEncoder.encode`'s contract: (vector, warnings)."""
        return self.embed_query(text), []

    def embed_query(self, text: str) -> Any:
        qv = self.vectors.get(text)
        if qv is None:
            t0 = time.perf_counter()
            qv = self._embedder.embed_query(text)
            self.seconds.append(time.perf_counter() - t0)
            self.vectors[text] = qv
        return qv


class Ticker:
    """Progress lines at most every `every` seconds (and at the end)."""

    def __init__(self, progress: Progress, label: str, total: int, every: float = 5.0) -> None:
        self.progress, self.label, self.total, self.every = progress, label, total, every
        self.t0 = self.last = time.perf_counter()

    def __call__(self, done: int, extra: str = "") -> None:
        now = time.perf_counter()
        if done >= self.total or now - self.last >= self.every:
            self.last = now
            el = now - self.t0
            eta = el / done * (self.total - done) if done else 0.0
            self.progress(f"{self.label}: {done}/{self.total} ({el:.0f} s"
                          + (f", ~{eta:.0f} s left" if done < self.total else "") + ")"
                          + (f" {extra}" if extra else ""))


# --- BEIR datasets ------------------------------------------------------------------------------


def paper_ranking(retriever: Any, query: str, mode: str, depth: int = BEIR_DEPTH) -> list[str]:
    """Papers for a query, best first: `retrieve` with one unit per paper (a paper ranks as its
    best unit: max aggregation)."""
    res = retriever.retrieve(query, mode=mode, limit=depth, per_paper=1, kind="all")
    return dedupe(m["zotero_key"] for m in res.matches)


def settings_for(index: Path, model: str | None) -> Any:
    over: dict[str, Any] = {"index_file": index}
    if model:
        over["embedding_model"] = model
    return get_settings(**over)


def run_modes(retriever: Any, items: Sequence[tuple[str, str]], modes: Sequence[str],
               rank: Callable[[Any, str, str], list[str]], progress: Progress,
               ) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[float]], list[str]]:
    """{mode: {item id: ranking}}, {mode: [seconds]}, warnings (first few per mode)."""
    runs: dict[str, dict[str, list[str]]] = {}
    times: dict[str, list[float]] = {}
    warnings: list[str] = []
    for mode in modes:
        run: dict[str, list[str]] = {}
        ts: list[float] = []
        failed = 0
        tick = Ticker(progress, f"{mode} queries", len(items))
        for i, (qid, text) in enumerate(items, start=1):
            t0 = time.perf_counter()
            try:
                run[qid] = rank(retriever, text, mode)
            except SheafError as e:
                if e.code != "BAD_QUERY":
                    raise
                run[qid] = []  # nothing searchable in it: an empty ranking (scores 0)
                failed += 1
            ts.append(time.perf_counter() - t0)
            tick(i)
        if failed:
            warnings.append(f"{mode}: {failed} queries had nothing to search for (scored 0)")
        runs[mode], times[mode] = run, ts
    return runs, times, warnings


def check_modes(modes: Sequence[str]) -> list[str]:
    modes = [m.strip() for m in modes if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise SheafError("BAD_QUERY", f"unknown mode {', '.join(bad) or '(none)'}; modes are "
                         f"{', '.join(MODES)}", {"modes": list(modes)}, hint="e.g. --modes lexical,hybrid")
    return list(dict.fromkeys(modes))


# --- the user's library: known items ----------------------------------------------------------


