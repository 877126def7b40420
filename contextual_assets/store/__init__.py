"""Chunk stores: DuckDB (embedded default) and Postgres + pgvector (production), each a `ChunkStore`
of small parts over one back-end (see storage.py)."""

from __future__ import annotations

from pathlib import Path

from .aliases import Aliases
from .corpus import Corpus
from .duckdb_store import DuckDBChunkStore
from .eval_runs import EvalRuns
from .header_cache import HeaderCache
from .inbox_state import InboxState
from .search import Search
from .storage import ChunkStore
from .types import ChunkKey, EmbeddingMatrix


def open_store(database_url: str | None, duckdb_path: str | Path, pool_size: int = 4) -> ChunkStore:
    """Postgres (`pool_size` connections) when `database_url` is set, otherwise the DuckDB file;
    migrated on open."""
    if database_url:
        from .postgres_store import PostgresChunkStore

        store: ChunkStore = PostgresChunkStore(database_url, pool_size=pool_size)
    else:
        store = DuckDBChunkStore(duckdb_path)
    store.migrate()
    return store


__all__ = ["Aliases", "ChunkKey", "ChunkStore", "Corpus", "DuckDBChunkStore", "EmbeddingMatrix", "EvalRuns",
           "HeaderCache", "InboxState", "Search", "open_store"]
