"""Scanning the inbox folder: which files exist, which changed, which are gone."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pydantic import BaseModel

from contextual_assets.errors import DocumentError
from contextual_assets.ingest.document_keys import key_for_path


class InboxEntry(BaseModel):
    key: str
    path: str
    size: int
    mtime_ns: int
    sha256: str


class InboxState(BaseModel):
    """The sensor cursor: what the last tick saw, so a tick only hashes files whose stat changed."""

    entries: dict[str, InboxEntry] = {}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def scan_inbox(root: Path, previous: InboxState) -> tuple[InboxState, list[str]]:
    """Current state of the inbox and the files refused (with reasons). Hidden files are ignored."""
    state = InboxState()
    refused: list[str] = []
    if not root.exists():
        return state, refused
    for directory, subdirs, files in os.walk(root, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(directory) / name
            try:
                key = key_for_path(path, root)
                stat = path.stat()
            except DocumentError as exc:
                refused.append(str(exc))
                continue
            except OSError:
                continue  # vanished between listing and stat: the sensor checks it is really gone
            if key in state.entries:
                # Two names that map to one key (e.g. the same name in NFC and NFD forms): never let
                # one silently replace the other.
                refused.append(f"{path}: same document key '{key}' as {state.entries[key].path}; rename one of them")
                continue
            old = previous.entries.get(key)
            if old is not None and old.size == stat.st_size and old.mtime_ns == stat.st_mtime_ns:
                sha = old.sha256
            else:
                try:
                    sha = file_sha256(path)
                except OSError:
                    if old is not None:  # unreadable for now (a copy in progress): keep what we knew
                        state.entries[key] = old
                    continue
            state.entries[key] = InboxEntry(key=key, path=str(path.absolute()), size=stat.st_size,
                                            mtime_ns=stat.st_mtime_ns, sha256=sha)
    return state, refused
