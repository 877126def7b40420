"""A LangChain retriever over the search service (`pip install 'ctx-search-client[langchain]'`):

    retriever = ContextualRetriever(base_url="http://search:8765", token=os.environ["CTX_SEARCH_TOKEN"], k=5)
    documents = retriever.invoke("What is the late delivery penalty?")
    documents = await retriever.ainvoke("What is the late delivery penalty?")   # httpx.AsyncClient
    chain = {"context": retriever, "question": RunnablePassthrough()} | prompt | llm

Each hit is a `Document` (its header and text as `page_content`; document, section path, pages, score
and index version as metadata; a stable `id`). The service does the retrieval (hybrid, filters,
rerank); nothing is embedded here."""

from __future__ import annotations

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr

from ._retrieval import RetrieverClients, hit_id, hit_metadata, hit_text, search_request
from .models import ChunkFilter, SearchMode, SearchRequest, SearchResponse


class ContextualRetriever(BaseRetriever):
    """Searches `ctx serve` at `base_url`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: str = Field(description="the search service, e.g. http://search:8765")
    token: SecretStr | None = Field(None, description="its bearer token (CTX_SEARCH_TOKEN)")
    k: int = Field(5, ge=1)
    mode: SearchMode = "hybrid"
    version: str | None = None
    filter: ChunkFilter | None = None
    rerank: bool | None = None
    include_header: bool = True
    timeout_s: float = 30.0
    _clients: RetrieverClients | None = PrivateAttr(None)

    def _search_clients(self) -> RetrieverClients:
        if self._clients is None:
            token = self.token.get_secret_value() if self.token else None
            self._clients = RetrieverClients(self.base_url, token, self.timeout_s)
        return self._clients

    def _request(self, query: str) -> SearchRequest:
        return search_request(query, k=self.k, mode=self.mode, version=self.version, filter=self.filter,
                              rerank=self.rerank)

    def _documents(self, response: SearchResponse) -> list[Document]:
        return [Document(id=hit_id(hit), page_content=hit_text(hit, self.include_header), metadata=hit_metadata(hit))
                for hit in response.hits]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self._documents(self._search_clients().sync().search(self._request(query)))

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        return self._documents(await self._search_clients().async_().search(self._request(query)))
