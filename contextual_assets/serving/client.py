"""HTTP client of the search service (`CTX_SEARCH_URL`): httpx and the API models, nothing heavier."""

from __future__ import annotations

import httpx

from contextual_assets.errors import ContextualError

from .api import SearchRequest, SearchResponse, VersionsResponse


class SearchServiceError(ContextualError):
    """The search service refused the request or could not be reached."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class SearchClient:
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s)

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        try:
            response = self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise SearchServiceError(f"search service at {self.base_url} unreachable ({type(exc).__name__}); "
                                     "start it with `ctx serve` or unset CTX_SEARCH_URL") from None
        if response.status_code != 200:
            try:
                detail = response.json().get("error") or response.text
            except ValueError:
                detail = response.text
            raise SearchServiceError(f"search service at {self.base_url} answered {response.status_code}: "
                                     f"{str(detail)[:300]}", status=response.status_code)
        return response.json()

    def search(self, request: SearchRequest) -> SearchResponse:
        return SearchResponse.model_validate(self._call("POST", "/search", request.model_dump(exclude_none=True)))

    def versions(self) -> VersionsResponse:
        return VersionsResponse.model_validate(self._call("GET", "/versions"))

    def health(self) -> dict:
        return self._call("GET", "/healthz")

    def close(self) -> None:
        self._client.close()
