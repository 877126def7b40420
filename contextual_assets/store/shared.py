"""One open store per (database URL, DuckDB file) per process: its connection pool is shared by every
caller (Dagster steps, the sensor, the CLI), and closed once."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from . import ChunkStore, open_store

_STORES: dict[tuple[str, str], ChunkStore] = {}
_STORES_LOCK = threading.Lock()


def shared_store(database_url: str, duckdb_path: str | Path) -> ChunkStore:
    """The process's store for `database_url` (Postgres) or, when empty, the DuckDB file."""
    key = (database_url, os.path.abspath(duckdb_path))
    with _STORES_LOCK:
        store = _STORES.get(key)
        if store is None:
            store = open_store(database_url or None, duckdb_path)
            _STORES[key] = store
        return store


def clear_store_cache() -> None:
    with _STORES_LOCK:
        for store in _STORES.values():
            store.close()
        _STORES.clear()
