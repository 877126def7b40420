"""The store: small parts over one back-end, in the shape of LlamaIndex's `StorageContext`.

Each part has its own interface and module; callers take the part they use:

    store.corpus        sources, index versions, documents, chunks (corpus.py)
    store.search        dense, lexical and hybrid top-k, hits (search.py)
    store.aliases       names pointing at index versions, with history (aliases.py)
    store.eval_runs     evaluation runs and the gate's decisions (eval_runs.py)
    store.inbox_state   the inbox sensor's per-entry state (inbox_state.py)
    store.header_cache  generated headers by cache key (header_cache.py)

The back-end (backend.py; DuckDB or Postgres) owns the connection, transactions and migrations.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .aliases import Aliases, AliasTable
from .backend import Backend
from .corpus import Corpus, CorpusTable
from .eval_runs import EvalRuns, EvalRunTable
from .header_cache import HeaderCache, HeaderCacheTable
from .inbox_state import InboxState, InboxStateTable
from .lexical_index import LexicalIndex
from .migrations import check_schema, pending_versions
from .search import CorpusSearch, Search


class ChunkStore:
    """The parts of one store, sharing `backend`'s connection; one atomic transaction per write."""

    def __init__(self, backend: Backend):
        self.backend = backend
        lexical = LexicalIndex(backend)  # written by the corpus's commits, read by search
        self.corpus: Corpus = CorpusTable(backend, lexical)
        self.search: Search = CorpusSearch(backend, self.corpus, lexical)
        self.aliases: Aliases = AliasTable(backend)
        self.eval_runs: EvalRuns = EvalRunTable(backend)
        self.inbox_state: InboxState = InboxStateTable(backend)
        self.header_cache: HeaderCache = HeaderCacheTable(backend)

    @property
    def dialect(self) -> str:
        return self.backend.dialect

    @property
    def location(self) -> str:
        """Where the data lives (`duckdb:<path>` or `postgres:<host, db, user>`), for messages."""
        return self.backend.location

    def migrate(self) -> int:
        """Apply the pending migrations; the schema version."""
        return self.backend.migrate()

    def apply_migrations(self, upto: int | None = None) -> tuple[int, list[int]]:
        """Apply the pending migrations (up to `upto` only, when given): (the schema version, those
        applied now). Concurrent migrators wait for each other (Postgres: an advisory lock)."""
        return self.backend.apply_migrations(upto)

    def schema_version(self) -> int:
        """The highest applied migration (0 before any); runs no DDL."""
        return max(self.backend.applied_migrations(), default=0)

    def pending_migrations(self) -> list[int]:
        """This release's migrations the store has not applied yet."""
        return pending_versions(self.dialect, self.backend.applied_migrations())

    def check_schema(self) -> int:
        """The schema version when it is this release's (`LATEST_SCHEMA`); `SchemaOutdated` when it is
        behind (run `ctx migrate`) or newer (migrated by a newer release). Runs no DDL."""
        return check_schema(self.dialect, self.backend.applied_migrations(), self.location)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Group the reads of one request, whichever parts make them (DuckDB keeps one connection open)."""
        with self.backend.reading():
            yield

    def close(self) -> None:
        self.backend.close()
