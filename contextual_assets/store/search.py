"""Search over one index version: BM25 over the persistent lexical index, dense (exact on DuckDB,
HNSW on Postgres), and hybrid weighted rank fusion.

Each stage yields keys and scores only; chunks are read for the hits returned (and, for hybrid, the
fused top k), so nothing on the query path reads the whole corpus into Python.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from ..fusion import FusionWeights, ScoredKey, fuse
from ..models import ChunkFilter, HeaderedChunk, SearchHit
from .backend import Backend, write_transaction
from .corpus import Corpus, chunk_from_row
from .lexical import tokenize
from .lexical_index import LexicalIndex
from .lexical_snapshot import LexicalSnapshot
from .types import ChunkKey, EmbeddingMatrix

DenseTop = Callable[[Sequence[float], str, int, "ChunkFilter | None"], list[ScoredKey]]
LexicalTop = Callable[[str, str, int, "ChunkFilter | None"], list[ScoredKey]]


class Search(Protocol):
    """Top-k keys per ranking, and hits (chunks with their scores) for keys."""

    # The version's whole matrix where the back-end offers it (DuckDB), else None: the search service
    # keeps it in memory; elsewhere dense search stays in the database.
    embedding_matrix: EmbeddingMatrix | None

    def dense_top(self, vector: Sequence[float], index_version: str, n: int,
                  where: ChunkFilter | None = None) -> list[ScoredKey]: ...
    def lexical_top(self, query: str, index_version: str, n: int,
                    where: ChunkFilter | None = None) -> list[ScoredKey]: ...
    def hybrid_top(self, query: str, vector: Sequence[float], index_version: str, k: int,
                   candidates: int | None = None, weights: FusionWeights | None = None,
                   dense_top: DenseTop | None = None, where: ChunkFilter | None = None,
                   lexical_top: LexicalTop | None = None) -> list[ScoredKey]: ...
    def lexical_snapshot(self, index_version: str) -> LexicalSnapshot: ...
    def hits(self, index_version: str, scored: Sequence[ScoredKey],
             rows: Mapping[ChunkKey, tuple] | None = None) -> list[SearchHit]: ...
    def lexical(self, query: str, index_version: str, k: int = 10,
                where: ChunkFilter | None = None) -> list[SearchHit]: ...
    def dense(self, vector: Sequence[float], index_version: str, k: int = 10,
              where: ChunkFilter | None = None) -> list[SearchHit]: ...
    def hybrid(self, query: str, vector: Sequence[float], index_version: str, k: int = 10,
               candidates: int | None = None, weights: FusionWeights | None = None,
               where: ChunkFilter | None = None) -> list[SearchHit]: ...
    def ensure_lexical_index(self, index_version: str) -> int: ...


class CorpusSearch:
    """Lexical, dense and hybrid search; dense ranking is the back-end's (DuckDB: exact in SQL,
    Postgres: HNSW)."""

    def __init__(self, backend: Backend, corpus: Corpus, lexical: LexicalIndex):
        self._backend, self._corpus, self._lexical = backend, corpus, lexical
        self.embedding_matrix = backend.embedding_matrix_reader()
        self._lexical_ready: set[str] = set()  # versions known to hold postings for every document
        self._lexical_lock = threading.Lock()

    # ---- rankings: keys and scores -----------------------------------------------------------
    # `where` (a ChunkFilter) is applied inside each ranking, before its top n is taken.
    def dense_top(self, vector: Sequence[float], index_version: str, n: int,
                  where: ChunkFilter | None = None) -> list[ScoredKey]:
        """(doc_id, ordinal, cosine similarity) of the n nearest chunks."""
        return self._backend.dense_top(vector, index_version, n, where)

    def lexical_top(self, query: str, index_version: str, n: int,
                    where: ChunkFilter | None = None) -> list[ScoredKey]:
        """(doc_id, ordinal, BM25 score) of the n best chunks with a score above 0."""
        if n > 0 and tokenize(query):
            self._ensure_indexed_once(index_version)
        return self._lexical.top(query, index_version, n, where)

    def hybrid_top(self, query: str, vector: Sequence[float], index_version: str, k: int,
                   candidates: int | None = None, weights: FusionWeights | None = None,
                   dense_top: DenseTop | None = None, where: ChunkFilter | None = None,
                   lexical_top: LexicalTop | None = None) -> list[ScoredKey]:
        """(doc_id, ordinal, fused score) of the k best chunks; `dense_top` and `lexical_top` replace the
        store's rankings (the search service's in-memory vectors and postings)."""
        weights = weights or FusionWeights()
        depth = max(k, candidates or weights.candidates)
        dense = (dense_top or self.dense_top)(vector, index_version, depth, where) if weights.dense > 0 else []
        lexical = (lexical_top or self.lexical_top)(query, index_version, depth, where) if weights.lexical > 0 else []
        return fuse(dense, lexical, k, weights)

    def lexical_snapshot(self, index_version: str) -> LexicalSnapshot:
        """The version's postings in memory, for a long-lived reader (lexical_snapshot.py)."""
        self._ensure_indexed_once(index_version)
        return self._lexical.snapshot(index_version)

    # ---- hits --------------------------------------------------------------------------------
    def hits(self, index_version: str, scored: Sequence[ScoredKey],
             rows: Mapping[ChunkKey, tuple] | None = None) -> list[SearchHit]:
        """Scored keys as hits, in the given order; a key whose chunk is gone (a commit between the
        ranking and this read) is dropped. `rows`: the version's chunk rows already in memory
        (`Corpus.chunk_rows`, a long-lived reader's), read instead of the store."""
        if rows is not None:
            chunks = {(d, o): chunk_from_row(rows[(d, o)]) for d, o, _ in scored if (d, o) in rows}
        else:
            chunks = self._corpus.chunks_by_key(index_version, [(d, o) for d, o, _ in scored])
        return [_hit(chunks[(d, o)], s, index_version) for d, o, s in scored if (d, o) in chunks]

    def lexical(self, query: str, index_version: str, k: int = 10,
                where: ChunkFilter | None = None) -> list[SearchHit]:
        """BM25 over title, section path, header and text."""
        return self.hits(index_version, self.lexical_top(query, index_version, k, where))

    def dense(self, vector: Sequence[float], index_version: str, k: int = 10,
              where: ChunkFilter | None = None) -> list[SearchHit]:
        """Cosine nearest chunks."""
        return self.hits(index_version, self.dense_top(vector, index_version, k, where))

    def hybrid(self, query: str, vector: Sequence[float], index_version: str, k: int = 10,
               candidates: int | None = None, weights: FusionWeights | None = None,
               where: ChunkFilter | None = None) -> list[SearchHit]:
        """Weighted reciprocal-rank fusion of the dense and lexical candidate lists."""
        return self.hits(index_version, self.hybrid_top(query, vector, index_version, k, candidates, weights,
                                                        where=where))

    # ---- documents stored before the lexical index --------------------------------------------
    @write_transaction
    def ensure_lexical_index(self, index_version: str) -> int:
        """Index the documents of a version stored before the lexical index existed (schema 4 and
        older); the number of documents indexed. Each one is checked and set in its own transaction,
        so concurrent readers never index a document twice."""
        db = self._backend
        pending = [r[0] for r in db.query(
            "SELECT doc_id FROM ctx_documents WHERE index_version = ? AND lexical_tokens IS NULL ORDER BY doc_id",
            (index_version,))]
        done = 0
        for doc_id in pending:
            chunks = self._corpus.chunks(index_version, doc_id)
            with db.transaction() as cur:
                claimed = db.fetch(cur, "UPDATE ctx_documents SET lexical_tokens = 0 WHERE doc_id = ? AND "
                                   "index_version = ? AND lexical_tokens IS NULL RETURNING doc_id",
                                   (doc_id, index_version))
                if not claimed:
                    continue  # another process indexed it, or a new commit replaced it with its own postings
                total = self._lexical.index_document(cur, index_version, doc_id, chunks)
                db.exec(cur, "UPDATE ctx_documents SET lexical_tokens = ? WHERE doc_id = ? AND index_version = ?",
                        (total, doc_id, index_version))
            done += 1
        return done

    def _ensure_indexed_once(self, index_version: str) -> None:
        """Documents without postings exist only from before the lexical index (new commits always write
        them), so each store object checks a version once; concurrent requests wait for one indexer."""
        ready = self._lexical_ready
        if index_version in ready:
            return
        with self._lexical_lock:
            if index_version in ready:
                return
            pending = self._backend.query("SELECT count(*) FROM ctx_documents WHERE index_version = ? AND "
                                          "lexical_tokens IS NULL", (index_version,))[0][0]
            if pending:
                self.ensure_lexical_index(index_version)
            ready.add(index_version)


def _hit(chunk: HeaderedChunk, score: float, index_version: str) -> SearchHit:
    return SearchHit(
        doc_id=chunk.doc_id, source_doc=chunk.source_doc, title=chunk.title, ordinal=chunk.ordinal,
        section_path=chunk.section_path, page_start=chunk.page_start, page_end=chunk.page_end, text=chunk.text,
        header=chunk.header, score=score, index_version=index_version, external_id=chunk.external_id,
    )
