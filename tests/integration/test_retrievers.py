"""The LlamaIndex and LangChain retrievers of the client package (`ctx_search_client`, clients/python/)
against a real `ctx serve` (a subprocess on loopback, the bundled MiniLM, a DuckDB index): what they return
is the service's own answer, as each framework's documents, with filters, through each framework's
blocking path and its async one (httpx.AsyncClient; tests/integration/test_client_package.py shows it
never blocks the event loop)."""

from __future__ import annotations

import asyncio
import os

import pytest
from ctx_search_client import AsyncSearchClient, SearchClient, SearchRequest, SearchServiceError

from contextual_assets.store import open_store
from tests.integration.test_search_service import DOCS, fill
from tests.support import ctx_serve

TOKEN = "tok-retrievers"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from contextual_assets.embedder_config import EmbedderCatalog

    home = tmp_path_factory.mktemp("retrievers")
    store = open_store(None, home / ".ctx" / "index.duckdb")
    fill(store, EmbedderCatalog(), "iv-one", "From")
    store.aliases.set("production", "iv-one", reason="test")
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTX_", "DAGSTER_")) and k != "DATABASE_URL"}
    env.update({"CTX_HOME": str(home / ".ctx"), "CTX_INBOX": str(home / "inbox"), "HF_HUB_OFFLINE": "1",
                "DAGSTER_HOME": str(home / "dagster_home")})
    with ctx_serve(env, TOKEN, "--no-access-log") as base:
        yield base


def service_hits(base: str, query: str, **request) -> list:
    return SearchClient(base, TOKEN, timeout_s=120).search(SearchRequest(query=query, **request)).hits


def test_llamaindex_retriever_returns_the_services_hits_as_nodes(served):
    from llama_index.core.schema import MetadataMode, QueryBundle

    from ctx_search_client.llamaindex import ContextualRetriever

    retriever = ContextualRetriever(served, token=TOKEN, k=3, timeout_s=120)
    nodes = retriever.retrieve("hotel per night in London")
    expected = service_hits(served, "hotel per night in London", k=3)
    assert [n.node.metadata["document"] for n in nodes] == [h.document for h in expected]
    assert [n.score for n in nodes] == pytest.approx([h.score for h in expected])
    top = nodes[0].node
    assert top.metadata["document"] == "handbook.pdf" and top.metadata["section_path"] == ["Travel"]
    assert top.text == f"{expected[0].header}\n\n{expected[0].text}", "the header the index embedded, then the text"
    assert top.node_id == f"iv-one:handbook.pdf#{expected[0].ordinal}"
    assert "index_version" not in top.get_content(MetadataMode.LLM) and "document: handbook.pdf" in \
        top.get_content(MetadataMode.LLM)

    narrowed = ContextualRetriever(served, token=TOKEN, k=3, filter={"path_prefix": "code/"}, timeout_s=120)
    nodes = asyncio.run(narrowed.aretrieve(QueryBundle("hotel per night in London")))
    assert [n.node.metadata["document"] for n in nodes] == ["code/rate_limiter.py"] * 2

    bare = ContextualRetriever(served, token=TOKEN, k=1, mode="lexical", include_header=False, timeout_s=120)
    (node,) = bare.retrieve("ninety days written notice")
    assert node.node.text == DOCS["contracts/supply.pdf"][1][1]

    with pytest.raises(SearchServiceError, match="401"):
        ContextualRetriever(served, token="wrong", timeout_s=120).retrieve("hotel")
    with pytest.raises(SearchServiceError, match="401") as info:
        asyncio.run(ContextualRetriever(served, token="wrong", timeout_s=120).aretrieve("hotel"))
    assert info.value.status == 401
    with pytest.raises(ValueError, match="base_url"):
        ContextualRetriever()


