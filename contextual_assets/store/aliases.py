"""Aliases: a name (e.g. `production`) pointing at an index version, with history and rollback."""

from __future__ import annotations

from typing import Any

from ..errors import StoreError
from .primitives import StorePrimitives, utc_now


class AliasTable(StorePrimitives):
    """`ctx_aliases` (current target per name) and `ctx_alias_history` (every change, numbered)."""

    def get_alias(self, name: str) -> str | None:
        """The index version `name` points at, or None."""
        rows = self._query("SELECT index_version FROM ctx_aliases WHERE name = ?", (name,))
        return rows[0][0] if rows else None

    def _lock_aliases(self, cur: Any) -> None:
        """Serialize alias changes (Postgres overrides; DuckDB already has one writer)."""

    def _write_alias(self, cur: Any, name: str, version: str, previous: str | None, action: str, reason: str) -> None:
        seq = self._fetch(cur, "SELECT coalesce(max(seq), 0) + 1 FROM ctx_alias_history WHERE name = ?", (name,))[0][0]
        self._exec(cur, "DELETE FROM ctx_aliases WHERE name = ?", (name,))
        self._exec(cur, "INSERT INTO ctx_aliases (name, index_version, updated_at) VALUES (?, ?, ?)",
                   (name, version, utc_now()))
        self._exec(cur, "INSERT INTO ctx_alias_history (name, seq, index_version, previous_version, action, reason, changed_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", (name, int(seq), version, previous, action, reason, utc_now()))

    def set_alias(self, name: str, version: str, reason: str = "", expected: str | None = "<any>") -> str | None:
        """Point `name` at `version` atomically and record it; returns the version it pointed at before.
        With `expected`, refuse when the alias no longer points where the caller last saw it."""
        with self._transaction() as cur:
            self._lock_aliases(cur)
            rows = self._fetch(cur, "SELECT index_version FROM ctx_aliases WHERE name = ?", (name,))
            previous = rows[0][0] if rows else None
            if expected != "<any>" and previous != expected:
                raise StoreError(f"alias '{name}' moved to {previous} since the gate compared against {expected}; "
                                 "evaluate again")
            self._write_alias(cur, name, version, previous, "promote", reason)
        return previous

    def rollback_alias(self, name: str, reason: str = "rollback") -> tuple[str, str]:
        """Point `name` back at the version it held before its last change: (restored, replaced)."""
        with self._transaction() as cur:
            self._lock_aliases(cur)
            rows = self._fetch(cur, "SELECT index_version, previous_version FROM ctx_alias_history WHERE name = ? "
                                    "ORDER BY seq DESC LIMIT 1", (name,))
            if not rows or not rows[0][1]:
                raise StoreError(f"alias '{name}' has no previous version to roll back to")
            current, previous = rows[0]
            self._write_alias(cur, name, previous, current, "rollback", reason)
        return previous, current

    def alias_history(self, name: str) -> list[dict[str, Any]]:
        """Every change of `name`, oldest first."""
        rows = self._query("SELECT seq, index_version, previous_version, action, reason, changed_at FROM ctx_alias_history "
                           "WHERE name = ? ORDER BY seq", (name,))
        return [{"seq": int(r[0]), "index_version": r[1], "previous_version": r[2], "action": r[3], "reason": r[4],
                 "at": r[5]} for r in rows]
