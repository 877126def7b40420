"""Rank-aware retrieval metrics over graded rankings.

A ranking is given as, for each retrieved position, the set of gold evidence indices that the
chunk at that position satisfies.
"""

from __future__ import annotations

import math


def pass_at_k(ranking: list[list[int]], n_gold: int, k: int) -> float:
    """Share of gold items found in the top k (the published Pass@k of the contextual-retrieval guide)."""
    if n_gold == 0:
        return 0.0
    found = {g for hits in ranking[:k] for g in hits}
    return len(found) / n_gold


def reciprocal_rank(ranking: list[list[int]]) -> float:
    for position, hits in enumerate(ranking, start=1):
        if hits:
            return 1.0 / position
    return 0.0


def first_gold_rank(ranking: list[list[int]]) -> int | None:
    for position, hits in enumerate(ranking, start=1):
        if hits:
            return position
    return None


def ndcg_at_k(ranking: list[list[int]], n_gold: int, k: int = 10) -> float:
    """Binary relevance; a position gains only for gold items not already credited above it."""
    if n_gold == 0:
        return 0.0
    credited: set[int] = set()
    dcg = 0.0
    for position, hits in enumerate(ranking[:k], start=1):
        new = set(hits) - credited
        if new:
            credited |= new
            dcg += 1.0 / math.log2(position + 1)
    ideal = sum(1.0 / math.log2(p + 1) for p in range(1, min(n_gold, k) + 1))
    return dcg / ideal
