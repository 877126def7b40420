"""`ctx serve`: the search service over HTTP (Starlette + uvicorn, both installed with dagster-webserver).

    POST /v1/search        {query, k, mode, version?, rerank?} -> hits and the index version served
                           (`/search`: the same, its first name)
    POST /v1/search/batch  {queries: [...]} -> one result per query, in order, each with its own status (an
                           invalid or failing query is answered in its result; the others still are)
    GET  /v1/versions      index versions, the production alias and what a search serves by default
                           (`/versions`: the same)
    GET  /healthz          liveness: the process answers (no key, no store)
    GET  /readyz           readiness: a version with chunks is being served (else 503, saying why)
    GET  /metrics          Prometheus text: requests, latency, errors, the version served, what is in memory
    GET  /openapi.json     the OpenAPI document of these routes; /docs renders it as a page

The routes, and every status each can answer, are one table (`routes.py`) that the OpenAPI document is
built from too. With keys configured (`keys.py`: CTX_SEARCH_KEYS_FILE and the token CTX_SEARCH_TOKEN_ENV
names), the search and version routes need `Authorization: Bearer <token>`. Each client (its key's name,
else its address) is rate limited (`rate_limit.py`) except on /healthz, /readyz and /metrics. Bodies over
CTX_SERVE_MAX_REQUEST_BYTES are refused before parsing. Every error is an RFC 9457 problem
(`problems.py`); every response carries `X-Request-ID`, and each request is logged on the
`ctx.serve.access` logger (`request_context.py`; never a header, so never a token).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from contextual_assets.errors import ContextualError

from .api import BatchResult, BatchSearchEnvelope, BatchSearchResponse, SearchRequest
from .keys import KeyRing
from .metrics import ServiceMetrics
from .openapi import docs_page, openapi_document
from .problems import problem_response
from .rate_limit import RateLimiter
from .request_context import ACCESS_LOG, RequestMiddleware, context
from .routes import ROUTES, RouteSpec
from .service import SearchError, SearchService

__all__ = ["ACCESS_LOG", "ServingState", "create_app"]
log = logging.getLogger(__name__)
Handler = Callable[[Request], Awaitable[Response]]
Body = TypeVar("Body", bound=BaseModel)


def _problem(request: Request, status: int, detail: str, *, slug: str | None = None,
             headers: dict[str, str] | None = None) -> Response:
    """This request's error response (a problem with its request id)."""
    return problem_response(status, detail, context(request).request_id, slug=slug, headers=headers)


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
    keys: KeyRing  # no keys configured: every request is admitted
    limiter: RateLimiter
    max_request_bytes: int
    metrics: ServiceMetrics
    document: dict[str, Any]  # the OpenAPI document (`/openapi.json`)
    page: str  # the page rendering it (`/docs`)


def _state(request: Request) -> ServingState:
    return request.app.state.serving


async def _json_body(request: Request, max_request_bytes: int) -> dict | Response:
    """The request's JSON object, or the refusal to send (size, not JSON, not an object)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_request_bytes:
        return _problem(request, 413, f"request body of {declared} bytes is over the limit of {max_request_bytes} "
                                      "(CTX_SERVE_MAX_REQUEST_BYTES)")
    body = b""
    async for part in request.stream():  # bounded even when no length was declared (chunked)
        body += part
        if len(body) > max_request_bytes:
            return _problem(request, 413, f"request body is over the limit of {max_request_bytes} bytes "
                                          "(CTX_SERVE_MAX_REQUEST_BYTES)")
    try:
        payload = json.loads(body or b"null")
    except (ValueError, RecursionError):
        return _problem(request, 400, "request body is not JSON; send {\"query\": \"...\", \"k\": 10}")
    if not isinstance(payload, dict):
        return _problem(request, 400, "request body must be a JSON object like {\"query\": \"...\", \"k\": 10}")
    return payload


async def _parsed_body(request: Request, model: type[Body]) -> Body | Response:
    """The request's body as `model`, or the refusal to send (413, 400, 422)."""
    payload = await _json_body(request, _state(request).max_request_bytes)
    if isinstance(payload, Response):
        return payload
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        return _problem(request, 422, _validation_message(exc))


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
        detail = outcome.error or ""
        if outcome.status == 500:
            detail = f"{detail} under request id {context(request).request_id}"
        return _problem(request, outcome.status, detail)
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
    try:
        result = await run_in_threadpool(_state(request).service.versions)
    except ContextualError as exc:
        return _problem(request, 503, str(exc))
    return JSONResponse(result.model_dump())


