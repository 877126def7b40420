"""Chunk stores: DuckDB (embedded default) and Postgres + pgvector (production)."""

from __future__ import annotations

from pathlib import Path

from .base import ChunkStore
from .duckdb_store import DuckDBChunkStore


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


__all__ = ["ChunkStore", "DuckDBChunkStore", "open_store"]
