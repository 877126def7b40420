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
from .migrations import LATEST_SCHEMA
from .search import Search
from .storage import ChunkStore
from .types import ChunkKey, EmbeddingMatrix


def connect_store(database_url: str | None, duckdb_path: str | Path, pool_size: int = 4) -> ChunkStore:
    """Postgres (`pool_size` connections) when `database_url` is set, otherwise the DuckDB file; neither
    migrated nor checked (`ctx migrate` migrates it; `open_store` is what other callers want)."""
    if database_url:
        from .postgres_store import PostgresChunkStore

        return PostgresChunkStore(database_url, pool_size=pool_size)
    return DuckDBChunkStore(duckdb_path)


def open_store(database_url: str | None, duckdb_path: str | Path, pool_size: int = 4,
               migrate: bool = True) -> ChunkStore:
    """The store (see `connect_store`), migrated on open; with `migrate=False` it runs no DDL and raises
    `SchemaOutdated` unless the schema is this release's (`LATEST_SCHEMA`): for processes that must
    not change the schema (search replicas), started after `ctx migrate` ran."""
    store = connect_store(database_url, duckdb_path, pool_size)
    try:
        if migrate:
            store.migrate()
        else:
            store.check_schema()
    except BaseException:
        store.close()
        raise
    return store


__all__ = [
    "LATEST_SCHEMA",
    "Aliases",
    "ChunkKey",
    "ChunkStore",
    "Corpus",
    "DuckDBChunkStore",
    "EmbeddingMatrix",
    "EvalRuns",
    "HeaderCache",
    "InboxState",
    "Search",
    "connect_store",
    "open_store",
]
