"""DuckDB back-end: the embedded default, one file under ./.ctx/, no server.

DuckDB lets one process open a file at a time, so connections are short-lived (opened per
operation) and a lock held by another process is retried for a bounded time. A long-lived reader
(the search service) and an ingest step hold one connection across operations instead, and hand the
file over when another process asks for it (duckdb_held.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_delay,
    wait_random_exponential,
)

from ..errors import StoreError
from ..models import ChunkFilter, EmbeddedChunk
from .backend import Backend, T, utc_now
from .duckdb_held import HeldConnection, signal_wanted
from .filters import filter_sql
from .migrations import MIGRATIONS
from .storage import ChunkStore
from .types import EmbeddingMatrix

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
    # At most 0.2 s apart: a holder that was asked stays out for 0.25 s (duckdb_held.py), and a
    # waiter must retry inside that window.
    wait=wait_random_exponential(multiplier=0.05, max=0.2),
    stop=stop_after_delay(120),
    reraise=True,
)


class DuckDBBackend(Backend):
    dialect = "duckdb"
    compacts_lexical = True

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.location = f"duckdb:{self.path}"
        self._reader = threading.local()
        self._held: HeldConnection | None = None

    @_retry_on_lock
    def apply_migrations(self, upto: int | None = None) -> tuple[int, list[int]]:
        with self._locked_connection() as con:  # the file's one writer: no other migrator meanwhile
            con.execute("CREATE TABLE IF NOT EXISTS ctx_schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
            applied = {r[0] for r in con.execute("SELECT version FROM ctx_schema_migrations").fetchall()}
            now: list[int] = []
            for version, statements in MIGRATIONS["duckdb"]:
                if version in applied or (upto is not None and version > upto):
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
                now.append(version)
            return int(con.execute("SELECT coalesce(max(version), 0) FROM ctx_schema_migrations").fetchone()[0]), now

    def applied_migrations(self) -> list[int]:
        if not self.path.exists():
            return []  # never created: nothing applied, and a check does not create the file
        return super().applied_migrations()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
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
                signal_wanted(self.path)  # a long-lived reader holding the file lets go
                raise
            if _being_created(exc, self.path):
                raise _FileBeingCreated(str(exc)) from exc
            raise StoreError(f"cannot open DuckDB store {self.path}: {exc}") from exc

    @contextmanager
    def _locked_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        held = self._held
        if held is not None:
            with held.cursor() as cur:  # its own transaction on the held connection's database
                yield cur
            return
        con = self._open()
        try:
            yield con
        finally:
            con.close()

    def hold_connection(self, idle_release_s: float = 0.5) -> None:
        """Keep one connection open across reads and writes from now on (a long-lived reader); see
        duckdb_held.py."""
        if self._held is None:
            self._held = HeldConnection(self._open, self.path, idle_release_s=idle_release_s)

    @contextmanager
    def holding(self) -> Iterator[None]:
        """`hold_connection` for everything inside, released at the end: an open costs ~20 ms, more than
        a small transaction's work, and an ingest run makes several per document (header cache, commit)."""
        if self._held is not None:
            yield
            return
        self.hold_connection()
        held = self._held
        try:
            yield
        finally:
            self._held = None
            held.close()

    def close(self) -> None:
        if self._held is not None:
            self._held.close()

    @contextmanager
    def reading(self) -> Iterator[None]:
        """One connection for the reads of one request (each open costs ~20 ms); held only that long
        (or, for a holder, until idle or asked for), so other processes get the file between requests."""
        if getattr(self._reader, "con", None) is not None:
            yield
            return
        with self._locked_connection() as con:
            self._reader.con = con
            try:
                yield
            finally:
                self._reader.con = None

    @contextmanager
    def _read_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        con = getattr(self._reader, "con", None)
        if con is not None:
            yield con.cursor()
        else:
            with self._locked_connection() as con:
                yield con

    @_retry_on_lock
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._read_connection() as con:
            return con.execute(sql, list(params)).fetchall()

    @_retry_on_lock
    def read_columns(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[np.ndarray]]:
        with self._locked_connection() as con:
            con.execute("BEGIN TRANSACTION")  # one snapshot for all of them
            try:
                out = []
                for sql, params in statements:
                    columns = con.execute(sql, list(params)).fetchnumpy()
                    out.append([np.asarray(c) for c in columns.values()])
                return out
            finally:
                con.execute("ROLLBACK")

    def insert_chunks(self, cursor: Any, chunks: list[EmbeddedChunk], index_version: str) -> None:
        if not chunks:
            return
        import json

        rows = [
            (c.doc_id, c.ordinal, c.source_doc, c.title, json.dumps(c.section_path, ensure_ascii=False),
             c.page_start, c.page_end, c.text, c.token_count, c.content_hash, c.external_id, c.header,
             c.header_source, c.header_model, c.embedding, len(c.embedding))
            for c in chunks
        ]
        # One statement over parallel lists: DuckDB's executemany runs one INSERT per row (~2 ms each).
        columns = [list(column) for column in zip(*rows)]
        types = ["VARCHAR", "INTEGER", "VARCHAR", "VARCHAR", "VARCHAR", "INTEGER", "INTEGER", "VARCHAR", "INTEGER",
                 "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "FLOAT[]", "INTEGER"]
        cursor.execute(
            "INSERT INTO ctx_chunks (index_version, doc_id, ordinal, source_doc, title, section_path, page_start, "
            "page_end, text, token_count, content_hash, external_id, header, header_source, header_model, embedding, "
            "embedding_dim) SELECT ?, " + ", ".join(f"unnest(?::{t}[])" for t in types),
            [index_version, *columns],
        )

    def insert_postings(self, cur: Any, index_version: str, doc_id: str, postings: list) -> None:
        cur.execute(
            "INSERT INTO ctx_lexical_postings (index_version, term, doc_id, chunk_count, ordinals, tfs, lengths) "
            "SELECT ?, unnest(?::VARCHAR[]), ?, unnest(?::INTEGER[]), unnest(?::INTEGER[][]), "
            "unnest(?::INTEGER[][]), unnest(?::INTEGER[][])",
            [index_version, [p.term for p in postings], doc_id, [len(p.ordinals) for p in postings],
             [p.ordinals for p in postings], [p.tfs for p in postings], [p.lengths for p in postings]],
        )

    def embedding_rows(self, index_version: str) -> list[tuple[str, int, list[float] | None]]:
        return [
            (r[0], int(r[1]), r[2])
            for r in self.query(
                "SELECT doc_id, ordinal, embedding FROM ctx_chunks WHERE index_version = ?", (index_version,)
            )
        ]

    def json_array_holds(self, column: str) -> str:
        return f"list_contains(from_json({column}, '[\"VARCHAR\"]'), ?)"

    @_retry_on_lock
    def dense_top(self, vector: Sequence[float], index_version: str, n: int,
                  where: ChunkFilter | None = None) -> list[tuple[str, int, float]]:
        """Exact cosine similarity computed in SQL: the vectors never leave DuckDB, only the top n keys do."""
        dim = len(vector)
        condition, params = filter_sql(where, self)
        with self._read_connection() as con:
            # A zero vector has no direction: its similarity is NaN, which DuckDB would sort first.
            rows = con.execute(
                "SELECT doc_id, ordinal, score FROM (SELECT doc_id, ordinal, "
                "list_cosine_similarity(embedding, ?::FLOAT[]) AS score FROM ctx_chunks "
                f"WHERE index_version = ? AND embedding_dim = ?{condition}) WHERE NOT isnan(score) "
                "ORDER BY score DESC, doc_id, ordinal LIMIT ?",
                [[float(x) for x in vector], index_version, dim, *params, int(n)]).fetchall()
            if not rows:
                other = con.execute("SELECT min(embedding_dim) FROM ctx_chunks WHERE index_version = ?",
                                    [index_version]).fetchone()[0]
                if other is not None and other != dim:
                    raise StoreError(
                        f"query vector has {dim} dimensions but index version {index_version} holds "
                        f"{other}-dimensional embeddings (embedder mismatch)")
        return [(str(d), int(o), float(s)) for d, o, s in rows if s is not None]

    def embedding_matrix_reader(self) -> EmbeddingMatrix:
        return self.embedding_matrix

    @_retry_on_lock
    def embedding_matrix(self, index_version: str) -> tuple[list[tuple[str, int]], np.ndarray]:
        """Keys and L2-normalised float32 vectors of a version, for a long-lived reader that searches
        in memory (the search service); read as numpy arrays, not Python lists."""
        with self._locked_connection() as con:
            dims = [r[0] for r in con.execute(
                "SELECT DISTINCT embedding_dim FROM ctx_chunks WHERE index_version = ?", [index_version]).fetchall()]
            if len(dims) != 1 or not dims[0]:
                return [], np.zeros((0, dims[0] if len(dims) == 1 and dims[0] else 0), dtype=np.float32)
            columns = con.execute(
                f"SELECT doc_id, ordinal, embedding::FLOAT[{int(dims[0])}] AS e FROM ctx_chunks "
                "WHERE index_version = ?", [index_version]).fetchnumpy()
        matrix = np.stack(columns["e"]).astype(np.float32, copy=False) if len(columns["e"]) else \
            np.zeros((0, dims[0]), dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        keys = [(str(d), int(o)) for d, o in zip(columns["doc_id"], columns["ordinal"])]
        return keys, matrix / norms

    @_retry_on_lock
    def run_write(self, write: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Whole write transactions are retried while another process or thread holds the file."""
        return write(*args, **kwargs)


class DuckDBChunkStore(ChunkStore):
    """The store over one DuckDB file (not migrated until `migrate`; `open_store` does both)."""

    def __init__(self, path: str | Path):
        super().__init__(DuckDBBackend(path))
