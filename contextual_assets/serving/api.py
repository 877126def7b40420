"""The search API's bodies as the service uses them: the shared request and response models (from the
client package, written once), and the service's own batch envelope, problem and readiness models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

# The request and response bodies are written once, in the thin client package this distribution ships
# (`clients/python/ctx_search_client/models.py`); the service adds its own envelope, problem and readiness.
from ctx_search_client.models import (  # noqa: F401 (re-exported for the service)
    MAX_BATCH_QUERIES,
    MAX_QUERY_CHARS,
    BatchResult,
    BatchSearchRequest,
    BatchSearchResponse,
    Hit,
    SearchMode,
    SearchRequest,
    SearchResponse,
    VersionInfo,
    VersionsResponse,
)


class BatchSearchEnvelope(BaseModel):
    """What the service validates of a batch as a whole (how many queries); each query is then validated
    alone as a `SearchRequest`, so one invalid query fails in its own result, not the batch."""

    model_config = {"extra": "forbid"}

    queries: list[Any] = Field(min_length=1, max_length=MAX_BATCH_QUERIES)


class Problem(BaseModel):
    """Every error response's body (RFC 9457 problem details, `application/problem+json`)."""

    type: str = Field(description="`urn:ctx:problem:<slug>`, one per kind of problem (e.g. `invalid-field`)",
                      examples=["urn:ctx:problem:invalid-field"])
    title: str = Field(description="a short summary, the same for every problem of this type")
    status: int = Field(description="the HTTP status, as on the response")
    detail: str = Field(description="what went wrong in this request, one line")
    request_id: str = Field(description="the request's id, as in the `X-Request-ID` response header")


class Readiness(BaseModel):
    """`GET /readyz` when ready: the version a search without `version` serves, and through which alias."""

    status: Literal["ready"] = "ready"
    index_version: str = Field(description="the version served by default (it holds chunks)")
    alias: str | None = Field(description="the alias it is served through; null: the settings' own version")
    production: str | None = Field(description="the production alias's target, null when never promoted")
    default: str = Field(description="the same as `index_version` (the field `/v1/versions` calls it by)")
    chunks: int = Field(description="chunks the served version holds")
