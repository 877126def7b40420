"""The search API's request and response bodies, shared by the service and its client (pydantic only:
a client imports neither torch nor Dagster)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from contextual_assets.models import ChunkFilter

MAX_QUERY_CHARS = 4000
MAX_BATCH_QUERIES = 32
SearchMode = Literal["hybrid", "dense", "lexical"]


class SearchRequest(BaseModel):
    """`POST /v1/search` (also `/search`)."""

    model_config = {"extra": "forbid"}

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    # Unbounded here: the service refuses k over its CTX_SERVE_MAX_K (a 422 naming it) before a store is asked.
    k: int = Field(10, ge=1, description="hits to return (at most the service's CTX_SERVE_MAX_K)")
    mode: SearchMode = "hybrid"
    version: str | None = Field(None, description="an index version (default: the production alias)")
    rerank: bool | None = Field(None, description="rerank the fused candidates (default: when a reranker is set)")
    filter: ChunkFilter | None = Field(None, description="which chunks may be returned, applied before the top k")


class Hit(BaseModel):
    rank: int
    score: float
    document: str
    ordinal: int | None = Field(None, description="the chunk's position in its document (with `document`, its key)")
    source_doc: str
    title: str
    section_path: list[str]
    page_start: int | None
    page_end: int | None
    header: str
    text: str
    index_version: str


class SearchResponse(BaseModel):
    index_version: str
    alias: str | None = Field(description="the alias the version was served through, if any")
    mode: str
    reranked: bool
    reranker: str | None = None
    took_ms: float
    hits: list[Hit]


class BatchSearchRequest(BaseModel):
    """`POST /v1/search/batch`: several searches in one request, answered in order. A query that is invalid
    or fails is answered in its own result (its status and error); the others are still answered."""

    model_config = {"extra": "forbid"}

    queries: list[SearchRequest] = Field(min_length=1, max_length=MAX_BATCH_QUERIES)


class BatchSearchEnvelope(BaseModel):
    """What the service validates of a batch as a whole (how many queries); each query is then validated
    alone as a `SearchRequest`, so one invalid query fails in its own result, not the batch."""

    model_config = {"extra": "forbid"}

    queries: list[Any] = Field(min_length=1, max_length=MAX_BATCH_QUERIES)


class BatchResult(BaseModel):
    """One search of a batch: its answer, or the status and message it would have had alone."""

    status: int = Field(description="200, or the status this query alone would have had: 400, 404, 409, 422 "
                                    "(invalid: the error names the field), 502, 503, or 500 (an unforeseen failure)")
    result: SearchResponse | None = Field(None, description="the answer when status is 200, else null")
    error: str | None = Field(None, description="why, in one line, when status is not 200, else null")


class BatchSearchResponse(BaseModel):
    results: list[BatchResult]


class VersionInfo(BaseModel):
    index_version: str
    documents: int
    chunks: int
    created_at: str
    embedder: str | None
    aliases: list[str]


class VersionsResponse(BaseModel):
    production: str | None
    default: str | None = Field(description="what a search without `version` serves")
    versions: list[VersionInfo]


class ErrorBody(BaseModel):
    error: str
