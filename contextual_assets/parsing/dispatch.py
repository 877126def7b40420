"""Choose a parser by file type; every rejection names the file and the reason."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from ..errors import DocumentError
from ..settings import PlatformSettings
from .blocks import ParsedSource
from .code import CODE_EXTENSIONS, parse_code
from .objects import (
    SourceUnavailableError,
    filesystem_for,
    is_object_url,
    object_info,
    object_revision,
    one_line,
)
from .pdf import DEFAULT_MAX_PDF_PAGES, parse_pdf
from .prechunked import looks_prechunked, parse_prechunked
from .text import parse_markdown, parse_text

# Larger files are refused by default (CTX_MAX_FILE_MB).
DEFAULT_MAX_BYTES = int(PlatformSettings.default("max_file_mb") * 1_000_000)

TEXT_EXTENSIONS = {".txt", ".text", ".rst", ".log", ".csv"}
MARKDOWN_EXTENSIONS = {".md", ".markdown"}
SUPPORTED_EXTENSIONS = sorted({".pdf", ".json"} | TEXT_EXTENSIONS | MARKDOWN_EXTENSIONS | set(CODE_EXTENSIONS))


def read_source(path: Path, max_bytes: int) -> bytes:
    """Read a file with the checks that apply to every kind.

    The file is opened without following a symbolic link in its last component: registered paths
    are resolved when they are registered (inbox sensor, `ctx ingest`), so a link found here was
    swapped in afterwards and could point anywhere (outside the inbox). Size is checked on the open
    file and enforced while reading, so a file that grows after the check cannot exceed the limit.
    An object-store URL (`s3://...`, passed as a `upath.UPath`) is read through fsspec with the same
    limits (see `read_object`).
    """
    if is_object_url(str(path)):
        return read_object(str(path), max_bytes)[0]
    if os.path.islink(path):
        raise DocumentError(
            str(path), "is a symbolic link (it replaced the registered file); refused, since it may point "
            "outside the inbox; add the file itself")
    if not path.exists():
        raise DocumentError(str(path), "file no longer exists (removed or renamed after it was registered)")
    if not path.is_file():
        raise DocumentError(str(path), "not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise DocumentError(str(path), f"cannot be opened: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise DocumentError(str(path), "not a regular file")
        if info.st_size == 0:
            raise DocumentError(str(path), "empty file (0 bytes)")
        if info.st_size > max_bytes:
            raise DocumentError(str(path), over_limit(info.st_size, max_bytes))
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise DocumentError(str(path), over_limit(len(data), max_bytes) + " (it grew while being read)")
    if not data:
        raise DocumentError(str(path), "empty file (0 bytes)")
    return data


def read_object(url: str, max_bytes: int) -> tuple[bytes, str]:
    """An object's bytes and the revision they are (see `objects.object_revision`).

    The size is checked on the object's listing entry before anything is downloaded. The read is
    pinned to the entry it was opened with where the store allows it (s3fs reads with If-Match on the
    ETag), so the bytes are the revision returned or the read fails."""
    fs, path = filesystem_for(url)
    info = object_info(url)  # the missing object and the unreachable store, each with its reason
    size = int(info.get("size") or 0)
    if size == 0:
        raise DocumentError(url, "empty file (0 bytes)")
    if size > max_bytes:
        raise DocumentError(url, over_limit(size, max_bytes))
    try:
        with fs.open(path, "rb") as handle:
            details = getattr(handle, "details", None) or info
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise DocumentError(url, "object no longer exists (removed or renamed after it was registered)") from None
    except Exception as exc:  # noqa: BLE001 - network, credentials, a changed ETag: the store, not the content
        raise SourceUnavailableError(f"{url}: reading the object failed: {one_line(exc)}") from None
    if len(data) > max_bytes:
        raise DocumentError(url, over_limit(len(data), max_bytes) + " (it grew while being read)")
    if not data:
        raise DocumentError(url, "empty file (0 bytes)")
    return data, object_revision(details)


def over_limit(size: int, max_bytes: int) -> str:
    return f"file is {size / 1e6:.1f} MB, over the limit of {max_bytes / 1e6:.1f} MB (CTX_MAX_FILE_MB)"


_SURROGATES = re.compile("[\ud800-\udfff]")


def _clean(text: str) -> str:
    """NUL characters (which Postgres text cannot hold) dropped, lone surrogates (which no store can
    encode as UTF-8) replaced: PDFs and JSON imports can carry both."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    return _SURROGATES.sub("\ufffd", text)


def _sanitize(parsed: ParsedSource) -> ParsedSource:
    blocks = [
        block.model_copy(update={"text": _clean(block.text), "section_path": [_clean(s) for s in block.section_path],
                                 "title": _clean(block.title) if block.title is not None else None,
                                 "source_doc": _clean(block.source_doc) if block.source_doc is not None else None,
                                 "external_id": _clean(block.external_id) if block.external_id is not None else None})
        for block in parsed.blocks
    ]
    return parsed.model_copy(update={"title": _clean(parsed.title), "blocks": blocks})


def parse_file(path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
               max_pdf_pages: int = DEFAULT_MAX_PDF_PAGES) -> tuple[ParsedSource, bytes]:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_EXTENSIONS:
        raise DocumentError(
            str(path), f"unsupported file type '{suffix or '(none)'}'; supported: {', '.join(SUPPORTED_EXTENSIONS)}"
        )
    data = read_source(path, max_bytes)
    if suffix == ".pdf":
        parsed = parse_pdf(path, data, max_pages=max_pdf_pages)
    elif suffix in MARKDOWN_EXTENSIONS:
        parsed = parse_markdown(path, data)
    elif suffix == ".json":
        if not looks_prechunked(data):
            raise DocumentError(
                str(path), "JSON files are read only as pre-chunked imports (a list of {doc_id, original_uuid, chunks})"
            )
        parsed = parse_prechunked(path, data)
    elif suffix in CODE_EXTENSIONS:
        parsed = parse_code(path, data)
    else:
        parsed = parse_text(path, data)
    parsed = _sanitize(parsed)
    if not any(block.text.strip() for block in parsed.blocks):
        raise DocumentError(str(path), "no text found in the document")
    return parsed, data
