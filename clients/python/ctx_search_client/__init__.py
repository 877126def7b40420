"""Client of the contextual-retrieval search API (`ctx serve`), with httpx and pydantic only:

    from ctx_search_client import SearchClient, AsyncSearchClient, SearchRequest

    with SearchClient("http://search:8765", token) as client:
        hits = client.search(SearchRequest(query="late delivery penalty", k=3)).hits
    async with AsyncSearchClient("http://search:8765", token) as client:
        hits = (await client.search(SearchRequest(query="late delivery penalty", k=3))).hits

Retrievers: `ctx_search_client.llamaindex` (extra `llamaindex`) and `ctx_search_client.langchain`
(extra `langchain`); neither framework is imported by this module."""

from .client import AsyncSearchClient, SearchClient, clean_token
from .errors import SearchRateLimited, SearchServiceError, SearchServiceUnavailable
from .models import (
    MAX_BATCH_QUERIES,
    MAX_PAGE,
    MAX_QUERY_CHARS,
    BatchResult,
    BatchSearchRequest,
    BatchSearchResponse,
    ChunkFilter,
    Hit,
    ProblemDetails,
    SearchMode,
    SearchRequest,
    SearchResponse,
    VersionInfo,
    VersionsResponse,
)

__version__ = "0.1.0"

__all__ = [
    "MAX_BATCH_QUERIES", "MAX_PAGE", "MAX_QUERY_CHARS", "AsyncSearchClient", "BatchResult", "BatchSearchRequest",
    "BatchSearchResponse", "ChunkFilter", "Hit", "ProblemDetails", "SearchClient", "SearchMode", "SearchRateLimited",
    "SearchRequest", "SearchResponse", "SearchServiceError", "SearchServiceUnavailable", "VersionInfo",
    "VersionsResponse", "clean_token",
]
