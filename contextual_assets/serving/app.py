"""`ctx serve`: the search service over HTTP (Starlette + uvicorn, both installed with dagster-webserver).

    POST /v1/search        {query, k, mode, version?, rerank?} -> hits and the index version served
                           (`/search`: the same, its first name)
    POST /v1/search/batch  {queries: [...]} -> one result per query, in order, each with its own status (an
                           invalid or failing query is answered in its result; the others still are)
    GET  /v1/versions      index versions, the production alias and what a search serves by default
                           (`/versions`: the same)
    GET  /healthz          liveness: the process answers (no token, no store)
    GET  /readyz           readiness: the store answers and a version is there to serve (else 503)
    GET  /metrics          Prometheus text: requests, latency, errors, the version served, what is in memory
    GET  /openapi.json     the OpenAPI document of these routes; /docs renders it as a page

With a token configured (the variable named by CTX_SEARCH_TOKEN_ENV), the search and version routes need
`Authorization: Bearer <token>`. Bodies over CTX_SERVE_MAX_REQUEST_BYTES are refused before parsing.
Each request is logged on the `ctx.serve.access` logger (method, path, status, milliseconds; never a
header, so never the token).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from contextual_assets.errors import ContextualError

from .api import BatchResult, BatchSearchEnvelope, BatchSearchResponse, SearchRequest
from .metrics import ServiceMetrics
from .openapi import docs_page, openapi_document
from .service import SearchError, SearchService

ACCESS_LOG = logging.getLogger("ctx.serve.access")
log = logging.getLogger(__name__)
Handler = Callable[[Request], Awaitable[Response]]
Body = TypeVar("Body", bound=BaseModel)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "body"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


@dataclass(frozen=True)
class ServingState:
    """What the handlers of one app share, kept on `app.state.serving`."""

    service: SearchService  # None only in tests: a search then answers 500, /metrics skips what is held
    token: str | None  # None: no token configured, every request is authorized
    max_request_bytes: int
    metrics: ServiceMetrics
    document: dict[str, Any]  # the OpenAPI document (`/openapi.json`)
    page: str  # the page rendering it (`/docs`)


def _state(request: Request) -> ServingState:
    return request.app.state.serving


def _authorized(state: ServingState, request: Request) -> bool:
    """No token configured, or the request's bearer token is it (compared in constant time)."""
    if not state.token:
        return True
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), state.token.encode())


def _refused() -> JSONResponse:
    return JSONResponse({"error": "missing or wrong bearer token (Authorization: Bearer <CTX_SEARCH_TOKEN>)"},
                        status_code=401, headers={"WWW-Authenticate": "Bearer"})


async def _json_body(request: Request, max_request_bytes: int) -> dict | JSONResponse:
    """The request's JSON object, or the refusal to send (size, not JSON, not an object)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_request_bytes:
        return _error(413, f"request body of {declared} bytes is over the limit of {max_request_bytes} "
                           "(CTX_SERVE_MAX_REQUEST_BYTES)")
    body = b""
    async for part in request.stream():  # bounded even when no length was declared (chunked)
        body += part
        if len(body) > max_request_bytes:
            return _error(413, f"request body is over the limit of {max_request_bytes} bytes "
                               "(CTX_SERVE_MAX_REQUEST_BYTES)")
    try:
        payload = json.loads(body or b"null")
    except (ValueError, RecursionError):
        return _error(400, "request body is not JSON; send {\"query\": \"...\", \"k\": 10}")
    if not isinstance(payload, dict):
        return _error(400, "request body must be a JSON object like {\"query\": \"...\", \"k\": 10}")
    return payload


async def _parsed_body(request: Request, model: type[Body]) -> Body | Response:
    """The authorized request's body as `model`, or the refusal to send (401, 413, 400, 422)."""
    state = _state(request)
    if not _authorized(state, request):
        return _refused()
    payload = await _json_body(request, state.max_request_bytes)
    if isinstance(payload, JSONResponse):
        return payload
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        return _error(422, _validation_message(exc))


def _answer(state: ServingState, parsed: SearchRequest) -> BatchResult:
    """One search, its refusal as a status and message (the store or embedder refusing: 503)."""
    try:
        result = state.service.search(parsed)
    except SearchError as exc:
        return BatchResult(status=exc.status, error=str(exc))
    except ContextualError as exc:  # the store or the embedder refused: the operator's to fix
        return BatchResult(status=503, error=str(exc))
    except Exception:  # unforeseen: this query answers 500 (as JSON), a batch's other queries still answer
        log.exception("search failed (mode %s, version %s)", parsed.mode, parsed.version or "default")
        return BatchResult(status=500, error="the search failed unexpectedly; the service log has the "
                                             "traceback")
    state.metrics.served(result.index_version, result.alias)
    return BatchResult(status=200, result=result)


