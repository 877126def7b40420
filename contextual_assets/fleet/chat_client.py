"""`ChatClient`: the header fleet's OpenAI-compatible chat-completions client, built for CPU per request.

Why not the OpenAI SDK: a header request is small (a ~1,000-token prompt, a ~50-token answer), so the
client's own CPU bounds how many requests one process can keep in flight. The SDK (request options,
pydantic models for every response) over httpx (whose connection pool walks its connections and
queued requests on every request) cost 3.0-3.7 ms of this process's CPU per request through the pool
on the 2-core dev box (64-256 in flight), and more under the ingest benchmark. Through the same pool
this client costs about 1 ms, of which ~0.3 ms is the client itself (`python -m bench.client_cpu`;
bench/results/client_cpu.json). What it does, and only that:

* one pooled, keep-alive `aiohttp.ClientSession` per replica, with no connection limit of its own (the
  pool's slots bound the requests in flight). aiohttp, not httpx: bare httpx measured 2.3-5.3 ms per
  request (16-64 in flight per replica), above the 2 ms target on its own;
* the request body made in one stdlib `json.dumps`, straight to bytes (no models); the URL and headers
  (`Authorization: Bearer`) built once per replica;
* the answer read as plain JSON into a small `ChatAnswer` (content, token usage, finish reason);
* errors as small exceptions: `ChatStatusError` (a non-2xx answer, with its status code and message;
  `ChatBadRequestError` for 400), and transport failures as `APIConnectionError` / `APITimeoutError`,
  named as the SDK names them so the fleet's error counters keep their keys.

Cancelling a call (a hedge that lost) closes its connection, so the server sees the disconnect and
aborts the request (vLLM does); a connection is never returned to the pool with an unread answer.
Timeouts are httpx-like: `connect_timeout_s` to get a connection, `request_timeout_s` per read.
Proxies (HTTP(S)_PROXY, NO_PROXY) are taken from the environment when the client opens, as httpx does.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

# Below vLLM's (uvicorn's) 5 s keep-alive: the client drops an idle connection before the server
# does, so a request is rarely written on a connection the server is closing.
KEEPALIVE_S = 4.0
ERROR_BODY_CHARS = 1000  # how much of an error answer an exception keeps


@dataclass(slots=True)
class ChatAnswer:
    """What the fleet reads from a chat completion."""

    content: str  # choices[0].message.content ("" when absent or null)
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None


class ChatClientError(Exception):
    """A chat completion that did not produce an answer."""


class ChatStatusError(ChatClientError):
    """The server answered with a non-2xx status. `str()` is `Error code: <status> - <error>`, as the
    SDK wrote it (the error object of the body, else the body's text)."""

    def __init__(self, status_code: int, message: str, detail: str):
        super().__init__(f"Error code: {status_code} - {detail}")
        self.status_code = status_code
        self.message = message  # the error's own message (body["error"]["message"]), else the detail


class ChatBadRequestError(ChatStatusError):
    """HTTP 400: the server rejected this request (over the context length, malformed...)."""


class APIConnectionError(ChatClientError):
    """No answer: the connection failed, was reset or closed, or the answer was cut short."""


class APITimeoutError(APIConnectionError):
    """No answer in time: the connect or a read timed out."""


class ChatResponseError(ChatClientError):
    """A 2xx answer that is not a chat completion (not JSON, no choices list...)."""


def encode_chat_body(model: str, messages: list[dict[str, Any]], max_tokens: int, temperature: float,
                     extra_body: dict[str, Any] | None = None) -> bytes:
    """The request's JSON body: model, messages, max_tokens, temperature, then `extra_body` merged over
    them (its keys win, as with the SDK's `extra_body`)."""
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens,
                            "temperature": temperature}
    if extra_body:
        body.update(extra_body)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def parse_chat_answer(payload: bytes) -> ChatAnswer:
    """A chat completion's JSON into a `ChatAnswer`: no choices or a null content read as ""; no usage as 0."""
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise ChatResponseError(f"the answer is not JSON: {payload[:120]!r}") from exc
    if not isinstance(data, dict):
        raise ChatResponseError(f"the answer is not a JSON object: {payload[:120]!r}")
    choices = data.get("choices")
    content, finish = "", None
    if choices:
        try:
            choice = choices[0]
            message = choice.get("message") or {}
            content = message.get("content") or ""
            finish = choice.get("finish_reason")
        except (AttributeError, KeyError, TypeError, IndexError) as exc:
            raise ChatResponseError(f"malformed choices in the answer: {payload[:120]!r}") from exc
        if not isinstance(content, str):
            raise ChatResponseError(f"the answer's content is not text: {content!r:.120}")
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return ChatAnswer(content=content, prompt_tokens=usage.get("prompt_tokens") or 0,
                      completion_tokens=usage.get("completion_tokens") or 0, finish_reason=finish)


