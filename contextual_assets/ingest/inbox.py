"""One tick of the `new_documents` sensor (`plan_tick`): what it does about each entry of the inbox
listing (`inbox_listing`): a new or changed file is taken once it has settled, a file that is gone is
removed, a refused one is logged once. The sensor applies the plan (partitions, runs, store).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pydantic import BaseModel, Field

from contextual_assets.ingest.inbox_listing import (
    Inbox,
    InboxUnavailable,
    ListedFile,
    Listing,
    LocalInbox,
    ObjectInbox,
    RefusedFile,
    file_sha256,
    open_inbox,
    unsupported,
)
from contextual_assets.parsing.dispatch import over_limit
from contextual_assets.parsing.objects import is_object_url
from contextual_assets.store.inbox_state import InboxEntryRow

# The listing's names are imported from here too (the sensor, the CLI, the tests, the benchmarks).
__all__ = [
    "Inbox",
    "InboxUnavailable",
    "ListedFile",
    "Listing",
    "LocalInbox",
    "ObjectInbox",
    "RefusedFile",
    "Registry",
    "TickPlan",
    "TickSettings",
    "file_sha256",
    "open_inbox",
    "pending_change",
    "plan_tick",
    "run_key_part",
    "settled",
    "unsupported",
]


class TickSettings(BaseModel):
    now: float
    tick: int  # this tick's number
    committed_tick: int  # the last tick whose cursor Dagster committed (its run requests were launched)
    settle_s: float
    max_bytes: int
    retry_limit: int


class TickPlan(BaseModel):
    rows: dict[str, InboxEntryRow]  # every entry after this tick, by path
    deletes: list[str] = Field(default_factory=list)  # paths whose rows are dropped
    taken: list[str] = Field(default_factory=list)  # paths whose new revision was taken (sources to register)
    requests: list[str] = Field(default_factory=list)  # paths to request runs for
    removed: list[str] = Field(default_factory=list)  # documents whose file is gone (purge, delete partition)
    messages: list[tuple[str, str]] = Field(default_factory=list)  # (level, text) for the tick's log


class Registry:
    """What the store already knows of documents: read once, and only when a tick takes a new revision
    (an unchanged inbox reads neither)."""

    def __init__(self, sources: Callable[[], dict[str, tuple[str, str | None]]],
                 held: Callable[[list[str]], set[tuple[str, str]]]):
        self._read_sources, self._read_held = sources, held
        self._sources: dict[str, tuple[str, str | None]] | None = None
        self._held: set[tuple[str, str]] | None = None

    def source(self, doc_id: str) -> tuple[str, str | None] | None:
        """(path, file hash) of the registered source, or None."""
        if self._sources is None:
            self._sources = self._read_sources()
        return self._sources.get(doc_id)

    def holds(self, doc_id: str, revision: str) -> bool:
        """Whether some index version stores the document at this revision."""
        if self._held is None:
            self.source(doc_id)
            self._held = self._read_held(sorted(self._sources or {}))  # one batched read for the whole tick
        return (doc_id, revision) in self._held


def settled(item: ListedFile, first_seen: float, settings: TickSettings) -> bool:
    """Unchanged for `settle_s`: since this tick series first saw its size/mtime/ETag, or, for a file
    whose modification time is already that old, at once (a fresh sensor does not wait for old files)."""
    if settings.settle_s <= 0:
        return True
    modified_age = settings.now - item.mtime_ns / 1e9 if item.mtime_ns else -1.0
    return modified_age >= settings.settle_s or settings.now - first_seen >= settings.settle_s


def pending_change(row: InboxEntryRow) -> bool:
    """Its size/mtime/ETag changed after its revision was taken, and the change has not settled yet."""
    return row.settled_at is None or row.first_seen > row.settled_at


def run_key_part(row: InboxEntryRow) -> str:
    """What one document contributes to a run key: the revision, the modification time (a file put back
    to older content is a new request) and the retry number (each retry is a new run)."""
    revision = (row.revision or "").split(":")[-1][:16]
    retry = f"#retry{row.failed_attempts}" if row.failed_attempts else ""
    return f"{row.doc_id}@{revision}@{row.mtime_ns}{retry}"


def plan_tick(inbox: Inbox, listing: Listing, rows: dict[str, InboxEntryRow], existing: set[str],
              registry: Registry, settings: TickSettings) -> TickPlan:
    """The listing against the stored entries: which entries change, which revisions are taken and
    requested, which documents are gone. Reads a file's content only to hash a new, settled file."""
    plan = TickPlan(rows=dict(rows))
    claimed = {item.key: path for path, item in listing.files.items()}
    for path, item in listing.files.items():
        _plan_file(plan, inbox, item, rows.get(path), existing, registry, settings)
    for path, refused in listing.refused.items():
        row = rows.get(path)
        if row is not None and row.status == "refused" and row.reason == refused.reason:
            continue  # logged when it was first refused
        plan.messages.append(("warning", f"refused: {refused.reason}"))
        update = {"status": "refused", "reason": refused.reason, "settled_at": settings.now}
        plan.rows[path] = row.model_copy(update=update) if row is not None else InboxEntryRow(
            path=path, size=refused.size, mtime_ns=refused.mtime_ns, first_seen=settings.now, **update)
    for path, row in rows.items():
        if path in listing.files or path in listing.refused:
            continue
        _plan_missing(plan, inbox, row, existing, claimed)
    for path, row in plan.rows.items():
        # Requests of a tick whose cursor was never committed (the daemon stopped before launching
        # them) are made again, with the same run key: Dagster launches a run key once.
        if (row.status == "requested" and row.requested_tick is not None and row.requested_tick > settings.committed_tick
                and path not in plan.requests and not pending_change(row)):
            plan.requests.append(path)
    return plan


