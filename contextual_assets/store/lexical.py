"""Lexical scoring: identifier-aware tokens and BM25's parameters (Lucene variant, as bm25s computes
it). Pure functions; the persistent index that uses them lives in lexical_index.py.

Code identifiers are indexed whole and split (`DiffExecutor` -> diffexecutor, diff, executor), so
queries in prose find code chunks.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

_WORD = re.compile(r"[^\W_]+(?:_[^\W_]+)*|\d+", re.UNICODE)
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_STOPWORDS = frozenset(
    "a an and are as at be but by for from has have how if in into is it its of on or that the their then "
    "there these this to was what when where which who why will with does do did".split()
)

# BM25 parameters (bm25s's and Lucene's defaults).
BM25_K1 = 1.5
BM25_B = 0.75
# Chunks rank by round(score * RANK_SCALE), then by key: a sum's last bits depend on the order it was
# added in (a hash aggregate's, numpy's), so equal scores would otherwise rank by that noise.
RANK_SCALE = 1e9


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


def lexical_text(title: str, section_path: Sequence[str], header: str, text: str) -> str:
    """What the lexical index reads of a chunk: title, section path, header and text."""
    return f"{title}\n{' / '.join(section_path)}\n{header}\n{text}"


def term_counts(text: str) -> tuple[Counter[str], int]:
    """Term frequencies of a chunk and its length in tokens (at least 1, as bm25s counts an empty
    chunk: one placeholder token)."""
    tokens = tokenize(text)
    return Counter(tokens), max(1, len(tokens))
