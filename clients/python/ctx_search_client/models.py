"""The search API's bodies, written once: the service (`contextual_assets/serving/api.py`, which adds only
its own envelope, problem and readiness models) validates with these classes, and this client sends and
reads them. Pydantic only. Response models ignore fields they do not know, so a newer server still parses."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

MAX_QUERY_CHARS = 4000
MAX_BATCH_QUERIES = 32
# The largest page a filter may name (the store's 32-bit page columns).
MAX_PAGE = 2**31 - 1
SearchMode = Literal["hybrid", "dense", "lexical"]


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


class SearchRequest(BaseModel):
    """`POST /v1/search` (also `/search`)."""

    model_config = {"extra": "forbid"}

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
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


class ProblemDetails(BaseModel):
    """An error body in RFC 9457's form (`Content-Type: application/problem+json`); every member optional,
    as the RFC allows, and unknown extension members kept."""

    model_config = {"extra": "allow"}

    type: str | None = None
    title: str | None = None
    status: int | None = None
    detail: str | None = None
    instance: str | None = None
    request_id: str | None = None


class LegacyErrorBody(BaseModel):
    """An older server's error body: `{"error": "<one line>"}`."""

    error: str
