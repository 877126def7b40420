"""The search API's contract, on the real app (Starlette's TestClient) over a real DuckDB store: readiness
that means a version with chunks is served, RFC 9457 problems on every error, request ids, named keys
reloaded without a restart, per-client rate limits, and an OpenAPI document that lists every route's
statuses."""

from __future__ import annotations

import logging
import os
import re

import pytest
from starlette.testclient import TestClient

from contextual_assets.embedder_config import EmbedderCatalog
from contextual_assets.errors import ConfigurationError
from contextual_assets.models import DocumentRecord, EmbeddedChunk, content_hash
from contextual_assets.serving.app import create_app
from contextual_assets.serving.keys import KeyRing
from contextual_assets.serving.rate_limit import RateLimiter
from contextual_assets.serving.routes import ROUTES
from contextual_assets.serving.service import SearchService, service_from_settings
from contextual_assets.store import open_store
from tests.unit.test_search_units import problem_detail

TEXT = "Late delivery costs the supplier half a percent of the order value per business day."


def fill(store, version: str, embedder: str = "openai:gone") -> None:
    """One version of one chunk; its embedder (by default one this deployment cannot load) is recorded."""
    store.corpus.register_index_version(version, {"embedder": embedder, "header_source": "structural"})
    chunk = EmbeddedChunk(doc_id="supply.txt", source_doc="supply.txt", title="supply.txt", ordinal=0,
                          section_path=["Penalties"], page_start=1, page_end=1, text=TEXT, token_count=14,
                          content_hash=content_hash(TEXT), header="", header_source="structural",
                          header_model="structural-v1", embedding=[1.0, 0.0, 0.0, 0.0])
    store.corpus.replace_document(DocumentRecord(doc_id="supply.txt", index_version=version, source_path="/in/s",
                                                 kind="text", title="supply.txt", file_hash="ab" * 32, n_chunks=1,
                                                 updated_at=""), [chunk])


@pytest.fixture
def store(tmp_path):
    opened = open_store(None, tmp_path / "index.duckdb")
    yield opened
    opened.close()


