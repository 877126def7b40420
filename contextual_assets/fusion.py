"""Hybrid fusion: how the dense and lexical ranked lists become one. Pure; no store, no model."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field, model_validator


class FusionWeights(BaseModel):
    """Weights of the dense and lexical lists in reciprocal-rank fusion (0 leaves a list out).

    The defaults were chosen by `bench.fusion` on the dev half of the codebase benchmark only
    (bench/results/fusion.json): with all-MiniLM-L6-v2 the dense list is much weaker than BM25, so it
    gets less weight, and a small constant lets each list's first ranks count most."""

    dense: float = Field(0.8, ge=0)
    lexical: float = Field(1.0, ge=0)
    constant: int = Field(5, ge=1)
    # 40 ranks the dev half exactly as 100 does (bench/results/fusion.json, "candidates") and halves the
    # HNSW candidate list Postgres walks for a hybrid query.
    candidates: int = Field(40, ge=1, description="hits taken from each list before fusion")

    model_config = {"extra": "forbid"}

    @model_validator(mode="after")
    def _one_list_at_least(self) -> "FusionWeights":
        if self.dense <= 0 and self.lexical <= 0:
            raise ValueError("dense and lexical are both 0: hybrid search would return nothing")
        return self


ScoredKey = tuple[str, int, float]  # (doc_id, ordinal, score)


def fuse(dense: Sequence[ScoredKey], lexical: Sequence[ScoredKey], k: int,
         weights: FusionWeights) -> list[ScoredKey]:
    """Weighted reciprocal-rank fusion of a dense and a lexical list of scored chunk keys; the k best
    with their fused scores (ties broken by `doc_id` and ordinal as text)."""
    keys = {f"{d}\x1f{o}": (d, o) for d, o, _ in [*dense, *lexical]}
    rankings = [[f"{d}\x1f{o}" for d, o, _ in ranked] for ranked in (dense, lexical)]
    fused = reciprocal_rank_fusion(rankings, k, constant=weights.constant, weights=[weights.dense, weights.lexical])
    return [(*keys[key], score) for key, score in fused]


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: int, constant: int = 60,
                           weights: Sequence[float] | None = None) -> list[tuple[str, float]]:
    """Fuse ranked lists of keys: score = sum of weight / (constant + rank)."""
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    fused: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights):
        if weight <= 0:
            continue
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + weight / (constant + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:k]
