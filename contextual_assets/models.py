"""Pydantic models at the boundaries between parsing, headers, embedding and the store."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, Field, model_validator


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


# The largest page a filter may name: the store keeps pages in 32-bit INTEGER columns (both back-ends), so
# no chunk lies beyond it, and a bound past it would reach SQL as a number DuckDB refuses (an HTTP 500).
MAX_PAGE = 2**31 - 1


class ChunkFilter(BaseModel):
    """Which chunks a search may return, applied before the top k is taken (so k hits come back when k
    chunks match). Conditions combine with AND; an unset one matches everything."""

    model_config = {"extra": "forbid", "frozen": True}

    documents: list[str] | None = Field(None, min_length=1, max_length=1000,
                                        description="document keys (a hit's `document`): any of these")
    path_prefix: str | None = Field(None, min_length=1,
                                    description="document keys that start with this, e.g. a folder of the inbox")
    section: str | None = Field(None, min_length=1,
                                description="a heading the chunk's section path holds, at any depth (exact)")
    page_from: int | None = Field(None, ge=1, le=MAX_PAGE, description="chunks that reach this page or a later one")
    page_to: int | None = Field(None, ge=1, le=MAX_PAGE,
                                description="chunks that start on this page or an earlier one")

    @model_validator(mode="after")
    def _page_range(self) -> "ChunkFilter":
        if self.page_from is not None and self.page_to is not None and self.page_from > self.page_to:
            raise ValueError(f"page_from ({self.page_from}) is after page_to ({self.page_to})")
        return self

    def is_empty(self) -> bool:
        return all(v is None for v in self.model_dump().values())


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
