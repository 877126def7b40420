"""The search client package (clients/python/, `ctx-search-client`): it installs alone into an empty
venv without torch, Dagster or PyMuPDF; its models are the server's (the same classes); it reads both
error bodies (RFC 9457 problem details and the older `{"error": ...}`) over real HTTP; and its async
path, through both retrievers, never blocks the event loop."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

import ctx_search_client
from ctx_search_client import AsyncSearchClient, SearchClient, SearchRateLimited, SearchRequest, SearchServiceError
from tests.support import REPO_ROOT, app_in_thread, free_port

CLIENT_DIR = REPO_ROOT / "clients" / "python"
DELAY_S = 0.6
HIT = {"rank": 1, "score": 0.5, "document": "a.pdf", "ordinal": 0, "source_doc": "a.pdf", "title": "A",
       "section_path": ["S"], "page_start": 1, "page_end": 1, "header": "H", "text": "T", "index_version": "iv"}


# -- the package alone ------------------------------------------------------------------------------------

def test_the_client_installs_alone_without_the_platforms_heavy_dependencies(tmp_path):
    venv, source = tmp_path / "venv", tmp_path / "client"
    # A copy: pip builds in the source tree, and the checkout keeps no build/ or egg-info.
    shutil.copytree(CLIENT_DIR, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                              str(source)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                            check=True, timeout=120)
    names = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert {"ctx-search-client", "httpx", "pydantic"} <= names
    heavy = names & {"torch", "dagster", "pymupdf", "sentence-transformers", "contextual-retrieval-platform",
                     "llama-index-core", "langchain-core", "numpy"}
    assert not heavy, f"the client pulled in {heavy}"
    probe = ("import sys, ctx_search_client as c; c.SearchClient('http://127.0.0.1:9'); "
             "assert not {'torch', 'dagster', 'pymupdf', 'contextual_assets', 'llama_index', 'langchain_core'} "
             "& set(sys.modules); print(c.__file__)")
    imported = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert str(venv) in imported.stdout, "imported from the venv, not from the checkout"


def test_the_platform_ships_the_client_and_its_extras_are_the_clients():
    platform = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    client = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())["project"]
    for extra in ("llamaindex", "langchain"):
        assert platform[extra] == client["optional-dependencies"][extra], extra
    assert client["dependencies"] == ["httpx>=0.27,<1", "pydantic>=2.7,<3"]
    assert Path(ctx_search_client.__file__).resolve().parent == CLIENT_DIR / "ctx_search_client"
    from contextual_assets.serving import client as platform_client

    assert issubclass(platform_client.SearchClient, SearchClient)
    assert platform_client.SearchServiceError is SearchServiceError


@pytest.mark.parametrize("name", ["ChunkFilter", "SearchRequest", "Hit", "SearchResponse", "BatchSearchRequest",
                                  "BatchResult", "BatchSearchResponse", "VersionInfo", "VersionsResponse"])
def test_the_server_validates_with_the_clients_models(name):
    """The bodies are written once, in the client package: the service's models are the same classes."""
    from contextual_assets import models
    from contextual_assets.serving import api

    server = getattr(api, name, None) or getattr(models, name)
    assert server is getattr(ctx_search_client, name), f"{name} is written twice"
    assert ctx_search_client.MAX_PAGE == models.MAX_PAGE
    assert (ctx_search_client.MAX_QUERY_CHARS, ctx_search_client.MAX_BATCH_QUERIES) == \
        (api.MAX_QUERY_CHARS, api.MAX_BATCH_QUERIES)


def test_the_servers_problem_bodies_are_read_whole():
    """The client's ProblemDetails is laxer than the server's Problem (RFC 9457 makes every member
    optional, and a proxy may answer one): every field the server sends is read."""
    from contextual_assets.serving.api import Problem

    server = Problem(type="urn:ctx:problem:invalid-field", title="T", status=422, detail="k: too big", request_id="r1")
    body = server.model_dump(mode="json")
    assert ctx_search_client.ProblemDetails.model_validate(body).model_dump(include=set(body)) == body


# -- a tiny server: both error forms, and a search that takes its time ---------------------------------------

async def _problem(request: Request) -> JSONResponse:
    status = int(request.path_params["status"])
    body = {"type": f"urn:ctx:problem:status-{status}", "title": "Too Many Requests" if status == 429 else
            "Index version not found", "status": status, "detail": "unknown version\n'iv-nope'",
            "request_id": request.headers.get("x-request-id", "srv-1")}
    headers = {"Retry-After": "7"} if status == 429 else {}
    return JSONResponse(body, status, headers=headers, media_type="application/problem+json")


async def _slow_search(request: Request) -> JSONResponse:
    body = await request.json()
    await asyncio.sleep(DELAY_S)
    return JSONResponse({"index_version": "iv", "alias": None, "mode": "hybrid", "reranked": False, "took_ms": 1.0,
                         "hits": [{**HIT, "text": body["query"]}]})


