"""Search pieces without a server: weighted fusion, the embedder device setting, query micro-batching."""

from __future__ import annotations

import threading

import pytest

from contextual_assets.batching import MicroBatcher
from contextual_assets.embedding import Embedder, torch_device
from contextual_assets.errors import ConfigurationError
from contextual_assets.fusion import FusionWeights, reciprocal_rank_fusion


def problem_detail(answer, status: int, slug: str) -> str:
    """The detail of an RFC 9457 problem answer, after checking every member, its media type and that its
    request id is the response's `X-Request-ID`."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json", answer.headers
    body = answer.json()
    assert set(body) == {"type", "title", "status", "detail", "request_id"}, body
    assert body["type"] == f"urn:ctx:problem:{slug}" and body["status"] == status and body["title"], body
    assert body["request_id"] == answer.headers["x-request-id"] and "\n" not in body["detail"], body
    return body["detail"]


def test_weighted_fusion_follows_the_weights():
    dense, lexical = ["a", "b", "c"], ["c", "b", "d"]
    equal = dict(reciprocal_rank_fusion([dense, lexical], 4, constant=60))
    assert equal["b"] > equal["a"] and equal["c"] > equal["a"]
    lexical_only = [k for k, _ in reciprocal_rank_fusion([dense, lexical], 4, weights=[0.0, 1.0])]
    assert lexical_only == lexical
    leaning = [k for k, _ in reciprocal_rank_fusion([dense, lexical], 4, constant=1, weights=[0.2, 1.0])]
    assert leaning[0] == "c"
    with pytest.raises(ValueError):
        FusionWeights(dense=-0.1)


def test_embed_device_auto_is_cpu_without_a_gpu_and_cuda_is_refused_by_name():
    import torch

    if torch.cuda.is_available():
        assert torch_device("auto") == "cuda"
    else:
        assert torch_device("auto") == "cpu"
        with pytest.raises(ConfigurationError, match="CTX_EMBED_DEVICE=cuda"):
            torch_device("cuda")
    assert torch_device("cpu") == "cpu"


class _Recording(Embedder):
    identity = "test:recording"
    dimension = 2

    def __init__(self):
        self.calls: list[int] = []
        self.entered = 0
        self.gate = threading.Event()

    def embed(self, texts):
        self.entered += len(texts)
        self.gate.wait(5)  # hold the first call so the others queue up behind it
        self.calls.append(len(texts))
        return [[float(len(t)), 1.0] for t in texts]


def test_concurrent_queries_are_embedded_together_and_each_gets_its_own_vector():
    embedder = _Recording()
    batcher = MicroBatcher(embedder.embed)
    results: dict[str, list[float]] = {}
    threads = [threading.Thread(target=lambda q=q: results.__setitem__(q, batcher.submit(q)))
               for q in ("a", "bb", "ccc", "dddd", "eeeee")]
    for t in threads:
        t.start()
    while embedder.entered + batcher.waiting() < 5:  # the first batch held, the rest waiting
        threading.Event().wait(0.01)
    embedder.gate.set()
    for t in threads:
        t.join(10)
    assert {q: v[0] for q, v in results.items()} == {"a": 1.0, "bb": 2.0, "ccc": 3.0, "dddd": 4.0, "eeeee": 5.0}
    assert sum(embedder.calls) == 5 and len(embedder.calls) < 5


def test_in_memory_vectors_answer_exactly_and_only_when_current():
    import time

    import numpy as np

    from contextual_assets.serving.vectors import VersionVectors

    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((500, 16)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    keys = [(f"doc{i // 50}", i % 50) for i in range(500)]
    revision = {"iv": ("r1",)}
    vectors = VersionVectors(lambda v: (keys, matrix), lambda v: revision[v], check_every_s=0.0)
    query = rng.standard_normal(16).astype(np.float32)
    assert vectors.top("iv", query.tolist(), 5) is None  # not loaded yet: the caller searches in SQL
    deadline = time.monotonic() + 5
    while (found := vectors.top("iv", query.tolist(), 5)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    exact = np.argsort(-(matrix @ (query / np.linalg.norm(query))))[:5]
    assert [(d, o) for d, o, _ in found] == [keys[i] for i in exact]
    revision["iv"] = ("r2",)  # the version changed: stale vectors are never used
    assert vectors.top("iv", query.tolist(), 5) is None


def test_the_batched_product_is_exact_for_one_query_and_for_many():
    """One query goes through torch as two columns, several as many: each gets numpy's exact top n."""
    import numpy as np

    from contextual_assets.serving.vectors import _batch_top, _Matrix

    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((3000, 24)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    loaded = _Matrix([(f"d{i // 10}", i % 10) for i in range(3000)], matrix)
    queries = rng.standard_normal((5, 24)).astype(np.float32)
    for size in (1, 2, 5):
        got = _batch_top([(loaded, q, 7) for q in queries[:size]])
        for q, top in zip(queries[:size], got):
            exact = matrix @ (q / np.linalg.norm(q))
            assert [loaded.keys.index((d, o)) for d, o, _ in top] == list(np.argsort(-exact)[:7])
            assert [s for _, _, s in top] == pytest.approx(sorted(exact, reverse=True)[:7], abs=1e-5)


def test_a_batchers_start_runs_first_in_its_own_thread():
    seen: list[str] = []
    batcher = MicroBatcher(lambda items: [threading.current_thread().name for _ in items], name="worker-x",
                           start=lambda: seen.append(threading.current_thread().name))
    assert batcher.submit("a") == "worker-x" and seen == ["worker-x"]
    assert batcher.submit("b") == "worker-x" and seen == ["worker-x"]  # once, not per batch


def test_search_settings_name_the_variable(monkeypatch):
    from contextual_assets.settings import PlatformSettings

    monkeypatch.setenv("CTX_SEARCH_URL", "localhost:8765")
    with pytest.raises(ConfigurationError, match="CTX_SEARCH_URL='localhost:8765' is not valid"):
        PlatformSettings()
    with pytest.raises(ValueError, match="both 0"):
        FusionWeights(dense=0, lexical=0)


def test_deeply_nested_json_is_a_400_not_a_500():
    from starlette.testclient import TestClient

    from contextual_assets.serving.app import create_app

    client = TestClient(create_app(service=None, max_request_bytes=100_000))  # refused before the service
    answer = client.post("/search", content=b"[" * 50_000 + b"]" * 50_000)
    assert "not JSON" in problem_detail(answer, 400, "bad-request")


def test_in_memory_vectors_keep_the_most_recently_searched_versions_only():
    import time

    import numpy as np

    from contextual_assets.serving.vectors import VersionVectors

    matrix = np.eye(4, dtype=np.float32)
    vectors = VersionVectors(lambda v: ([(v, i) for i in range(4)], matrix), lambda v: ("r",), check_every_s=60,
                             max_versions=2)
    for version in ("a", "b", "c"):
        deadline = time.monotonic() + 5
        while vectors.top(version, [1.0, 0, 0, 0], 1) is None and time.monotonic() < deadline:
            time.sleep(0.01)
    assert vectors.versions == ["b", "c"]


def test_page_bounds_are_refused_at_the_boundary_by_field():
    from pydantic import ValidationError

    from contextual_assets.models import MAX_PAGE, ChunkFilter
    from contextual_assets.serving.api import SearchRequest

    assert ChunkFilter(page_from=MAX_PAGE, page_to=MAX_PAGE).page_to == MAX_PAGE  # the bound itself is a page
    for field in ("page_from", "page_to"):
        with pytest.raises(ValidationError) as refused:
            SearchRequest(query="q", filter={field: 10**40})
        (error,) = refused.value.errors()
        assert error["loc"] == ("filter", field) and error["type"] == "less_than_equal"


def test_one_query_of_a_batch_that_is_invalid_or_fails_is_answered_alone():
    from starlette.testclient import TestClient

    from contextual_assets.serving.app import create_app

    # No service: a query that passes validation fails unexpectedly (here, on the missing service), which
    # must be that query's 500 as one JSON line, beside the other queries' own answers.
    client = TestClient(create_app(service=None))
    single = client.post("/v1/search", json={"query": "q"})
    assert "service log" in problem_detail(single, 500, "internal-error")
    batch = client.post("/v1/search/batch", json={"queries": [
        {"query": "q"}, {"query": "q", "filter": {"page_from": 10**40}}, {"query": ""}, "not an object"]})
    assert batch.status_code == 200, batch.text
    results = batch.json()["results"]
    assert [r["status"] for r in results] == [500, 422, 422, 422]
    assert all(r["result"] is None and "\n" not in r["error"] for r in results)
    assert results[1]["error"].startswith("filter.page_from: ") and "2147483647" in results[1]["error"]
    assert results[2]["error"].startswith("query: ")
    too_many = client.post("/v1/search/batch", json={"queries": [{"query": "q"}] * 33})
    assert "queries" in problem_detail(too_many, 422, "invalid-field")


def test_tokens_are_stripped_by_the_server_and_the_client():
    from starlette.testclient import TestClient

    from contextual_assets.serving.app import create_app
    from contextual_assets.serving.client import SearchClient, SearchServiceError, clean_token

    assert clean_token(" tok\n") == "tok" and clean_token(" \n") is None and clean_token(None) is None
    app = TestClient(create_app(service=None, token="s3cret\n"))  # a Secret mounted with its newline
    invalid = {"query": ""}  # refused after the token check: a 422 means the token was accepted
    assert app.post("/v1/search", json=invalid, headers={"Authorization": "Bearer s3cret"}).status_code == 422
    assert app.post("/v1/search", json=invalid, headers={"Authorization": "Bearer other"}).status_code == 401
    problem_detail(app.post("/v1/search", json=invalid, headers={"Authorization": "Bearer other"}), 401, "unauthorized")
    assert SearchClient("http://127.0.0.1:9", " s3cret\n")._client.headers["Authorization"] == "Bearer s3cret"
    with pytest.raises(SearchServiceError, match="printable ASCII"):
        SearchClient("http://127.0.0.1:9", "s3c\nret")


def test_an_older_versions_recorded_endpoint_gets_no_embedding_key(monkeypatch):
    from contextual_assets.embedder_config import EmbedderCatalog

    monkeypatch.setenv("CTX_TEST_EMBED_KEY", "embed-secret\n")
    catalog = EmbedderCatalog("http://embed.internal/v1", "new-model", api_key_env="CTX_TEST_EMBED_KEY")

    def sent(identity: str, base_url: str) -> str:
        embedder = catalog.for_identity(identity, {"identity": identity, "base_url": base_url, "model": ""})
        return embedder.client.headers["Authorization"]

    assert catalog.get().client.headers["Authorization"] == "Bearer embed-secret"
    assert sent("openai:sibling", "http://embed.internal/v1/") == "Bearer embed-secret"  # the same endpoint
    assert sent("openai:sibling-2", "") == "Bearer embed-secret"  # no recorded endpoint: the configured one
    assert sent("openai:old-model", "http://elsewhere.example/v1") == "Bearer not-needed"
    local = EmbedderCatalog(api_key_env="CTX_TEST_EMBED_KEY")  # a local model configured: no endpoint has the key
    assert local.for_identity("openai:old", {"base_url": "http://embed.internal/v1"}).client.headers[
        "Authorization"] == "Bearer not-needed"


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.0.0.9", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("search.example.com", False)])
def test_which_hosts_count_as_loopback(host, loopback):
    from contextual_assets.cli.commands.serve import is_loopback

    assert is_loopback(host) is loopback
