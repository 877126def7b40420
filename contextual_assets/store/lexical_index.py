"""The persistent lexical index: BM25 postings per index version, written in the same transaction as
the document's chunks, so the index always matches what the store holds and survives restarts.

One row per (index version, term, document) holds the ordinals of the document's chunks that contain
the term, with their term frequencies and lengths; `ctx_documents.lexical_tokens` holds each
document's token total. A query reads the rows of its own terms and two small aggregates, never the
corpus. Scores are BM25 exactly as bm25s computes them (Lucene idf, k1 1.5, b 0.75).

`LexicalIndex` is shared by two parts: the corpus writes a document's postings in its commit, search
ranks over them (and indexes, once, what older schemas stored without them).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..models import ChunkFilter, HeaderedChunk
from .lexical import (
    BM25_B,
    BM25_K1,
    lexical_text,
    term_counts,
    tokenize,
)
from .backend import Backend
from .filters import filter_sql


@dataclass(frozen=True)
class Posting:
    """Where one term occurs in one document: chunk ordinals, term frequencies, chunk lengths."""

    term: str
    ordinals: list[int]
    tfs: list[int]
    lengths: list[int]


def document_postings(chunks: Sequence[HeaderedChunk]) -> tuple[list[Posting], int]:
    """The postings of one document's chunks and its token total."""
    by_term: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    total = 0
    for chunk in chunks:
        counts, length = term_counts(lexical_text(chunk.title, chunk.section_path, chunk.header, chunk.text))
        total += length
        for term, tf in counts.items():
            by_term[term].append((chunk.ordinal, tf, length))
    postings = [Posting(term, [o for o, _, _ in rows], [t for _, t, _ in rows], [n for _, _, n in rows])
                for term, rows in sorted(by_term.items())]
    return postings, total


class LexicalIndex:
    """`ctx_lexical_postings`: one document's postings inside the caller's transaction, and BM25 top-k."""

    def __init__(self, backend: Backend):
        self._backend = backend

    def index_document(self, cur: Any, index_version: str, doc_id: str, chunks: Sequence[HeaderedChunk]) -> int:
        """Replace one document's postings inside the caller's transaction; its token total."""
        self._backend.exec(cur, "DELETE FROM ctx_lexical_postings WHERE doc_id = ? AND index_version = ?",
                           (doc_id, index_version))
        postings, total = document_postings(chunks)
        if postings:
            self._backend.insert_postings(cur, index_version, doc_id, postings)
        return total

    def top(self, query: str, index_version: str, n: int,
            where: ChunkFilter | None = None) -> list[tuple[str, int, float]]:
        """(doc_id, ordinal, BM25 score) of the n best indexed chunks with a score above 0 that `where`
        admits, in one statement: the version's chunk count and token total, the query terms' document
        frequencies, then the postings of those terms only. The statistics are the whole version's: a
        filter narrows what is returned, never how a chunk scores."""
        counts = Counter(tokenize(query))
        if not counts or n <= 0:
            return []
        values = ", ".join("(CAST(? AS TEXT), CAST(? AS DOUBLE PRECISION))" for _ in counts)
        where = where or ChunkFilter()
        # Conditions on the document key narrow the postings read; the others need the chunk's row.
        by_document, document_params = filter_sql(
            ChunkFilter(documents=where.documents, path_prefix=where.path_prefix), self._backend, "p")
        by_chunk, chunk_params = filter_sql(
            ChunkFilter(section=where.section, page_from=where.page_from, page_to=where.page_to), self._backend, "c")
        chunk_exists = (" WHERE EXISTS (SELECT 1 FROM ctx_chunks c WHERE c.index_version = ? AND c.doc_id = p.doc_id "
                        f"AND c.ordinal = p.ordinal{by_chunk}) ") if by_chunk else " "
        # Document frequencies are the whole version's: from the postings read, unless a condition on
        # the document key narrowed them (then from all postings of the query's terms).
        df_source, df_params = (("ctx_lexical_postings p JOIN q ON p.term = q.term WHERE p.index_version = ?",
                                 [index_version]) if by_document else ("matched p", []))
        rows = self._backend.query(
            # Over indexed documents only: another process may be indexing pre-migration ones right now.
            "WITH stats AS (SELECT CAST(sum(n_chunks) AS DOUBLE PRECISION) AS n, "
            "      CAST(sum(lexical_tokens) AS DOUBLE PRECISION) / greatest(sum(n_chunks), 1) AS avgdl "
            "    FROM ctx_documents WHERE index_version = ? AND lexical_tokens IS NOT NULL), "
            f" q (term, times) AS (VALUES {values}), "
            " matched AS MATERIALIZED (SELECT p.doc_id, p.term, p.chunk_count, p.ordinals, p.tfs, p.lengths "
            f"    FROM ctx_lexical_postings p JOIN q ON p.term = q.term WHERE p.index_version = ?{by_document}), "
            f" df AS (SELECT p.term, sum(p.chunk_count) AS chunk_count FROM {df_source} GROUP BY p.term), "
            " weights AS (SELECT df.term, q.times * ln(1 + (stats.n - df.chunk_count + 0.5) / "
            "      (df.chunk_count + 0.5)) AS weight FROM df JOIN q ON df.term = q.term, stats), "
            " postings AS (SELECT m.doc_id, m.term, unnest(m.ordinals) AS ordinal, unnest(m.tfs) AS tf, "
            "      unnest(m.lengths) AS dl FROM matched m) "
            "SELECT p.doc_id, p.ordinal, sum(w.weight * p.tf / (p.tf + ? * (1 - ? + ? * p.dl / stats.avgdl))) AS score "
            f"FROM postings p JOIN weights w ON p.term = w.term, stats{chunk_exists}"
            "GROUP BY p.doc_id, p.ordinal ORDER BY score DESC, p.doc_id, p.ordinal LIMIT ?",
            [index_version, *[v for item in counts.items() for v in item], index_version, *document_params,
             *df_params, BM25_K1, BM25_B, BM25_B, *([index_version, *chunk_params] if by_chunk else []), int(n)])
        return [(str(d), int(o), float(s)) for d, o, s in rows if s > 0]


def postings_rows(index_version: str, doc_id: str, postings: list[Posting]) -> list[tuple]:
    """Rows for a bulk insert (COPY), in the table's column order."""
    return [(index_version, p.term, doc_id, len(p.ordinals), p.ordinals, p.tfs, p.lengths) for p in postings]

