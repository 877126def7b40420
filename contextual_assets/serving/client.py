"""HTTP client of the search service (`CTX_SEARCH_URL`): httpx and the API models, nothing heavier."""

from __future__ import annotations

import os

import httpx
from pydantic import ValidationError

from contextual_assets.errors import ContextualError, DependencyUnavailable

from .api import BatchSearchRequest, BatchSearchResponse, SearchRequest, SearchResponse, VersionsResponse


class SearchServiceError(ContextualError):
    """The search service refused the request or could not be reached."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class SearchServiceUnavailable(SearchServiceError, DependencyUnavailable):
    """The search service does not answer (`ctx` exits 3)."""


def clean_token(token: str | None) -> str | None:
    """A bearer token without surrounding whitespace (a Secret or file often ends in a newline, which
    would make every comparison fail); None when nothing is left."""
    return (token or "").strip() or None


def token_from_env(variable: str) -> str | None:
    """The search token the variable `variable` holds (CTX_SEARCH_TOKEN_ENV names it), stripped."""
    return clean_token(os.environ.get(variable))


class SearchClient:
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0):
        self.base_url = base_url.rstrip("/")
        token = clean_token(token)
        if token is not None and not (token.isascii() and token.isprintable()):
            raise SearchServiceError("the search token (CTX_SEARCH_TOKEN) must be printable ASCII")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)
        except httpx.InvalidURL as exc:
            raise SearchServiceError(f"CTX_SEARCH_URL={base_url!r} is not a valid URL ({exc})") from None

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        try:
            response = self._client.request(method, path, json=body)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise SearchServiceUnavailable(f"search service at {self.base_url} unreachable ({type(exc).__name__}); "
                                           "start it with `ctx serve` or unset CTX_SEARCH_URL") from None
        if response.status_code != 200:
            try:
                detail = response.json().get("error") or response.text
            except ValueError:
                detail = response.text
            detail = " ".join(str(detail).split())  # one line, whatever the body (a proxy's HTML page)
            raise SearchServiceError(f"search service at {self.base_url} answered {response.status_code}: "
                                     f"{detail[:300]}", status=response.status_code)
        try:
            return response.json()
        except ValueError:
            raise SearchServiceError(f"{self.base_url} answered 200 with a body that is not JSON: is CTX_SEARCH_URL "
                                     "a `ctx serve`?") from None

    def _parsed(self, model, body: dict):
        try:
            return model.model_validate(body)
        except ValidationError as exc:
            raise SearchServiceError(f"{self.base_url} answered a body this client cannot read ({exc.error_count()} "
                                     "problems): are the service and the client the same version?") from None

    def search(self, request: SearchRequest) -> SearchResponse:
        return self._parsed(SearchResponse, self._call("POST", "/v1/search", request.model_dump(exclude_none=True)))

    def search_batch(self, requests: list[SearchRequest]) -> BatchSearchResponse:
        """Several searches in one round trip; each result carries its own status (a 404 for one unknown
        version does not fail the others)."""
        body = BatchSearchRequest(queries=requests).model_dump(exclude_none=True)
        return self._parsed(BatchSearchResponse, self._call("POST", "/v1/search/batch", body))

    def versions(self) -> VersionsResponse:
        return self._parsed(VersionsResponse, self._call("GET", "/v1/versions"))

    def health(self) -> dict:
        return self._call("GET", "/healthz")

    def ready(self) -> dict:
        return self._call("GET", "/readyz")

    def close(self) -> None:
        self._client.close()
