"""Choose a parser by file type; every rejection names the file and the reason."""

from __future__ import annotations

from pathlib import Path

from ..errors import DocumentError
from .blocks import ParsedSource
from .code import CODE_EXTENSIONS, parse_code
from .pdf import parse_pdf
from .prechunked import looks_prechunked, parse_prechunked
from .text import parse_markdown, parse_text

TEXT_EXTENSIONS = {".txt", ".text", ".rst", ".log", ".csv"}
MARKDOWN_EXTENSIONS = {".md", ".markdown"}
SUPPORTED_EXTENSIONS = sorted({".pdf", ".json"} | TEXT_EXTENSIONS | MARKDOWN_EXTENSIONS | set(CODE_EXTENSIONS))


def read_source(path: Path, max_bytes: int) -> bytes:
    """Read a file with the checks that apply to every kind."""
    if not path.exists():
        raise DocumentError(str(path), "file no longer exists (removed or renamed after it was registered)")
    if not path.is_file():
        raise DocumentError(str(path), "not a regular file")
    size = path.stat().st_size
    if size == 0:
        raise DocumentError(str(path), "empty file (0 bytes)")
    if size > max_bytes:
        raise DocumentError(
            str(path), f"file is {size / 1e6:.1f} MB, over the limit of {max_bytes / 1e6:.1f} MB (CTX_MAX_FILE_MB)"
        )
    return path.read_bytes()


def parse_file(path: Path, *, max_bytes: int = 100_000_000, max_pdf_pages: int = 2000) -> tuple[ParsedSource, bytes]:
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
    if not any(block.text.strip() for block in parsed.blocks):
        raise DocumentError(str(path), "no text found in the document")
    return parsed, data
