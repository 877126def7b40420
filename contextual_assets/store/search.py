"""Search over one index version: lexical BM25, exact dense cosine, and hybrid rank fusion.

Lexical (and, on DuckDB, dense) search run over an in-memory snapshot of the corpus, cached per
index version and rebuilt when the store's revision for that version changes.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import StoreError
from ..models import HeaderedChunk, SearchHit
from .lexical import LexicalIndex, dense_top_k, reciprocal_rank_fusion
from .primitives import StorePrimitives


@dataclass
class CorpusSnapshot:
    """Every chunk of one index version, in memory, for lexical (and, on DuckDB, dense) search."""

    revision: tuple
    hits: list[SearchHit]
    lexical: LexicalIndex
    matrix: np.ndarray | None = None
    keys: dict[str, int] = field(default_factory=dict)


def hit_key(hit: SearchHit) -> str:
    """Identity of a hit across result lists: document and chunk ordinal."""
    return f"{hit.doc_id}\x1f{hit.ordinal}"


class CorpusSearch(StorePrimitives):
    """Lexical, dense and hybrid search; back-ends may override `search_dense` (Postgres: HNSW)."""

    def __init__(self) -> None:
        super().__init__()
        # Explicit, per-instance cache: in-memory search corpora keyed by index version,
        # invalidated by the store revision (document count + last update).
        self._snapshots: dict[str, CorpusSnapshot] = {}
        self._snapshot_lock = threading.Lock()

    def _hit(self, chunk: HeaderedChunk, score: float, index_version: str) -> SearchHit:
        return SearchHit(
            doc_id=chunk.doc_id, source_doc=chunk.source_doc, title=chunk.title, ordinal=chunk.ordinal,
            section_path=chunk.section_path, page_start=chunk.page_start, page_end=chunk.page_end, text=chunk.text,
            header=chunk.header, score=score, index_version=index_version, external_id=chunk.external_id,
        )

    def snapshot(self, index_version: str, with_vectors: bool = False) -> CorpusSnapshot:
        """The cached corpus of an index version, rebuilt if the store changed (or vectors are newly needed)."""
        revision = self.revision(index_version)
        with self._snapshot_lock:
            cached = self._snapshots.get(index_version)
            if cached is not None and cached.revision == revision and (cached.matrix is not None or not with_vectors):
                return cached
            hits = [self._hit(c, 0.0, index_version) for c in self.chunks(index_version)]
            lexical = LexicalIndex([f"{h.title}\n{' / '.join(h.section_path)}\n{h.header}\n{h.text}" for h in hits])
            snap = CorpusSnapshot(revision=revision, hits=hits, lexical=lexical,
                                  keys={hit_key(h): i for i, h in enumerate(hits)})
            if with_vectors:
                snap.matrix = self._load_matrix(index_version, snap)
            self._snapshots[index_version] = snap
            return snap

    def _load_matrix(self, index_version: str, snap: CorpusSnapshot) -> np.ndarray:
        rows = self._embedding_rows(index_version)
        dim = next((len(v) for _, _, v in rows if v is not None), 0)
        matrix = np.zeros((len(snap.hits), dim), dtype=np.float32)
        for doc_id, ordinal, vector in rows:
            index = snap.keys.get(f"{doc_id}\x1f{ordinal}")
            if index is not None and vector is not None:
                matrix[index] = vector
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return matrix / norms

    def search_lexical(self, query: str, index_version: str, k: int = 10) -> list[SearchHit]:
        """BM25 over title, section path, header and text."""
        snap = self.snapshot(index_version)
        return [snap.hits[i].model_copy(update={"score": s}) for i, s in snap.lexical.search(query, k)]

    def search_dense(self, vector: Sequence[float], index_version: str, k: int = 10) -> list[SearchHit]:
        """Exact cosine search over the in-memory matrix; Postgres overrides this with HNSW."""
        snap = self.snapshot(index_version, with_vectors=True)
        assert snap.matrix is not None
        if snap.matrix.shape[0] and snap.matrix.shape[1] != len(vector):
            raise StoreError(
                f"query vector has {len(vector)} dimensions but index version {index_version} holds "
                f"{snap.matrix.shape[1]}-dimensional embeddings (embedder mismatch)"
            )
        top = dense_top_k(snap.matrix, np.asarray(vector, dtype=np.float32), k)
        return [snap.hits[i].model_copy(update={"score": s}) for i, s in top]

    def search_hybrid(self, query: str, vector: Sequence[float], index_version: str, k: int = 10,
                      candidates: int = 100) -> list[SearchHit]:
        """Reciprocal-rank fusion of dense and lexical candidate lists."""
        dense = self.search_dense(vector, index_version, max(k, candidates))
        lexical = self.search_lexical(query, index_version, max(k, candidates))
        by_key = {hit_key(h): h for h in lexical + dense}
        fused = reciprocal_rank_fusion([[hit_key(h) for h in dense], [hit_key(h) for h in lexical]], k)
        return [by_key[key].model_copy(update={"score": score}) for key, score in fused]
