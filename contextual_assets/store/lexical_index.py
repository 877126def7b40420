"""The persistent lexical index: BM25 postings per index version, written in the same transaction as
the document's chunks, so the index always matches what the store holds and survives restarts.

One row per (index version, term, document) holds the ordinals of the document's chunks that contain
the term, with their term frequencies and lengths; `ctx_documents.lexical_tokens` holds each
document's token total. A query reads the rows of its own terms and two small aggregates, never the
corpus. Scores are BM25 exactly as bm25s computes them (Lucene idf, k1 1.5, b 0.75).

Postgres finds a term's rows through its B-tree index. DuckDB has none that helps (its ART lookups fetch
row by row, slower than the scan), so a version's postings are compacted now and then into one row per
term, in term order (`ctx_lexical_terms`); a query reads its terms' rows there plus the rows written
since, and a document replaced since counts only through its new rows.

`LexicalIndex` is shared by two parts: the corpus writes a document's postings in its commit, search
ranks over them (and indexes, once, what older schemas stored without them).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from ..models import ChunkFilter, HeaderedChunk
from .backend import Backend
from .filters import filter_sql
from .lexical import BM25_B, BM25_K1, RANK_SCALE, lexical_text, term_counts, tokenize
from .lexical_snapshot import LexicalSnapshot
from .types import Posting


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
    """`ctx_lexical_postings`: one document's postings inside the caller's transaction, and BM25 top-k.
    On DuckDB, also their compaction into `ctx_lexical_terms`."""

    COMPACT_MIN_ROWS = 50_000
    COMPACT_RATIO = 0.125

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
        admits, in one statement: the version's chunk count and token total, then the postings of the
        query's terms only (`_current_postings`). The statistics are the whole version's: a filter narrows
        what is returned, never how a chunk scores."""
        counts = Counter(tokenize(query))
        if not counts or n <= 0:
            return []
        values = ", ".join("(CAST(? AS TEXT), CAST(? AS DOUBLE PRECISION))" for _ in counts)
        where = where or ChunkFilter()
        # Conditions on the document key apply to the postings read; the others need the chunk's row.
        by_document, document_params = filter_sql(
            ChunkFilter(documents=where.documents, path_prefix=where.path_prefix), self._backend, "p")
        by_chunk, chunk_params = filter_sql(
            ChunkFilter(section=where.section, page_from=where.page_from, page_to=where.page_to), self._backend, "c")
        chunk_exists = (" WHERE EXISTS (SELECT 1 FROM ctx_chunks c WHERE c.index_version = ? AND c.doc_id = p.doc_id "
                        f"AND c.ordinal = p.ordinal{by_chunk}) ") if by_chunk else " "
        current, current_params = self._current_postings(index_version, list(counts))
        rows = self._backend.query(
            # Over indexed documents only: another process may be indexing pre-migration ones right now.
            "WITH stats AS (SELECT CAST(sum(n_chunks) AS DOUBLE PRECISION) AS n, "
            "      CAST(sum(lexical_tokens) AS DOUBLE PRECISION) / greatest(sum(n_chunks), 1) AS avgdl "
            "    FROM ctx_documents WHERE index_version = ? AND lexical_tokens IS NOT NULL), "
            f" q (term, times) AS (VALUES {values}), "
            f" current_postings AS MATERIALIZED ({current}), "
            f" matched AS (SELECT * FROM current_postings p WHERE TRUE{by_document}), "
            # Document frequencies are the whole version's, whatever the filter.
            " df AS (SELECT term, sum(chunk_count) AS chunk_count FROM current_postings GROUP BY term), "
            " weights AS (SELECT df.term, q.times * ln(1 + (stats.n - df.chunk_count + 0.5) / "
            "      (df.chunk_count + 0.5)) AS weight FROM df JOIN q ON df.term = q.term, stats), "
            " postings AS (SELECT m.doc_id, m.term, unnest(m.ordinals) AS ordinal, unnest(m.tfs) AS tf, "
            "      unnest(m.lengths) AS dl FROM matched m), "
            " scored AS (SELECT p.doc_id, p.ordinal, "
            "      sum(w.weight * p.tf / (p.tf + ? * (1 - ? + ? * p.dl / stats.avgdl))) AS score "
            f"    FROM postings p JOIN weights w ON p.term = w.term, stats{chunk_exists}GROUP BY p.doc_id, p.ordinal) "
            "SELECT doc_id, ordinal, score FROM scored ORDER BY round(score * ?) DESC, doc_id, ordinal LIMIT ?",
            [index_version, *[v for item in counts.items() for v in item], *current_params, *document_params,
             BM25_K1, BM25_B, BM25_B, *([index_version, *chunk_params] if by_chunk else []), RANK_SCALE, int(n)])
        return [(str(d), int(o), float(s)) for d, o, s in rows if s > 0]

    def snapshot(self, index_version: str) -> LexicalSnapshot:
        """The version's current postings and statistics in memory (lexical_snapshot.py), read in one
        snapshot of the store: chunks numbered in (doc_id, ordinal) order and terms in term order, as the
        database sorts them, so ties rank as in `top`."""
        current, params = self._current_postings(index_version, None)
        flat = ("SELECT c.term, c.doc_id, unnest(c.ordinals) AS ordinal, unnest(c.tfs) AS tf, "
                f"unnest(c.lengths) AS dl FROM ({current}) c")
        (stats, keys, terms, postings) = self._backend.read_columns([
            ("SELECT CAST(sum(n_chunks) AS DOUBLE PRECISION), CAST(sum(lexical_tokens) AS DOUBLE PRECISION) / "
             "greatest(sum(n_chunks), 1) FROM ctx_documents WHERE index_version = ? AND lexical_tokens IS NOT NULL",
             [index_version]),
            (f"SELECT f.doc_id, f.ordinal, max(f.dl) AS dl FROM ({flat}) f GROUP BY f.doc_id, f.ordinal "
             "ORDER BY f.doc_id, f.ordinal", params),
            (f"SELECT f.term FROM ({flat}) f GROUP BY f.term ORDER BY f.term", params),
            ("SELECT dense_rank() OVER (ORDER BY f.term) - 1 AS term_number, "
             "dense_rank() OVER (ORDER BY f.doc_id, f.ordinal) - 1 AS chunk_number, f.tf "
             f"FROM ({flat}) f ORDER BY term_number, chunk_number", params),
        ])
        n, avgdl = (float(v[0]) if len(v) and v[0] is not None else 0.0 for v in stats)
        return LexicalSnapshot.from_postings(
            [str(t) for t in terms[0]], postings[0], postings[1], postings[2],
            [(str(d), int(o)) for d, o in zip(keys[0], keys[1])], keys[2], n, avgdl)

    def _current_postings(self, index_version: str, terms: list[str] | None) -> tuple[str, list]:
        """SQL for the current postings of `terms` (None: all) in a version (doc_id, term, chunk_count,
        ordinals, tfs, lengths), and its parameters: on Postgres the rows its index finds; on DuckDB the
        terms' compacted rows (entries of documents still as compacted) and what was written since."""
        recent = ("SELECT p.doc_id, p.term, p.chunk_count, p.ordinals, p.tfs, p.lengths FROM ctx_lexical_postings p "
                  "WHERE p.index_version = ?")
        if terms is not None:
            recent += f" AND p.term IN ({', '.join('?' for _ in terms)})"
        recent_params = [index_version, *(terms or [])]
        if not self._backend.compacts_lexical:
            return recent, recent_params
        if terms is None:
            return (f"{recent} UNION ALL {_still_compacted(f'{_UNNEST_TERMS} WHERE t.index_version = ?')}",
                    [*recent_params, index_version, index_version])
        # One equality per term: each is an ART index lookup (an IN list may become a scan).
        lookups = " UNION ALL ".join(f"({_UNNEST_TERMS} WHERE t.term_key = ?)" for _ in terms)
        return (f"{recent} UNION ALL {_still_compacted(lookups)}",
                [*recent_params, *[term_key(index_version, t) for t in terms], index_version])

    # ---- DuckDB: compaction ------------------------------------------------------------------
    def maybe_compact(self, cur: Any, index_version: str) -> bool:
        """Compact a version's postings (inside the caller's transaction) once what was written since the
        last compaction reaches COMPACT_MIN_ROWS rows and COMPACT_RATIO of the compacted entries: a
        query then reads at most that much besides its own terms' rows, and each entry is rewritten a
        bounded number of times as the version grows."""
        if not self._backend.compacts_lexical:
            return False
        recent = self._backend.fetch(cur, "SELECT count(*) FROM ctx_lexical_postings WHERE index_version = ?",
                                     (index_version,))[0][0]
        if recent < self.COMPACT_MIN_ROWS:
            return False
        compacted = self._backend.fetch(cur, "SELECT coalesce(sum(len(doc_ids)), 0) FROM ctx_lexical_terms "
                                        "WHERE index_version = ?", (index_version,))[0][0]
        if recent < compacted * self.COMPACT_RATIO:
            return False
        self.compact(cur, index_version)
        return True

    def compact(self, cur: Any, index_version: str) -> None:
        """Rewrite a version's compacted rows from their still-current entries and the postings written
        since, one row per term in term order, and mark the version's documents compacted."""
        db, v = self._backend, index_version
        current, params = self._current_postings(v, None)
        db.exec(cur, f"CREATE OR REPLACE TEMP TABLE ctx_lexical_merge AS WITH merged AS ({current}) "
                "SELECT term, list(doc_id ORDER BY doc_id) AS doc_ids, "
                "list(chunk_count ORDER BY doc_id) AS chunk_counts, list(ordinals ORDER BY doc_id) AS ordinals, "
                "list(tfs ORDER BY doc_id) AS tfs, list(lengths ORDER BY doc_id) AS lengths "
                "FROM merged GROUP BY term", params)
        db.exec(cur, "DELETE FROM ctx_lexical_terms WHERE index_version = ?", (v,))
        db.exec(cur, "INSERT INTO ctx_lexical_terms SELECT ? || chr(31) || term, ?, term, doc_ids, chunk_counts, "
                "ordinals, tfs, lengths FROM ctx_lexical_merge ORDER BY term", (v, v))
        db.exec(cur, "DROP TABLE ctx_lexical_merge")
        db.exec(cur, "DELETE FROM ctx_lexical_postings WHERE index_version = ?", (v,))
        db.exec(cur, "UPDATE ctx_documents SET lexical_compacted = TRUE WHERE index_version = ? "
                "AND lexical_tokens IS NOT NULL", (v,))


