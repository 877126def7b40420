"""Pydantic models at the boundaries between parsing, headers, embedding and the store."""

from __future__ import annotations

import hashlib

from ctx_search_client.models import MAX_PAGE, ChunkFilter  # noqa: F401 (re-exported: the API's filter, written once)
from pydantic import BaseModel, Field


def content_hash(text: str) -> str:
    """Stable identity of a chunk's raw content (whitespace-normalised, so layout noise does not
    change identity)."""
    normalised = " ".join(text.split())
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:32]


class Chunk(BaseModel):
    """One retrievable unit of a document, before any header is attached."""

    doc_id: str = Field(description="Partition key of the source file this chunk came from.")
    source_doc: str = Field(
        description="Logical document inside the source (equals doc_id except for pre-chunked imports)."
    )
    title: str
    ordinal: int
    section_path: list[str] = Field(default_factory=list)
    page_start: int | None = None
    page_end: int | None = None
    text: str
    token_count: int
    content_hash: str
    external_id: str | None = Field(
        default=None, description="Identity given by a pre-chunked import (e.g. '<doc_uuid>:<index>')."
    )


class HeaderedChunk(Chunk):
    header: str = ""
    header_source: str = "none"
    header_model: str = ""


class EmbeddedChunk(HeaderedChunk):
    embedding: list[float]


class ParsedDocument(BaseModel):
    doc_id: str
    source_path: str
    kind: str
    title: str
    file_hash: str
    pages: int | None = None
    chunks: list[Chunk]
    warnings: list[str] = Field(default_factory=list)




class SearchHit(BaseModel):
    doc_id: str
    source_doc: str
    title: str
    ordinal: int
    section_path: list[str]
    page_start: int | None
    page_end: int | None
    text: str
    header: str
    score: float
    index_version: str
    external_id: str | None = None


class SourceRecord(BaseModel):
    """Where a partition's file lives, as registered by the sensor or `ctx ingest`."""

    doc_id: str
    path: str
    file_hash: str | None = None


class DocumentRecord(BaseModel):
    doc_id: str
    index_version: str
    source_path: str
    kind: str
    title: str
    file_hash: str
    n_chunks: int
    updated_at: str