class Clock:
    """A clock the test moves (the limiter and the key ring take one)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- readiness -----------------------------------------------------------------------------------


def test_readyz_is_not_ready_on_an_empty_store(store):
    client = TestClient(create_app(SearchService(store, EmbedderCatalog())))
    detail = problem_detail(client.get("/readyz"), 503, "not-ready")
    assert "never promoted" in detail and "ingest" in detail
    assert client.get("/healthz").json() == {"status": "ok"}, "alive all the same"


def test_readyz_from_settings_is_not_ready_until_the_settings_version_holds_chunks(settings_factory):
    """`service_from_settings` falls back to the version the settings build: never promoted and empty,
    that is not ready (every search would 404); once it holds chunks it is served, and so ready."""
    service = service_from_settings(settings_factory())
    try:
        client = TestClient(create_app(service))
        fallback = service.default_version()
        assert fallback and service.production() is None
        detail = problem_detail(client.get("/readyz"), 503, "not-ready")
        assert f"{fallback} (the version the current settings build) holds no chunks" in detail
        fill(service.store, fallback)
        assert client.get("/readyz").json() == {"status": "ready", "index_version": fallback, "alias": None,
                                                "production": None, "default": fallback, "chunks": 1}
    finally:
        service.store.close()


def test_readyz_follows_promotion_to_a_version_with_chunks(store):
    fill(store, "iv-full")
    store.corpus.register_index_version("iv-empty", {"embedder": "openai:gone"})
    service = SearchService(store, EmbedderCatalog(), alias_refresh_s=0.0, fallback_version=lambda: "iv-settings")
    client = TestClient(create_app(service))
    detail = problem_detail(client.get("/readyz"), 503, "not-ready")
    assert "never promoted" in detail and "iv-settings" in detail
    store.aliases.set("production", "iv-empty", reason="test")
    detail = problem_detail(client.get("/readyz"), 503, "not-ready")
    assert "points to iv-empty, which holds no chunks" in detail
    store.aliases.set("production", "iv-full", reason="test")
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.headers["content-type"] == "application/json"
    assert ready.json() == {"status": "ready", "index_version": "iv-full", "alias": "production",
                            "production": "iv-full", "default": "iv-full", "chunks": 1}


# ---- problems and request ids --------------------------------------------------------------------


def test_every_error_is_a_problem_with_its_request_id(store):
    fill(store, "iv-full")
    store.aliases.set("production", "iv-full", reason="test")
    service = SearchService(store, EmbedderCatalog(), max_k=10, alias_refresh_s=0.0)
    client = TestClient(create_app(service, token="tok", max_request_bytes=512))
    auth = {"Authorization": "Bearer tok"}
    lexical = {"query": "late delivery", "mode": "lexical"}
    assert client.post("/v1/search", json=lexical, headers=auth).json()["hits"][0]["document"] == "supply.txt"
    assert "bearer" in problem_detail(client.post("/v1/search", json=lexical), 401, "unauthorized").lower()
    assert client.post("/v1/search", json=lexical).headers["www-authenticate"] == "Bearer"
    problem_detail(client.get("/v1/versions", headers={"Authorization": "Bearer nope"}), 401, "unauthorized")
    assert "not JSON" in problem_detail(client.post("/v1/search", content=b"{", headers=auth), 400, "bad-request")
    assert "CTX_SERVE_MAX_REQUEST_BYTES" in problem_detail(
        client.post("/v1/search", json={"query": "x" * 600}, headers=auth), 413, "payload-too-large")
    assert "CTX_SERVE_MAX_K" in problem_detail(client.post("/v1/search", json={**lexical, "k": 11}, headers=auth),
                                               422, "invalid-field")
    assert "iv-nope" in problem_detail(client.post("/v1/search", json={**lexical, "version": "iv-nope"},
                                                   headers=auth), 404, "not-found")
    assert "openai:gone" in problem_detail(client.post("/v1/search", json={"query": "late"}, headers=auth), 409,
                                           "embedder-unavailable")
    assert "/v1/nowhere" in problem_detail(client.get("/v1/nowhere"), 404, "not-found")
    wrong_method = client.get("/v1/search")
    assert "POST" in problem_detail(wrong_method, 405, "method-not-allowed")
    assert wrong_method.headers["allow"] == "POST"
    store.aliases.set("production", "iv-nothing", reason="test")
    problem_detail(client.get("/readyz"), 503, "not-ready")
    unforeseen = TestClient(create_app(service=None))  # a search on no service fails unexpectedly
    assert "service log" in problem_detail(unforeseen.post("/v1/search", json=lexical), 500, "internal-error")
    assert "traceback" in problem_detail(unforeseen.get("/readyz"), 500, "internal-error")


def test_a_request_id_is_kept_when_sane_else_made_and_echoed_and_logged(store, caplog):
    client = TestClient(create_app(SearchService(store, EmbedderCatalog()), token="tok"))
    with caplog.at_level(logging.INFO, logger="ctx.serve.access"):
        given = client.get("/healthz", headers={"X-Request-ID": "trace-4f2a.b:1"})
        refused = client.post("/v1/search", json={"query": "q"}, headers={"X-Request-ID": "abc-123"})
        made = [client.get("/healthz").headers["x-request-id"] for _ in range(2)]
        for bad in ("x" * 129, "has space", "naïve".encode(), "a<script>", ""):
            replaced = client.get("/v1/nowhere", headers={"X-Request-ID": bad})
            assert re.fullmatch(r"[0-9a-f]{32}", replaced.headers["x-request-id"]), bad
            assert replaced.json()["request_id"] == replaced.headers["x-request-id"]
    assert given.headers["x-request-id"] == "trace-4f2a.b:1"
    assert refused.headers["x-request-id"] == refused.json()["request_id"] == "abc-123"
    assert all(re.fullmatch(r"[0-9a-f]{32}", m) for m in made) and made[0] != made[1]
    records = [r for r in caplog.records if r.name == "ctx.serve.access"]
    by_id = {r.request_id: r.getMessage() for r in records}
    assert '"GET /healthz" 200' in by_id["trace-4f2a.b:1"] and "request_id=trace-4f2a.b:1" in by_id["trace-4f2a.b:1"]
    assert '"POST /v1/search" 401' in by_id["abc-123"] and "request_id=abc-123" in by_id["abc-123"]
    assert made[0] in by_id and len(records) == 9 and not any("tok" in m.split("request_id=")[0]
                                                               for m in by_id.values())


# ---- keys ----------------------------------------------------------------------------------------


def test_a_rotated_key_works_without_a_restart_and_a_bad_rewrite_keeps_the_last_good_keys(tmp_path, caplog):
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text("alice: key-alice-1\nbob: key-bob\n")
    clock = Clock()
    ring = KeyRing(" tok-default\n", keys_file, clock=clock)
    client = TestClient(create_app(service=None, keys=ring))
    invalid = {"query": ""}  # refused after the key check, before the service: a 422 means admitted

    def status(token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return client.post("/v1/search", json=invalid, headers=headers).status_code

    assert [status(t) for t in ("key-alice-1", "key-bob", "tok-default", "nope", None)] == [422, 422, 422, 401, 401]
    keys_file.write_text("alice: key-alice-2-rotated\nbob: key-bob\n")  # another size: seen as changed
    clock.now += 1.0
    assert [status(t) for t in ("key-alice-2-rotated", "key-alice-1", "key-bob")] == [422, 401, 422]

    with caplog.at_level(logging.WARNING, logger="contextual_assets.serving.keys"):
        for bad in ("alice: [not, a, token]\n", "", "- a list\n", "alice: same\nbob: same\n"):
            keys_file.write_text(bad)
            os.utime(keys_file, ns=(1, int(clock.now * 1e9)))  # a new mtime even when the size is the same
            clock.now += 1.0
            assert status("key-alice-2-rotated") == 422, bad
    warnings = [r.getMessage() for r in caplog.records if r.name == "contextual_assets.serving.keys"]
    assert len(warnings) == 4 and all("CTX_SEARCH_KEYS_FILE" in w and "keeping the 2 keys" in w for w in warnings)
    keys_file.unlink()
    clock.now += 1.0
    assert status("key-bob") == 422, "a deleted file keeps the last good keys too"


def test_a_bad_keys_file_at_startup_is_one_line_naming_the_setting(tmp_path):
    for content in ("alice: [1, 2]\n", "{unclosed\n", "", "default: x\n"):
        bad = tmp_path / "keys.yaml"
        bad.write_text(content)
        with pytest.raises(ConfigurationError) as refused:
            KeyRing("tok", bad)
        assert str(refused.value).startswith(f"CTX_SEARCH_KEYS_FILE={bad}") and "\n" not in str(refused.value)
    with pytest.raises(ConfigurationError, match="CTX_SEARCH_KEYS_FILE=.*cannot be read"):
        KeyRing(None, tmp_path / "missing.yaml")
    assert not KeyRing(None, None).enabled and KeyRing(None, None).identify("Bearer x") is None
    (tmp_path / "none.yaml").write_text("{}\n")
    locked = KeyRing(None, tmp_path / "none.yaml")  # a keys file with no keys: nobody gets in, not everybody
    assert locked.enabled and locked.identify("Bearer ") is None


def test_ctx_serve_refuses_an_unreadable_keys_file_by_name(tmp_path, monkeypatch, capsys):
    from contextual_assets.cli.main import main

    monkeypatch.setenv("CTX_HOME", str(tmp_path))
    monkeypatch.setenv("CTX_SEARCH_KEYS_FILE", str(tmp_path / "absent.yaml"))
    assert main(["serve", "--port", "9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: CTX_SEARCH_KEYS_FILE={tmp_path / 'absent.yaml'} cannot be read") and \
        err.count("\n") == 1, err


# ---- rate limit ----------------------------------------------------------------------------------


def test_over_the_rate_a_client_gets_429_with_retry_after_and_others_are_not_slowed(tmp_path):
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text("alice: key-a\nbob: key-b\n")
    clock = Clock()
    app = create_app(service=None, keys=KeyRing(None, keys_file, clock=clock),
                     rate_limiter=RateLimiter(0.5, 2, clock=clock))
    client = TestClient(app)
    alice, bob = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
    invalid = {"query": ""}
    assert [client.post("/v1/search", json=invalid, headers=alice).status_code for _ in range(2)] == [422, 422]
    limited = client.post("/v1/search", json=invalid, headers=alice)
    assert "CTX_SERVE_RATE_LIMIT_PER_S" in problem_detail(limited, 429, "rate-limited")
    assert limited.headers["retry-after"] == "2", "one token at 0.5 a second: 2 whole seconds"
    assert client.get("/v1/versions", headers=alice).status_code == 429, "one bucket per client, every route"
    assert client.post("/v1/search", json=invalid, headers=bob).status_code == 422, "bob has his own bucket"
    for _ in range(5):  # probes and scrapes are never limited
        assert client.get("/healthz").status_code == 200 and client.get("/metrics").status_code == 200
        assert client.get("/readyz").status_code == 500  # no service here: answered, not limited
    clock.now += 1.2  # 0.6 of a token: 0.8 s to go, said as 1
    assert client.post("/v1/search", json=invalid, headers=alice).headers["retry-after"] == "1"
    clock.now += 1.0
    assert client.post("/v1/search", json=invalid, headers=alice).status_code == 422, "refilled"
    # Without a valid key the client is its address: wrong keys are paced as well.
    assert [client.get("/v1/versions", headers={"Authorization": f"Bearer g{i}"}).status_code
            for i in range(3)] == [401, 401, 429]
    metrics = client.get("/metrics").text
    assert 'ctx_search_requests_total{route="search",status="429"} 2.0' in metrics
    assert 'ctx_search_errors_total{route="versions",status="429"} 2.0' in metrics
    assert 'route="healthz",status="429"' not in metrics


def test_the_limiter_paces_a_steady_client_to_its_rate():
    clock = Clock()
    limiter = RateLimiter(4.0, 1, clock=clock)
    admitted = 0
    for _ in range(400):  # 10 seconds of a request every 25 ms
        admitted += limiter.take("c") is None
        clock.now += 0.025
    assert 39 <= admitted <= 41
    assert RateLimiter(0.0, 1).take("c") is None and not RateLimiter(0.0, 1).enabled


# ---- the OpenAPI document ------------------------------------------------------------------------


def test_the_openapi_document_lists_every_route_with_its_methods_and_statuses():
    app = create_app(service=None, token="tok")
    document = TestClient(app).get("/openapi.json").json()
    served = {(route.path, method) for route in app.routes for method in route.methods if method != "HEAD"}
    documented = {(path, method.upper()) for path, ops in document["paths"].items() for method in ops}
    assert served == documented
    for spec in ROUTES:
        responses = document["paths"][spec.path][spec.method.lower()]["responses"]
        assert set(responses) == {str(s) for s in spec.statuses}, spec.path
        for status, response in responses.items():
            assert "X-Request-ID" in response["headers"]
            if status != "200":
                assert response["content"] == {"application/problem+json": {
                    "schema": {"$ref": "#/components/schemas/Problem"}}}, (spec.path, status)
    search = document["paths"]["/v1/search"]["post"]["responses"]
    assert {"200", "400", "401", "404", "409", "413", "422", "429", "500", "502", "503"} == set(search)
    assert "Retry-After" in search["429"]["headers"]
    assert set(document["paths"]["/readyz"]["get"]["responses"]) == {"200", "500", "503"}
    assert set(document["paths"]["/healthz"]["get"]["responses"]) == {"200", "500"}
    assert set(document["paths"]["/openapi.json"]["get"]["responses"]) == {"200", "429", "500"}
    problem = document["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == set(problem["properties"]) == {"type", "title", "status", "detail",
                                                                     "request_id"}


def test_every_status_an_exercised_route_answers_is_in_the_document(store, caplog):
    """Every route asked for what makes it answer each status reachable here; each answer must be listed
    for that route, and the app must never log a status missing from its route table."""
    fill(store, "iv-full")
    store.aliases.set("production", "iv-full", reason="test")
    app = create_app(SearchService(store, EmbedderCatalog(), max_k=10), token="tok", max_request_bytes=512,
                     rate_limiter=RateLimiter(0.001, 8))
    client = TestClient(app)
    document = client.get("/openapi.json").json()
    auth = {"Authorization": "Bearer tok"}
    bodies = [{"query": "late", "mode": "lexical"}, {"query": "late", "k": 11}, {"query": "late", "version": "x"},
              {"query": "late"}, {"query": "y" * 600}, {"queries": [{"query": "late", "mode": "lexical"}]}, []]
    seen: set[tuple[str, str, int]] = set()
    with caplog.at_level(logging.ERROR, logger="contextual_assets.serving.app"):
        for spec in ROUTES:
            for headers in (auth, {}):
                if spec.method == "GET":
                    answers = [client.get(spec.path, headers=headers) for _ in range(9)]
                else:
                    answers = [client.post(spec.path, json=b, headers=headers) for b in bodies]
                    answers.append(client.post(spec.path, content=b"{", headers=headers))
                seen |= {(spec.path, spec.method, a.status_code) for a in answers}
    for path, method, status in seen:
        assert str(status) in document["paths"][path][method.lower()]["responses"], (path, method, status)
    assert {s for p, _, s in seen if p == "/v1/search"} >= {200, 400, 401, 404, 409, 413, 422, 429}
    assert {(p, m) for p, m, _ in seen} == {(spec.path, spec.method) for spec in ROUTES}
    assert not [r for r in caplog.records if "route table" in r.getMessage()]
