"""The platform's side of the search client (`ctx search` with `CTX_SEARCH_URL`): the client itself is the
`ctx_search_client` package (clients/python/, shipped in this distribution too), with the messages and
the token variable `ctx` uses. Nothing heavier than httpx and pydantic is imported."""

from __future__ import annotations

import os

import ctx_search_client
from ctx_search_client import SearchServiceError, SearchServiceUnavailable, clean_token

__all__ = ["SearchClient", "SearchServiceError", "SearchServiceUnavailable", "clean_token", "token_from_env"]

UNREACHABLE_HINT = "start it with `ctx serve` or unset CTX_SEARCH_URL"


def token_from_env(variable: str) -> str | None:
    """The search token the variable `variable` holds (CTX_SEARCH_TOKEN_ENV names it), stripped."""
    return clean_token(os.environ.get(variable))


class SearchClient(ctx_search_client.SearchClient):
    """The package's blocking client; when the service does not answer, the message says how `ctx` finds it."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 30.0):
        super().__init__(base_url, token, timeout_s, hint=UNREACHABLE_HINT)