def term_key(index_version: str, term: str) -> str:
    """ctx_lexical_terms' lookup key (as `compact` writes it: the two joined by the unit separator)."""
    return f"{index_version}\x1f{term}"


def _still_compacted(entries: str) -> str:
    """Postings rows (doc_id, term, chunk_count, ordinals, tfs, lengths) of the compacted entries that
    `entries` (over _UNNEST_TERMS) selects, of documents still as compacted; one parameter: the version."""
    return ("SELECT e.doc_id, e.term, e.chunk_count, e.ordinals, e.tfs, e.lengths "
            f"FROM ({entries}) e JOIN ctx_documents d ON d.doc_id = e.doc_id AND d.index_version = ? "
            "AND d.lexical_compacted")


# One row per compacted (term, document) entry of ctx_lexical_terms (DuckDB: unnest zips the lists).
_UNNEST_TERMS = ("SELECT t.term, unnest(t.doc_ids) AS doc_id, unnest(t.chunk_counts) AS chunk_count, "
                 "unnest(t.ordinals) AS ordinals, unnest(t.tfs) AS tfs, unnest(t.lengths) AS lengths "
                 "FROM ctx_lexical_terms t")


def postings_rows(index_version: str, doc_id: str, postings: list[Posting]) -> list[tuple]:
    """Rows for a bulk insert (COPY), in the table's column order."""
    return [(index_version, p.term, doc_id, len(p.ordinals), p.ordinals, p.tfs, p.lengths) for p in postings]

