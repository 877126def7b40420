"""A LlamaIndex retriever over the search service (`pip install 'contextual-assets[llamaindex]'`):

    retriever = ContextualRetriever("http://search:8765", token=os.environ["CTX_SEARCH_TOKEN"], k=5)
    nodes = retriever.retrieve("What is the late delivery penalty?")
    query_engine = RetrieverQueryEngine.from_args(retriever, llm=...)

Each hit is a `TextNode` (its header and text; document, section path, pages and index version as
metadata) with the service's score. The service does the retrieval (hybrid, filters, rerank); nothing
is embedded here."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from contextual_assets.models import ChunkFilter
from contextual_assets.serving.api import SearchMode
from contextual_assets.serving.client import SearchClient

from .hits import hit_id, hit_metadata, hit_text, search_request

# Metadata the LLM and the embedder never read in a node's content (the header is already in the text).
_NOT_FOR_CONTENT = ["ordinal", "header", "score", "rank", "index_version", "page_start", "page_end"]


class ContextualRetriever(BaseRetriever):
    """Searches `ctx serve` at `base_url` (or through a `SearchClient` of the caller's)."""

    def __init__(self, base_url: str | None = None, *, token: str | None = None, client: SearchClient | None = None,
                 k: int = 5, mode: SearchMode = "hybrid", version: str | None = None,
                 filter: ChunkFilter | dict | None = None, rerank: bool | None = None, include_header: bool = True,
                 timeout_s: float = 30.0, **kwargs: Any):
        if client is None and not base_url:
            raise ValueError("ContextualRetriever needs base_url (the search service, e.g. http://search:8765) "
                             "or client")
        super().__init__(**kwargs)
        self.client = client or SearchClient(base_url or "", token, timeout_s=timeout_s)
        self.k, self.mode, self.version, self.rerank, self.include_header = k, mode, version, rerank, include_header
        self.filter = ChunkFilter.model_validate(filter) if isinstance(filter, dict) else filter
        search_request("check", k=k, mode=mode, version=version, filter=self.filter, rerank=rerank)  # fail early

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        request = search_request(query_bundle.query_str, k=self.k, mode=self.mode, version=self.version,
                                 filter=self.filter, rerank=self.rerank)
        return [
            NodeWithScore(node=TextNode(id_=hit_id(hit), text=hit_text(hit, self.include_header),
                                        metadata=hit_metadata(hit), excluded_llm_metadata_keys=_NOT_FOR_CONTENT,
                                        excluded_embed_metadata_keys=_NOT_FOR_CONTENT),
                          score=hit.score)
            for hit in self.client.search(request).hits
        ]
