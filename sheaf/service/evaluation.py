"""`sheaf eval beir | library`: retrieval quality as an envelope (and, with `out`, a file)."""
from __future__ import annotations

import datetime as dt
import json
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sheaf.core.envelope import ok
from sheaf.eval import beir as beir_suite
from sheaf.eval import library as library_suite
from sheaf.eval.metrics import METRICS
from sheaf.service.requests import Outcome

if TYPE_CHECKING:
    from sheaf.core.settings import Settings

__all__ = ["METRICS", "beir", "library"]

Progress = Callable[[str], None]


def _quiet(message: str) -> None:
    pass


def _outcome(suite: str, res: dict[str, Any], count: int, actions: list[str], t0: float,
             out: str | Path | None, progress: Progress) -> Outcome:
    res["data"]["run"] = {"date": dt.datetime.now().isoformat(timespec="seconds"),
                          "seconds": round(time.perf_counter() - t0, 1), "python": platform.python_version(),
                          "machine": platform.machine()}
    res["data"] = {"suite": suite, **res["data"]}
    env = ok("eval", res["data"], count=count, warnings=res["warnings"], next_actions=actions)
    if out:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(env, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        progress(f"results written to {out}")
    return Outcome(env)


def beir(settings: Settings, corpus: str | Path, queries: str | Path, qrels: str | Path, *,
         modes: Sequence[str], cache_dir: str | Path | None = None, rebuild: bool = False,
         max_queries: int | None = None, per_query: bool = False, out: str | Path | None = None,
         progress: Progress = _quiet) -> Outcome:
    """nDCG@10, recall@10/@100, MRR@10 per mode on a BEIR dataset (a cached eval index built from it)."""
    t0 = time.perf_counter()
    ds = beir_suite.load_beir(corpus, queries, qrels)
    cache = Path(cache_dir) if cache_dir else settings.home / "eval-cache"
    res = beir_suite.run_beir(ds, modes=modes, cache_dir=cache, settings=settings, rebuild=rebuild,
                              max_queries=max_queries, per_query=per_query, progress=progress)
    actions = [] if res["data"]["index"]["reused"] else [f"the eval index is cached in {cache}: reruns reuse it"]
    return _outcome("beir", res, res["data"]["dataset"]["queries_evaluated"], actions, t0, out, progress)


def library(*, sample: int = 50, seed: int = 0, modes: Sequence[str], per_query: bool = False,
            out: str | Path | None = None, progress: Progress = _quiet) -> Outcome:
    """Known-item recall@1/@10 and MRR per query type and mode on the configured index."""
    t0 = time.perf_counter()
    res = library_suite.run_library(sample=sample, seed=seed, modes=modes, per_query=per_query, progress=progress)
    return _outcome("library", res, sum(res["data"]["queries"].values()), [], t0, out, progress)
