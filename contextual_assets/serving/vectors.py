"""In-memory dense vectors for a long-lived reader of an embedded (DuckDB) store.

A `ctx search` process computes cosine similarity in SQL; the service, answering many queries, keeps
each version's matrix in memory and reloads it in the background when the version changes. Until the
reload lands, queries fall back to SQL, so an answer never comes from vectors older than the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from contextual_assets.batching import MicroBatcher


@dataclass(frozen=True)
class _Loaded:
    revision: tuple
    keys: list[tuple[str, int]]
    matrix: np.ndarray


def _batch_top(items: list[tuple[_Loaded, np.ndarray, int]]) -> list[list[tuple[str, int, float]]]:
    """Top n of each query; queries against the same matrix share one matrix product."""
    out: list[list[tuple[str, int, float]]] = [[] for _ in items]
    by_matrix: dict[int, list[int]] = {}
    for position, (loaded, _, _) in enumerate(items):
        by_matrix.setdefault(id(loaded), []).append(position)
    for positions in by_matrix.values():
        loaded = items[positions[0]][0]
        queries = np.stack([items[p][1] / (np.linalg.norm(items[p][1]) or 1.0) for p in positions])
        scores = loaded.matrix @ queries.T
        for column, position in enumerate(positions):
            column_scores = scores[:, column]
            k = min(items[position][2], len(column_scores))
            if k <= 0:
                continue
            top = np.argpartition(-column_scores, k - 1)[:k]
            top = top[np.argsort(-column_scores[top], kind="stable")]
            out[position] = [(*loaded.keys[i], float(column_scores[i])) for i in top]
    return out


class VersionVectors:
    """Matrices per index version, keyed by the store's revision of that version; a replaced matrix is
    dropped (the one batcher holds none between batches)."""

    def __init__(self, load: Callable[[str], tuple[list[tuple[str, int]], np.ndarray]],
                 revision: Callable[[str], tuple], check_every_s: float = 1.0, max_versions: int = 3):
        self._load, self._revision, self._check_every_s = load, revision, check_every_s
        self.max_versions = max_versions  # versions held in memory; the least recently searched is dropped
        self._loaded: dict[str, _Loaded] = {}
        self._used: dict[str, float] = {}
        self._checked: dict[str, tuple[float, tuple]] = {}
        self._loading: set[str] = set()
        self._lock = threading.Lock()
        # Concurrent queries share one read of the matrix: a matrix product (see batching.py).
        self._batcher: MicroBatcher = MicroBatcher(_batch_top, name="dense-top")

    def _current_revision(self, version: str) -> tuple:
        now = time.monotonic()
        with self._lock:
            seen = self._checked.get(version)
            if seen is not None and now - seen[0] < self._check_every_s:
                return seen[1]
        revision = self._revision(version)
        with self._lock:
            self._checked[version] = (now, revision)
        return revision

    def top(self, version: str, vector: Sequence[float], n: int) -> list[tuple[str, int, float]] | None:
        """(doc_id, ordinal, cosine) of the n nearest, or None while this version's matrix is loading."""
        revision = self._current_revision(version)
        with self._lock:
            self._used[version] = time.monotonic()
            loaded = self._loaded.get(version)
            fresh = loaded is not None and loaded.revision == revision
            if not fresh and version not in self._loading:
                self._loading.add(version)
                threading.Thread(target=self._reload, args=(version, revision), daemon=True,
                                 name=f"vectors-{version}").start()
        if not fresh or loaded is None:
            return None
        if loaded.matrix.shape[0] and loaded.matrix.shape[1] != len(vector):
            return None  # let the store raise its dimension-mismatch error
        return self._batcher.submit((loaded, np.asarray(vector, dtype=np.float32), n))

    def _reload(self, version: str, revision: tuple) -> None:
        try:
            keys, matrix = self._load(version)
            with self._lock:
                self._loaded[version] = _Loaded(revision, keys, matrix)  # the old matrix is freed
                while len(self._loaded) > self.max_versions:
                    oldest = min((v for v in self._loaded if v != version), key=lambda v: self._used.get(v, 0.0))
                    del self._loaded[oldest]
        finally:
            with self._lock:
                self._loading.discard(version)
