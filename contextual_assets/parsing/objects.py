"""Object-store sources: `s3://bucket/prefix/file.pdf` or any other fsspec URL.

The inbox sensor lists objects and takes their ETag (or version id) as the revision, so an unchanged
object is never downloaded; the ingest run reads an object once, size-checked before the download.
Endpoints and credentials come from the store's own environment (for S3: `AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE`, ... as botocore reads them).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..errors import ContextualError, DocumentError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
# The variables that choose an object store's endpoint and credentials: a filesystem is reused only
# while they are unchanged (fsspec's own instance cache would keep an old endpoint).
_ENV_PREFIXES = ("AWS_", "FSSPEC_", "GOOGLE_", "AZURE_")
_FILESYSTEMS: dict[tuple, Any] = {}
_LOCK = threading.Lock()


class SourceUnavailableError(ContextualError):
    """The object store could not be reached or answered with an error: worth retrying, unlike a
    `DocumentError` (the document itself is unusable)."""


def is_object_url(location: str) -> bool:
    """`s3://...`, `gcs://...`, `memory://...`: a URL other than `file://` (a local path)."""
    return bool(_URL.match(location)) and not location.lower().startswith("file://")


def local_location(location: str) -> str:
    """A local path given as a path or as a `file://` URL."""
    return location[len("file://"):] if location.lower().startswith("file://") else location


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def filesystem_for(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for `url` and the path within it (`s3://b/p/a.md` -> `b/p/a.md`)."""
    import fsspec

    protocol = url.split("://", 1)[0].lower()
    environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)))
    key = (protocol, url.split("://", 1)[1].split("/", 1)[0], environment)
    with _LOCK:
        fs = _FILESYSTEMS.get(key)
        if fs is None:
            try:
                fs, _ = fsspec.url_to_fs(url, skip_instance_cache=True)
            except ImportError as exc:
                extra = " (pip install 'contextual-retrieval-platform[s3]')" if protocol in ("s3", "s3a") else ""
                raise SourceUnavailableError(f"{url}: no file system for '{protocol}://' is installed{extra}: "
                                             f"{one_line(exc)}") from None
            except ValueError as exc:
                raise SourceUnavailableError(f"{url}: not a usable object-store URL: {one_line(exc)}") from None
            _FILESYSTEMS[key] = fs
    return fs, type(fs)._strip_protocol(url)


def object_revision(info: Mapping[str, Any]) -> str:
    """What identifies an object's content without reading it: its ETag, else its version id (or an
    equivalent of other stores), else its size and modification time."""
    for field, label in (("ETag", "etag"), ("etag", "etag"), ("md5Hash", "md5"), ("VersionId", "version"),
                         ("version_id", "version"), ("generation", "generation")):
        value = info.get(field)
        if value not in (None, "", "null"):
            return f"{label}:{str(value).strip(chr(34))}"
    return f"stat:{int(info.get('size') or 0)}:{object_mtime_ns(info)}"


def object_mtime_ns(info: Mapping[str, Any]) -> int:
    """Last-modified time of a listed object in nanoseconds (0 when the store gives none)."""
    for field in ("LastModified", "last_modified", "mtime", "updated", "modified", "created"):
        value = info.get(field)
        if value is None:
            continue
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
        if isinstance(value, datetime):
            return int(value.timestamp() * 1e9)
        if isinstance(value, (int, float)):
            return int(value * 1e9) if value < 1e11 else int(value * 1e6) if value < 1e14 else int(value)
    return 0


def object_info(url: str) -> dict[str, Any]:
    """The object's listing entry (size, ETag, last modified); a missing object is a `DocumentError`, an
    unreachable store a `SourceUnavailableError`."""
    fs, path = filesystem_for(url)
    try:
        fs.invalidate_cache(path)  # the object as it is now, not as a listing in this process saw it
        info = fs.info(path)
    except FileNotFoundError:
        raise DocumentError(url, "object no longer exists (removed or renamed after it was registered)") from None
    except Exception as exc:  # noqa: BLE001 - network, credentials, throttling: the store, not the document
        raise SourceUnavailableError(f"{url}: the object store did not answer: {one_line(exc)}") from None
    if info.get("type", "file") != "file":
        raise DocumentError(url, "not an object (a folder or prefix)")
    return dict(info)
