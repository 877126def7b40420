"""Header cache: situating headers already generated, keyed by chunk content and prompt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .backend import Backend, utc_now, write_transaction


class HeaderCache(Protocol):
    """Headers by cache key (see headers/cache_key.py for the key)."""

    def cached_headers(self, keys: Sequence[str]) -> dict[str, str]: ...
    def cache_headers(self, items: Sequence[tuple[str, str, str]]) -> None: ...


class HeaderCacheTable:
    """`ctx_header_cache`: one header per cache key."""

    def __init__(self, backend: Backend):
        self._backend = backend

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

    @write_transaction
    def cache_headers(self, items: Sequence[tuple[str, str, str]]) -> None:
        """Store (cache_key, header, model) rows; the latest write of a key wins."""
        if not items:
            return
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
