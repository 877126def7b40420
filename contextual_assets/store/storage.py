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
        return self.backend.migrate()

    def schema_version(self) -> int:
        """The highest applied migration (0 before any)."""
        return int(self.backend.query("SELECT coalesce(max(version), 0) FROM ctx_schema_migrations")[0][0])

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Group the reads of one request, whichever parts make them (DuckDB keeps one connection open)."""
        with self.backend.reading():
            yield

    def close(self) -> None:
        self.backend.close()
