"""One open store per (database URL, DuckDB file) per process: its connection pool is shared by every
caller (Dagster steps, the sensor, the CLI), and closed once."""

from __future__ import annotations

import os
from pathlib import Path

from contextual_assets.process_cache import ProcessCache

from . import ChunkStore, open_store

_STORES: ProcessCache[ChunkStore] = ProcessCache()


def shared_store(database_url: str, duckdb_path: str | Path) -> ChunkStore:
    """The process's store for `database_url` (Postgres) or, when empty, the DuckDB file."""
    key = (database_url, os.path.abspath(duckdb_path))
    return _STORES.get(key, lambda: open_store(database_url or None, duckdb_path))


def clear_store_cache() -> None:
    _STORES.close_all()
