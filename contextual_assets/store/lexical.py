"""Lexical retrieval: BM25 (bm25s) over header + chunk text with identifier-aware tokens.

Code identifiers are indexed whole and split (`DiffExecutor` -> diffexecutor, diff, executor), so
queries in prose find code chunks.
"""

from __future__ import annotations

import logging
import re

import numpy as np

_WORD = re.compile(r"[^\W_]+(?:_[^\W_]+)*|\d+", re.UNICODE)
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_STOPWORDS = frozenset(
    "a an and are as at be but by for from has have how if in into is it its of on or that the their then "
    "there these this to was what when where which who why will with does do did".split()
)


def tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    for word in _WORD.findall(text):
        lowered = word.lower()
        if lowered not in _STOPWORDS and len(lowered) > 1:
            tokens.append(lowered)
        parts = [p for piece in word.split("_") for p in _CAMEL.findall(piece)] if not word.isdigit() else []
        if len(parts) > 1:
            tokens.extend(p.lower() for p in parts if len(p) > 1 and p.lower() not in _STOPWORDS)
    return tokens


class LexicalIndex:
    """BM25 over a fixed list of documents; rebuilt by the store when its contents change."""

    def __init__(self, texts: list[str]):
        import bm25s

        # bm25s sets its own logger to DEBUG on import, which would print index builds to users.
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.size = len(texts)
        self._bm25 = bm25s.BM25()
        corpus = [tokenize(t) or ["\u2400"] for t in texts]
        if corpus:
            self._bm25.index(corpus, show_progress=False)
        self._vocab = set(self._bm25.vocab_dict) if corpus else set()

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        terms = [t for t in tokenize(query) if t in self._vocab]
        if not terms or self.size == 0:
            return []
        k = min(k, self.size)
        ids, scores = self._bm25.retrieve([terms], k=k, show_progress=False)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if s > 0]


def dense_top_k(matrix: np.ndarray, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Exact cosine top-k over L2-normalised rows."""
    if matrix.shape[0] == 0:
        return []
    query = vector / (np.linalg.norm(vector) or 1.0)
    scores = matrix @ query
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(int(i), float(scores[i])) for i in top]


def reciprocal_rank_fusion(rankings: list[list[str]], k: int, constant: int = 60) -> list[tuple[str, float]]:
    """Fuse ranked lists of keys: score = sum of 1 / (constant + rank)."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            fused[key] = fused.get(key, 0.0) + 1.0 / (constant + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:k]
