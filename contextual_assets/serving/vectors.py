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


@dataclass
class _Loaded:
    revision: tuple
    keys: list[tuple[str, int]]
    matrix: np.ndarray
    batcher: MicroBatcher | None = None

    def top(self, vector: Sequence[float], n: int) -> list[tuple[str, int, float]]:
        if self.batcher is None:
            # Concurrent queries share one read of the matrix: a matrix product (see batching.py).
            self.batcher = MicroBatcher(self._batch_top, name="dense-top")
        return self.batcher.submit((np.asarray(vector, dtype=np.float32), n))

    def _batch_top(self, items: list[tuple[np.ndarray, int]]) -> list[list[tuple[str, int, float]]]:
        queries = np.stack([v / (np.linalg.norm(v) or 1.0) for v, _ in items])
        scores = self.matrix @ queries.T
        out = []
        for column, (_, n) in enumerate(items):
            column_scores = scores[:, column]
            k = min(n, len(column_scores))
            if k <= 0:
                out.append([])
                continue
            top = np.argpartition(-column_scores, k - 1)[:k]
            top = top[np.argsort(-column_scores[top], kind="stable")]
            out.append([(*self.keys[i], float(column_scores[i])) for i in top])
        return out


class VersionVectors:
    """Matrices per index version, keyed by the store's revision of that version."""

    def __init__(self, load: Callable[[str], tuple[list[tuple[str, int]], np.ndarray]],
                 revision: Callable[[str], tuple], check_every_s: float = 1.0):
        self._load, self._revision, self._check_every_s = load, revision, check_every_s
        self._loaded: dict[str, _Loaded] = {}
        self._checked: dict[str, tuple[float, tuple]] = {}
        self._loading: set[str] = set()
        self._lock = threading.Lock()

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
        return loaded.top(vector, n)

    def _reload(self, version: str, revision: tuple) -> None:
        try:
            keys, matrix = self._load(version)
            with self._lock:
                self._loaded[version] = _Loaded(revision, keys, matrix)
        finally:
            with self._lock:
                self._loading.discard(version)
