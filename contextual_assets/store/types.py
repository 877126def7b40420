"""Types several store modules share: chunk keys, lexical postings, the embedding-matrix reader.

The bottom of the store package: it imports no other store module, so the back-end (backend.py) and
the parts above it (corpus.py, search.py, lexical_index.py, ...) can all name these without a cycle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# A chunk's identity within an index version: (doc_id, ordinal).
ChunkKey = tuple[str, int]

# Keys and L2-normalised float32 vectors of a whole version, for a long-lived reader that searches in memory.
EmbeddingMatrix = Callable[[str], "tuple[list[ChunkKey], np.ndarray]"]


@dataclass(frozen=True)
class Posting:
    """Where one term occurs in one document: chunk ordinals, term frequencies, chunk lengths."""

    term: str
    ordinals: list[int]
    tfs: list[int]
    lengths: list[int]
