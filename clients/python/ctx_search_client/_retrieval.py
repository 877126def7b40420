"""What both retrievers share: the clients they search through (one blocking, one async per event loop),
the search request they send, and how a hit becomes a framework's document (its text, a stable id and
metadata). Imports neither framework."""

from __future__ import annotations

import asyncio
from typing import Any

from .client import AsyncSearchClient, SearchClient
from .models import ChunkFilter, Hit, SearchMode, SearchRequest


class RetrieverClients:
    """The blocking client for `retrieve`/`invoke` and an async one for `aretrieve`/`ainvoke`, each made
    when first needed. An httpx.AsyncClient's connections belong to the event loop that opened them, so
    an async client this object made is remade when a search runs on another loop (each `asyncio.run`);
    one the caller passed is used as given."""

    def __init__(self, base_url: str | None, token: str | None, timeout_s: float, *,
                 client: SearchClient | None = None, async_client: AsyncSearchClient | None = None):
        given = client or async_client
        if given is None and not base_url:
            raise ValueError("ContextualRetriever needs base_url (the search service, e.g. http://search:8765) "
                             "or client")
        # A sibling of the other kind (async for a given blocking client, or the reverse) is made like it.
        source = (base_url, token, timeout_s) if base_url or given is None else \
            (given.base_url, given.token, given.timeout_s)
        self.base_url, self.token, self.timeout_s = source[0] or "", source[1], source[2]
        self._client = client
        self._given_async = async_client
        self._async: tuple[asyncio.AbstractEventLoop, AsyncSearchClient] | None = None
        if client is None and async_client is None:
            self._client = SearchClient(self.base_url, self.token, timeout_s=self.timeout_s)  # a bad URL fails here

    def sync(self) -> SearchClient:
        if self._client is None:
            self._client = SearchClient(self.base_url, self.token, timeout_s=self.timeout_s)
        return self._client

    def async_(self) -> AsyncSearchClient:
        if self._given_async is not None:
            return self._given_async
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            self._async = (loop, AsyncSearchClient(self.base_url, self.token, timeout_s=self.timeout_s))
        return self._async[1]


def as_filter(filter: ChunkFilter | dict[str, Any] | None) -> ChunkFilter | None:
    return ChunkFilter.model_validate(filter) if isinstance(filter, dict) else filter


def search_request(query: str, *, k: int, mode: SearchMode, version: str | None,
                   filter: ChunkFilter | dict[str, Any] | None, rerank: bool | None) -> SearchRequest:
    return SearchRequest(query=query, k=k, mode=mode, version=version, rerank=rerank, filter=as_filter(filter))


def hit_text(hit: Hit, include_header: bool) -> str:
    """The chunk as the index embedded it: its situating header, then its text."""
    return f"{hit.header}\n\n{hit.text}" if include_header and hit.header else hit.text


def hit_id(hit: Hit) -> str:
    """Stable across searches of one index version: the document key and the chunk's position."""
    return f"{hit.index_version}:{hit.document}#{hit.ordinal if hit.ordinal is not None else hit.rank}"


def hit_metadata(hit: Hit) -> dict[str, Any]:
    return {"document": hit.document, "ordinal": hit.ordinal, "source_doc": hit.source_doc, "title": hit.title,
            "section_path": list(hit.section_path), "page_start": hit.page_start, "page_end": hit.page_end,
            "header": hit.header, "score": hit.score, "rank": hit.rank, "index_version": hit.index_version}
