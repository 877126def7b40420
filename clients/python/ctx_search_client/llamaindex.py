"""A LlamaIndex retriever over the search service (`pip install 'ctx-search-client[llamaindex]'`):

    retriever = ContextualRetriever("http://search:8765", token=os.environ["CTX_SEARCH_TOKEN"], k=5)
    nodes = retriever.retrieve("What is the late delivery penalty?")
    nodes = await retriever.aretrieve("What is the late delivery penalty?")   # httpx.AsyncClient
    query_engine = RetrieverQueryEngine.from_args(retriever, llm=...)

Each hit is a `TextNode` (its header and text; document, section path, pages and index version as
metadata) with the service's score. The service does the retrieval (hybrid, filters, rerank); nothing
is embedded here."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from ._retrieval import RetrieverClients, as_filter, hit_id, hit_metadata, hit_text, search_request
from .client import AsyncSearchClient, SearchClient
from .models import ChunkFilter, SearchMode, SearchRequest, SearchResponse

# Metadata the LLM and the embedder never read in a node's content (the header is already in the text).
_NOT_FOR_CONTENT = ["ordinal", "header", "score", "rank", "index_version", "page_start", "page_end"]


class ContextualRetriever(BaseRetriever):
    """Searches `ctx serve` at `base_url` (or through the caller's `SearchClient` / `AsyncSearchClient`)."""

    def __init__(self, base_url: str | None = None, *, token: str | None = None, client: SearchClient | None = None,
                 async_client: AsyncSearchClient | None = None, k: int = 5, mode: SearchMode = "hybrid",
                 version: str | None = None, filter: ChunkFilter | dict[str, Any] | None = None,
                 rerank: bool | None = None, include_header: bool = True, timeout_s: float = 30.0,
                 **kwargs: Any):
        clients = RetrieverClients(base_url, token, timeout_s, client=client, async_client=async_client)
        super().__init__(**kwargs)
        self.clients = clients
        self.k, self.mode, self.version, self.rerank, self.include_header = k, mode, version, rerank, include_header
        self.filter = as_filter(filter)
        self._request("check")  # an invalid k, mode or filter fails here, not at the first query

    @property
    def client(self) -> SearchClient:
        return self.clients.sync()

    def _request(self, query: str) -> SearchRequest:
        return search_request(query, k=self.k, mode=self.mode, version=self.version, filter=self.filter,
                              rerank=self.rerank)

    def _nodes(self, response: SearchResponse) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=TextNode(id_=hit_id(hit), text=hit_text(hit, self.include_header),
                                        metadata=hit_metadata(hit), excluded_llm_metadata_keys=_NOT_FOR_CONTENT,
                                        excluded_embed_metadata_keys=_NOT_FOR_CONTENT),
                          score=hit.score)
            for hit in response.hits
        ]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(self.clients.sync().search(self._request(query_bundle.query_str)))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(await self.clients.async_().search(self._request(query_bundle.query_str)))
