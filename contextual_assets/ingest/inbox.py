"""The inbox: a local folder or an object-store prefix (`s3://bucket/prefix`, any fsspec URL).

What is in it (`LocalInbox.list`, `ObjectInbox.list`), what may be ingested (the file types
`ctx ingest` accepts, the size limit), and what one tick of the `new_documents` sensor does about
each entry (`plan_tick`): a new or changed file is taken once it has settled, a file that is gone
is removed, a refused one is logged once. The sensor applies the plan (partitions, runs, store).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from contextual_assets.errors import ContextualError, DocumentError
from contextual_assets.ingest.document_keys import key_for_path, partition_key_for
from contextual_assets.parsing import SUPPORTED_EXTENSIONS
from contextual_assets.parsing.dispatch import over_limit
from contextual_assets.parsing.objects import (
    SourceUnavailableError,
    filesystem_for,
    is_object_url,
    local_location,
    object_mtime_ns,
    object_revision,
    one_line,
)
from contextual_assets.store.inbox_state import InboxEntryRow

_ACCEPTED = frozenset(SUPPORTED_EXTENSIONS)  # exactly what `ctx ingest` takes from a folder


class InboxUnavailable(ContextualError):
    """The inbox cannot be listed (missing folder or bucket, unreachable store): a tick changes nothing."""


class ListedFile(BaseModel):
    key: str
    path: str  # absolute path, or the object's URL
    size: int
    mtime_ns: int
    etag: str | None = None  # objects: the revision the listing shows (never downloaded to hash)


class RefusedFile(BaseModel):
    path: str
    reason: str
    size: int = 0
    mtime_ns: int = 0


class Listing(BaseModel):
    files: dict[str, ListedFile] = Field(default_factory=dict)  # by path
    refused: dict[str, RefusedFile] = Field(default_factory=dict)  # by path; hidden files are skipped silently


def unsupported(path: str) -> str | None:
    """Why a file of this type is not taken, or None (the rule `ctx ingest` applies to a folder)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in _ACCEPTED:
        return None
    return f"{path}: unsupported file type '{suffix or '(none)'}', skipped (supported: {', '.join(SUPPORTED_EXTENSIONS)})"


def _add(listing: Listing, keys: dict[str, str], item: ListedFile) -> None:
    reason = unsupported(item.path)
    if reason is None and item.key in keys:
        # Two names that map to one key (e.g. the same name in NFC and NFD forms): never let one
        # silently replace the other.
        reason = f"{item.path}: same document key '{item.key}' as {keys[item.key]}; rename one of them"
    if reason is not None:
        listing.refused[item.path] = RefusedFile(path=item.path, reason=reason, size=item.size, mtime_ns=item.mtime_ns)
        return
    keys[item.key] = item.path
    listing.files[item.path] = item


class LocalInbox:
    """A folder; files keep a sha256 of their content as their revision."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.location = str(self.root.absolute())

    def list(self) -> Listing:
        if not self.root.is_dir():
            # A missing or unmounted inbox is not "every file was deleted".
            raise InboxUnavailable(f"inbox {self.root} is missing or not a directory; nothing changed")
        listing: Listing = Listing()
        self._walk(self.root.absolute(), "", listing, {})
        return listing

    def _walk(self, directory: Path, prefix: str, listing: Listing, keys: dict[str, str]) -> None:
        """Files before sub-folders, each sorted by name (os.walk's order); hidden entries and linked
        folders are skipped. A regular file's key needs no path resolution (nothing on the way to it
        is a link), which keeps an unchanged tick over 10,000 files to stat calls."""
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return  # vanished or unreadable folder: its files are checked one by one when removed
        subdirs = []
        for item in entries:
            if item.name.startswith("."):
                continue
            if item.is_dir(follow_symlinks=False):
                subdirs.append(item)
                continue
            path = directory / item.name
            try:
                if item.is_symlink():
                    if item.is_dir():
                        continue  # a linked folder is not followed (as os.walk does not)
                    key = key_for_path(path, self.root)  # refuses a link that resolves outside the inbox
                else:
                    key = partition_key_for(prefix + item.name)
                stat = item.stat()
            except DocumentError as exc:
                listing.refused[str(path)] = RefusedFile(path=str(path), reason=str(exc))
                continue
            except OSError:
                continue  # vanished between listing and stat: the sensor checks it is really gone
            _add(listing, keys, ListedFile.model_construct(key=key, path=str(path), size=stat.st_size,
                                                           mtime_ns=stat.st_mtime_ns, etag=None))
        for sub in subdirs:
            self._walk(directory / sub.name, f"{prefix}{sub.name}/", listing, keys)

    def revision(self, item: ListedFile) -> str:
        """The file's sha256 (read only when the file is new or changed and has settled)."""
        return file_sha256(Path(item.path))

    def gone(self, path: str) -> bool:
        return not os.path.lexists(path)

    def source_path(self, path: str) -> str:
        # The resolved path: a file swapped for a symlink later is refused when read.
        return str(Path(path).resolve())

    def owns(self, path: str) -> bool:
        return not is_object_url(path) and Path(path).is_relative_to(self.root.resolve())


class ObjectInbox:
    """A prefix of an object store; an object's ETag (or version id) is its revision."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.location = self.url

    def list(self) -> Listing:
        try:
            fs, root = filesystem_for(self.url)
        except SourceUnavailableError as exc:
            raise InboxUnavailable(f"inbox {exc}; nothing changed") from None
        root = root.rstrip("/")
        try:
            fs.invalidate_cache()  # a listing must be current, not fsspec's cached one
            found = fs.find(root, detail=True)
        except FileNotFoundError as exc:
            raise InboxUnavailable(f"inbox {self.url}: bucket not found ({one_line(exc)}); nothing changed") from None
        except Exception as exc:  # noqa: BLE001 - unreachable endpoint, credentials, permissions
            raise InboxUnavailable(f"inbox {self.url} cannot be listed: {one_line(exc)}; nothing changed") from None
        listing, keys = Listing(), {}
        for name, info in sorted(found.items()):
            relative = name[len(root):].lstrip("/") if name.startswith(root) else ""
            if not relative or name.endswith("/") or info.get("type", "file") != "file":
                continue  # the prefix itself, "folder" marker objects
            if any(part.startswith(".") for part in relative.split("/")):
                continue
            url = fs.unstrip_protocol(name)
            size, mtime_ns = int(info.get("size") or 0), object_mtime_ns(info)
            try:
                key = partition_key_for(relative)
            except DocumentError as exc:
                listing.refused[url] = RefusedFile(path=url, reason=str(exc), size=size, mtime_ns=mtime_ns)
                continue
            _add(listing, keys, ListedFile(key=key, path=url, size=size, mtime_ns=mtime_ns,
                                           etag=object_revision(info)))
        return listing

    def revision(self, item: ListedFile) -> str:
        return item.etag or ""

    def gone(self, path: str) -> bool:
        return True  # the listing succeeded and is authoritative (S3 listings are strongly consistent)

    def source_path(self, path: str) -> str:
        return path

    def owns(self, path: str) -> bool:
        return path.startswith(self.url + "/")


Inbox = LocalInbox | ObjectInbox


def open_inbox(location: str) -> Inbox:
    """`CTX_INBOX`: an object-store URL, or a folder (a path or a `file://` URL)."""
    return ObjectInbox(location) if is_object_url(location) else LocalInbox(local_location(location))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---- one tick -----------------------------------------------------------------------------------


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

