"""A source file -> a `ParsedDocument`: parsed blocks chunked within the embedder's token budget,
with the file's content hash (the document's identity at this revision)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from contextual_assets.parsing.chunking import chunk_blocks
from contextual_assets.models import ParsedDocument
from contextual_assets.parsing import parse_file
from contextual_assets.parsing.tokens import TokenCounter


def parse_document(doc_id: str, path: Path, counter: TokenCounter, *, chunk_tokens: int, max_bytes: int,
                   max_pdf_pages: int) -> ParsedDocument:
    parsed, data = parse_file(path, max_bytes=max_bytes, max_pdf_pages=max_pdf_pages)
    chunks = chunk_blocks(doc_id, parsed, counter, chunk_tokens)
    return ParsedDocument(
        doc_id=doc_id, source_path=str(path), kind=parsed.kind, title=parsed.title,
        file_hash=hashlib.sha256(data).hexdigest(), pages=parsed.pages, chunks=chunks, warnings=parsed.warnings,
    )
