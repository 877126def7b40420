"""A source file -> a `ParsedDocument`: parsed blocks chunked within the embedder's token budget,
with the file's content hash (the document's identity at this revision)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from contextual_assets.models import ParsedDocument
from contextual_assets.parsing import parse_file
from contextual_assets.parsing.chunking import chunk_blocks
from contextual_assets.parsing.tokens import TokenCounter


def parse_document(doc_id: str, path: Path, counter: TokenCounter, *, chunk_tokens: int, max_bytes: int,
                   max_pdf_pages: int) -> ParsedDocument:
    parsed, data = parse_file(path, max_bytes=max_bytes, max_pdf_pages=max_pdf_pages)
    chunks = chunk_blocks(doc_id, parsed, counter, chunk_tokens)
    return ParsedDocument(
        doc_id=doc_id, source_path=str(path), kind=parsed.kind, title=parsed.title,
        file_hash=hashlib.sha256(data).hexdigest(), pages=parsed.pages, chunks=chunks, warnings=parsed.warnings,
    )


def parse_metadata(doc: ParsedDocument, chunk_tokens: int, tokenizer: str, parse_s: float) -> dict[str, Any]:
    tokens = [c.token_count for c in doc.chunks] or [0]
    return {
        "file": doc.source_path,
        "kind": doc.kind,
        "title": doc.title,
        "chunks": len(doc.chunks),
        "sections": len({tuple(c.section_path) for c in doc.chunks}),
        "pages": doc.pages or 0,
        "tokens_total": sum(tokens),
        "tokens_max": max(tokens),
        "chunk_token_budget": chunk_tokens,
        "tokenizer": tokenizer,
        "file_sha256": doc.file_hash,
        "warnings": "; ".join(doc.warnings) or "none",
        "parse_s": round(parse_s, 3),
    }