def status_error(status: int, payload: bytes) -> ChatStatusError:
    """The exception for a non-2xx answer (400: `ChatBadRequestError`)."""
    text = payload[:64 * 1024].decode("utf-8", "replace")
    message = detail = text.strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data)
        detail = json.dumps(error, ensure_ascii=False) if not isinstance(error, str) else error
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            message = error["message"]
        elif isinstance(error, str):
            message = error
    kind = ChatBadRequestError if status == 400 else ChatStatusError
    return kind(status, message[:ERROR_BODY_CHARS], detail[:ERROR_BODY_CHARS])


def _ssl_context() -> ssl.SSLContext:
    """The system's CA store, plus certifi's bundle where installed (what httpx, and so the SDK, trust)."""
    context = ssl.create_default_context()
    try:
        import certifi
    except ImportError:  # pragma: no cover - certifi comes with httpx
        return context
    context.load_verify_locations(certifi.where())
    return context


def _env_proxy(url: URL) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy HTTP(S)_PROXY / NO_PROXY choose for `url` (None: none)."""
    from aiohttp.helpers import get_env_proxy_for_url

    try:
        return get_env_proxy_for_url(url)
    except LookupError:
        return None, None


class ChatClient:
    """One replica's chat-completions client: a pooled keep-alive session, created on first use (on the
    event loop that uses it), closed by `close()`."""

    def __init__(self, base_url: str, *, api_key: str | None, request_timeout_s: float,
                 connect_timeout_s: float):
        self.base_url = base_url.rstrip("/")
        self.url = URL(f"{self.base_url}/chat/completions")
        self.headers: dict[str, str] = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_connect=connect_timeout_s,
                                             sock_read=request_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=0, limit_per_host=0,  # no cap here: the fleet's slots bound the requests in flight
            keepalive_timeout=KEEPALIVE_S,
            ssl=_ssl_context() if self.url.scheme == "https" else True,
        )
        # The proxy is read from the environment once, here, as httpx reads it when a client is made:
        # aiohttp's trust_env would look it up again on every request (~0.3 ms of CPU each). No cookie
        # jar: an inference server sets none, and the jar is work on every request.
        proxy, proxy_auth = _env_proxy(self.url)
        self._session = aiohttp.ClientSession(connector=connector, headers=self.headers, timeout=self.timeout,
                                              proxy=proxy, proxy_auth=proxy_auth,
                                              cookie_jar=aiohttp.DummyCookieJar(), raise_for_status=False)
        return self._session

    async def complete(self, *, model: str, messages: list[dict[str, Any]], max_tokens: int,
                       temperature: float, extra_body: dict[str, Any] | None = None) -> ChatAnswer:
        """One chat completion (stream off). Raises `ChatStatusError` for a non-2xx answer,
        `APIConnectionError` / `APITimeoutError` when no answer came, `ChatResponseError` for an answer
        that is not a chat completion."""
        return await self.send(encode_chat_body(model, messages, max_tokens, temperature, extra_body))

    async def send(self, body: bytes) -> ChatAnswer:
        """POST an already-encoded body (see `encode_chat_body`) to /chat/completions."""
        session = self._session or self._open()
        try:
            response = await session.post(self.url, data=body, allow_redirects=False)
            try:
                payload = await response.read()
            except BaseException:
                # Cancelled (a hedge that lost) or failed mid-answer: drop the connection, so the server
                # sees the disconnect and the connection never goes back to the pool half-read.
                response.close()
                raise
        except TimeoutError as exc:  # aiohttp's timeouts are TimeoutErrors (asyncio.TimeoutError is one)
            raise APITimeoutError(f"request timed out ({type(exc).__name__}: {exc})") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise APIConnectionError(f"{type(exc).__name__}: {exc}") from exc
        status = response.status
        if status < 200 or status >= 300:
            raise status_error(status, payload)
        return parse_chat_answer(payload)

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
