"""In-memory dense vectors for a long-lived reader of an embedded (DuckDB) store.

A `ctx search` process computes cosine similarity in SQL; the service, answering many queries, keeps
each version's matrix in memory (version_cache.py: reloaded in the background when the version changes,
SQL until then).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from contextual_assets.batching import MicroBatcher

from .version_cache import VersionCache


@dataclass(frozen=True)
class _Matrix:
    keys: list[tuple[str, int]]
    matrix: np.ndarray


def _cosines(matrix: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(chunks, queries) float32 products, exact. torch's CPU product rather than numpy's: on 200,000 x 384
    with one thread it took 16-57 ms for 1 to 8 queries against numpy's 28-72 (bench/README.md, *Search*).
    One query goes as two columns: torch's one-column kernel is the slow one (33 ms against 14)."""
    import torch

    columns = queries if len(queries) > 1 else np.repeat(queries, 2, axis=0)
    scores = (torch.from_numpy(matrix) @ torch.from_numpy(columns).T).numpy()
    return scores[:, :len(queries)]


def _batch_top(items: list[tuple[_Matrix, np.ndarray, int]]) -> list[list[tuple[str, int, float]]]:
    """Top n of each query; queries against the same matrix share one matrix product."""
    out: list[list[tuple[str, int, float]]] = [[] for _ in items]
    by_matrix: dict[int, list[int]] = {}
    for position, (loaded, _, _) in enumerate(items):
        by_matrix.setdefault(id(loaded), []).append(position)
    for positions in by_matrix.values():
        loaded = items[positions[0]][0]
        queries = np.stack([items[p][1] / (np.linalg.norm(items[p][1]) or 1.0) for p in positions])
        scores = _cosines(loaded.matrix, queries)
        rows = scores.shape[0]
        k_max = min(max(items[p][2] for p in positions), rows)
        if k_max <= 0:
            continue
        # The k best of every column in one partition (no negated copy of the scores).
        best = np.argpartition(scores, rows - k_max, axis=0)[rows - k_max:]
        for column, position in enumerate(positions):
            k = min(items[position][2], rows)
            if k <= 0:
                continue
            candidates = best[:, column]
            top = candidates[np.argsort(-scores[candidates, column], kind="stable")[:k]]
            out[position] = [(*loaded.keys[i], float(scores[i, column])) for i in top]
    return out


def _one_compute_thread() -> None:
    """OpenMP's thread count is per thread: the batcher's thread starts with one per core whatever the main
    thread set, and torch's product there ran on both cores of the dev machine, beside the embedder."""
    import torch

    torch.set_num_threads(1)


class VersionVectors:
    """Matrices per index version (a `VersionCache`); a replaced matrix is dropped (the one batcher holds
    none between batches)."""

    def __init__(self, load: Callable[[str], tuple[list[tuple[str, int]], np.ndarray]],
                 revision: Callable[[str], tuple], check_every_s: float = 1.0, max_versions: int = 3):
        self._matrices: VersionCache[_Matrix] = VersionCache(lambda version: _Matrix(*load(version)), revision,
                                                             "vectors", check_every_s, max_versions)
        # Concurrent queries share one read of the matrix: a matrix product (see batching.py).
        self._batcher: MicroBatcher = MicroBatcher(_batch_top, name="dense-top", start=_one_compute_thread)

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