async def healthz(request: Request) -> Response:
    """`GET /healthz`: liveness, answered without a key or the store."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """`GET /readyz`: the version served by default and its alias, or a 503 saying why there is none."""
    service = _state(request).service
    try:
        readiness = await run_in_threadpool(service.ready)
    except SearchError as exc:
        return _problem(request, exc.status, str(exc), slug="not-ready" if exc.status == 503 else None)
    except ContextualError as exc:
        return _problem(request, 503, str(exc), slug="not-ready")
    return JSONResponse(readiness.model_dump())


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


HANDLERS: dict[str, Handler] = {"search": search, "search_batch": search_batch, "versions": versions,
                                "healthz": healthz, "readyz": readyz, "metrics": prometheus, "openapi": openapi,
                                "docs": docs}


def _admit(spec: RouteSpec, request: Request) -> Response | None:
    """The rate limit's 429 or the key check's 401 for this request, or None to let it through. The
    client is the key's name when a valid key came, else the address (so a flood of wrong keys is paced)."""
    state = _state(request)
    key = None
    if spec.keyed and state.keys.enabled:
        key = state.keys.identify(request.headers.get("authorization", ""))
    if spec.limited:
        client = f"key:{key}" if key else f"address:{request.client.host if request.client else '-'}"
        wait = state.limiter.take(client)
        if wait is not None:
            return _problem(request, 429, f"over {state.limiter.per_s:g} requests a second (bursts of "
                                          f"{state.limiter.burst}, CTX_SERVE_RATE_LIMIT_PER_S); retry in {wait} s",
                            headers={"Retry-After": str(wait)})
    if spec.keyed and state.keys.enabled and key is None:
        return _problem(request, 401, "missing or wrong API key: send `Authorization: Bearer <token>` with a key of "
                                      "CTX_SEARCH_KEYS_FILE or the CTX_SEARCH_TOKEN", headers={"WWW-Authenticate": "Bearer"})
    return None


def _guarded(spec: RouteSpec, handler: Handler) -> Handler:
    """The handler behind the route's guards (rate limit, key), its route named for the metrics and log."""
    async def guarded(request: Request) -> Response:
        context(request).route = spec.name
        response = _admit(spec, request) or await handler(request)
        if response.status_code not in spec.statuses:  # the route table (and so the document) misses it
            log.error("%s %s answered %d, a status its route table does not list", spec.method, spec.path,
                      response.status_code)
        return response

    return guarded


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such path: 404; a method the path does not take: 405) as problems."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        detail = f"no route {request.url.path}; see /openapi.json"
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        detail = f"{request.method} is not allowed on {request.url.path} (allowed: {allowed})"
    else:
        detail = str(exc.detail)
    return _problem(request, exc.status_code, detail, headers=exc.headers)


def create_app(service: SearchService, token: str | None = None, max_request_bytes: int = 16_384, *,
               keys: KeyRing | None = None, rate_limiter: RateLimiter | None = None) -> Starlette:
    """The search service's app: the route table's routes, each guarded, over one `ServingState` on
    `app.state.serving`. `keys` (default: `token` alone, named `default`) and `rate_limiter` (default:
    none) come from the settings in `ctx serve`."""
    keys = keys if keys is not None else KeyRing(token)
    document = openapi_document(bearer=keys.enabled)
    metrics = ServiceMetrics()
    app = Starlette(routes=[Route(spec.path, _guarded(spec, HANDLERS[spec.name]), methods=[spec.method])
                            for spec in ROUTES],
                    middleware=[Middleware(RequestMiddleware, metrics=metrics)],
                    exception_handlers={HTTPException: _http_error})
    app.state.serving = ServingState(service=service, keys=keys, limiter=rate_limiter or RateLimiter(0.0, 1),
                                     max_request_bytes=max_request_bytes, metrics=metrics, document=document,
                                     page=docs_page(document))
    return app
