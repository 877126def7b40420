"""The search API's route table: each route's path, method, what guards it (key, rate limit, body) and
every status it can answer. The app is built from it and so is the OpenAPI document, so the two cannot
drift; the app logs an error for a status its route does not list."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from .api import BatchSearchRequest, BatchSearchResponse, Readiness, SearchRequest, SearchResponse, VersionsResponse

# What a status means when a route does not say otherwise (the OpenAPI descriptions).
MEANINGS: dict[int, str] = {
    200: "the answer", 400: "not JSON, not an object, or a rerank asked of a service without a reranker",
    401: "missing or wrong API key (`Authorization: Bearer <token>`)", 404: "no such index version",
    409: "the version's embedder cannot be loaded by this service", 413: "body over CTX_SERVE_MAX_REQUEST_BYTES",
    422: "a field is invalid (the detail names it)", 429: "over CTX_SERVE_RATE_LIMIT_PER_S (see `Retry-After`)",
    500: "an unforeseen failure (the service log has the traceback, under the request id)",
    502: "the reranker failed", 503: "the store, the embedder or a version to serve is unavailable",
}


@dataclass(frozen=True)
class RouteSpec:
    """One route. `own`: the statuses its handler answers; the guards add theirs (see `statuses`)."""

    path: str
    name: str  # the metrics' `route` label and the handler's name in the app
    method: str
    operation_id: str
    summary: str
    own: tuple[int, ...] = (200,)
    keyed: bool = False  # needs an API key when keys are configured
    limited: bool = True  # counted against the client's rate limit
    request: type[BaseModel] | None = None  # a JSON body, parsed as this model
    response: type[BaseModel] | None = None  # the 200 body (None: described by `ok`)
    ok: str = "the answer"
    ok_media: str = "application/json"
    description: str = ""
    deprecated: bool = False
    meanings: tuple[tuple[int, str], ...] = ()  # a status's meaning on this route, where it differs

    @property
    def statuses(self) -> tuple[int, ...]:
        """Every status this route can answer: its own, its guards' and 500 (anything unforeseen)."""
        found = set(self.own) | {500}
        if self.keyed:
            found.add(401)
        if self.limited:
            found.add(429)
        if self.request is not None:
            found |= {400, 413, 422}
        return tuple(sorted(found))

    def meaning(self, status: int) -> str:
        return dict(self.meanings).get(status, MEANINGS[status])


_SEARCH = dict(own=(200, 400, 404, 409, 422, 502, 503), keyed=True, request=SearchRequest, response=SearchResponse,
               ok="the hits and the version that served them",
               meanings=((404, "no such index version, or nothing promoted and none configured"),))
_BATCH_DESCRIPTION = ("Each query is validated and answered alone: one that is invalid (422, the error names its "
                      "field) or fails (e.g. 404, 503, 500) gets `status` and `error` in its result, and the other "
                      "queries are still answered.")

ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("/v1/search", "search", "POST", "search", "Search an index version (default: the production alias)",
              **_SEARCH),
    RouteSpec("/search", "search", "POST", "search_legacy", "Search (the first name of /v1/search)", deprecated=True,
              **_SEARCH),
    RouteSpec("/v1/search/batch", "search_batch", "POST", "search_batch",
              "Several searches in one request, answered in order, each with its own status", keyed=True,
              request=BatchSearchRequest, response=BatchSearchResponse, description=_BATCH_DESCRIPTION,
              ok="one result per query: {status, result, error}",
              meanings=((422, "`queries` is missing, empty or over 32, or the body has an unknown field"),)),
    RouteSpec("/v1/versions", "versions", "GET", "versions", "Index versions, the production alias and the default",
              own=(200, 503), keyed=True, response=VersionsResponse, ok="the versions"),
    RouteSpec("/versions", "versions", "GET", "versions_legacy", "Index versions (the first name of /v1/versions)",
              own=(200, 503), keyed=True, response=VersionsResponse, ok="the versions", deprecated=True),
    RouteSpec("/healthz", "healthz", "GET", "healthz", "Liveness: the process answers", limited=False, ok="alive"),
    RouteSpec("/readyz", "readyz", "GET", "readyz", "Readiness: a version with chunks is being served",
              own=(200, 503), limited=False, response=Readiness, ok="ready: the version served and its alias",
              meanings=((503, "not ready: nothing promoted and the settings' version holds no chunks, the served "
                              "version holds none, or the store is down (the detail says which)"),)),
    RouteSpec("/metrics", "metrics", "GET", "metrics", "Prometheus metrics", limited=False,
              ok="text exposition format", ok_media="text/plain"),
    RouteSpec("/openapi.json", "openapi", "GET", "openapi", "This document", ok="the OpenAPI document"),
    RouteSpec("/docs", "docs", "GET", "docs", "This document as a page", ok="an HTML page", ok_media="text/html"),
)
