"""HTTP clients of the search service (`ctx serve`): `SearchClient` (blocking, httpx.Client) and
`AsyncSearchClient` (httpx.AsyncClient: awaiting a search never blocks the event loop). Both send the
same requests and read the same answers; neither retries: a 429's `Retry-After` is on the error."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from .errors import REQUEST_ID_HEADER, SearchServiceError, SearchServiceUnavailable, error_from_response
from .models import BatchSearchRequest, BatchSearchResponse, SearchRequest, SearchResponse, VersionsResponse

Model = TypeVar("Model", bound=BaseModel)


def clean_token(token: str | None) -> str | None:
    """A bearer token without surrounding whitespace (a Secret or file often ends in a newline, which
    would make every comparison fail); None when nothing is left."""
    return (token or "").strip() or None


def sendable_token(token: str) -> bool:
    """Whether `token` can travel in an `Authorization` header (printable ASCII)."""
    return token.isascii() and token.isprintable()


class _Endpoint:
    """What both clients share: the base URL, the headers, and how an answer is read."""

    def __init__(self, base_url: str, token: str | None, hint: str | None):
        self.base_url = base_url.rstrip("/")
        self.hint = hint
        token = clean_token(token)
        if token is not None and not sendable_token(token):
            raise SearchServiceError("the search token must be printable ASCII")
        self._token = token
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _invalid_url(self, exc: Exception) -> SearchServiceError:
        return SearchServiceError(f"{self.base_url!r} is not a valid URL for the search service ({exc})")

    def _unreachable(self, exc: Exception) -> SearchServiceUnavailable:
        hint = f"; {self.hint}" if self.hint else ""
        return SearchServiceUnavailable(f"search service at {self.base_url} unreachable ({type(exc).__name__}){hint}")

    @property
    def token(self) -> str | None:
        """The bearer token sent (stripped), for a sibling client of the other kind."""
        return self._token

    @staticmethod
    def _request_headers(request_id: str | None) -> dict[str, str]:
        return {REQUEST_ID_HEADER: request_id} if request_id else {}

    def _json(self, response: httpx.Response) -> Any:
        if not response.is_success:
            raise error_from_response(response, self.base_url)
        try:
            return response.json()
        except ValueError:
            raise SearchServiceError(f"{self.base_url} answered {response.status_code} with a body that is not "
                                     "JSON: is it a `ctx serve`?", status=response.status_code,
                                     request_id=response.headers.get(REQUEST_ID_HEADER)) from None

    def _parsed(self, model: type[Model], body: Any) -> Model:
        try:
            return model.model_validate(body)
        except ValidationError as exc:
            raise SearchServiceError(f"{self.base_url} answered a body this client cannot read ({exc.error_count()} "
                                     "problems): are the service and the client the same version?") from None


def _batch_body(requests: list[SearchRequest]) -> dict[str, Any]:
    return BatchSearchRequest(queries=requests).model_dump(exclude_none=True)


class SearchClient(_Endpoint):
    """Blocking client: `SearchClient("http://search:8765", token).search(SearchRequest(query="..."))`.
    `hint` is appended to the message when the service cannot be reached."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0, *,
                 hint: str | None = None, transport: httpx.BaseTransport | None = None):
        super().__init__(base_url, token, hint)
        self.timeout_s = timeout_s
        try:
            self._client = httpx.Client(base_url=self.base_url, headers=self._headers, timeout=timeout_s,
                                        transport=transport)
        except httpx.InvalidURL as exc:
            raise self._invalid_url(exc) from None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, request_id: str | None = None) -> Any:
        try:
            response = self._client.request(method, path, json=body, headers=self._request_headers(request_id))
        except httpx.InvalidURL as exc:
            raise self._invalid_url(exc) from None
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        return self._json(response)

    def search(self, request: SearchRequest, *, request_id: str | None = None) -> SearchResponse:
        body = request.model_dump(exclude_none=True)
        return self._parsed(SearchResponse, self._call("POST", "/v1/search", body, request_id))

    def search_batch(self, requests: list[SearchRequest], *, request_id: str | None = None) -> BatchSearchResponse:
        """Several searches in one round trip; each result carries its own status (a 404 for one unknown
        version does not fail the others)."""
        return self._parsed(BatchSearchResponse, self._call("POST", "/v1/search/batch", _batch_body(requests),
                                                            request_id))

    def versions(self, *, request_id: str | None = None) -> VersionsResponse:
        return self._parsed(VersionsResponse, self._call("GET", "/v1/versions", request_id=request_id))

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/healthz")

    def ready(self) -> dict[str, Any]:
        return self._call("GET", "/readyz")

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "SearchClient":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncSearchClient(_Endpoint):
    """Async client over httpx.AsyncClient: `await AsyncSearchClient(url, token).search(...)`; close it with
    `await client.aclose()` or `async with`."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0, *,
                 hint: str | None = None, transport: httpx.AsyncBaseTransport | None = None):
        super().__init__(base_url, token, hint)
        self.timeout_s = timeout_s
        try:
            self._client = httpx.AsyncClient(base_url=self.base_url, headers=self._headers, timeout=timeout_s,
                                             transport=transport)
        except httpx.InvalidURL as exc:
            raise self._invalid_url(exc) from None

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
                    request_id: str | None = None) -> Any:
        try:
            response = await self._client.request(method, path, json=body,
                                                  headers=self._request_headers(request_id))
        except httpx.InvalidURL as exc:
            raise self._invalid_url(exc) from None
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        return self._json(response)

    async def search(self, request: SearchRequest, *, request_id: str | None = None) -> SearchResponse:
        body = request.model_dump(exclude_none=True)
        return self._parsed(SearchResponse, await self._call("POST", "/v1/search", body, request_id))

    async def search_batch(self, requests: list[SearchRequest], *,
                           request_id: str | None = None) -> BatchSearchResponse:
        return self._parsed(BatchSearchResponse, await self._call("POST", "/v1/search/batch", _batch_body(requests),
                                                                  request_id))

    async def versions(self, *, request_id: str | None = None) -> VersionsResponse:
        return self._parsed(VersionsResponse, await self._call("GET", "/v1/versions", request_id=request_id))

    async def health(self) -> dict[str, Any]:
        return await self._call("GET", "/healthz")

    async def ready(self) -> dict[str, Any]:
        return await self._call("GET", "/readyz")

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> "AsyncSearchClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
