"""A version's BM25 postings held in memory as arrays, for a long-lived reader (the search service).

The store's lexical statement reads a query's terms' postings and aggregates them in SQL: 25-50 ms at
200,000 chunks on DuckDB, ~15-40 ms on Postgres, most of a hybrid request's CPU. In memory, a query
gathers its terms' posting arrays and sums their scores with numpy (~4 ms), with the same formula,
statistics and order as the statement (`LexicalIndex.top`), so both answer alike.

Memory: about 6 bytes per posting (chunk number and term frequency), ~34 postings per chunk on real
text: 68 MB for 200,000 chunks with their keys.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from .lexical import BM25_B, BM25_K1, RANK_SCALE, tokenize


@dataclass(frozen=True)
class LexicalSnapshot:
    """Postings of one version: `chunks[starts[t]:starts[t + 1]]` are the chunk numbers holding term t
    (`terms[t]`), `tfs` its frequencies there; `keys[c]` and `lengths[c]` are chunk c's key and length in
    tokens, chunks numbered in (doc_id, ordinal) order; `n` and `avgdl` the version's statistics."""

    terms: dict[str, int]
    starts: np.ndarray  # int64, len(terms) + 1
    chunks: np.ndarray  # int32 chunk numbers, grouped by term
    tfs: np.ndarray
    keys: list[tuple[str, int]]
    lengths: np.ndarray  # float64, one per chunk
    n: float
    avgdl: float

    @classmethod
    def from_postings(cls, terms: list[str], term_numbers: np.ndarray, chunk_numbers: np.ndarray,
                      tfs: np.ndarray, keys: list[tuple[str, int]], lengths: np.ndarray, n: float,
                      avgdl: float) -> LexicalSnapshot:
        """From flat postings sorted by term number (terms[i] is term number i)."""
        counts = np.bincount(np.asarray(term_numbers, dtype=np.int64), minlength=len(terms))
        starts = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        tfs = np.asarray(tfs)
        small_tfs = tfs.dtype.kind in "iu" and (tfs.size == 0 or int(tfs.max()) < 2**16)
        return cls({t: i for i, t in enumerate(terms)}, starts, np.asarray(chunk_numbers, dtype=np.int32),
                   tfs.astype(np.uint16 if small_tfs else np.float64), keys,
                   np.asarray(lengths, dtype=np.float64), float(n), float(avgdl))

    @property
    def postings(self) -> int:
        return int(self.chunks.size)

    def top(self, query: str, n: int) -> list[tuple[str, int, float]]:
        """(doc_id, ordinal, BM25 score) of the n best chunks with a score above 0, best first (by
        round(score * RANK_SCALE)), ties by (doc_id, ordinal): what `LexicalIndex.top` returns unfiltered."""
        counts = Counter(tokenize(query))
        if not counts or n <= 0 or self.avgdl <= 0:
            return []
        parts_chunks, parts_scores = [], []
        for term, times in counts.items():
            number = self.terms.get(term)
            if number is None:
                continue
            start, end = int(self.starts[number]), int(self.starts[number + 1])
            chunks = self.chunks[start:end]
            df = float(end - start)
            weight = times * np.log(1 + (self.n - df + 0.5) / (df + 0.5))
            tf = self.tfs[start:end].astype(np.float64)
            dl = self.lengths[chunks]
            parts_chunks.append(chunks)
            parts_scores.append(weight * tf / (tf + BM25_K1 * (1 - BM25_B + BM25_B * dl / self.avgdl)))
        if not parts_chunks:
            return []
        chunks, contributions = np.concatenate(parts_chunks), np.concatenate(parts_scores)
        if chunks.size * 8 >= len(self.keys):  # common terms: one sum per chunk of the version, no sort
            scores = np.bincount(chunks, weights=contributions, minlength=len(self.keys))
            matched = np.flatnonzero(scores > 0)
            scores = scores[matched]
        else:  # rare terms: sums over the matched chunks only
            matched, inverse = np.unique(chunks, return_inverse=True)
            scores = np.bincount(inverse, weights=contributions, minlength=matched.size)
            positive = scores > 0
            matched, scores = matched[positive], scores[positive]
        ranked = np.round(scores * RANK_SCALE)
        if matched.size > n:
            # Everything ranking at least as the n-th best, so ties at the cut are decided by key below.
            cut = np.partition(ranked, matched.size - n)[matched.size - n]
            keep = ranked >= cut
            matched, scores, ranked = matched[keep], scores[keep], ranked[keep]
        order = np.lexsort((matched, -ranked))[:n]  # rounded score descending, then chunk number = key order
        return [(*self.keys[int(matched[i])], float(scores[i])) for i in order]
