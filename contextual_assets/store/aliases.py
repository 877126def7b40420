"""Aliases: a name (e.g. `production`) pointing at an index version, with history and rollback."""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import AliasMoved, StoreError
from .backend import Backend, utc_now, write_transaction


class Aliases(Protocol):
    """Names pointing at index versions; every change recorded."""

    def get(self, name: str) -> str | None: ...
    def set(self, name: str, version: str, reason: str = "", expected: str | None = "<any>") -> str | None: ...
    def rollback(self, name: str, reason: str = "rollback") -> tuple[str, str]: ...
    def history(self, name: str) -> list[dict[str, Any]]: ...


class AliasTable:
    """`ctx_aliases` (current target per name) and `ctx_alias_history` (every change, numbered)."""

    def __init__(self, backend: Backend):
        self._backend = backend

    def get(self, name: str) -> str | None:
        """The index version `name` points at, or None."""
        rows = self._backend.query("SELECT index_version FROM ctx_aliases WHERE name = ?", (name,))
        return rows[0][0] if rows else None

    def _write(self, cur: Any, name: str, version: str, previous: str | None, action: str, reason: str) -> None:
        db = self._backend
        seq = db.fetch(cur, "SELECT coalesce(max(seq), 0) + 1 FROM ctx_alias_history WHERE name = ?", (name,))[0][0]
        db.exec(cur, "DELETE FROM ctx_aliases WHERE name = ?", (name,))
        db.exec(cur, "INSERT INTO ctx_aliases (name, index_version, updated_at) VALUES (?, ?, ?)",
                (name, version, utc_now()))
        db.exec(cur, "INSERT INTO ctx_alias_history (name, seq, index_version, previous_version, action, reason, "
                "changed_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (name, int(seq), version, previous, action, reason, utc_now()))

    @write_transaction
    def set(self, name: str, version: str, reason: str = "", expected: str | None = "<any>") -> str | None:
        """Point `name` at `version` atomically and record it; returns the version it pointed at before.
        With `expected`, refuse when the alias no longer points where the caller last saw it."""
        db = self._backend
        with db.transaction() as cur:
            db.lock_aliases(cur)
            rows = db.fetch(cur, "SELECT index_version FROM ctx_aliases WHERE name = ?", (name,))
            previous = rows[0][0] if rows else None
            if expected != "<any>" and previous != expected:
                raise AliasMoved(f"alias '{name}' moved to {previous} since the gate compared against {expected}; "
                                 "evaluate again", previous)
            self._write(cur, name, version, previous, "promote", reason)
        return previous

    @write_transaction
    def rollback(self, name: str, reason: str = "rollback") -> tuple[str, str]:
        """Point `name` back at the version it held before its last change: (restored, replaced)."""
        db = self._backend
        with db.transaction() as cur:
            db.lock_aliases(cur)
            rows = db.fetch(cur, "SELECT index_version, previous_version FROM ctx_alias_history WHERE name = ? "
                                 "ORDER BY seq DESC LIMIT 1", (name,))
            if not rows or not rows[0][1]:
                raise StoreError(f"alias '{name}' has no previous version to roll back to")
            current, previous = rows[0]
            self._write(cur, name, previous, current, "rollback", reason)
        return previous, current

    def history(self, name: str) -> list[dict[str, Any]]:
        """Every change of `name`, oldest first."""
        rows = self._backend.query("SELECT seq, index_version, previous_version, action, reason, changed_at "
                                   "FROM ctx_alias_history WHERE name = ? ORDER BY seq", (name,))
        return [{"seq": int(r[0]), "index_version": r[1], "previous_version": r[2], "action": r[3], "reason": r[4],
                 "at": r[5]} for r in rows]
