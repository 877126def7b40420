"""The inbox's contents: a local folder or an object-store prefix (`s3://bucket/prefix`, any fsspec
URL), listed with each file's key, size, modification time and (objects) ETag; what may be ingested
(the file types `ctx ingest` accepts, one file per document key) and each file's revision."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pydantic import BaseModel, Field

from contextual_assets.errors import ContextualError, DocumentError
from contextual_assets.ingest.inbox.document_keys import key_for_path, partition_key_for
from contextual_assets.ingest.inbox.file_selection import is_hidden, special_kind, unsupported
from contextual_assets.parsing.objects import (
    SourceUnavailableError,
    filesystem_for,
    is_object_url,
    local_location,
    object_mtime_ns,
    object_revision,
    one_line,
)



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
        self._walk(self.root.absolute(), "", listing, {}, top=True)
        return listing

    def _walk(self, directory: Path, prefix: str, listing: Listing, keys: dict[str, str], top: bool = False) -> None:
        """Files before sub-folders, each sorted by name (os.walk's order); hidden entries and linked
        folders are skipped. A regular file's key needs no path resolution (nothing on the way to it
        is a link), which keeps an unchanged tick over 10,000 files to stat calls."""
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            if top:  # an unreadable inbox is not an empty one
                raise InboxUnavailable(f"inbox {self.root} cannot be read ({exc.strerror or exc}); nothing "
                                       "changed") from None
            return  # vanished or unreadable folder: its files are checked one by one when removed
        subdirs = []
        for item in entries:
            if is_hidden(item.name):
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
                kind = special_kind(stat.st_mode)  # a FIFO, socket or device: never opened
                if kind is not None:
                    raise DocumentError(str(path), kind)
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
        """Known not to exist; a path that cannot be checked (a folder without permission) is not gone."""
        try:
            os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return True
        except OSError:
            return False
        return False

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
            if is_hidden(relative):
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
        """Known not to exist: asked of the store itself (a HEAD request on S3), past any cached listing.
        An object that cannot be checked (unreachable endpoint, credentials, permissions) is not gone."""
        try:
            fs, name = filesystem_for(path)
            fs.invalidate_cache(name)
            fs.info(name)
        except FileNotFoundError:
            return True
        except Exception:  # noqa: BLE001 - could not check: keep the document
            return False
        return False

    def source_path(self, path: str) -> str:
        return path

    def owns(self, path: str) -> bool:
        return path.startswith(self.url + "/")


Inbox = LocalInbox | ObjectInbox


def open_inbox(location: str) -> Inbox:
    """`CTX_INBOX`: an object-store URL, or a folder (a path or a `file://` URL)."""
    return ObjectInbox(location) if is_object_url(location) else LocalInbox(local_location(location))


def file_sha256(path: Path) -> str:
    """The file's sha256. Opened without blocking and checked to be a regular file before it is read: a
    path swapped for a FIFO after it was selected is refused instead of waiting for a writer for ever."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        kind = special_kind(os.fstat(handle.fileno()).st_mode)
        if kind is not None:
            raise DocumentError(str(path), kind)
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
