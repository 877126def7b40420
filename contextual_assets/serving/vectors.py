"""In-memory dense vectors for a long-lived reader of an embedded (DuckDB) store.

A `ctx search` process computes cosine similarity in SQL; the service, answering many queries, keeps
each version's matrix in memory (version_cache.py: reloaded in the background when the version changes,
SQL until then).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from contextual_assets.batching import MicroBatcher

from .version_cache import VersionCache

# Candidates come from a bfloat16 copy of the matrix, exact float32 scores decide among them: the product
# over 200,000 x 384 reads half the bytes (40 ms against 53 for a batch of 3 on one thread of the dev
# machine). A bfloat16 score of unit vectors is off by at most 2u + u^2 (inputs) + u (output), u = 2^-8,
# so within COARSE_ERROR of the exact one; every chunk whose coarse score is within 2 * COARSE_ERROR of
# the k-th best coarse score is rescored, which holds the exact top k.
COARSE_ERROR = 0.0125


@dataclass(frozen=True)
class _Matrix:
    keys: list[tuple[str, int]]
    matrix: np.ndarray  # float32, unit rows
    coarse: torch.Tensor  # the same in bfloat16, for shortlists


def _matrix(keys: list[tuple[str, int]], matrix: np.ndarray) -> _Matrix:
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    return _Matrix(keys, matrix, torch.from_numpy(matrix).to(torch.bfloat16))


def _batch_top(items: list[tuple[_Matrix, np.ndarray, int]]) -> list[list[tuple[str, int, float]]]:
    """Top n of each query by exact cosine; queries against the same matrix share one matrix product
    (bfloat16, then exact float32 scores for every chunk that could be in the top n: see COARSE_ERROR)."""
    out: list[list[tuple[str, int, float]]] = [[] for _ in items]
    by_matrix: dict[int, list[int]] = {}
    for position, (loaded, _, _) in enumerate(items):
        by_matrix.setdefault(id(loaded), []).append(position)
    for positions in by_matrix.values():
        loaded = items[positions[0]][0]
        queries = np.stack([items[p][1] / (np.linalg.norm(items[p][1]) or 1.0) for p in positions]).astype(np.float32)
        rows = loaded.matrix.shape[0]
        if rows == 0:
            continue
        coarse = (loaded.coarse @ torch.from_numpy(np.ascontiguousarray(queries.T)).to(torch.bfloat16)).float().numpy()
        for column, position in enumerate(positions):
            k = min(items[position][2], rows)
            if k <= 0:
                continue
            scores = coarse[:, column]
            kth = np.partition(scores, rows - k)[rows - k]
            candidates = np.flatnonzero(scores >= kth - 2 * COARSE_ERROR)
            exact = loaded.matrix[candidates] @ queries[column]
            best = np.argpartition(exact, len(exact) - k)[len(exact) - k:] if len(exact) > k else np.arange(len(exact))
            order = best[np.argsort(-exact[best], kind="stable")]
            out[position] = [(*loaded.keys[candidates[i]], float(exact[i])) for i in order]
    return out


class VersionVectors:
    """Matrices per index version (a `VersionCache`); a replaced matrix is dropped (the one batcher holds
    none between batches)."""

    def __init__(self, load: Callable[[str], tuple[list[tuple[str, int]], np.ndarray]],
                 revision: Callable[[str], tuple], check_every_s: float = 1.0, max_versions: int = 3):
        self._matrices: VersionCache[_Matrix] = VersionCache(lambda version: _matrix(*load(version)), revision,
                                                             "vectors", check_every_s, max_versions)
        # Concurrent queries share one read of the matrix: a matrix product (see batching.py).
        self._batcher: MicroBatcher = MicroBatcher(_batch_top, name="dense-top")

    @property
    def versions(self) -> list[str]:
        return self._matrices.versions

    def top(self, version: str, vector: Sequence[float], n: int) -> list[tuple[str, int, float]] | None:
        """(doc_id, ordinal, cosine) of the n nearest, or None while this version's matrix is loading."""
        loaded = self._matrices.current(version)
        if loaded is None:
            return None
        if loaded.matrix.shape[0] and loaded.matrix.shape[1] != len(vector):
            return None  # let the store raise its dimension-mismatch error
        return self._batcher.submit((loaded, np.asarray(vector, dtype=np.float32), n))
