"""Which files become documents, for the inbox sensor and `ctx ingest` alike: hidden files and folders
are skipped, a file type the parsers do not take is refused with its reason, and a file's key follows
from where it is (`document_keys`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from contextual_assets.errors import DocumentError
from contextual_assets.ingest.inbox.document_keys import document_key, key_for_path
from contextual_assets.parsing import SUPPORTED_EXTENSIONS

_ACCEPTED = frozenset(SUPPORTED_EXTENSIONS)


def is_hidden(relative: str | Path) -> bool:
    """A path (relative to the folder or prefix being listed) with a hidden part: .git, .cache, editor
    swap files are never documents."""
    return any(part.startswith(".") for part in Path(relative).parts)


def unsupported(path: str) -> str | None:
    """Why a file of this type is not taken, or None."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in _ACCEPTED:
        return None
    return f"{path}: unsupported file type '{suffix or '(none)'}', skipped (supported: {', '.join(SUPPORTED_EXTENSIONS)})"


_SPECIAL_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                  (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def special_file(path: str | Path, mode: int | None = None) -> str | None:
    """Why a path that is neither a regular file nor a folder (a FIFO, socket or device) is refused, or
    None; decided from its mode (`os.stat`, following links), never by opening it: opening a FIFO waits
    for a writer, for ever. A path that cannot be stat'ed is not decided here (None)."""
    if mode is None:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return None
    kind = special_kind(mode)
    return None if kind is None else f"{path}: {kind}"


def special_kind(mode: int) -> str | None:
    """What a file of this mode is when it is neither a regular file nor a folder (why it is refused)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kind = next((name for test, name in _SPECIAL_KINDS if test(mode)), "not a regular file")
    return f"{kind}, not a regular file; refused without opening it"


def collect_sources(
    paths: Iterable[str | Path],
    *,
    inbox: Path | None,
    source_root: Path | None = None,
    registered: dict[str, str] | None = None,
) -> tuple[list[tuple[str, Path]], list[str]]:
    """Files to ingest with their document keys, and the refusals (with reasons).

    A file's key follows from the file, not from how it was named, so re-ingesting it by any route
    updates the same document: (1) the key it is already registered under (`registered` maps a
    resolved path to its key, from `store.corpus.list_sources()`); else (2) its path relative to the inbox
    when it resolves under it (the key the inbox sensor gives); else (3) relative to `source_root`
    (default: the current directory); else (4) its whole resolved path. A folder's files are all
    its non-hidden files; a link in it that resolves outside it is refused. The same file reached
    twice is one source; two files never share a key (nor take one registered to another file
    that still exists). A FIFO, socket or device, named or in a folder, is refused from its mode
    alone, never opened (`special_file`).
    """
    root = Path.cwd() if source_root is None else Path(source_root)
    sources = _SourceKeys(inbox=inbox, root=root, registered=registered or {})
    for raw in paths:
        sources.add_path(Path(raw))
    return list(sources.unique.items()), sources.refused


class _SourceKeys:
    """One `collect_sources` call's files by key so far, and its refusals."""

    def __init__(self, *, inbox: Path | None, root: Path, registered: dict[str, str]) -> None:
        self.inbox = inbox
        self.root = root
        self.registered = registered  # resolved path -> its registered key
        self.owner_of = {key: path for path, key in registered.items()}  # registered key -> resolved path
        self.unique: dict[str, Path] = {}  # key -> the file taken under it
        self.keyed: dict[Path, str] = {}  # resolved file -> its key in this call
        self.refused: list[str] = []

    def add_path(self, path: Path) -> None:
        """A named path: a folder's files, a file, or the reason it is refused."""
        if path.is_dir():
            for file, reason in folder_files(path):
                if reason is not None:
                    self.refused.append(reason)
                else:
                    self.add(file)
        elif (reason := special_file(path)) is not None:
            self.refused.append(reason)
        elif path.exists():
            self.add(path)
        else:
            self.refused.append(f"{path}: no such file or directory")

    def add(self, file: Path) -> None:
        """Take a file under its key, unless it is taken already or its key belongs to another file."""
        resolved = file.resolve()
        if resolved in self.keyed:
            return
        key = self.registered.get(str(resolved))
        if key is None:
            key = self._new_key(file, resolved)
            if key is None:
                return
        if key in self.unique:
            self.refused.append(f"{file}: same document key '{key}' as {self.unique[key]}; rename one of them or "
                                "set CTX_SOURCE_ROOT so the keys differ")
            return
        self.keyed[resolved] = key
        self.unique[key] = file

    def _new_key(self, file: Path, resolved: Path) -> str | None:
        """The key of a file not registered yet, or None (refused): no key follows from where it is, or the
        key is registered to another file that still exists."""
        try:
            key = document_key(resolved, inbox=self.inbox, source_root=self.root)
        except DocumentError as exc:
            self.refused.append(str(exc))
            return None
        owner = self.owner_of.get(key)
        if owner is not None and Path(owner).exists() and Path(owner).resolve() != resolved:
            self.refused.append(f"{file}: same document key '{key}' as {owner} (already ingested); rename one of "
                                "them or set CTX_SOURCE_ROOT so the keys differ")
            return None
        return key


def folder_files(folder: Path) -> list[tuple[Path, str | None]]:
    """A folder's files in name order, each with why it is refused (None: taken): its non-hidden files of a
    supported type; a link in it that resolves outside it is refused, and so is a FIFO, socket or device
    (from its mode: never opened)."""
    found: list[tuple[Path, str | None]] = []
    for file in sorted(p for p in folder.rglob("*") if not is_hidden(p.relative_to(folder))):
        try:
            mode = file.stat().st_mode
        except OSError:
            continue  # a dangling link, or gone since the listing
        if stat.S_ISDIR(mode):
            continue
        reason = special_file(file, mode) or unsupported(str(file))
        if reason is None:
            try:
                key_for_path(file, folder)  # refuses a link that resolves outside the folder
            except DocumentError as exc:
                reason = str(exc)
        found.append((file, reason))
    return found
