"""Opening the embedded DuckDB store while another process is creating the same file."""

from __future__ import annotations

import os
import threading
import time

import duckdb
import pytest

from contextual_assets.errors import StoreError
from contextual_assets.store.duckdb_store import NEW_FILE_GRACE_S, DuckDBChunkStore


def test_a_file_still_being_created_is_waited_for(tmp_path):
    """Two first `ctx ingest`s at once: one finds the file before its header is written."""
    path = tmp_path / "index.duckdb"
    path.write_bytes(b"")  # created, header not written yet

    def finish_creating() -> None:
        time.sleep(0.5)
        path.unlink()
        duckdb.connect(str(path)).close()

    creator = threading.Thread(target=finish_creating)
    creator.start()
    store = DuckDBChunkStore(path)
    try:
        assert store.migrate() >= 1
    finally:
        creator.join()


def test_an_old_damaged_file_is_an_error_at_once(tmp_path):
    path = tmp_path / "index.duckdb"
    path.write_bytes(b"\0" * 100)
    old = time.time() - 10 * NEW_FILE_GRACE_S
    os.utime(path, (old, old))
    started = time.monotonic()
    with pytest.raises(StoreError, match="not a valid DuckDB database file"):
        DuckDBChunkStore(path).migrate()
    assert time.monotonic() - started < NEW_FILE_GRACE_S
