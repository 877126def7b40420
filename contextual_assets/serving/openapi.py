"""The search API's OpenAPI 3.1 document, from the same pydantic models the service validates with, and a
plain page that shows it (no script from a CDN: the docs work on a closed network)."""

from __future__ import annotations

import html
import json
from typing import Any

from pydantic.json_schema import models_json_schema

from contextual_assets import package_version

from .api import BatchSearchRequest, BatchSearchResponse, ErrorBody, SearchRequest, SearchResponse, VersionsResponse

_REF = "#/components/schemas/{model}"


def _body(model: type, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": _REF.format(
        model=model.__name__)}}}}


def _errors(*statuses: int, **meanings: str) -> dict[str, Any]:
    """Error responses by status; `meanings` (`s422="..."`) replaces a status's usual description."""
    meaning = {400: "not JSON or not an object", 401: "missing or wrong bearer token", 404: "no such version",
               413: "body over CTX_SERVE_MAX_REQUEST_BYTES", 422: "a field is invalid (the message names it)",
               500: "an unforeseen failure (the service log has the traceback)",
               502: "the reranker failed", 503: "the store, embedder or a version to serve is unavailable"}
    return {str(s): _body(ErrorBody, meanings.get(f"s{s}", meaning[s])) for s in statuses}


def openapi_document(*, bearer: bool) -> dict[str, Any]:
    """The document; `bearer`: the search and version routes need a token (this service has one set)."""
    _, schemas = models_json_schema(
        [(m, "validation") for m in (SearchRequest, BatchSearchRequest)]
        + [(m, "serialization") for m in (SearchResponse, BatchSearchResponse, VersionsResponse, ErrorBody)],
        ref_template=_REF)
    secured = {"security": [{"bearer": []}]} if bearer else {}
    search = {"requestBody": {"required": True, **_body(SearchRequest, "the query")},
              "responses": {"200": _body(SearchResponse, "the hits and the version that served them"),
                            **_errors(400, 401, 404, 413, 422, 500, 502, 503)}, **secured}
    paths: dict[str, Any] = {
        "/v1/search": {"post": {"summary": "Search an index version (default: the production alias)",
                                "operationId": "search", **search}},
        "/search": {"post": {"summary": "Search (the first name of /v1/search)", "operationId": "search_legacy",
                             "deprecated": True, **search}},
        "/v1/search/batch": {"post": {
            "summary": "Several searches in one request, answered in order, each with its own status",
            "description": "Each query is validated and answered alone: one that is invalid (422, the error "
                           "names its field) or fails (e.g. 404, 503, 500) gets `status` and `error` in its "
                           "result, and the other queries are still answered.",
            "operationId": "search_batch",
            "requestBody": {"required": True, **_body(BatchSearchRequest, "the queries")},
            "responses": {"200": _body(BatchSearchResponse, "one result per query: {status, result, error}"),
                          **_errors(400, 401, 413, 422, s422="`queries` is missing, empty or over 32, or "
                                                             "the body has an unknown field")}, **secured}},
        "/v1/versions": {"get": {"summary": "Index versions, the production alias and the default",
                                 "operationId": "versions",
                                 "responses": {"200": _body(VersionsResponse, "the versions"),
                                               **_errors(401, 503)}, **secured}},
        "/healthz": {"get": {"summary": "Liveness: the process answers", "operationId": "healthz",
                             "responses": {"200": {"description": "alive"}}}},
        "/readyz": {"get": {"summary": "Readiness: the store answers and a version is there to serve",
                            "operationId": "readyz",
                            "responses": {"200": {"description": "ready"}, **_errors(503)}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "operationId": "metrics",
                             "responses": {"200": {"description": "text exposition format",
                                                   "content": {"text/plain": {}}}}}},
    }
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "Contextual retrieval search", "version": package_version(),
                 "description": "Hybrid (dense + BM25) search over a promoted index version; `ctx serve`."},
        "paths": paths, "components": {"schemas": schemas["$defs"]},
    }
    if bearer:
        document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return document


def docs_page(document: dict[str, Any]) -> str:
    """Each route with its summary and statuses, and the schemas, as one HTML page."""
    rows = []
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            statuses = ", ".join(op["responses"])
            rows.append(f"<tr><td><code>{method.upper()} {html.escape(path)}</code></td>"
                        f"<td>{html.escape(op['summary'])}</td><td>{statuses}</td></tr>")
    schemas = html.escape(json.dumps(document["components"]["schemas"], indent=2))
    title = html.escape(document["info"]["title"])
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
            f"<h1>{title} {html.escape(document['info']['version'])}</h1>"
            "<p>The machine-readable document: <a href='/openapi.json'>/openapi.json</a>.</p>"
            "<table border='1' cellpadding='4'><tr><th>route</th><th>what</th><th>statuses</th></tr>"
            f"{''.join(rows)}</table><h2>Schemas</h2><pre>{schemas}</pre></body></html>")
