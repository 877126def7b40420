"""Aliases: a name (e.g. `production`) pointing at an index version, with history and rollback.

Rollback walks back: the versions an alias can return to are a stack replayed from its history
(`walk_back_stack`): a promote pushes its version, a rollback to V pops down to V. `ctx rollback` moves
to the version below the top, `--to V` to any version in the stack; neither ever moves forward again."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ..errors import AliasMoved, StoreError
from .backend import Backend, utc_now, write_transaction


class RollbackRefused(StoreError):
    """No older version to roll back to, or a `--to` version the walk-back cannot reach (`ctx` exits 2)."""


class Aliases(Protocol):
    """Names pointing at index versions; every change recorded."""

    def get(self, name: str) -> str | None: ...
    def set(self, name: str, version: str, reason: str = "", expected: str | None = "<any>") -> str | None: ...
    def rollback(self, name: str, reason: str = "rollback", to: str | None = None) -> tuple[str, str]: ...
    def history(self, name: str) -> list[dict[str, Any]]: ...
    def rollback_targets(self, name: str) -> list[str]: ...


def walk_back_stack(changes: Iterable[tuple[str, str]]) -> list[str]:
    """The versions an alias went through that a rollback can still return to, oldest first; the last
    is the version it points at. `changes` are its history's (action, version), oldest first: a promote
    pushes its version (not again when it is already the top), a rollback to V pops down to the nearest
    V below the top. A rollback to a version not below the top (history written before rollbacks walked
    back, when a second rollback went forward again) counts as a promote of it."""
    stack: list[str] = []
    for action, version in changes:
        below = stack[:-1]
        if action == "rollback" and version in below:
            del stack[len(below) - below[::-1].index(version):]
        elif not stack or stack[-1] != version:
            stack.append(version)
    return stack


def rollback_targets(stack: Sequence[str]) -> list[str]:
    """The versions `ctx rollback --to` can move to, nearest first: every version below the top of the
    walk-back stack other than the one the alias points at (each once)."""
    current = stack[-1] if stack else None
    return [v for v in dict.fromkeys(reversed(stack[:-1])) if v != current]


def stack_on(db: Backend, cursor: Any, name: str) -> list[str]:
    """`walk_back_stack` of alias `name`, read on a transaction's cursor (the corpus reads it in its purge)."""
    rows = db.fetch(cursor, "SELECT action, index_version FROM ctx_alias_history WHERE name = ? ORDER BY seq",
                    (name,))
    return walk_back_stack((r[0], r[1]) for r in rows)


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
    def rollback(self, name: str, reason: str = "rollback", to: str | None = None) -> tuple[str, str]:
        """Point `name` back at the version below the top of its walk-back stack, or at `to` (any version
        the walk-back can reach): (restored, replaced). Never forward again: the version rolled back from
        leaves the stack."""
        db = self._backend
        with db.transaction() as cur:
            db.lock_aliases(cur)
            stack = stack_on(db, cur, name)
            targets = rollback_targets(stack)
            if not targets:
                where = f"it points at {stack[-1]} and nothing older is left" if stack else "it has no history"
                raise RollbackRefused(f"alias '{name}' has no previous version to roll back to: {where}")
            if to is not None and to not in targets:
                raise RollbackRefused(f"alias '{name}' cannot roll back to {to}; a rollback can reach "
                                      + ", ".join(targets))
            current, restored = stack[-1], to or targets[0]
            self._write(cur, name, restored, current, "rollback", reason)
        return restored, current

    def history(self, name: str) -> list[dict[str, Any]]:
        """Every change of `name`, oldest first."""
        rows = self._backend.query("SELECT seq, index_version, previous_version, action, reason, changed_at "
                                   "FROM ctx_alias_history WHERE name = ? ORDER BY seq", (name,))
        return [{"seq": int(r[0]), "index_version": r[1], "previous_version": r[2], "action": r[3], "reason": r[4],
                 "at": r[5]} for r in rows]

    def rollback_targets(self, name: str) -> list[str]:
        """The versions `name` can roll back to, nearest first (the first is what `rollback` restores)."""
        return rollback_targets(walk_back_stack((h["action"], h["index_version"]) for h in self.history(name)))
