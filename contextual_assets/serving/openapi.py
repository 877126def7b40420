"""The search API's OpenAPI 3.1 document, from the same pydantic models the service validates with, and a
plain page that shows it (no script from a CDN: the docs work on a closed network)."""

from __future__ import annotations

import html
import json
from typing import Any

from pydantic.json_schema import models_json_schema

from contextual_assets import package_version

from .api import Problem
from .problems import PROBLEM_MEDIA_TYPE, PROBLEM_TYPES
from .request_context import REQUEST_ID_HEADER
from .routes import ROUTES, RouteSpec

_REF = "#/components/schemas/{model}"
_REQUEST_ID = {"name": REQUEST_ID_HEADER, "in": "header", "required": False, "schema": {"type": "string"},
               "description": "the request's id (1 to 128 of letters, digits and `._:~+/=-`; else one is made); "
                              "echoed on the response and in the access log"}
_ID_HEADER = {REQUEST_ID_HEADER: {"$ref": f"#/components/headers/{REQUEST_ID_HEADER}"}}
_DESCRIPTION = ("Hybrid (dense + BM25) search over a promoted index version; `ctx serve`. Every error is an RFC "
                "9457 problem (`application/problem+json`, the `Problem` schema), an unknown path (404) or method "
                "(405) included; every response carries `X-Request-ID`.")


def _schema(model: type) -> dict[str, Any]:
    return {"$ref": _REF.format(model=model.__name__)}


def _ok(spec: RouteSpec) -> dict[str, Any]:
    content = {spec.ok_media: {"schema": _schema(spec.response)} if spec.response is not None else {}}
    return {"description": spec.ok, "headers": _ID_HEADER, "content": content}


def _problem(spec: RouteSpec, status: int) -> dict[str, Any]:
    headers = dict(_ID_HEADER)
    if status == 429:
        headers["Retry-After"] = {"description": "whole seconds to wait (at least 1)", "schema": {"type": "integer"}}
    if status == 401:
        headers["WWW-Authenticate"] = {"description": "`Bearer`", "schema": {"type": "string"}}
    return {"description": spec.meaning(status), "headers": headers,
            "content": {PROBLEM_MEDIA_TYPE: {"schema": _schema(Problem)}}}


def operation(spec: RouteSpec, *, bearer: bool) -> dict[str, Any]:
    """The OpenAPI operation of one route: every status the route table lists for it."""
    op: dict[str, Any] = {"summary": spec.summary, "operationId": spec.operation_id, "parameters": [_REQUEST_ID],
                          "responses": {str(s): _ok(spec) if s == 200 else _problem(spec, s) for s in spec.statuses}}
    if spec.description:
        op["description"] = spec.description
    if spec.deprecated:
        op["deprecated"] = True
    if spec.request is not None:
        op["requestBody"] = {"required": True, "description": "the request",
                             "content": {"application/json": {"schema": _schema(spec.request)}}}
    if spec.keyed and bearer:
        op["security"] = [{"bearer": []}]
    return op


def openapi_document(*, bearer: bool) -> dict[str, Any]:
    """The document of the route table; `bearer`: the keyed routes need a key (this service has some)."""
    requests = {spec.request for spec in ROUTES if spec.request is not None}
    responses = {spec.response for spec in ROUTES if spec.response is not None} | {Problem}
    _, schemas = models_json_schema(
        [(m, "validation") for m in sorted(requests, key=lambda m: m.__name__)]
        + [(m, "serialization") for m in sorted(responses, key=lambda m: m.__name__)], ref_template=_REF)
    paths: dict[str, Any] = {}
    for spec in ROUTES:
        paths.setdefault(spec.path, {})[spec.method.lower()] = operation(spec, bearer=bearer)
    types = ", ".join(f"`{t.uri}` ({t.status})" for t in PROBLEM_TYPES.values())
    components: dict[str, Any] = {
        "schemas": schemas["$defs"],
        "headers": {REQUEST_ID_HEADER: {"description": "the request's id (given or made)",
                                        "schema": {"type": "string"}}}}
    if bearer:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return {"openapi": "3.1.0",
            "info": {"title": "Contextual retrieval search", "version": package_version(),
                     "description": f"{_DESCRIPTION} Problem types: {types}."},
            "paths": paths, "components": components}


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
