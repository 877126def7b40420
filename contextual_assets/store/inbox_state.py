"""Inbox state: what the `new_documents` sensor knows of each inbox entry, kept in the store so that
the sensor's cursor stays a few bytes and a tick writes only the entries that changed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel

from .backend import Backend, write_transaction

EntryStatus = Literal["settling", "refused", "requested", "retrying", "gave_up", "removed"]

_NUMBERS = {"size": int, "mtime_ns": int, "first_seen": float, "settled_at": float, "requested_tick": int,
            "failed_attempts": int, "next_retry": float}
_COLUMNS = ("path", "doc_id", "size", "mtime_ns", "etag", "revision", "first_seen", "settled_at", "status", "reason",
            "requested_tick", "run_key", "failed_attempts", "next_retry")


class InboxEntryRow(BaseModel):
    """One file or object of an inbox (`ctx_inbox_entries`).

    `size`, `mtime_ns` and `etag` are what the last listing showed; `first_seen` is when that listing
    first showed them (the settle clock). `revision` is the content taken when the entry settled (a
    file's sha256, an object's `etag:`/`version:`), registered as the source's file hash.
    `requested_tick` and `run_key` name the run request that covers the current attempt; the tick
    is compared with the cursor's to re-emit requests of a tick whose cursor was never committed."""

    path: str
    doc_id: str | None = None
    size: int
    mtime_ns: int
    etag: str | None = None
    revision: str | None = None
    first_seen: float
    settled_at: float | None = None
    status: EntryStatus
    reason: str | None = None  # why it is refused, or how its last run failed
    requested_tick: int | None = None
    run_key: str | None = None
    failed_attempts: int = 0
    next_retry: float | None = None  # epoch seconds when the next re-request is due


class HeldRemoval(BaseModel):
    """A removal the sensor held back (`ctx_inbox_removals`): the entry's file is missing from the listing
    in a tick that would have removed too many documents at once. `confirmed_at` is set by an operator
    (`ctx inbox confirm-removals`); the next tick then removes it if its file is still gone."""

    path: str
    doc_id: str
    held_at: float  # epoch seconds of the tick that first held it
    reason: str  # the guard's reason
    confirmed_at: float | None = None


class InboxState(Protocol):
    """What the sensor keeps of each inbox entry, which revisions the index holds, and the removals it holds
    until an operator confirms them."""

    def entries(self, inbox: str) -> dict[str, InboxEntryRow]: ...
    def save_entries(self, inbox: str, upserts: Sequence[InboxEntryRow], deletes: Sequence[str] = ()) -> None: ...
    def held_revisions(self, doc_ids: Sequence[str]) -> set[tuple[str, str]]: ...
    def held_removals(self, inbox: str) -> dict[str, HeldRemoval]: ...
    def save_held_removals(self, inbox: str, holds: Sequence[HeldRemoval], releases: Sequence[str] = ()) -> None: ...
    def confirm_removals(self, inbox: str, now: float, keys: Sequence[str] | None = None) -> list[HeldRemoval]: ...


