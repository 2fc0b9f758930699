"""How `retrieve` ranks: the legs fused (one leg's own order, or reciprocal rank), whether more
candidates could still pass a score floor, and the per-paper cap (`sheaf.search.retriever`)."""
from __future__ import annotations

from typing import Any

from sheaf.search.units import HYBRID_RRF_K


class RankFusion:
    """The fusion steps of `Retriever.retrieve`, as static methods of its base class."""

    @staticmethod
    def _fuse(legs: dict[str, list[tuple[str, str, float]]], mode: str) -> list[dict[str, Any]]:
        """Candidates best first. One leg: in the leg's own order (lexical: units holding every
        word first, then bm25), scored by the leg's score; hybrid: sum of 1 / (HYBRID_RRF_K + rank)."""
        table: dict[str, dict[str, Any]] = {}
        for leg in ("lexical", "semantic"):
            for rank, (uid, pid, score) in enumerate(legs.get(leg, []), start=1):
                c = table.setdefault(uid, {"unit_id": uid, "paper_id": pid, "score": 0.0,
                                           "legs": {name: None for name in legs}})
                c["legs"][leg] = {"rank": rank, "score": round(float(score), 6)}
                c["score"] += 1.0 / (HYBRID_RRF_K + rank) if mode == "hybrid" else float(score)
        if mode != "hybrid":
            return sorted(table.values(), key=lambda c: min(v["rank"] for v in c["legs"].values() if v))
        # Ties (typically the first hit of one leg against the first hit of the other) go to the
        # unit the lexical leg found: an exact word or code match over the nearest meaning.
        return sorted(table.values(), key=lambda c: (
            -c["score"], min(v["rank"] for v in c["legs"].values() if v), c["legs"].get("lexical") is None,
            c["unit_id"]))

    @staticmethod
    def _below(min_score: float | None, mode: str, legs: dict[str, list[tuple[str, str, float]]], n: int) -> bool:
        """True when fetching more candidates cannot add one scoring `min_score` or more (the
        legs are in score order; a hybrid score is at most 2 / (k + rank))."""
        if min_score is None:
            return False
        if mode == "hybrid":
            return 2.0 / (HYBRID_RRF_K + n) < min_score
        leg = legs.get("lexical" if mode == "lexical" else "semantic") or []
        return bool(leg) and min(s for _, _, s in leg) < min_score

    @staticmethod
    def _cap(cands: list[dict[str, Any]], per_paper: int, limit: int,
             dropped: dict[str, int] | None = None) -> list[dict[str, Any]]:
        """The first `limit` candidates, at most `per_paper` of one paper (`dropped`: how many
        each paper had past its cap before the limit was reached)."""
        per: dict[str, int] = {}
        out = []
        for c in cands:
            if per_paper and per.get(c["paper_id"], 0) >= per_paper:
                if dropped is not None:
                    dropped[c["paper_id"]] = dropped.get(c["paper_id"], 0) + 1
                continue
            per[c["paper_id"]] = per.get(c["paper_id"], 0) + 1
            out.append(c)
            if len(out) >= limit:
                break
        return out
