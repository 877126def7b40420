"""`ChatClient` (contextual_assets/fleet/chat_client.py) against tiny servers on loopback.

Nothing is mocked inside the client: each test starts a small aiohttp.web app (or, for cancellation, a
raw asyncio socket server) on 127.0.0.1 that records what it received and answers a canned reply, so
the real request path (connection pool, body, headers, reading and closing) is exercised. The error
mapping is also checked through `Attempts._call`, with a `ReplicaState` whose client is a real
`ChatClient` on such a server (the slots are not involved).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json

import pytest
from aiohttp import web

from contextual_assets.fleet.attempts import Attempts
from contextual_assets.fleet.breaker import CircuitBreaker
from contextual_assets.fleet.chat_client import (
    APIConnectionError,
    APITimeoutError,
    ChatAnswer,
    ChatBadRequestError,
    ChatClient,
    ChatResponseError,
    ChatStatusError,
    encode_chat_body,
    parse_chat_answer,
)
from contextual_assets.fleet.config import ReplicaConfig
from contextual_assets.fleet.replica import ReplicaState
from contextual_assets.fleet.types import (
    FleetCounters,
    FleetRequest,
    RequestRejectedError,
    RequestTooLargeError,
    RetryableFleetError,
)

MESSAGES = [{"role": "system", "content": "Write a header."}, {"role": "user", "content": "Ünïcode chunk"}]
COMPLETION = {
    "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "A header."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}


class Server:
    """An aiohttp.web app on a free loopback port: POST /v1/chat/completions records the request and
    answers `self.reply` (status, JSON body or raw bytes)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.reply: tuple[int, object] = (200, COMPLETION)
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def handler(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.requests.append({"headers": dict(request.headers), "body": json.loads(raw), "path": request.path})
        status, body = self.reply
        if isinstance(body, bytes):
            return web.Response(status=status, body=body, content_type="application/json")
        return web.json_response(body, status=status)

    async def __aenter__(self) -> Server:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handler)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


def client_for(base_url: str, api_key: str | None = "sk-test", **timeouts) -> ChatClient:
    timeouts = {"request_timeout_s": 10.0, "connect_timeout_s": 5.0, **timeouts}
    return ChatClient(base_url, api_key=api_key, **timeouts)