class InboxStateTable:
    """`ctx_inbox_entries`: one row per (inbox, path)."""

    def __init__(self, backend: Backend):
        self._backend = backend

    def entries(self, inbox: str) -> dict[str, InboxEntryRow]:
        """Every entry of one inbox, by path."""
        rows = self._backend.query(f"SELECT {', '.join(_COLUMNS)} FROM ctx_inbox_entries WHERE inbox = ?", (inbox,))
        entries: dict[str, InboxEntryRow] = {}
        for row in rows:
            values = dict(zip(_COLUMNS, row))
            # Unvalidated (10,000 rows a tick), so the numbers are normalised here: drivers may return
            # Decimal or numpy types, and rows are compared with the tick's new ones.
            for name, kind in _NUMBERS.items():
                if values[name] is not None:
                    values[name] = kind(values[name])
            values["failed_attempts"] = values["failed_attempts"] or 0
            entries[values["path"]] = InboxEntryRow.model_construct(**values)
        return entries

    @write_transaction
    def save_entries(self, inbox: str, upserts: Sequence[InboxEntryRow], deletes: Sequence[str] = ()) -> None:
        """Write the entries that changed and drop those that are gone, in one transaction (a tick over
        an unchanged inbox calls this with nothing and writes nothing)."""
        latest = list({e.path: e for e in upserts}.values())
        gone = sorted(set(deletes) - {e.path for e in latest})
        if not latest and not gone:
            return
        row = "(" + ", ".join("?" for _ in range(len(_COLUMNS) + 1)) + ")"
        with self._backend.transaction() as cur:
            # Delete then insert (as register_sources does): one statement shape on both back-ends.
            for start in range(0, len(latest), 500):
                batch = latest[start: start + 500]
                self._delete_entries(cur, inbox, [e.path for e in batch])
                self._backend.exec(cur, f"INSERT INTO ctx_inbox_entries (inbox, {', '.join(_COLUMNS)}) VALUES "
                                   + ", ".join(row for _ in batch),
                                   [v for e in batch for v in (inbox, *(getattr(e, c) for c in _COLUMNS))])
            for start in range(0, len(gone), 500):
                self._delete_entries(cur, inbox, gone[start: start + 500])

    def _delete_entries(self, cur, inbox: str, paths: Sequence[str]) -> None:
        self._backend.exec(cur, "DELETE FROM ctx_inbox_entries WHERE inbox = ? AND path IN "
                           f"({', '.join('?' for _ in paths)})", [inbox, *paths])

    def held_revisions(self, doc_ids: Sequence[str]) -> set[tuple[str, str]]:
        """(doc_id, file_hash) pairs that some index version holds, for these documents."""
        found: set[tuple[str, str]] = set()
        unique = list(dict.fromkeys(doc_ids))
        with self._backend.reading():
            for start in range(0, len(unique), 500):
                batch = unique[start: start + 500]
                rows = self._backend.query(f"SELECT DISTINCT doc_id, file_hash FROM ctx_documents WHERE doc_id IN "
                                           f"({', '.join('?' for _ in batch)})", batch)
                found.update((r[0], r[1]) for r in rows)
        return found

    def held_removals(self, inbox: str) -> dict[str, HeldRemoval]:
        """The removals the sensor holds for one inbox, by path."""
        rows = self._backend.query("SELECT path, doc_id, held_at, reason, confirmed_at FROM ctx_inbox_removals "
                                   "WHERE inbox = ? ORDER BY path", (inbox,))
        return {r[0]: HeldRemoval(path=r[0], doc_id=r[1], held_at=float(r[2]), reason=r[3],
                                  confirmed_at=None if r[4] is None else float(r[4])) for r in rows}

    @write_transaction
    def save_held_removals(self, inbox: str, holds: Sequence[HeldRemoval], releases: Sequence[str] = ()) -> None:
        """Record held removals (a path held again keeps its row) and drop those done or back in the listing."""
        latest = list({h.path: h for h in holds}.values())
        gone = sorted(set(releases) - {h.path for h in latest})
        if not latest and not gone:
            return
        with self._backend.transaction() as cur:
            for start in range(0, len(latest), 500):
                batch = latest[start: start + 500]
                self._delete_removals(cur, inbox, [h.path for h in batch])
                self._backend.exec(cur, "INSERT INTO ctx_inbox_removals (inbox, path, doc_id, held_at, reason, "
                                   "confirmed_at) VALUES " + ", ".join("(?, ?, ?, ?, ?, ?)" for _ in batch),
                                   [v for h in batch for v in (inbox, h.path, h.doc_id, h.held_at, h.reason,
                                                               h.confirmed_at)])
            for start in range(0, len(gone), 500):
                self._delete_removals(cur, inbox, gone[start: start + 500])

    def _delete_removals(self, cur, inbox: str, paths: Sequence[str]) -> None:
        self._backend.exec(cur, "DELETE FROM ctx_inbox_removals WHERE inbox = ? AND path IN "
                           f"({', '.join('?' for _ in paths)})", [inbox, *paths])

    @write_transaction
    def confirm_removals(self, inbox: str, now: float, keys: Sequence[str] | None = None) -> list[HeldRemoval]:
        """An operator's go-ahead: mark the held removals of `inbox` (all, or those whose document key or path
        is in `keys`) confirmed; the next tick removes each whose file is still gone. Returns the removals
        confirmed now."""
        with self._backend.transaction() as cur:
            rows = self._backend.fetch(cur, "SELECT path, doc_id, held_at, reason FROM ctx_inbox_removals "
                                            "WHERE inbox = ? AND confirmed_at IS NULL ORDER BY path", (inbox,))
            wanted = None if keys is None else set(keys)
            confirmed = [HeldRemoval(path=r[0], doc_id=r[1], held_at=float(r[2]), reason=r[3], confirmed_at=now)
                         for r in rows if wanted is None or r[0] in wanted or r[1] in wanted]
            for start in range(0, len(confirmed), 500):
                batch = [h.path for h in confirmed[start: start + 500]]
                self._backend.exec(cur, "UPDATE ctx_inbox_removals SET confirmed_at = ? WHERE inbox = ? AND path IN "
                                   f"({', '.join('?' for _ in batch)})", [now, inbox, *batch])
        return confirmed
