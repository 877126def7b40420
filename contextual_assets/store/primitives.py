"""The contract the store's concern mixins build on: the clock and the back-end primitives.

`ChunkStore` (base.py) implements every member; the mixins (header cache, aliases, evaluation
runs, search) use nothing else, so each concern reads as SQL over these few calls.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from typing import Any

from ..models import HeaderedChunk


def utc_now() -> str:
    """Current UTC time as an ISO-8601 string with milliseconds (the store's timestamp format)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class StorePrimitives(ABC):
    """What a concern mixin may call; implemented by `ChunkStore` and its back-ends."""

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """A cursor-like object inside one transaction (commit on success, rollback on error)."""

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Group several reads of one request (DuckDB keeps one connection open for them)."""
        yield

    @abstractmethod
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Rows of one parameterized statement, outside any transaction."""

    @abstractmethod
    def _exec(self, cursor: Any, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one parameterized statement on a transaction's cursor."""

    @abstractmethod
    def _fetch(self, cursor: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        """Rows of one parameterized statement run on a transaction's cursor."""

    @abstractmethod
    def _embedding_rows(self, index_version: str) -> list[tuple[str, int, list[float] | None]]:
        """(doc_id, ordinal, embedding) of every chunk of one index version."""

    @abstractmethod
    def chunks(self, index_version: str, doc_id: str | None = None) -> list[HeaderedChunk]:
        """Chunks of one index version, ordered by document and ordinal."""

    @abstractmethod
    def revision(self, index_version: str) -> tuple:
        """A value that changes whenever the index version's documents change."""
