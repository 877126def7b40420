"""Import of pre-chunked corpora (the format of Anthropic's contextual-retrieval benchmark), so
published benchmarks run on their own chunks."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ValidationError

from ..errors import DocumentError
from .blocks import Block, ParsedSource


class PrechunkedChunk(BaseModel):
    chunk_id: str
    original_index: int
    content: str


class PrechunkedDocument(BaseModel):
    doc_id: str
    original_uuid: str
    content: str | None = None
    chunks: list[PrechunkedChunk]


def looks_prechunked(data: bytes) -> bool:
    head = data[:4096].lstrip()
    return head.startswith(b"[") and b'"chunks"' in data[:200_000] and b'"original_uuid"' in data[:200_000]


def parse_prechunked(path: Path, data: bytes) -> ParsedSource:
    try:
        raw = json.loads(data.decode("utf-8"))
        documents = [PrechunkedDocument.model_validate(item) for item in raw]
    except (UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
        raise DocumentError(str(path), f"not a valid pre-chunked JSON import: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise DocumentError(
            str(path), f"pre-chunked JSON does not match the expected format at {first['loc']}: {first['msg']}"
        ) from None
    blocks = [
        Block(
            text=chunk.content,
            source_doc=document.original_uuid,
            title=document.doc_id,
            fixed_chunk=True,
            external_id=f"{document.original_uuid}:{chunk.original_index}",
            is_code=True,
        )
        for document in documents
        for chunk in sorted(document.chunks, key=lambda c: c.original_index)
    ]
    return ParsedSource(kind="prechunked-json", title=path.stem, blocks=blocks)
