"""Rank-aware retrieval metrics and graders: pure functions over rankings and ranks.

A ranking is given as, for each retrieved position, the set of gold evidence indices that the
chunk at that position satisfies. The per-task metrics (Pass@k, reciprocal rank, nDCG, first gold
rank) feed the gate; the graders below them compare two runs' ranks (rank shift, worst
regressions) or look inside one run's ranked hits (within-section confusion, score spread).
Nothing here reads files, calls a model or touches the store.
"""

from __future__ import annotations

import math

__all__ = [
    "first_gold_rank",
    "ndcg_at_k",
    "pass_at_k",
    "rank_shift",
    "reciprocal_rank",
    "score_spread",
    "within_section_confusion",
    "worst_regressions",
]


# --------------------------------------------------------------------------------------------
# Per-task metrics over one ranking
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Rank movement between two runs
# --------------------------------------------------------------------------------------------


def _effective_rank(rank: int | None, depth: int) -> int:
    """A missing rank, or one deeper than `depth`, counts as depth + 1."""
    if rank is None or rank > depth:
        return depth + 1
    return rank


def rank_shift(before: dict[str, int | None], after: dict[str, int | None], depth: int = 20) -> dict[str, int]:
    """Per task id present in both runs: after_rank - before_rank (positive = the gold got worse).

    A missing rank (None) counts as depth + 1; so does a rank deeper than `depth`, so that runs
    retrieved to different depths compare fairly.
    """
    return {
        task_id: _effective_rank(after[task_id], depth) - _effective_rank(before[task_id], depth)
        for task_id in before
        if task_id in after
    }


def worst_regressions(
    before: dict[str, int | None],
    after: dict[str, int | None],
    queries: dict[str, str],
    n: int = 5,
    depth: int = 20,
) -> list[dict]:
    """The `n` tasks whose first gold rank got worst, with their query and both ranks.

    Each row has task_id, query ("" when unknown), rank_before, rank_after (as given, None when
    missing) and shift (see `rank_shift`). Only shift > 0; sorted by shift descending, then task id.
    """
    shifts = rank_shift(before, after, depth)
    worse = sorted(((s, t) for t, s in shifts.items() if s > 0), key=lambda pair: (-pair[0], pair[1]))
    return [
        {
            "task_id": task_id,
            "query": queries.get(task_id, ""),
            "rank_before": before[task_id],
            "rank_after": after[task_id],
            "shift": shift,
        }
        for shift, task_id in worse[: max(0, n)]
    ]


# --------------------------------------------------------------------------------------------
# Ranking-level diagnostics
# --------------------------------------------------------------------------------------------


def within_section_confusion(tasks: list[list[tuple[str, tuple[str, ...], bool]]]) -> float:
    """Share of tasks in which a sibling chunk outranks the gold one.

    Each task is its ranked hits as (doc_id, section_path, is_gold). Among tasks where a gold chunk
    appears at all, counts those where some non-gold chunk of the same document and the same
    section path as the *first* gold chunk ranks above it. 0.0 when no task has a gold chunk.
    """
    with_gold = 0
    confused = 0
    for hits in tasks:
        first = next((i for i, (_, _, gold) in enumerate(hits) if gold), None)
        if first is None:
            continue
        with_gold += 1
        doc_id, path, _ = hits[first]
        key = (doc_id, tuple(path))
        if any(not gold and (d, tuple(p)) == key for d, p, gold in hits[:first]):
            confused += 1
    return confused / with_gold if with_gold else 0.0


def score_spread(tasks: list[list[tuple[float, bool]]]) -> float | None:
    """Mean margin of the best gold score over the best non-gold score (positive = gold wins).

    Each task is its hits as (score, is_gold). Tasks lacking either a gold or a non-gold hit are
    left out; None when no task has both.
    """
    gaps: list[float] = []
    for hits in tasks:
        gold = [score for score, is_gold in hits if is_gold]
        other = [score for score, is_gold in hits if not is_gold]
        if gold and other:
            gaps.append(max(gold) - max(other))
    return sum(gaps) / len(gaps) if gaps else None
