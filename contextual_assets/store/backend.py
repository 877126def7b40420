"""The back-end: one engine's connection(s), transactions, migrations, placeholder style and the
statements that differ between engines (bulk inserts, dense search). The store's parts (corpus.py,
search.py, aliases.py, ...) share one back-end and write portable SQL over these few calls.

SQL is written with `?` placeholders and always parameterized; a back-end translates the placeholder
style (`sql`).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import numpy as np

    from ..models import ChunkFilter, EmbeddedChunk
    from .types import EmbeddingMatrix, Posting

T = TypeVar("T")


def utc_now() -> str:
    """Current UTC time as an ISO-8601 string with milliseconds (the store's timestamp format)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Backend(ABC):
    """What the store's parts may call; DuckDB (duckdb_store.py) and Postgres (postgres_store.py)."""

    dialect: str = "abstract"
    location: str = ""
    compacts_lexical: bool = False  # lexical_index.py: postings compacted into one row per term (DuckDB)

    # ---- lifecycle ---------------------------------------------------------------------------
    def migrate(self) -> int:
        """Apply the pending migrations; the schema version."""
        return self.apply_migrations()[0]

    @abstractmethod
    def apply_migrations(self, upto: int | None = None) -> tuple[int, list[int]]:
        """Apply the pending migrations (those up to `upto` only, when given), one transaction each, one
        migrator at a time: (the schema version, the versions applied now)."""

    def applied_migrations(self) -> list[int]:
        """The versions of the applied migrations, ascending ([] before any); runs no DDL."""
        with self.reading():
            if not self.query("SELECT count(*) FROM information_schema.tables "
                              "WHERE table_schema = current_schema() AND table_name = 'ctx_schema_migrations'")[0][0]:
                return []
            return [int(r[0]) for r in self.query("SELECT version FROM ctx_schema_migrations ORDER BY version")]

    def close(self) -> None:  # pragma: no cover - trivial
        pass

    def hold_connection(self, idle_release_s: float = 0.5) -> None:
        """For a long-lived reader: keep a connection open across requests (DuckDB; a Postgres pool
        already does)."""

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Keep a connection open for the reads and writes inside (an ingest run's many small
        transactions), handed to other processes that ask for it; released at the end. A no-op
        where connections are pooled (Postgres) or already held."""
        yield

    # ---- statements --------------------------------------------------------------------------
    @abstractmethod
    def transaction(self) -> AbstractContextManager[Any]:
        """A cursor-like object inside one transaction (commit on success, rollback on error)."""

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Group several reads of one request (DuckDB keeps one connection open for them)."""
        yield

    @abstractmethod
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Rows of one parameterized statement, outside any transaction."""

    def sql(self, sql: str) -> str:
        """The statement in the back-end's placeholder style (`?` here; Postgres overrides)."""
        return sql

    def exec(self, cursor: Any, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one parameterized statement on a transaction's cursor."""
        cursor.execute(self.sql(sql), params)

    def fetch(self, cursor: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Rows of one parameterized statement run on a transaction's cursor."""
        cursor.execute(self.sql(sql), params)
        return cursor.fetchall()

    def run_write(self, write: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one whole write transaction (DuckDB retries it while another process holds the file)."""
        return write(*args, **kwargs)

    # ---- what differs between engines --------------------------------------------------------
    @abstractmethod
    def insert_chunks(self, cursor: Any, chunks: list[EmbeddedChunk], index_version: str) -> None:
        """Write one document's chunks with their embeddings (bulk)."""

    @abstractmethod
    def insert_postings(self, cursor: Any, index_version: str, doc_id: str, postings: list[Posting]) -> None:
        """Write one document's lexical postings (bulk)."""

    def lock_aliases(self, cursor: Any) -> None:
        """Serialize alias changes (Postgres takes a lock; DuckDB already has one writer)."""

    def prepare_vectors(self, dims: set[int]) -> None:
        """Get ready to store vectors of these dimensions, before the transaction that writes them
        (Postgres creates the HNSW index of a new dimension)."""

    @abstractmethod
    def dense_top(self, vector: Sequence[float], index_version: str, n: int,
                  where: ChunkFilter | None = None) -> list[tuple[str, int, float]]:
        """(doc_id, ordinal, cosine similarity) of the n nearest chunks that `where` admits."""

    @abstractmethod
    def json_array_holds(self, column: str) -> str:
        """A condition with one `?`: the JSON array of strings in `column` holds that string."""

    @abstractmethod
    def embedding_rows(self, index_version: str) -> list[tuple[str, int, list[float] | None]]:
        """(doc_id, ordinal, embedding) of every chunk of one index version."""

    @abstractmethod
    def read_columns(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[np.ndarray]]:
        """The columns (numpy arrays) of several statements read in one snapshot of the database: bulk
        reads for a long-lived reader's in-memory copies, without a Python tuple per row."""

    def embedding_matrix_reader(self) -> EmbeddingMatrix | None:
        """A reader of a version's whole normalised matrix, when this engine offers one (DuckDB)."""
        return None


def write_transaction(method: Callable[..., T]) -> Callable[..., T]:
    """A part's method that is one whole write transaction, run through its back-end's `run_write`."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> T:
        return self._backend.run_write(method, self, *args, **kwargs)

    return run