def _plan_file(plan: TickPlan, inbox: Inbox, item: ListedFile, row: InboxEntryRow | None, existing: set[str],
               registry: Registry, settings: TickSettings) -> None:
    same = row is not None and row.status != "removed" and row.doc_id == item.key and \
        (row.size, row.mtime_ns, row.etag) == (item.size, item.mtime_ns, item.etag)
    if same and not pending_change(row):
        return  # unchanged since it was taken: nothing to read, nothing to write
    stat = {"doc_id": item.key, "size": item.size, "mtime_ns": item.mtime_ns, "etag": item.etag,
            "first_seen": row.first_seen if same else settings.now}
    if row is None or row.status == "removed":
        current = InboxEntryRow(path=item.path, status="settling", **stat)
    else:
        current = row.model_copy(update=stat)
    if not settled(item, current.first_seen, settings):
        plan.rows[item.path] = current  # being written (or copied): neither hashed nor taken yet
        return
    reason = None
    if item.size == 0:
        reason = f"{item.path}: empty file (0 bytes)"
    elif item.size > settings.max_bytes:
        reason = f"{item.path}: {over_limit(item.size, settings.max_bytes)}"
    if reason is not None:
        # A document already ingested keeps its partition and its last revision.
        _refuse(plan, item.path, row, current, reason, settings.now)
        return
    try:
        revision = inbox.revision(item)
    except OSError:
        return  # unreadable for now (a copy in progress, permissions): keep what we knew
    taken = {"settled_at": settings.now, "reason": None}
    if row is not None and row.revision == revision and row.status != "removed":
        if row.status == "gave_up":
            # Saving (or touching) a file the sensor gave up on is how a user asks for another try.
            plan.messages.append(("info", f"{item.key}: saved again after it was given up; requesting it again"))
            taken.update(status="requested", failed_attempts=0, next_retry=None, requested_tick=settings.tick,
                         run_key=None)
            plan.requests.append(item.path)
        elif row.status == "refused":  # back to the revision it holds: nothing to run
            taken.update(status="requested")
        plan.rows[item.path] = current.model_copy(update=taken)
        return
    conflict = _owner_conflict(inbox, item, registry)
    if conflict is not None:
        _refuse(plan, item.path, row, current, conflict, settings.now)
        return
    # The run key is set with the run request; until then no failed run of an earlier one matches it.
    taken.update(status="requested", revision=revision, failed_attempts=0, next_retry=None,
                 requested_tick=settings.tick, run_key=None)
    registered = registry.source(item.key) if row is None else None
    if registered is not None and registered == (inbox.source_path(item.path), revision) and \
            item.key in existing and registry.holds(item.key, revision):
        # Already registered and stored at this revision (e.g. by `ctx ingest`, or before the state
        # moved to the store): adopted, not ingested again.
        taken.update(requested_tick=0)
        plan.rows[item.path] = current.model_copy(update=taken)
        return
    plan.rows[item.path] = current.model_copy(update=taken)
    plan.taken.append(item.path)
    plan.requests.append(item.path)


def _refuse(plan: TickPlan, path: str, row: InboxEntryRow | None, current: InboxEntryRow, reason: str,
            now: float) -> None:
    """Mark an entry refused; the reason is logged once, not at every tick."""
    if not (row is not None and row.status == "refused" and row.reason == reason):
        plan.messages.append(("warning", f"refused: {reason}"))
    plan.rows[path] = current.model_copy(update={"status": "refused", "reason": reason, "settled_at": now})


def _owner_conflict(inbox: Inbox, item: ListedFile, registry: Registry) -> str | None:
    """A key `ctx ingest` gave a file outside the inbox is not silently re-pointed at an inbox file."""
    registered = registry.source(item.key)
    if registered is None:
        return None
    owner = registered[0]
    if owner == inbox.source_path(item.path) or inbox.owns(owner) or is_object_url(owner) or not os.path.exists(owner):
        return None
    return (f"{item.path}: document key '{item.key}' belongs to {owner} (ingested with ctx ingest); rename one "
            "of them")


def _plan_missing(plan: TickPlan, inbox: Inbox, row: InboxEntryRow, existing: set[str],
                  claimed: dict[str, str]) -> None:
    if row.status == "removed":
        if row.doc_id in existing and row.doc_id not in claimed:
            plan.removed.append(row.doc_id)  # the partition's delete request was lost: ask again
        else:
            plan.deletes.append(row.path)
        return
    if row.revision is None or row.doc_id is None:
        plan.deletes.append(row.path)  # never taken: nothing to undo
        return
    if not inbox.gone(row.path):
        return  # unreadable for a moment, not removed
    if row.doc_id in claimed:
        plan.deletes.append(row.path)  # another name now holds this key
        return
    plan.removed.append(row.doc_id)
    plan.messages.append(("info", f"{row.doc_id}: file removed from the inbox"))
    plan.rows[row.path] = row.model_copy(update={"status": "removed", "next_retry": None})

