"""Paired significance for the promotion gate: per-task deltas (candidate - production), a seeded
bootstrap confidence interval of their mean, and an exact two-sided sign test. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Deltas smaller than this are ties: the same ranking graded twice must not look like a change.
TIE_EPSILON = 1e-9


def paired_deltas(candidate: Sequence[float], production: Sequence[float]) -> list[float]:
    """Per-task candidate - production, with float noise below TIE_EPSILON snapped to 0."""
    if len(candidate) != len(production):
        raise ValueError(f"paired deltas need equal lengths, got {len(candidate)} and {len(production)}")
    return [0.0 if abs(c - p) < TIE_EPSILON else c - p for c, p in zip(candidate, production)]


def bootstrap_mean_ci(deltas: Sequence[float], confidence: float = 0.95, samples: int = 2000,
                      seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean delta; the fixed seed makes a rerun give the same gate."""
    if not deltas:
        return 0.0, 0.0
    values = np.asarray(deltas, dtype=float)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(samples, len(values)))].mean(axis=1)
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def sign_counts(deltas: Sequence[float]) -> tuple[int, int]:
    """(wins, losses) of the candidate; ties are dropped, as the sign test requires."""
    return sum(1 for d in deltas if d > 0), sum(1 for d in deltas if d < 0)


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided binomial test of wins vs losses under p = 1/2 (1.0 when there is no untied pair)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / 2**n)
