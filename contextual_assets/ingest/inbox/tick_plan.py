"""The plan of a sensor tick (`plan_tick`), a pure function: what to do about each entry of the inbox
listing (`listing`): a new or changed file is taken once it has settled, a file that is gone is
removed, a refused one is logged once. The sensor applies the plan (partitions, runs, store).

Removals are guarded (`removal_guard`): a tick in which more documents are missing from the listing than
`CTX_INBOX_MAX_REMOVE`, or than `CTX_INBOX_MAX_REMOVE_SHARE` of the inbox's documents, or all of them
(an unmounted share, an emptied prefix), removes none of them: it holds them until an operator confirms
(`ctx inbox confirm-removals`), while the rest of the tick goes on.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pydantic import BaseModel, Field

from contextual_assets.ingest.inbox.listing import (
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
from contextual_assets.settings import PlatformSettings
from contextual_assets.store.inbox_state import HeldRemoval, InboxEntryRow

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
    "removal_guard",
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
    max_remove: int = PlatformSettings.default("inbox_max_remove")
    max_remove_share: float = PlatformSettings.default("inbox_max_remove_share")


# Documents removed in one tick at most (the rest at the next ticks): a confirmed mass removal must not
# outlast the sensor's evaluation timeout (each purge is a transaction, each object check a request).
REMOVALS_PER_TICK = 200


class TickPlan(BaseModel):
    rows: dict[str, InboxEntryRow]  # every entry after this tick, by path
    deletes: list[str] = Field(default_factory=list)  # paths whose rows are dropped
    taken: list[str] = Field(default_factory=list)  # paths whose new revision was taken (sources to register)
    requests: list[str] = Field(default_factory=list)  # paths to request runs for
    removed: list[str] = Field(default_factory=list)  # documents whose file is gone (purge, delete partition)
    messages: list[tuple[str, str]] = Field(default_factory=list)  # (level, text) for the tick's log
    held: list[HeldRemoval] = Field(default_factory=list)  # removals held after this tick (new or still held)
    released: list[str] = Field(default_factory=list)  # paths whose held removal is over (done, or back)
    hold_reason: str | None = None  # why this tick held removals (the sensor's warning and skip reason)


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


def removal_guard(missing: int, documents: int, max_remove: int, max_share: float) -> str | None:
    """Why a tick in which `missing` of the inbox's `documents` are missing from the listing must remove
    none of them, or None when it may remove them. Held: more than `max_remove`; more than `max_share` of
    the documents (a tick may always remove one); all of them, unless `max_share` is 1 (an unmounted share
    is an empty folder, an emptied prefix an empty listing: both look like every file deleted)."""
    if missing <= 0:
        return None
    if missing >= documents and max_share < 1:
        return (f"all {documents} of the inbox's documents are missing from its listing (an unmounted share, an "
                "emptied prefix?)")
    if missing > max_remove:
        return (f"{missing} documents are missing from the inbox listing, more than CTX_INBOX_MAX_REMOVE "
                f"({max_remove}) removes in one tick")
    if missing > max(1, int(max_share * documents)):
        return (f"{missing} of the inbox's {documents} documents are missing from its listing, more than "
                f"CTX_INBOX_MAX_REMOVE_SHARE ({max_share:g}) removes in one tick")
    return None


def plan_tick(inbox: Inbox, listing: Listing, rows: dict[str, InboxEntryRow], existing: set[str],
              registry: Registry, settings: TickSettings, held: dict[str, HeldRemoval] | None = None) -> TickPlan:
    """The listing against the stored entries: which entries change, which revisions are taken and
    requested, which documents are gone (guarded: `removal_guard`; `held` are the removals held so far).
    Reads a file's content only to hash a new, settled file."""
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
    missing = [row for path, row in rows.items() if path not in listing.files and path not in listing.refused
               and _plan_missing(plan, row, existing, claimed)]
    _plan_removals(plan, inbox, missing, rows, held or {}, settings)
    held_paths = {h.path for h in plan.held}
    for path, row in plan.rows.items():
        # Requests of a tick whose cursor was never committed (the daemon stopped before launching
        # them) are made again, with the same run key: Dagster launches a run key once.
        if (row.status == "requested" and row.requested_tick is not None and row.requested_tick > settings.committed_tick
                and path not in plan.requests and path not in held_paths and not pending_change(row)):
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


def _plan_missing(plan: TickPlan, row: InboxEntryRow, existing: set[str], claimed: dict[str, str]) -> bool:
    """An entry missing from the listing: True when its document would be removed (guarded)."""
    if row.status == "removed":
        if row.doc_id in existing and row.doc_id not in claimed:
            plan.removed.append(row.doc_id)  # the partition's delete request was lost: ask again
        else:
            plan.deletes.append(row.path)
        return False
    if row.revision is None or row.doc_id is None:
        plan.deletes.append(row.path)  # never taken: nothing to undo
        return False
    if row.doc_id in claimed:
        plan.deletes.append(row.path)  # another name now holds this key
        return False
    return True


def _plan_removals(plan: TickPlan, inbox: Inbox, missing: list[InboxEntryRow], rows: dict[str, InboxEntryRow],
                   held: dict[str, HeldRemoval], settings: TickSettings) -> None:
    """Remove the documents of `missing`, unless the guard holds them: then only those an operator confirmed
    are removed, the others are held (recorded, with a warning every tick until confirmed or back)."""
    confirmed = {row.path for row in missing if row.path in held and held[row.path].confirmed_at is not None}
    unconfirmed = [row for row in missing if row.path not in confirmed]
    documents = sum(1 for r in rows.values()
                    if r.revision is not None and r.doc_id is not None and r.status != "removed")
    reason = removal_guard(len(unconfirmed), documents, settings.max_remove, settings.max_remove_share)
    removing = sorted((row for row in missing if reason is None or row.path in confirmed), key=lambda r: r.path)
    holding = [] if reason is None else unconfirmed
    for row in holding:
        previous = held.get(row.path)
        plan.held.append(previous if previous is not None else
                         HeldRemoval(path=row.path, doc_id=row.doc_id or "", held_at=settings.now, reason=reason))
    if holding:
        plan.hold_reason = (f"{reason}; none of them removed (held: {len(holding)}, listed by `ctx inbox held`): "
                            "check the inbox, then `ctx inbox confirm-removals` removes them at the next tick")
        plan.messages.append(("warning", plan.hold_reason))
    deferred = removing[REMOVALS_PER_TICK:]
    done: set[str] = set()
    for row in removing[:REMOVALS_PER_TICK]:
        if not inbox.gone(row.path):
            continue  # unreadable for a moment, not removed
        done.add(row.path)
        plan.removed.append(row.doc_id)
        plan.messages.append(("info", f"{row.doc_id}: file removed from the inbox"
                                      + (" (removal confirmed)" if row.path in confirmed else "")))
        plan.rows[row.path] = row.model_copy(update={"status": "removed", "next_retry": None})
    if deferred:
        plan.messages.append(("info", f"{len(deferred)} more removals at the next ticks ({REMOVALS_PER_TICK} a tick)"))
    # A confirmation lasts until its removal is done (or the file is back in the listing).
    keep = {h.path for h in plan.held} | (confirmed - done)
    plan.held.extend(held[path] for path in sorted(confirmed - done))
    plan.released = sorted(set(held) - keep)