def _answer_payload(state: ServingState, payload: Any) -> BatchResult:
    """One query of a batch, validated alone: an invalid one is its own 422, not the batch's."""
    try:
        parsed = SearchRequest.model_validate(payload)
    except ValidationError as exc:
        return BatchResult(status=422, error=_validation_message(exc))
    return _answer(state, parsed)


async def search(request: Request) -> Response:
    """`POST /v1/search` (and `/search`): one query's hits, or its refusal with the status it earned."""
    parsed = await _parsed_body(request, SearchRequest)
    if isinstance(parsed, Response):
        return parsed
    outcome = await run_in_threadpool(_answer, _state(request), parsed)
    if outcome.result is None:
        return _error(outcome.status, outcome.error or "")
    return JSONResponse(outcome.result.model_dump())


async def search_batch(request: Request) -> Response:
    """`POST /v1/search/batch`: one result per query, in order, each with its own status."""
    parsed = await _parsed_body(request, BatchSearchEnvelope)
    if isinstance(parsed, Response):
        return parsed
    state = _state(request)
    results = await run_in_threadpool(lambda: [_answer_payload(state, q) for q in parsed.queries])
    return JSONResponse(BatchSearchResponse(results=results).model_dump())


async def versions(request: Request) -> Response:
    """`GET /v1/versions` (and `/versions`): the index versions and what a search serves by default."""
    state = _state(request)
    if not _authorized(state, request):
        return _refused()
    try:
        result = await run_in_threadpool(state.service.versions)
    except ContextualError as exc:
        return _error(503, str(exc))
    return JSONResponse(result.model_dump())


async def healthz(request: Request) -> Response:
    """`GET /healthz`: liveness, answered without the token or the store."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """`GET /readyz`: the store answers and a version is there to serve, else 503."""
    service = _state(request).service
    try:
        return JSONResponse(await run_in_threadpool(service.ready))
    except SearchError as exc:
        return _error(exc.status, str(exc))
    except ContextualError as exc:
        return _error(503, str(exc))


async def prometheus(request: Request) -> Response:
    """`GET /metrics`: the Prometheus exposition, with what the service holds in memory now."""
    state = _state(request)
    if state.service is not None:
        state.metrics.held(state.service.in_memory())
    return Response(state.metrics.exposition(), media_type=state.metrics.content_type)


async def openapi(request: Request) -> Response:
    """`GET /openapi.json`: the OpenAPI document of these routes."""
    return JSONResponse(_state(request).document)


async def docs(request: Request) -> Response:
    """`GET /docs`: the OpenAPI document rendered as a page."""
    return HTMLResponse(_state(request).page)


def _observed(route: str, handler: Handler) -> Handler:
    """The handler, counted and timed under `route` and written to the access log."""
    async def wrapped(request: Request) -> Response:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status_code
            return response
        finally:
            elapsed = time.perf_counter() - started
            _state(request).metrics.observe(route, status, elapsed)
            client = request.client.host if request.client else "-"
            ACCESS_LOG.info('%s "%s %s" %d %.1f ms', client, request.method, request.url.path, status,
                            elapsed * 1000)

    return wrapped


# (path, metrics route name, handler, methods); the unversioned paths are the routes' first names.
_ROUTES: tuple[tuple[str, str, Handler, list[str]], ...] = (
    ("/v1/search", "search", search, ["POST"]), ("/search", "search", search, ["POST"]),
    ("/v1/search/batch", "search_batch", search_batch, ["POST"]),
    ("/v1/versions", "versions", versions, ["GET"]), ("/versions", "versions", versions, ["GET"]),
    ("/healthz", "healthz", healthz, ["GET"]), ("/readyz", "readyz", readyz, ["GET"]),
    ("/metrics", "metrics", prometheus, ["GET"]),
    ("/openapi.json", "openapi", openapi, ["GET"]), ("/docs", "docs", docs, ["GET"]),
)


def create_app(service: SearchService, token: str | None = None, max_request_bytes: int = 16_384) -> Starlette:
    """The search service's app: its routes, each observed, over one `ServingState` on `app.state.serving`."""
    token = (token or "").strip() or None  # a Secret's trailing newline would lock every client out
    document = openapi_document(bearer=bool(token))
    app = Starlette(routes=[Route(path, _observed(name, handler), methods=methods)
                            for path, name, handler, methods in _ROUTES])
    app.state.serving = ServingState(service=service, token=token, max_request_bytes=max_request_bytes,
                                     metrics=ServiceMetrics(), document=document, page=docs_page(document))
    return app