def test_langchain_retriever_returns_the_services_hits_as_documents(served):
    from ctx_search_client.langchain import ContextualRetriever

    retriever = ContextualRetriever(base_url=served, token=TOKEN, k=3, timeout_s=120)
    documents = retriever.invoke("hotel per night in London")
    expected = service_hits(served, "hotel per night in London", k=3)
    assert [d.metadata["document"] for d in documents] == [h.document for h in expected]
    assert [d.metadata["score"] for d in documents] == pytest.approx([h.score for h in expected])
    assert documents[0].page_content == f"{expected[0].header}\n\n{expected[0].text}"
    assert documents[0].id == f"iv-one:handbook.pdf#{expected[0].ordinal}"
    assert "tok-retrievers" not in repr(retriever), "the token is a secret"

    narrowed = ContextualRetriever(base_url=served, token=TOKEN, k=5, timeout_s=120,
                                   filter={"section": "Termination"})
    documents = asyncio.run(narrowed.ainvoke("hotel per night in London"))
    assert [(d.metadata["document"], d.metadata["section_path"]) for d in documents] == \
        [("contracts/supply.pdf", ["Termination"])]

    with pytest.raises(SearchServiceError, match="404"):
        ContextualRetriever(base_url=served, token=TOKEN, version="iv-nope", timeout_s=120).invoke("hotel")
    with pytest.raises(SearchServiceError, match="404") as info:
        asyncio.run(ContextualRetriever(base_url=served, token=TOKEN, version="iv-nope", timeout_s=120)
                    .ainvoke("hotel"))
    assert info.value.status == 404 and "iv-nope" in (info.value.detail or "")


def test_retrievers_strip_their_token_and_refuse_bad_filters_before_sending(served):
    from pydantic import ValidationError

    from ctx_search_client.langchain import ContextualRetriever as LangChainRetriever
    from ctx_search_client.llamaindex import ContextualRetriever as LlamaIndexRetriever

    # A token read from a file or a Secret, with its newline: sent without it, so the service admits it.
    token = f" {TOKEN}\n"
    nodes = LlamaIndexRetriever(served, token=token, k=1, timeout_s=120).retrieve("hotel per night in London")
    assert [n.node.metadata["document"] for n in nodes] == ["handbook.pdf"]
    documents = LangChainRetriever(base_url=served, token=token, k=1, timeout_s=120).invoke("hotel per night")
    assert [d.metadata["document"] for d in documents] == ["handbook.pdf"]
    with pytest.raises(ValidationError, match="page_from"):
        LlamaIndexRetriever(served, token=TOKEN, filter={"page_from": 10**40})


def test_the_async_paths_answer_what_the_blocking_ones_do(served):
    from ctx_search_client.langchain import ContextualRetriever as LangChainRetriever
    from ctx_search_client.llamaindex import ContextualRetriever as LlamaIndexRetriever

    query = "hotel per night in London"
    llama = LlamaIndexRetriever(served, token=TOKEN, k=3, timeout_s=120)
    chain = LangChainRetriever(base_url=served, token=TOKEN, k=3, timeout_s=120)

    async def both() -> tuple[list, list]:
        return await asyncio.gather(llama.aretrieve(query), chain.ainvoke(query))

    for _ in range(2):  # a second event loop: each retriever opens a new async client on it
        nodes, documents = asyncio.run(both())
        assert [(n.node.node_id, n.node.text) for n in nodes] == \
            [(n.node.node_id, n.node.text) for n in llama.retrieve(query)]
        assert [(d.id, d.page_content) for d in documents] == [(d.id, d.page_content) for d in chain.invoke(query)]

    async def direct() -> list:
        async with AsyncSearchClient(served, f" {TOKEN}\n", timeout_s=120) as client:
            return (await client.search(SearchRequest(query=query, k=3), request_id="test-req-1")).hits

    assert [h.document for h in asyncio.run(direct())] == [h.document for h in service_hits(served, query, k=3)]

    async def given() -> list:  # a retriever over the caller's async client (no base_url): used as given
        async with AsyncSearchClient(served, TOKEN, timeout_s=120) as client:
            return await LlamaIndexRetriever(async_client=client, k=3).aretrieve(query)

    assert [n.node.node_id for n in asyncio.run(given())] == [n.node.node_id for n in llama.retrieve(query)]


def test_the_platforms_retriever_modules_re_export_the_client_packages():
    import ctx_search_client.langchain
    import ctx_search_client.llamaindex
    from contextual_assets.retrievers import langchain, llamaindex

    assert llamaindex.ContextualRetriever is ctx_search_client.llamaindex.ContextualRetriever
    assert langchain.ContextualRetriever is ctx_search_client.langchain.ContextualRetriever
