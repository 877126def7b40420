"""The search service over real HTTP (uvicorn on loopback, httpx), on DuckDB and Postgres: what it
serves, following the production alias live, token and size limits, rerank through the fleet
simulator's /v1/rerank, and `ctx search` as its client without torch or Dagster."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx
import pytest

from contextual_assets.embedder_config import EmbedderCatalog
from contextual_assets.models import DocumentRecord, EmbeddedChunk, content_hash
from contextual_assets.serving.api import SearchRequest
from contextual_assets.serving.app import create_app
from contextual_assets.serving.metrics import ServiceMetrics
from contextual_assets.serving.service import SearchService
from contextual_assets.serving.version_cache import VersionCache
from contextual_assets.store import open_store
from tests.support import REPO_ROOT, app_in_thread, ctx_serve
from tests.unit.test_search_units import problem_detail

DOCS = {
    "contracts/supply.pdf": [
        ("Penalties", "Late delivery costs the supplier 0.5% of the order value per business day, capped at 10%."),
        ("Termination", "Either party may terminate with ninety days written notice."),
    ],
    "code/rate_limiter.py": [
        ("TokenBucket", "class TokenBucket: refills tokens at a fixed rate and rejects requests when empty."),
        ("SlidingWindow", "A sliding window counter limits requests per client over the last minute."),
    ],
    "handbook.pdf": [
        ("Travel", "Hotels are reimbursed up to EUR 210 per night in London and EUR 150 elsewhere."),
        ("Leave", "Employees accrue two days of paid leave per month of service."),
    ],
}


@pytest.fixture(scope="module")
def embedders() -> EmbedderCatalog:
    return EmbedderCatalog()  # the bundled all-MiniLM-L6-v2, loaded once for the module


def fill(store, embedders: EmbedderCatalog, version: str, header_prefix: str) -> None:
    """One index version of DOCS, built with the real embedder (its identity in the fingerprint)."""
    embedder = embedders.get()
    store.corpus.register_index_version(version, {"embedder": embedder.identity, "header_source": "structural"})
    for doc_id, sections in DOCS.items():
        texts = [text for _, text in sections]
        headers = [f"{header_prefix} {doc_id}, section {section}." for section, _ in sections]
        vectors = embedder.embed([f"{h}\n\n{t}" for h, t in zip(headers, texts)])
        chunks = [EmbeddedChunk(doc_id=doc_id, source_doc=doc_id, title=doc_id, ordinal=i, section_path=[section],
                                page_start=i + 1, page_end=i + 1, text=text, token_count=len(text.split()),
                                content_hash=content_hash(text), header=header, header_source="structural",
                                header_model="structural-v1", embedding=vector)
                  for i, ((section, text), header, vector) in enumerate(zip(sections, headers, vectors))]
        store.corpus.replace_document(DocumentRecord(doc_id=doc_id, index_version=version, source_path=f"/in/{doc_id}",
                                                     kind="text", title=doc_id, file_hash="ab" * 32,
                                                     n_chunks=len(chunks), updated_at=""), chunks)


@pytest.fixture(params=["duckdb", "postgres"])
def store_location(request, tmp_path):
    if request.param == "postgres":
        return request.getfixturevalue("pg_url"), tmp_path / "unused.duckdb"
    return None, tmp_path / "index.duckdb"


@pytest.fixture
def filled(store_location, embedders):
    url, path = store_location
    store = open_store(url, path)
    fill(store, embedders, "iv-one", "From")
    fill(store, embedders, "iv-two", "Excerpt of")
    store.aliases.set("production", "iv-one", reason="test")
    yield store
    store.close()


@contextmanager
def serving(service: SearchService, **app_options):
    """The app under a real uvicorn server on a free loopback port, in a thread."""
    with app_in_thread(create_app(service, **app_options), "the search service") as base:
        yield base


def test_service_searches_production_and_follows_the_alias_live(filled, store_location, embedders):
    url, path = store_location
    service = SearchService(open_store(url, path), embedders, alias_refresh_s=0.2, vectors_in_memory=True)
    with serving(service) as base:
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        assert httpx.get(f"{base}/readyz").json() == {"status": "ready", "index_version": "iv-one",
                                                      "alias": "production", "production": "iv-one",
                                                      "default": "iv-one", "chunks": 6}
        answer = httpx.post(f"{base}/search", json={"query": "late delivery penalty per business day", "k": 3})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["index_version"] == "iv-one" and body["alias"] == "production" and body["mode"] == "hybrid"
        top = body["hits"][0]
        assert top["document"] == "contracts/supply.pdf" and top["section_path"] == ["Penalties"]
        assert top["page_start"] == 1 and top["header"].startswith("From ") and top["rank"] == 1
        assert len(body["hits"]) == 3
        for mode in ("dense", "lexical"):
            hits = httpx.post(f"{base}/search", json={"query": "hotel per night in London", "k": 2,
                                                       "mode": mode}).json()["hits"]
            assert hits[0]["document"] == "handbook.pdf", mode

        versions = httpx.get(f"{base}/versions").json()
        assert versions["production"] == "iv-one"
        assert {v["index_version"]: v["chunks"] for v in versions["versions"]} == {"iv-one": 6, "iv-two": 6}

        # Another process promotes iv-two (here: another handle on the same store): served without a restart.
        other = open_store(url, path)
        other.aliases.set("production", "iv-two", reason="promoted")
        assert _served_version(base) == "iv-two"
        other.aliases.rollback("production", reason="rollback")
        assert _served_version(base) == "iv-one"
        other.close()

        # An explicit version is served as asked, without the alias.
        pinned = httpx.post(f"{base}/search", json={"query": "token bucket", "version": "iv-two"}).json()
        assert pinned["index_version"] == "iv-two" and pinned["alias"] is None
        assert pinned["hits"][0]["header"].startswith("Excerpt of ")
    service.store.close()


def test_a_long_lived_service_ranks_bm25_in_memory_and_follows_commits(filled, store_location,
                                                                     embedders):
    """`ctx serve` keeps each version's postings in memory: its answers equal the store's, a commit is
    searchable at once (the store answers until the postings are reloaded), and a version over the
    chunk limit is ranked in the store."""
    url, path = store_location
    service = SearchService(open_store(url, path), embedders, alias_refresh_s=0.2, vectors_in_memory=True,
                            in_memory_max_chunks=1000)
    store = service.store
    query = "hotel per night in London"

    def lexical(q: str, version: str = "iv-one") -> list[tuple[str, int]]:
        return [(h.document, h.ordinal) for h in service.search(SearchRequest(query=q, mode="lexical", k=5,
                                                                              version=version)).hits]

    def wait_for_postings(version: str = "iv-one"):
        deadline = time.monotonic() + 30
        while (postings := service.postings.current(version)) is None:
            assert time.monotonic() < deadline, "the postings never loaded"
            time.sleep(0.05)
        return postings

    expected = [(d, o) for d, o, _ in store.search.lexical_top(query, "iv-one", 5)]
    assert lexical(query) == expected  # answered by the store while loading
    postings = wait_for_postings()
    assert len(postings.keys) == 6 and lexical(query) == expected
    assert service.search(SearchRequest(query=query, k=3)).hits  # hybrid through the postings
    if url is None:  # DuckDB: the hits' rows come from memory too, as the store would give them
        deadline = time.monotonic() + 30
        while service.rows.current("iv-one") is None:
            assert time.monotonic() < deadline, "the chunk rows never loaded"
            time.sleep(0.05)
        scored = store.search.hybrid_top(query, embedders.get().embed([query])[0], "iv-one", 5)
        assert service._hits("iv-one", scored) == store.search.hits("iv-one", scored)
    else:
        assert service.rows is None  # Postgres reads hits by primary key
    held = ServiceMetrics()
    held.held(service.in_memory())
    exposition = held.exposition().decode()
    assert 'ctx_search_in_memory{index_version="iv-one",part="postings"} 1.0' in exposition
    assert ('ctx_search_in_memory{index_version="iv-one",part="rows"} 1.0' in exposition) == (url is None)

    other = open_store(url, path)  # another process commits to the served version
    text = "the zanzibar clove tariff"
    chunk = EmbeddedChunk(doc_id="zanzibar.txt", source_doc="zanzibar.txt", title="zanzibar.txt", ordinal=0,
                          section_path=["Tariffs"], page_start=1, page_end=1, text=text, token_count=4,
                          content_hash=content_hash(text), header="", header_source="structural",
                          header_model="structural-v1", embedding=embedders.get().embed([text])[0])
    other.corpus.replace_document(DocumentRecord(doc_id="zanzibar.txt", index_version="iv-one",
                                                 source_path="/in/zanzibar.txt", kind="text", title="zanzibar.txt",
                                                 file_hash="cd" * 32, n_chunks=1, updated_at=""), [chunk])
    other.close()
    deadline = time.monotonic() + 30
    while lexical("zanzibar clove") != [("zanzibar.txt", 0)]:  # revision checked within a second
        assert time.monotonic() < deadline, "a committed document never became searchable"
        time.sleep(0.05)
    assert len(wait_for_postings().keys) == 7

    service.in_memory_max_chunks = 3  # too many chunks to hold: ranked in the store
    service.postings = VersionCache(service._within_limit(store.search.lexical_snapshot), store.corpus.revision,
                                    "postings")
    assert lexical(query) == expected
    time.sleep(0.5)
    assert lexical(query) == expected and service.postings.current("iv-one") is None
    store.close()


def test_a_long_lived_service_on_onnxruntime_ranks_as_torch(filled, store_location, embedders):
    """`ctx serve` embeds queries with onnxruntime (CTX_SERVE_QUERY_RUNTIME=onnx, the default) and its
    dense product in memory: every mode ranks as the in-process service on torch does."""
    url, path = store_location
    served = SearchService(open_store(url, path), EmbedderCatalog(threads=1, runtime="onnx"), vectors_in_memory=True)
    in_process = SearchService(open_store(url, path), embedders)
    assert served.embedders.get().active
    if url is None:  # DuckDB: the matrix loads in the background; the store answers until then
        deadline = time.monotonic() + 30
        while served.vectors.top("iv-one", embedders.get().embed(["x"])[0], 1) is None:
            assert time.monotonic() < deadline, "the vectors never loaded"
            time.sleep(0.05)
    for query in ("hotel per night in London", "termination notice", "token bucket refill rate", "leave"):
        for mode in ("dense", "hybrid", "lexical"):
            ask = SearchRequest(query=query, mode=mode, k=4, version="iv-one")
            got, expected = served.search(ask).hits, in_process.search(ask).hits
            assert [(h.document, h.ordinal) for h in got] == [(h.document, h.ordinal) for h in expected], (query, mode)
            assert [h.score for h in got] == pytest.approx([h.score for h in expected], abs=1e-5)
    served.store.close()
    in_process.store.close()


def _served_version(base: str, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    previous = None
    while time.monotonic() < deadline:
        served = httpx.post(f"{base}/search", json={"query": "ninety days notice", "k": 1}).json()["index_version"]
        if served == previous:
            return served
        previous = served
        time.sleep(0.3)
    return previous


@pytest.mark.parametrize("store_location", ["duckdb"], indirect=True)
def test_refusals_are_clear_4xx(filled, store_location, embedders):
    url, path = store_location
    service = SearchService(open_store(url, path), embedders, max_k=20)
    with serving(service, token="s3cret-token", max_request_bytes=1024) as base:
        assert httpx.get(f"{base}/healthz").status_code == 200  # liveness needs no token
        query = {"query": "ninety days notice"}
        assert httpx.post(f"{base}/search", json=query).status_code == 401
        wrong = httpx.post(f"{base}/search", json=query, headers={"Authorization": "Bearer nope"})
        assert "Bearer <token>" in problem_detail(wrong, 401, "unauthorized")
        assert httpx.get(f"{base}/versions").status_code == 401
        assert httpx.post(f"{base}/v1/search/batch", json={"queries": [query]}).status_code == 401
        auth = {"Authorization": "Bearer s3cret-token"}
        assert httpx.post(f"{base}/search", json=query, headers=auth).status_code == 200

        big = httpx.post(f"{base}/search", json={"query": "x" * 5000}, headers=auth)
        assert "CTX_SERVE_MAX_REQUEST_BYTES" in problem_detail(big, 413, "payload-too-large")
        too_many = httpx.post(f"{base}/search", json={**query, "k": 21}, headers=auth)
        assert "CTX_SERVE_MAX_K" in problem_detail(too_many, 422, "invalid-field")
        bad_mode = httpx.post(f"{base}/search", json={**query, "mode": "fuzzy"}, headers=auth)
        assert "mode" in problem_detail(bad_mode, 422, "invalid-field")
        unknown = httpx.post(f"{base}/search", json={**query, "colour": "red"}, headers=auth)
        assert "colour" in problem_detail(unknown, 422, "invalid-field")
        not_json = httpx.post(f"{base}/search", content=b"{query", headers=auth)
        assert "not JSON" in problem_detail(not_json, 400, "bad-request")
        nested = httpx.post(f"{base}/search", content=b"[" * 500 + b"]" * 500, headers=auth)
        problem_detail(nested, 400, "bad-request")
        missing = httpx.post(f"{base}/search", json={**query, "version": "iv-nope"}, headers=auth)
        assert "iv-nope" in problem_detail(missing, 404, "not-found")
        no_reranker = httpx.post(f"{base}/search", json={**query, "rerank": True}, headers=auth)
        assert "CTX_RERANK_BASE_URL" in problem_detail(no_reranker, 400, "bad-request")
    service.store.close()


@pytest.mark.parametrize("store_location", ["duckdb"], indirect=True)
def test_v1_routes_batch_openapi_metrics_readiness_and_access_log(filled, store_location, embedders, caplog):
    import logging

    url, path = store_location
    empty = open_store(None, path.with_name("empty.duckdb"))
    with serving(SearchService(empty, embedders)) as base:
        unready = httpx.get(f"{base}/readyz")
        assert "ingest" in problem_detail(unready, 503, "not-ready"), "nothing to serve: not ready"
        assert httpx.get(f"{base}/healthz").status_code == 200, "alive all the same"
    empty.close()

    service = SearchService(open_store(url, path), embedders, max_k=20)
    with caplog.at_level(logging.INFO, logger="ctx.serve.access"), \
            serving(service, token="s3cret-token") as base:
        auth = {"Authorization": "Bearer s3cret-token"}
        one = httpx.post(f"{base}/v1/search", json={"query": "ninety days notice", "k": 2}, headers=auth).json()
        legacy = httpx.post(f"{base}/search", json={"query": "ninety days notice", "k": 2}, headers=auth).json()
        assert one["hits"] == legacy["hits"] and one["hits"][0]["section_path"] == ["Termination"]
        # Filters apply before the top k: the London hotel chunk is not in contracts/, so both hits are.
        filtered = httpx.post(f"{base}/v1/search", headers=auth, json={
            "query": "hotel per night in London", "k": 2, "filter": {"path_prefix": "contracts/"}}).json()
        assert [h["document"] for h in filtered["hits"]] == ["contracts/supply.pdf"] * 2
        section = httpx.post(f"{base}/v1/search", headers=auth, json={
            "query": "hotel per night in London", "k": 5, "mode": "dense",
            "filter": {"section": "Termination", "page_from": 2, "page_to": 2}}).json()
        assert [(h["document"], h["section_path"]) for h in section["hits"]] == [("contracts/supply.pdf",
                                                                                  ["Termination"])]
        backwards = httpx.post(f"{base}/v1/search", headers=auth, json={
            "query": "hotel", "filter": {"page_from": 4, "page_to": 2}})
        assert "page_from (4) is after page_to (2)" in problem_detail(backwards, 422, "invalid-field")

        batch = httpx.post(f"{base}/v1/search/batch", headers=auth, json={"queries": [
            {"query": "ninety days notice", "k": 2}, {"query": "token bucket", "version": "iv-nope"},
            {"query": "hotel per night in London", "k": 1, "mode": "lexical", "version": "iv-two"}]})
        assert batch.status_code == 200, batch.text
        results = batch.json()["results"]
        assert [r["status"] for r in results] == [200, 404, 200], "one unknown version fails alone"
        assert results[0]["result"]["hits"] == one["hits"]
        assert "iv-nope" in results[1]["error"] and results[1]["result"] is None
        assert results[2]["result"]["index_version"] == "iv-two"
        assert results[2]["result"]["hits"][0]["document"] == "handbook.pdf"
        empty_batch = httpx.post(f"{base}/v1/search/batch", json={"queries": []}, headers=auth)
        assert "queries" in problem_detail(empty_batch, 422, "invalid-field")

        document = httpx.get(f"{base}/openapi.json").json()
        assert document["openapi"].startswith("3.") and document["info"]["version"]
        assert {"/v1/search", "/v1/search/batch", "/v1/versions", "/readyz", "/metrics"} <= set(document["paths"])
        schemas = document["components"]["schemas"]
        assert set(schemas["SearchRequest"]["properties"]) >= {"query", "k", "mode", "version", "rerank", "filter"}
        assert set(schemas["ChunkFilter"]["properties"]) == {"documents", "path_prefix", "section", "page_from",
                                                             "page_to"}
        assert document["paths"]["/v1/search"]["post"]["security"] == [{"bearer": []}]
        assert "/v1/search/batch" in httpx.get(f"{base}/docs").text

        metrics = httpx.get(f"{base}/metrics").text
        assert 'ctx_search_requests_total{route="search",status="200"} 4.0' in metrics
        assert 'ctx_search_errors_total{route="search",status="422"} 1.0' in metrics
        assert 'ctx_search_requests_total{route="search_batch",status="422"} 1.0' in metrics
        assert 'ctx_search_errors_total{route="search_batch",status="422"} 1.0' in metrics
        assert 'ctx_search_request_duration_seconds_count{route="search"} 5.0' in metrics
        # The last search served iv-two (pinned, no alias): one series at 1.
        assert 'ctx_search_served_version{alias="",index_version="iv-two"} 1.0' in metrics
        assert 'index_version="iv-one"' not in metrics
    service.store.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "ctx.serve.access"]
    assert any('"POST /v1/search/batch" 200' in line for line in lines), lines
    ids = [r.request_id for r in caplog.records if r.name == "ctx.serve.access"]
    assert all(f"request_id={i}" in line for i, line in zip(ids, lines)) and len(set(ids)) == len(ids)
    assert not any("s3cret-token" in line for line in lines), "the token is never logged"


def test_integers_out_of_range_are_a_422_naming_the_field_and_fail_alone_in_a_batch(filled, store_location,
                                                                                     embedders):
    """A page or k of 10**40 (DuckDB refuses integers over 128 bits) is refused at the boundary on both
    back-ends, in every mode; the largest page the filter takes is a valid bound for both stores."""
    from contextual_assets.models import MAX_PAGE

    url, path = store_location
    service = SearchService(open_store(url, path), embedders, max_k=20)
    with serving(service) as base:
        def search(**request) -> httpx.Response:
            return httpx.post(f"{base}/v1/search", json={"query": "ninety days notice", **request}, timeout=60)

        for mode in ("hybrid", "dense", "lexical"):
            for field in ("page_from", "page_to"):
                refused = search(mode=mode, filter={field: 10**40})
                assert refused.status_code == 422, (mode, field, refused.text)
                error = problem_detail(refused, 422, "invalid-field")
                assert error.startswith(f"filter.{field}: ") and str(MAX_PAGE) in error and "\n" not in error
            too_many = search(mode=mode, k=10**40)
            assert "CTX_SERVE_MAX_K" in problem_detail(too_many, 422, "invalid-field"), mode
            beyond = search(mode=mode, k=3, filter={"page_from": MAX_PAGE})
            assert beyond.status_code == 200 and beyond.json()["hits"] == [], (mode, beyond.text)
            within = search(mode=mode, k=3, filter={"page_from": 1, "page_to": MAX_PAGE})  # every chunk passes
            assert within.status_code == 200, (mode, within.text)
            keys = [[(h["document"], h["ordinal"]) for h in r.json()["hits"]] for r in (within, search(mode=mode, k=3))]
            assert keys[0] == keys[1] and keys[0], mode

        batch = httpx.post(f"{base}/v1/search/batch", timeout=60, json={"queries": [
            {"query": "ninety days notice", "k": 2}, {"query": "x", "filter": {"page_from": 10**40}},
            {"query": "x", "k": 10**40}, {"query": "x", "filter": {"page_to": 10**40}, "mode": "dense"},
            {"query": "hotel per night in London", "k": 1, "mode": "lexical"}]})
        assert batch.status_code == 200, batch.text
        results = batch.json()["results"]
        assert [r["status"] for r in results] == [200, 422, 422, 422, 200], "each bad query fails alone"
        assert results[0]["result"]["hits"][0]["section_path"] == ["Termination"]
        assert results[1]["error"].startswith("filter.page_from: ") and "CTX_SERVE_MAX_K" in results[2]["error"]
        assert results[3]["error"].startswith("filter.page_to: ")
        assert all(r["result"] is None for r in results[1:4])
        assert results[4]["result"]["hits"][0]["document"] == "handbook.pdf"
    service.store.close()


@pytest.mark.parametrize("store_location", ["duckdb"], indirect=True)
def test_rerank_through_the_simulators_rerank_endpoint(filled, store_location, embedders):
    from bench.sim.fleet import FleetSimulator, relevance
    from contextual_assets.rerank import HTTPReranker

    url, path = store_location
    with FleetSimulator(1, time_scale=0.01) as fleet:
        model = httpx.get(f"{fleet.base_urls[0]}/models").json()["data"][0]["id"]
        reranker = HTTPReranker(fleet.base_urls[0], model)
        service = SearchService(open_store(url, path), embedders, reranker=reranker, rerank_candidates=6)
        with serving(service) as base:
            query = "requests per client sliding window minute"
            plain = httpx.post(f"{base}/search", json={"query": query, "k": 4, "rerank": False}).json()
            assert plain["reranked"] is False
            body = httpx.post(f"{base}/search", json={"query": query, "k": 4}).json()  # on by default when set
            assert body["reranked"] is True and body["reranker"] == f"rerank:{model}"
            hits = body["hits"]
            assert len(hits) == 4 and hits[0]["section_path"] == ["SlidingWindow"]
            expected = [relevance(query, f"{h['header']}\n\n{h['text']}") for h in hits]
            assert [h["score"] for h in hits] == pytest.approx(expected)
            assert expected == sorted(expected, reverse=True)
            assert fleet.stats()[0].get("rerank_requests", 0) >= 1

            fleet.set_faults(0, error_rate=1.0)
            failed = httpx.post(f"{base}/search", json={"query": query, "k": 4})
            assert "reranker" in problem_detail(failed, 502, "upstream-failed")
        service.store.close()


def test_ctx_search_uses_a_running_ctx_serve_without_torch_or_dagster(tmp_path, env, embedders):
    store = open_store(None, tmp_path / ".ctx" / "index.duckdb")
    fill(store, embedders, "iv-one", "From")
    store.aliases.set("production", "iv-one", reason="test")
    store.close()
    with ctx_serve(env, "tok-123") as base:
        client_env = {**env, "CTX_SEARCH_URL": base, "CTX_SEARCH_TOKEN": "tok-123"}
        probe = ("import sys, json; from contextual_assets.cli.main import main; rc = main(sys.argv[1:]); "
                 "print(json.dumps({'rc': rc, 'loaded': sorted(m for m in ('torch', 'dagster', 'duckdb', "
                 "'sentence_transformers') if m in sys.modules)}), file=sys.stderr)")
        result = subprocess.run([sys.executable, "-c", probe, "search", "hotel per night in London", "-k", "2",
                                 "--json"], env=client_env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        report = json.loads(result.stderr.strip().splitlines()[-1])
        assert report == {"rc": 0, "loaded": []}, result.stderr
        answer = json.loads(result.stdout)  # the service's whole answer, not only its hits
        assert answer["index_version"] == "iv-one" and {"alias", "reranked", "took_ms"} <= set(answer)
        assert answer["hits"][0]["document"] == "handbook.pdf" and answer["hits"][0]["index_version"] == "iv-one"

        narrowed = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", "search", "hotel per night",
                                   "-k", "3", "--path-prefix", "code/", "--json"], env=client_env, cwd=REPO_ROOT,
                                  capture_output=True, text=True, timeout=120)
        assert narrowed.returncode == 0, narrowed.stderr
        assert [h["document"] for h in json.loads(narrowed.stdout)["hits"]] == ["code/rate_limiter.py"] * 2
        backwards = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", "search", "hotel",
                                    "--pages", "7-3"], env=client_env, cwd=REPO_ROOT, capture_output=True, text=True,
                                   timeout=120)
        assert backwards.returncode == 2 and backwards.stderr.strip() == \
            "error: --pages '7-3': 7 is after 3; give FROM-TO with FROM <= TO", backwards.stderr
        huge = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", "search", "hotel", "--pages",
                               f"{10**40}-"], env=client_env, cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=120)
        assert huge.returncode == 2 and huge.stderr == f"error: --pages '{10**40}-': page numbers run from 1 to " \
            "2147483647\n", huge.stderr
        # The service's own 422 (k over its CTX_SERVE_MAX_K, which the client cannot know) is one line too.
        over_k = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", "search", "hotel", "-k",
                                 str(10**40)], env=client_env, cwd=REPO_ROOT, capture_output=True, text=True,
                                timeout=120)
        assert over_k.returncode == 2 and over_k.stderr.count("\n") == 1, over_k.stderr
        assert "answered 422" in over_k.stderr and "CTX_SERVE_MAX_K" in over_k.stderr
        # A token with a trailing newline (as a file or Secret gives it) is stripped by the client.
        newline = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", "search", "hotel", "-k", "1"],
                                 env={**client_env, "CTX_SEARCH_TOKEN": "tok-123\n"}, cwd=REPO_ROOT,
                                 capture_output=True, text=True, timeout=120)
        assert newline.returncode == 0 and "handbook.pdf" in newline.stdout, newline.stderr

        refused = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", "search", "hotel"],
                                 env={**client_env, "CTX_SEARCH_TOKEN": "wrong"}, cwd=REPO_ROOT, capture_output=True,
                                 text=True, timeout=120)
        assert refused.returncode == 2 and "401" in refused.stderr


@pytest.mark.parametrize("store_location", ["duckdb"], indirect=True)
def test_evaluation_with_rerank_and_weights_is_another_evaluator(filled, embedders, tmp_path):
    from bench.sim.fleet import FleetSimulator
    from contextual_assets.fusion import FusionWeights
    from contextual_assets.rerank import HTTPReranker
    from eval_assets.evaluate import evaluate
    from eval_assets.gold.gold_set import load_gold

    gold_path = tmp_path / "gold.jsonl"
    gold_path.write_text("\n".join(json.dumps(row) for row in [
        {"query": "hotel limit per night in London", "evidence": [{"text": "EUR 210 per night in London"}]},
        {"query": "late delivery penalty", "evidence": [{"text": "0.5% of the order value per business day"}]},
    ]) + "\n")
    gold = load_gold(gold_path)
    embedder = embedders.get()
    plain = evaluate(filled, embedder, gold, "iv-one", modes=("hybrid",))
    weighted = evaluate(filled, embedder, gold, "iv-one", modes=("hybrid",),
                        weights=FusionWeights(dense=0.5, lexical=1.0))
    assert weighted.evaluator["fusion_weights"] == {"dense": 0.5, "lexical": 1.0}
    assert plain.evaluator["fusion_weights"] != weighted.evaluator["fusion_weights"]
    with FleetSimulator(1, time_scale=0.01) as fleet:
        model = httpx.get(f"{fleet.base_urls[0]}/models").json()["data"][0]["id"]
        reranked = evaluate(filled, embedder, gold, "iv-one", modes=("hybrid",),
                            reranker=HTTPReranker(fleet.base_urls[0], model), rerank_candidates=6)
        assert fleet.stats()[0]["rerank_requests"] == len(gold.tasks)
    assert reranked.evaluator["rerank"] == {"reranker": f"rerank:{model}", "candidates": 6}
    assert len({plain.evaluator_id, weighted.evaluator_id, reranked.evaluator_id}) == 3
    assert reranked.metrics["hybrid"].pass_at_5 == 1.0
