"""Header cache: situating headers already generated, keyed by chunk content and prompt."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from .backend import Backend, utc_now, write_transaction


class HeaderCache(Protocol):
    """Headers by cache key (see headers/cache_key.py for the key)."""

    def cached_headers(self, keys: Sequence[str]) -> dict[str, str]: ...
    def cache_headers(self, items: Sequence[tuple[str, str, str]]) -> None: ...


class _Batch:
    """Rows of several callers, written in one transaction."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []
        self.written = threading.Event()
        self.error: BaseException | None = None


class HeaderCacheTable:
    """`ctx_header_cache`: one header per cache key.

    Writes are group-committed: every document in flight caches its headers as they arrive, and a
    transaction costs the store the same for 3 rows as for 300 (DuckDB: ~25 ms with the write lock held),
    so rows that arrive while one transaction is written go into the next one together. A caller still
    returns only once its rows are written."""

    def __init__(self, backend: Backend):
        self._backend = backend
        self._lock = threading.Lock()
        self._open: _Batch | None = None  # taking rows; the next transaction writes it
        self._writing = False

    def cached_headers(self, keys: Sequence[str]) -> dict[str, str]:
        """Headers already generated for these cache keys (see headers/cache_key.py for the key)."""
        found: dict[str, str] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):
            batch = unique[start : start + 500]
            placeholders = ", ".join("?" for _ in batch)
            rows = self._backend.query(
                f"SELECT cache_key, header FROM ctx_header_cache WHERE cache_key IN ({placeholders})", batch)
            found.update({r[0]: r[1] for r in rows})
        return found

    def cache_headers(self, items: Sequence[tuple[str, str, str]]) -> None:
        """Store (cache_key, header, model) rows; the latest write of a key wins. With other callers'
        rows when they come at once (the first caller writes every batch that fills meanwhile)."""
        if not items:
            return
        with self._lock:
            batch = self._open = self._open or _Batch()
            batch.rows.extend(items)
            leads, self._writing = not self._writing, True
        if leads:
            while True:
                with self._lock:
                    taken, self._open = self._open, None
                    if taken is None:
                        self._writing = False
                        break
                try:
                    self._write(taken.rows)
                except BaseException as exc:  # noqa: BLE001 - each caller of the batch raises it
                    taken.error = exc
                taken.written.set()
        batch.written.wait()
        if batch.error is not None:
            raise batch.error

    @write_transaction
    def _write(self, items: Sequence[tuple[str, str, str]]) -> None:
        db = self._backend
        rows = list(dict((i[0], i) for i in items).values())  # one row per key (ON CONFLICT cannot see twice)
        now = utc_now()
        with db.transaction() as cur:
            # Many rows per statement: one statement per row costs DuckDB ~2 ms each.
            for start in range(0, len(rows), 250):
                batch = rows[start : start + 250]
                db.exec(cur, "INSERT INTO ctx_header_cache (cache_key, header, model, created_at) VALUES "
                        + ", ".join("(?, ?, ?, ?)" for _ in batch)
                        + " ON CONFLICT (cache_key) DO UPDATE SET header = excluded.header, model = excluded.model, "
                        "created_at = excluded.created_at",
                        [value for key, header, model in batch for value in (key, header, model, now)])
