"""Every error of the search API as RFC 9457 problem details (`application/problem+json`): one type per
kind of problem, its short title fixed, the request's own detail in one line and its request id."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ctx_search_client.errors import PROBLEM_MEDIA_TYPE, one_line
from starlette.responses import JSONResponse

from .api import Problem

TYPE_PREFIX = "urn:ctx:problem:"


@dataclass(frozen=True)
class ProblemType:
    """One kind of problem: its slug (the type is `urn:ctx:problem:<slug>`), status and fixed title."""

    slug: str
    status: int
    title: str

    @property
    def uri(self) -> str:
        return f"{TYPE_PREFIX}{self.slug}"


_TYPES = (
    ProblemType("bad-request", 400, "Bad request"),
    ProblemType("unauthorized", 401, "Missing or wrong API key"),
    ProblemType("not-found", 404, "Not found"),
    ProblemType("method-not-allowed", 405, "Method not allowed"),
    ProblemType("embedder-unavailable", 409, "The version's embedder cannot be loaded here"),
    ProblemType("payload-too-large", 413, "Request body too large"),
    ProblemType("invalid-field", 422, "Invalid request field"),
    ProblemType("rate-limited", 429, "Too many requests"),
    ProblemType("internal-error", 500, "Internal error"),
    ProblemType("upstream-failed", 502, "A service this one depends on failed"),
    ProblemType("unavailable", 503, "Service unavailable"),
    ProblemType("not-ready", 503, "Not ready to serve"),
)
PROBLEM_TYPES: dict[str, ProblemType] = {t.slug: t for t in _TYPES}
_BY_STATUS: dict[int, ProblemType] = {}
for _type in _TYPES:
    _BY_STATUS.setdefault(_type.status, _type)  # a status's first type is its default


def problem_type(status: int, slug: str | None = None) -> ProblemType:
    """The type named `slug`, else the status's usual one (an unlisted status: a generic type)."""
    if slug is not None:
        return PROBLEM_TYPES[slug]
    found = _BY_STATUS.get(status)
    if found is None:
        kind = "internal-error" if status >= 500 else "bad-request"
        return ProblemType(PROBLEM_TYPES[kind].slug, status, PROBLEM_TYPES[kind].title)
    return found


def problem(status: int, detail: str, request_id: str, slug: str | None = None) -> Problem:
    """The problem body for `status` (or the type `slug`) with this request's detail."""
    kind = problem_type(status, slug)
    return Problem(type=kind.uri, title=kind.title, status=status, detail=one_line(detail) or kind.title,
                   request_id=request_id)


def problem_response(status: int, detail: str, request_id: str, *, slug: str | None = None,
                     headers: Mapping[str, str] | None = None) -> JSONResponse:
    """An error response: the problem body, `application/problem+json`, with any extra headers."""
    body = problem(status, detail, request_id, slug)
    return JSONResponse(body.model_dump(), status_code=status, headers=dict(headers or {}),
                        media_type=PROBLEM_MEDIA_TYPE)
