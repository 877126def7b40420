"""The ingest steps as plain functions (the Dagster assets are thin wrappers over these)."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path

from .chunking import chunk_blocks
from .embedding import Embedder, embedding_text
from .headers.base import HeaderRequest, HeaderSource
from .models import EmbeddedChunk, HeaderedChunk, ParsedDocument
from .parsing import parse_file
from .tokens import TokenCounter


def parse_document(doc_id: str, path: Path, counter: TokenCounter, *, chunk_tokens: int, max_bytes: int,
                   max_pdf_pages: int) -> ParsedDocument:
    parsed, data = parse_file(path, max_bytes=max_bytes, max_pdf_pages=max_pdf_pages)
    chunks = chunk_blocks(doc_id, parsed, counter, chunk_tokens)
    return ParsedDocument(
        doc_id=doc_id, source_path=str(path), kind=parsed.kind, title=parsed.title,
        file_hash=hashlib.sha256(data).hexdigest(), pages=parsed.pages, chunks=chunks, warnings=parsed.warnings,
    )


def header_requests(doc: ParsedDocument, counter: TokenCounter, context_tokens: int) -> list[HeaderRequest]:
    """Each chunk with its section as context, trimmed symmetrically around the chunk to the budget."""
    sections: dict[tuple, list[int]] = defaultdict(list)
    for index, chunk in enumerate(doc.chunks):
        sections[(chunk.source_doc, tuple(chunk.section_path))].append(index)
    token_counts = [c.token_count for c in doc.chunks]
    requests: list[HeaderRequest] = []
    for index, chunk in enumerate(doc.chunks):
        members = sections[(chunk.source_doc, tuple(chunk.section_path))]
        position = members.index(index)
        left, right = position, position
        used = token_counts[index]
        while True:
            grown = False
            if left > 0 and used + token_counts[members[left - 1]] <= context_tokens:
                left -= 1
                used += token_counts[members[left]]
                grown = True
            if right < len(members) - 1 and used + token_counts[members[right + 1]] <= context_tokens:
                right += 1
                used += token_counts[members[right]]
                grown = True
            if not grown:
                break
        before = [doc.chunks[i].text for i in reversed(members[left:position])]
        after = [doc.chunks[i].text for i in members[position + 1 : right + 1]]
        requests.append(HeaderRequest(chunk=chunk, before=before, after=after))
    return requests


def attach_headers(doc: ParsedDocument, source: HeaderSource, counter: TokenCounter,
                   context_tokens: int) -> tuple[list[HeaderedChunk], list]:
    requests = header_requests(doc, counter, context_tokens)
    results = source.generate(requests)
    headered = [
        HeaderedChunk(**chunk.model_dump(), header=result.header, header_source=result.source,
                      header_model=result.model)
        for chunk, result in zip(doc.chunks, results)
    ]
    return headered, results


def embed_chunks(chunks: list[HeaderedChunk], embedder: Embedder) -> list[EmbeddedChunk]:
    vectors = embedder.embed([embedding_text(c.header, c.text) for c in chunks])
    return [EmbeddedChunk(**c.model_dump(), embedding=v) for c, v in zip(chunks, vectors)]
