"""Retrieval metrics (pure functions): nDCG, recall and MRR at k over rankings of paper ids, and
latency percentiles."""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence

#: The metrics `run_beir` reports per mode, in order.
METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


#: Library (known-item) metrics.
KNOWN_ITEM_METRICS = ("recall@1", "recall@10", "mrr@10")


def dedupe(ranking: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ranking))


def _dcg(gains: Sequence[float]) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains) if g)


def ndcg_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """nDCG@k of one ranking (doc ids, best first) against graded judgements {doc: rel}.
    Gain = rel (rel <= 0 is not relevant), discount log2(rank + 1); 0 when nothing is relevant."""
    ideal = sorted((r for r in qrels.values() if r > 0), reverse=True)[:k]
    idcg = _dcg(ideal)
    if idcg <= 0:
        return 0.0
    gains = [max(qrels.get(d, 0), 0) for d in dedupe(ranking)[:k]]
    return _dcg(gains) / idcg


def recall_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents (rel > 0) found in the first k."""
    rel = {d for d, r in qrels.items() if r > 0}
    if not rel:
        return 0.0
    return len(rel.intersection(dedupe(ranking)[:k])) / len(rel)


def mrr_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document within the first k, else 0."""
    for i, d in enumerate(dedupe(ranking)[:k]):
        if qrels.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


_METRIC_FNS = {"ndcg": ndcg_at_k, "recall": recall_at_k, "mrr": mrr_at_k}


def _metric(name: str) -> tuple[Callable[..., float], int]:
    kind, _, k = name.partition("@")
    if kind not in _METRIC_FNS or not k.isdigit():
        raise ValueError(f"unknown metric {name!r}")
    return _METRIC_FNS[kind], int(k)


def per_query_metrics(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]],
                      metrics: Sequence[str] = METRICS) -> dict[str, dict[str, float]]:
    """{query id: {metric: value}} for every judged query with a relevant document (a query
    missing from `run` has an empty ranking)."""
    fns = [(m, *_metric(m)) for m in metrics]
    out: dict[str, dict[str, float]] = {}
    for qid, judged in qrels.items():
        if not any(r > 0 for r in judged.values()):
            continue
        ranking = run.get(qid, ())
        out[qid] = {m: fn(ranking, judged, k) for m, fn, k in fns}
    return out


def evaluate_run(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]],
                 metrics: Sequence[str] = METRICS) -> dict[str, float]:
    """Mean of each metric over the judged queries (see `per_query_metrics`)."""
    per = per_query_metrics(run, qrels, metrics)
    if not per:
        return {m: 0.0 for m in metrics}
    return {m: sum(v[m] for v in per.values()) / len(per) for m in metrics}


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def latency_stats(seconds: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / mean / max in milliseconds (nearest-rank percentiles)."""
    if not seconds:
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0, "max": 0.0, "n": 0}
    return {"p50": round(_pct(seconds, 50) * 1000, 2), "p95": round(_pct(seconds, 95) * 1000, 2),
            "mean": round(statistics.fmean(seconds) * 1000, 2), "max": round(max(seconds) * 1000, 2),
            "n": len(seconds)}