ROUTES = [
    Route("/problem/{status}/v1/search", _problem, methods=["POST"]),
    Route("/legacy/v1/search", lambda request: JSONResponse({"error": "k: must be at most 100 (CTX_SERVE_MAX_K)"},
                                                            422, headers={"X-Request-ID": "old-7"}), methods=["POST"]),
    Route("/proxy/v1/search", lambda request: HTMLResponse("<html>\n<h1>Bad gateway</h1></html>", 502),
          methods=["POST"]),
    Route("/dated/v1/search", lambda request: JSONResponse({"error": "slow down"}, 429, headers={
        "Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}), methods=["POST"]),
    Route("/slow/v1/search", _slow_search, methods=["POST"]),
]


@pytest.fixture(scope="module")
def tiny():
    with app_in_thread(Starlette(routes=ROUTES), "the tiny server") as base:
        yield base


def test_problem_details_become_the_errors_fields(tiny):
    with SearchClient(f"{tiny}/problem/404") as client, pytest.raises(SearchServiceError) as info:
        client.search(SearchRequest(query="q"), request_id="req-abc")
    error = info.value
    assert (error.status, error.title, error.type) == (404, "Index version not found", "urn:ctx:problem:status-404")
    assert error.detail == "unknown version 'iv-nope'" and error.request_id == "req-abc", "X-Request-ID was sent"
    assert "\n" not in str(error) and "answered 404" in str(error) and "req-abc" in str(error)
    assert error.retry_after_s is None

    async def limited() -> None:
        async with AsyncSearchClient(f"{tiny}/problem/429") as client:
            await client.search(SearchRequest(query="q"))

    with pytest.raises(SearchRateLimited) as info:
        asyncio.run(limited())
    assert (info.value.status, info.value.retry_after_s, info.value.request_id) == (429, 7.0, "srv-1")
    assert "retry after 7 s" in str(info.value)


def test_older_error_bodies_and_a_proxys_page_are_read_too(tiny):
    with pytest.raises(SearchServiceError) as info:
        SearchClient(f"{tiny}/legacy").search(SearchRequest(query="q"))
    error = info.value
    assert (error.status, error.detail, error.request_id) == (422, "k: must be at most 100 (CTX_SERVE_MAX_K)", "old-7")
    assert error.title == "Unprocessable Entity" and error.type is None
    with pytest.raises(SearchServiceError) as info:
        SearchClient(f"{tiny}/proxy").search(SearchRequest(query="q"))
    assert info.value.status == 502 and "Bad gateway" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(SearchRateLimited) as info:
        SearchClient(f"{tiny}/dated").search(SearchRequest(query="q"))
    assert info.value.retry_after_s == 0.0, "a date in the past: retry now"
    with pytest.raises(ctx_search_client.SearchServiceUnavailable, match="unreachable"):
        SearchClient(f"http://127.0.0.1:{free_port()}").search(SearchRequest(query="q"))


# -- the async path never blocks the loop -------------------------------------------------------------------

class _NoThreads(ThreadPoolExecutor):
    """A default executor that refuses work: an async path that falls back to the blocking one in a thread
    (LangChain's default `_aget_relevant_documents`) fails here."""

    def submit(self, *args, **kwargs):
        raise AssertionError("the async path ran the blocking client in a thread")


async def _concurrently(searches: list, ticks: list[float]) -> tuple[list, float]:
    asyncio.get_running_loop().set_default_executor(_NoThreads(max_workers=1))

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.05)

    ticker = asyncio.create_task(tick())
    start = time.monotonic()
    results = await asyncio.gather(*searches)
    elapsed = time.monotonic() - start
    ticker.cancel()
    return results, elapsed


def _assert_not_blocked(results: list, elapsed: float, ticks: list[float], n: int) -> None:
    assert elapsed < DELAY_S * n / 2, f"{n} searches of {DELAY_S} s each took {elapsed:.2f} s: they ran one by one"
    assert len(ticks) >= DELAY_S / 0.05 / 2, f"the loop ticked {len(ticks)} times while waiting: it was blocked"
    assert max(b - a for a, b in zip(ticks, ticks[1:])) < DELAY_S / 2, "the loop was held for a whole search"


def test_the_llamaindex_retrievers_async_path_does_not_block_the_loop(tiny):
    from ctx_search_client.llamaindex import ContextualRetriever

    retriever = ContextualRetriever(f"{tiny}/slow", k=1)
    ticks: list[float] = []
    queries = [f"q{i}" for i in range(4)]
    results, elapsed = asyncio.run(_concurrently([retriever.aretrieve(q) for q in queries], ticks))
    assert [nodes[0].node.metadata["document"] for nodes in results] == ["a.pdf"] * 4
    assert [nodes[0].node.text for nodes in results] == [f"H\n\n{q}" for q in queries]
    _assert_not_blocked(results, elapsed, ticks, len(queries))


def test_the_langchain_retrievers_async_path_does_not_block_the_loop(tiny):
    from ctx_search_client.langchain import ContextualRetriever

    retriever = ContextualRetriever(base_url=f"{tiny}/slow", k=1)
    ticks: list[float] = []
    queries = [f"q{i}" for i in range(4)]
    results, elapsed = asyncio.run(_concurrently([retriever.ainvoke(q) for q in queries], ticks))
    assert [documents[0].page_content for documents in results] == [f"H\n\n{q}" for q in queries]
    _assert_not_blocked(results, elapsed, ticks, len(queries))
    # A second event loop (another asyncio.run): the retriever opens a new async client on it.
    again, _ = asyncio.run(_concurrently([retriever.ainvoke("q9")], []))
    assert again[0][0].page_content == "H\n\nq9"