def run(coroutine):
    """On a thread of its own: another test's event loop (Playwright's sync API) may still be running
    in the main thread, where asyncio.run() refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_body_shape_auth_header_and_answer():
    async def go():
        async with Server() as server:
            client = client_for(server.base_url)
            try:
                answer = await client.complete(model="m", messages=MESSAGES, max_tokens=60, temperature=0.7,
                                               extra_body={"top_p": 0.5, "temperature": 0.1,
                                                           "chat_template_kwargs": {"enable_thinking": False}})
                again = await client.complete(model="m", messages=MESSAGES, max_tokens=60, temperature=0.0)
            finally:
                await client.close()
            return server.requests, answer, again

    requests, answer, again = run(go())
    assert answer == ChatAnswer(content="A header.", prompt_tokens=12, completion_tokens=3, finish_reason="stop")
    assert again == answer
    first, second = requests
    assert first["path"] == "/v1/chat/completions"
    # extra_body merged over the body, its keys winning (as the SDK's extra_body)
    assert first["body"] == {"model": "m", "messages": MESSAGES, "max_tokens": 60, "temperature": 0.1, "top_p": 0.5,
                             "chat_template_kwargs": {"enable_thinking": False}}
    assert second["body"] == {"model": "m", "messages": MESSAGES, "max_tokens": 60, "temperature": 0.0}
    assert first["headers"]["Authorization"] == "Bearer sk-test"
    assert first["headers"]["Content-Type"] == "application/json"


def test_no_api_key_sends_no_authorization():
    async def go():
        async with Server() as server:
            client = client_for(server.base_url, api_key=None)
            try:
                await client.complete(model="m", messages=MESSAGES, max_tokens=5, temperature=0.0)
            finally:
                await client.close()
            return server.requests

    assert "Authorization" not in run(go())[0]["headers"]


def test_encode_chat_body_is_compact_utf8_json():
    body = encode_chat_body("m", MESSAGES, 60, 0.0, None)
    assert isinstance(body, bytes) and "Ünïcode".encode() in body and b", " not in body
    assert json.loads(body) == {"model": "m", "messages": MESSAGES, "max_tokens": 60, "temperature": 0.0}


def test_answer_parsing_null_content_missing_usage_and_no_choices():
    null = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "length"}]}
    assert parse_chat_answer(json.dumps(null).encode()) == ChatAnswer("", 0, 0, "length")
    assert parse_chat_answer(b'{"choices": [], "usage": null}') == ChatAnswer("", 0, 0, None)
    assert parse_chat_answer(b'{"usage": {"prompt_tokens": 7, "completion_tokens": null}}') == ChatAnswer("", 7, 0, None)
    for bad in (b"not json", b"[1, 2]", b'{"choices": ["x"]}', b'{"choices": [{"message": {"content": [1]}}]}'):
        with pytest.raises(ChatResponseError):
            parse_chat_answer(bad)


def test_status_errors_carry_status_and_message():
    too_long = ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
                "(4940 in the messages, 60 in the completion).")

    async def go():
        async with Server() as server:
            client = client_for(server.base_url)
            caught = []
            try:
                for status, body in [
                    (400, {"error": {"message": too_long, "type": "BadRequestError", "code": 400}}),
                    (400, {"error": {"message": "messages must be a non-empty list", "type": "BadRequestError"}}),
                    (500, {"error": {"message": "boom", "type": "InternalServerError", "code": 500}}),
                    (429, {"detail": "slow down"}),
                    (404, b"no such route"),
                ]:
                    server.reply = (status, body)
                    with pytest.raises(ChatStatusError) as info:
                        await client.complete(model="m", messages=MESSAGES, max_tokens=5, temperature=0.0)
                    caught.append(info.value)
                server.reply = (200, b"<html>not json</html>")
                with pytest.raises(ChatResponseError):
                    await client.complete(model="m", messages=MESSAGES, max_tokens=5, temperature=0.0)
            finally:
                await client.close()
            return caught

    too_large, rejected, failed, throttled, missing = run(go())
    assert type(too_large) is ChatBadRequestError and too_large.status_code == 400
    assert too_large.message == too_long and "maximum context length" in str(too_large)
    assert str(too_large).startswith("Error code: 400 - ")
    assert type(rejected) is ChatBadRequestError and rejected.message == "messages must be a non-empty list"
    assert type(failed) is ChatStatusError and failed.status_code == 500 and failed.message == "boom"
    assert throttled.status_code == 429 and "slow down" in str(throttled)
    assert missing.status_code == 404 and missing.message == "no such route"


def test_attempts_sort_the_errors_as_before():
    """`Attempts._call` over a real ChatClient: 400 too large / 400 other give up (breaker success);
    500 and 429 retry elsewhere with a breaker failure; 404 retries elsewhere with a breaker success."""
    too_long = "This model's maximum context length is 4096 tokens. Please reduce the length of the messages."
    cases = [
        (400, {"error": {"message": too_long}}, RequestTooLargeError, "success", "http_400"),
        (400, {"error": {"message": "unknown field"}}, RequestRejectedError, "success", "http_400"),
        (500, {"error": {"message": "boom"}}, RetryableFleetError, "failure", "http_500"),
        (429, {"error": {"message": "busy"}}, RetryableFleetError, "failure", "http_429"),
        (404, {"error": {"message": "The model `x` does not exist."}}, RetryableFleetError, "success", "http_404"),
    ]

    async def go():
        async with Server() as server:
            client = client_for(server.base_url)
            outcomes = []
            try:
                for status, body, expected, verdict, kind in cases:
                    server.reply = (status, body)
                    counters = FleetCounters()
                    attempts = Attempts(slots=None, counters=counters, ids=itertools.count(1))
                    breaker = CircuitBreaker(failure_threshold=5, cooldown_s=5.0)
                    breaker.record_failure()  # one failure before: a success resets it, a failure adds one
                    state = ReplicaState(config=ReplicaConfig(base_url=server.base_url), model="m", breaker=breaker,
                                         client=client)
                    request = FleetRequest(messages=MESSAGES, est_prompt_tokens=10, max_tokens=5, label="doc#1")
                    with pytest.raises(expected) as info:
                        await attempts._call(state, request, attempt=1)
                    outcomes.append((info.value, breaker, counters, state, verdict, kind))
            finally:
                await client.close()
            return outcomes

    outcomes = run(go())
    for exc, breaker, counters, state, verdict, kind in outcomes:
        assert counters.errors == {kind: 1}
        if verdict == "failure":
            assert state.failures == 1 and breaker.consecutive_failures == 2, exc
            assert state.last_error.startswith(f"HTTP {kind[5:]}: Error code: {kind[5:]} - "), state.last_error
        else:
            assert state.failures == 0 and breaker.consecutive_failures == 0, exc
    assert "refused the prompt" in str(outcomes[0][0]) and "maximum context length" in str(outcomes[0][0])
    assert "rejected the request" in str(outcomes[1][0])


def test_transport_errors():
    async def go():
        # A port nobody listens on: connection refused.
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        client = client_for(f"http://127.0.0.1:{port}/v1")
        try:
            with pytest.raises(APIConnectionError) as refused:
                await client.complete(model="m", messages=MESSAGES, max_tokens=5, temperature=0.0)
        finally:
            await client.close()

        # A server that accepts and never answers: the read timeout.
        async def silent(reader, writer):
            await reader.read(65536)
            await asyncio.sleep(30)

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = client_for(f"http://127.0.0.1:{port}/v1", request_timeout_s=0.3)
        try:
            with pytest.raises(APITimeoutError) as timed_out:
                await client.complete(model="m", messages=MESSAGES, max_tokens=5, temperature=0.0)
        finally:
            await client.close()
            server.close()
        return refused.value, timed_out.value

    refused, timed_out = run(go())
    assert type(refused) is APIConnectionError
    assert type(timed_out).__name__ == "APITimeoutError"  # the key the fleet's error counters use


async def cancel_mid_call(answer_head: bytes | None) -> bool:
    """A raw socket server reads the request, writes `answer_head` (None: nothing) and then holds the
    connection; the call is cancelled once the server is there. True when the server then sees
    end-of-file (the client closed the connection, so vLLM would abort the request)."""
    there = asyncio.Event()
    disconnected = asyncio.Event()

    async def hold(reader, writer):
        data = b""
        while b"\r\n\r\n" not in data:
            data += await reader.read(65536)
        if answer_head is not None:
            writer.write(answer_head)
            await writer.drain()
        there.set()
        while await reader.read(65536):  # the body, then nothing until the client goes away
            pass
        disconnected.set()
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = client_for(f"http://127.0.0.1:{port}/v1")
    try:
        call = asyncio.ensure_future(client.complete(model="m", messages=MESSAGES, max_tokens=5, temperature=0.0))
        await asyncio.wait_for(there.wait(), 5)
        if answer_head is not None:
            await asyncio.sleep(0.05)  # the client is now in the body's read
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(disconnected.wait(), 5)
    finally:
        await client.close()
        server.close()
    return disconnected.is_set()


def test_cancelling_a_call_closes_its_connection():
    """The server never answers; cancelling the call (a hedge that lost) must close the connection."""
    assert run(cancel_mid_call(None))


def test_cancelling_while_the_answer_is_read_closes_the_connection():
    """Headers sent, body still coming: cancelling then must close the connection too (it may never
    return to the pool half-read)."""
    assert run(cancel_mid_call(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"))


def test_connections_are_reused():
    """Keep-alive: sequential calls share one connection."""

    async def go():
        async with Server() as server:
            client = client_for(server.base_url)
            try:
                for _ in range(5):
                    await client.complete(model="m", messages=MESSAGES, max_tokens=5, temperature=0.0)
                return len(client._session.connector._conns)  # idle connections per host key
            finally:
                await client.close()

    assert run(go()) == 1


def test_proxy_from_the_environment_is_read_once_when_the_client_opens(monkeypatch):
    """HTTP(S)_PROXY / NO_PROXY as httpx honours them (no proxy server involved: only the choice)."""
    from yarl import URL

    from contextual_assets.fleet.chat_client import _env_proxy

    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert _env_proxy(URL("http://gpu-1:8000/v1/chat/completions")) == (None, None)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "gpu-2")
    assert _env_proxy(URL("http://gpu-1:8000/v1/chat/completions"))[0] == URL("http://proxy.internal:3128")
    assert _env_proxy(URL("http://gpu-2:8000/v1/chat/completions")) == (None, None)
