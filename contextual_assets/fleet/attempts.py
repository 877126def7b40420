"""`Attempts`: one try of a request on one replica (one HTTP call), and what its outcome means.

An attempt takes a slot, sends the chat completion, validates the answer and gives the slot back.
Its outcome feeds the replica's circuit breaker and the fleet's counters, and is sorted into an
answer (`FleetResult`), a failure worth retrying elsewhere (`RetryableFleetError`), or a request no
replica will take (`RequestTooLargeError`, `RequestRejectedError`). Retrying is `retries.py`'s job.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from .chat_client import ChatAnswer, ChatBadRequestError, ChatStatusError
from .replica import ReplicaState
from .slots import Slots
from .ticket import Ticket
from .types import (
    FleetCounters,
    FleetRequest,
    FleetResult,
    InvalidAnswerError,
    RequestRejectedError,
    RequestTooLargeError,
    RetryableFleetError,
)

# Words in a 400 answer that say the prompt is over the replica's context length.
TOO_LARGE_HINTS = ("context", "too long", "maximum")


class Attempts:
    def __init__(self, slots: Slots, counters: FleetCounters, ids: Iterator[int]):
        self.slots = slots
        self.counters = counters
        self.ids = ids  # shared with the hedging tickets: one numbering for the pool

    async def send(self, request: FleetRequest, tried: set[str], attempt: int,
                   ticket: Ticket | None = None, acquired: ReplicaState | None = None) -> FleetResult:
        """One try on one replica: `acquired` (a hedge's slot, already taken) or the routed one."""
        state = acquired or await self.slots.acquire(request, tried)
        failover = bool(tried) and state.url not in tried
        if failover and acquired is None:
            self.counters.failovers += 1
        tried.add(state.url)
        cost = request.cost
        started = time.monotonic()
        request_id = next(self.ids)
        state.open_requests[request_id] = (started, cost)
        if ticket is not None and acquired is None:
            ticket.state, ticket.dispatched = state, started
        self.counters.sent += 1
        try:
            answer = await self._call(state, request, attempt)
            return self._answer(state, request, answer, started, attempt)
        except (RetryableFleetError, RequestTooLargeError, RequestRejectedError):
            raise
        except Exception as exc:  # connection refused/reset, timeouts, protocol errors (chat_client's
            # APIConnectionError / APITimeoutError, counted under those names), an answer that is not JSON
            state.failures += 1
            state.last_error = f"{type(exc).__name__}: {str(exc)[:120]}"
            state.breaker.record_failure()
            self.counters.count_error(type(exc).__name__)
            raise RetryableFleetError(f"{state.url}: {state.last_error}") from None
        finally:
            state.open_requests.pop(request_id, None)
            if state.breaker.probe_in_flight:  # a probe that ended without a verdict (e.g. cancelled)
                state.breaker.record_failure()
            await self.slots.release(state, cost)

    async def _call(self, state: ReplicaState, request: FleetRequest, attempt: int) -> ChatAnswer:
        """The chat completion (`state.client`, a `ChatClient`), with HTTP errors sorted into
        retry-elsewhere or give-up. Transport errors go up to `send`."""
        try:
            # The first attempt is greedy; a retry samples, with the attempt as its seed (vLLM and llama.cpp
            # take `seed`): the same server gives a re-run the same answers.
            extra_body = request.extra_body if attempt == 1 else {"seed": attempt, **(request.extra_body or {})}
            return await state.client.complete(
                model=state.model, messages=request.messages, max_tokens=request.max_tokens,
                temperature=0.0 if attempt == 1 else 0.7, extra_body=extra_body,
            )
        except ChatBadRequestError as exc:
            # The replica answered: it is healthy, the request is not. Retrying cannot help.
            state.breaker.record_success()
            message = str(exc)
            self.counters.count_error("http_400")
            if any(hint in message.lower() for hint in TOO_LARGE_HINTS):
                raise RequestTooLargeError(f"{request.label}: {state.url} refused the prompt: {message[:200]}")
            raise RequestRejectedError(f"{request.label}: {state.url} rejected the request: {message[:200]}")
        except ChatStatusError as exc:
            self.counters.count_error(f"http_{exc.status_code}")
            state.last_error = f"HTTP {exc.status_code}: {str(exc)[:120]}"
            if exc.status_code >= 500 or exc.status_code in (408, 429):
                state.failures += 1
                state.breaker.record_failure()
            else:
                state.breaker.record_success()  # 401/403/404...: the replica is up; retry elsewhere
            raise RetryableFleetError(f"{state.url}: {state.last_error}") from None

    def _answer(self, state: ReplicaState, request: FleetRequest, answer: ChatAnswer, started: float,
                attempt: int) -> FleetResult:
        """The replica answered: validate the answer and record the replica's speed."""
        state.breaker.record_success()
        raw = answer.content
        try:
            value = request.validate(raw) if request.validate else raw
        except Exception as exc:  # validation rejected the answer
            self.counters.invalid += 1
            raise InvalidAnswerError(f"invalid answer from {state.url} ({exc})") from None
        state.completed += 1
        now = time.monotonic()
        state.observe(now - started, request.cost, now)
        return FleetResult(
            value=value, raw=raw, replica=state.url, model=state.model,
            prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens,
            latency_s=now - started, attempts=attempt, failovers=0,
        )
