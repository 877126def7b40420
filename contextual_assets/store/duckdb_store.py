"""DuckDB back-end: the embedded default, one file under ./.ctx/, no server.

DuckDB lets one process write a file at a time, so connections are short-lived (opened per
operation) and a lock held by another process is retried for a bounded time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from ..errors import StoreError
from ..models import EmbeddedChunk
from .base import ChunkStore, utc_now
from .migrations import MIGRATIONS

# A file this young that DuckDB calls invalid is most likely still being created by another process
# (it exists before its header is written); an older one is really damaged.
NEW_FILE_GRACE_S = 10.0


class _FileBeingCreated(Exception):
    """Another process has created the database file but not yet written its header."""


def _is_lock_conflict(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, _FileBeingCreated) or (
        isinstance(exc, (duckdb.IOException, duckdb.TransactionException)) and ("lock" in text or "conflict" in text)
    )


def _being_created(exc: BaseException, path: Path) -> bool:
    if "not a valid duckdb database file" not in str(exc).lower():
        return False
    try:
        return time.time() - path.stat().st_mtime < NEW_FILE_GRACE_S
    except OSError:
        return True  # gone again: the creator gave up; the next attempt creates it


_retry_on_lock = retry(
    retry=retry_if_exception(_is_lock_conflict),
    wait=wait_random_exponential(multiplier=0.05, max=2.0),
    stop=stop_after_delay(120),
    reraise=True,
)


class DuckDBChunkStore(ChunkStore):
    dialect = "duckdb"

    def __init__(self, path: str | Path):
        super().__init__()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.location = f"duckdb:{self.path}"

    @_retry_on_lock
    def migrate(self) -> int:
        with self._locked_connection() as con:
            con.execute("CREATE TABLE IF NOT EXISTS ctx_schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
            applied = {r[0] for r in con.execute("SELECT version FROM ctx_schema_migrations").fetchall()}
            for version, statements in MIGRATIONS["duckdb"]:
                if version in applied:
                    continue
                con.execute("BEGIN TRANSACTION")
                try:
                    for statement in statements:
                        con.execute(statement)
                    con.execute("INSERT INTO ctx_schema_migrations VALUES (?, ?)", (version, utc_now()))
                    con.execute("COMMIT")
                except Exception:
                    con.execute("ROLLBACK")
                    raise
            return int(con.execute("SELECT max(version) FROM ctx_schema_migrations").fetchone()[0])

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._locked_connection() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # a failed COMMIT already ended the transaction; keep the original error
                raise

    @_retry_on_lock
    def _open(self) -> duckdb.DuckDBPyConnection:
        try:
            return duckdb.connect(str(self.path))
        except duckdb.Error as exc:
            if _is_lock_conflict(exc):
                raise
            if _being_created(exc, self.path):
                raise _FileBeingCreated(str(exc)) from exc
            raise StoreError(f"cannot open DuckDB store {self.path}: {exc}") from exc

    @contextmanager
    def _locked_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        con = self._open()
        try:
            yield con
        finally:
            con.close()

    @_retry_on_lock
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._locked_connection() as con:
            return con.execute(sql, list(params)).fetchall()

    def _insert_chunks(self, cursor: Any, chunks: list[EmbeddedChunk], index_version: str) -> None:
        if not chunks:
            return
        import json

        rows = [
            (index_version, c.doc_id, c.ordinal, c.source_doc, c.title, json.dumps(c.section_path, ensure_ascii=False),
             c.page_start, c.page_end, c.text, c.token_count, c.content_hash, c.external_id, c.header,
             c.header_source, c.header_model, c.embedding, len(c.embedding))
            for c in chunks
        ]
        cursor.executemany(
            "INSERT INTO ctx_chunks (index_version, doc_id, ordinal, source_doc, title, section_path, page_start, "
            "page_end, text, token_count, content_hash, external_id, header, header_source, header_model, embedding, "
            "embedding_dim) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def _embedding_rows(self, index_version: str) -> list[tuple[str, int, list[float] | None]]:
        return [
            (r[0], int(r[1]), r[2])
            for r in self._query(
                "SELECT doc_id, ordinal, embedding FROM ctx_chunks WHERE index_version = ?", (index_version,)
            )
        ]

    # Whole write transactions are retried when another process or thread holds the file.
    register_source = _retry_on_lock(ChunkStore.register_source)
    register_sources = _retry_on_lock(ChunkStore.register_sources)
    register_index_version = _retry_on_lock(ChunkStore.register_index_version)
    replace_document = _retry_on_lock(ChunkStore.replace_document)
    purge_document = _retry_on_lock(ChunkStore.purge_document)
    cache_headers = _retry_on_lock(ChunkStore.cache_headers)
    set_alias = _retry_on_lock(ChunkStore.set_alias)
    rollback_alias = _retry_on_lock(ChunkStore.rollback_alias)
    save_eval_run = _retry_on_lock(ChunkStore.save_eval_run)
    set_eval_gate = _retry_on_lock(ChunkStore.set_eval_gate)
