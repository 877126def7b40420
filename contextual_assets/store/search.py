"""Search over one index version: BM25 over the persistent lexical index, dense (exact on DuckDB,
HNSW on Postgres), and hybrid weighted rank fusion.

Each stage yields keys and scores only; chunks are read for the hits returned (and, for hybrid, the
fused top k), so nothing on the query path reads the whole corpus into Python.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence

from ..fusion import FusionWeights, ScoredKey, fuse
from ..models import HeaderedChunk, SearchHit
from .lexical_index import LexicalIndexTable

ChunkKey = tuple[str, int]


class CorpusSearch(LexicalIndexTable):
    """Lexical, dense and hybrid search; back-ends implement `dense_top` (DuckDB: exact in SQL,
    Postgres: HNSW) and may serve chunk rows faster."""

    @abstractmethod
    def dense_top(self, vector: Sequence[float], index_version: str, n: int) -> list[tuple[str, int, float]]:
        """(doc_id, ordinal, cosine similarity) of the n nearest chunks."""

    @abstractmethod
    def chunks_by_key(self, index_version: str, keys: Sequence[ChunkKey]) -> dict[ChunkKey, HeaderedChunk]:
        """The stored chunks of these keys (missing keys are left out)."""

    def hits(self, index_version: str, scored: Sequence[tuple[str, int, float]]) -> list[SearchHit]:
        """Scored keys as hits, in the given order; a key whose chunk is gone (a commit between the
        ranking and this read) is dropped."""
        chunks = self.chunks_by_key(index_version, [(d, o) for d, o, _ in scored])
        return [_hit(chunks[(d, o)], s, index_version) for d, o, s in scored if (d, o) in chunks]

    def search_lexical(self, query: str, index_version: str, k: int = 10) -> list[SearchHit]:
        """BM25 over title, section path, header and text."""
        return self.hits(index_version, self.lexical_top(query, index_version, k))

    def search_dense(self, vector: Sequence[float], index_version: str, k: int = 10) -> list[SearchHit]:
        """Cosine nearest chunks."""
        return self.hits(index_version, self.dense_top(vector, index_version, k))

    def search_hybrid(self, query: str, vector: Sequence[float], index_version: str, k: int = 10,
                      candidates: int | None = None, weights: FusionWeights | None = None) -> list[SearchHit]:
        """Weighted reciprocal-rank fusion of the dense and lexical candidate lists."""
        return self.hits(index_version, self.hybrid_top(query, vector, index_version, k, candidates, weights))

    def hybrid_top(self, query: str, vector: Sequence[float], index_version: str, k: int,
                   candidates: int | None = None, weights: FusionWeights | None = None,
                   dense_top: Callable[[Sequence[float], str, int], list[ScoredKey]] | None = None) -> list[ScoredKey]:
        """(doc_id, ordinal, fused score) of the k best chunks; `dense_top` replaces the store's dense
        ranking (the search service's in-memory vectors)."""
        weights = weights or FusionWeights()
        depth = max(k, candidates or weights.candidates)
        dense = (dense_top or self.dense_top)(vector, index_version, depth) if weights.dense > 0 else []
        lexical = self.lexical_top(query, index_version, depth) if weights.lexical > 0 else []
        return fuse(dense, lexical, k, weights)

def _hit(chunk: HeaderedChunk, score: float, index_version: str) -> SearchHit:
    return SearchHit(
        doc_id=chunk.doc_id, source_doc=chunk.source_doc, title=chunk.title, ordinal=chunk.ordinal,
        section_path=chunk.section_path, page_start=chunk.page_start, page_end=chunk.page_end, text=chunk.text,
        header=chunk.header, score=score, index_version=index_version, external_id=chunk.external_id,
    )
