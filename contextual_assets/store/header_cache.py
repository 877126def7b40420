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
    """Callers' rows, written in one transaction by the first of them to find no write in progress."""

    def __init__(self) -> None:
        self.parts: list[Sequence[tuple[str, str, str]]] = []  # one per caller, in arrival order
        self.errors: list[BaseException | None] = []
        self.done = False


class HeaderCacheTable:
    """`ctx_header_cache`: one header per cache key.

    Writes are group-committed: every document in flight caches its headers as they arrive, and a
    transaction costs the store about the same for 3 rows as for 300 (DuckDB: ~25 ms with the write lock
    held), so the rows of callers that arrive while one transaction is written go into the next one
    together, written by the first of those callers (each caller writes at most one transaction). A caller
    returns once its rows are written; when a grouped write fails, each caller's rows are written alone,
    so a failure fails only the callers whose rows cause it."""

    def __init__(self, backend: Backend):
        self._backend = backend
        self._turn = threading.Condition()
        self._open: _Batch | None = None  # taking rows; its first caller to find no write in progress writes it
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
        """Store (cache_key, header, model) rows; the latest write of a key wins. Grouped with other
        callers' rows that arrive meanwhile (see the class)."""
        if not items:
            return
        with self._turn:
            batch = self._open = self._open or _Batch()
            part = len(batch.parts)
            batch.parts.append(items)
            batch.errors.append(None)
            while not batch.done and self._writing:
                self._turn.wait()
            leads = not batch.done  # no write in progress: this caller writes the open batch, its rows in it
            if leads:
                self._open, self._writing = None, True
        if leads:
            self._write_batch(batch)
        error = batch.errors[part]
        if error is not None:
            raise error

    def _write_batch(self, batch: _Batch) -> None:
        try:
            try:
                self._write([row for part in batch.parts for row in part])
            except Exception:  # noqa: BLE001 - each caller's rows alone: only those that fail again fail
                for index, part in enumerate(batch.parts):
                    try:
                        self._write(part)
                    except Exception as exc:  # noqa: BLE001 - raised in its caller's thread
                        batch.errors[index] = exc
        finally:
            with self._turn:
                batch.done, self._writing = True, False
                self._turn.notify_all()

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
