"""`ctx serve`: the search service over HTTP (Starlette + uvicorn, both installed with dagster-webserver).

    POST /search    {query, k, mode, version?, rerank?} -> hits and the index version served
    GET  /versions  index versions, the production alias and what a search serves by default
    GET  /healthz   liveness (no token needed; the status and the production version only)

With a token configured (the variable named by CTX_SEARCH_TOKEN_ENV), /search and /versions need
`Authorization: Bearer <token>`. Bodies over CTX_SERVE_MAX_REQUEST_BYTES are refused before parsing.
"""

from __future__ import annotations

import hmac
import json

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from contextual_assets.errors import ContextualError

from .api import SearchRequest
from .service import SearchError, SearchService


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "body"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def create_app(service: SearchService, token: str | None = None, max_request_bytes: int = 16_384) -> Starlette:
    def authorized(request: Request) -> bool:
        if not token:
            return True
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())

    def refused() -> JSONResponse:
        return JSONResponse({"error": "missing or wrong bearer token (Authorization: Bearer <CTX_SEARCH_TOKEN>)"},
                            status_code=401, headers={"WWW-Authenticate": "Bearer"})

    async def search(request: Request) -> JSONResponse:
        if not authorized(request):
            return refused()
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
        try:
            parsed = SearchRequest.model_validate(payload)
        except ValidationError as exc:
            return _error(422, _validation_message(exc))
        try:
            result = await run_in_threadpool(service.search, parsed)
        except SearchError as exc:
            return _error(exc.status, str(exc))
        except ContextualError as exc:  # the store or the embedder refused: the operator's to fix
            return _error(503, str(exc))
        return JSONResponse(result.model_dump())

    async def versions(request: Request) -> JSONResponse:
        if not authorized(request):
            return refused()
        try:
            result = await run_in_threadpool(service.versions)
        except ContextualError as exc:
            return _error(503, str(exc))
        return JSONResponse(result.model_dump())

    async def healthz(request: Request) -> JSONResponse:
        try:
            return JSONResponse(await run_in_threadpool(service.health))
        except ContextualError as exc:
            return _error(503, str(exc))

    return Starlette(routes=[
        Route("/search", search, methods=["POST"]),
        Route("/versions", versions, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
    ])
