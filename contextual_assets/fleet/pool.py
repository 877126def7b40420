"""`HeaderFleet`: one async request pool per process, shared by every document in flight.

The pool runs on its own event-loop thread. Any thread (a Dagster step, a CLI worker) submits
requests and gets `concurrent.futures.Future`s back, so documents ingested concurrently share the
replicas' in-flight caps instead of each bringing its own.

Routing (which replica gets a request, when to hedge, how many requests a replica may hold) is the
pure policy in `routing.py`; this module owns the event loop, acquire/release under one condition,
the HTTP attempts and their errors, a reader of each replica's `/metrics` (so that processes sharing
the fleet see each other's load) and the hedging monitor. Failures retry with jittered exponential
backoff (tenacity) on a replica not yet tried for that request, within a fleet-wide retry budget.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from ..errors import HeaderGenerationError
from . import routing
from .breaker import CircuitBreaker
from .config import FleetConfig
from .discovery import DEFAULT_DISCOVERY, ModelDiscovery, ResolvedModel
from .replica import ReplicaReport, ReplicaState
from .vllm_metrics import KV_GAUGES, metrics_url, parse_vllm_metrics

HEDGE_CHECK_S = 0.2  # how often open requests are checked for hedging
METRICS_RETRY_S = 10.0  # a replica whose /metrics failed is read again after this
SLOW_START_READS = 2  # slow start ends by this many reads (0.1 s apart) whatever they show


class RetryableFleetError(HeaderGenerationError):
    """A failed attempt worth retrying (elsewhere)."""


class InvalidAnswerError(RetryableFleetError):
    """The replica answered, but the answer failed validation."""


class FleetUnavailableError(HeaderGenerationError):
    """No replica could take the request within the configured time."""


class RequestTooLargeError(HeaderGenerationError):
    """The replica refused the request as over its context length: retrying cannot help."""


class RequestRejectedError(HeaderGenerationError):
    """The replica rejected the request itself (HTTP 400): retrying cannot help."""


@dataclass
class FleetRequest:
    messages: list[dict[str, str]]
    est_prompt_tokens: int
    max_tokens: int
    label: str  # e.g. "<doc>#<ordinal>", for error messages
    validate: Callable[[str], Any] | None = None  # raises to reject an answer (retried)
    extra_body: dict[str, Any] | None = None


@dataclass
class FleetResult:
    value: Any
    raw: str
    replica: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    attempts: int
    failovers: int
    hedged: bool = False  # a duplicate was sent for this request
    hedge_won: bool = False  # and its answer is this one


@dataclass
class FleetCounters:
    sent: int = 0
    retries: int = 0
    failovers: int = 0
    invalid: int = 0
    hedges: int = 0  # duplicates sent
    hedge_wins: int = 0  # duplicates whose answer was used (the other request was cancelled)
    errors: dict[str, int] = field(default_factory=dict)


@dataclass
class _Ticket:
    """One request's current attempt, as the hedging monitor sees it."""

    cost: int
    state: ReplicaState | None = None  # the primary's replica, once dispatched
    dispatched: float = 0.0
    hedge: asyncio.Event = field(default_factory=asyncio.Event)  # set by the monitor: send a duplicate
    hedged: bool = False
    stalled: bool = False  # the duplicate is sent because the primary's replica stalled


class HeaderFleet:
    def __init__(self, config: FleetConfig, discovery: ModelDiscovery | None = None):
        self.config = config
        self.discovery = discovery or DEFAULT_DISCOVERY
        self.resolved: ResolvedModel = self.discovery.resolve_fleet(config)
        self.counters = FleetCounters()
        self.down_since: float | None = None  # since when no replica has had a closed breaker
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="header-fleet", daemon=True)
        self._thread.start()
        self._closed = False
        self.replicas: list[ReplicaState] = self._call(self._setup())

    # ---- lifecycle ---------------------------------------------------------------------------
    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _setup(self) -> list[ReplicaState]:
        from openai import AsyncOpenAI

        self._cond = asyncio.Condition()
        self._waiting = 0  # requests waiting for a slot (the routing policy's queue length)
        states = []
        for replica in self.config.replicas:
            served = self.resolved.per_endpoint.get(replica.base_url)
            state = ReplicaState(
                config=replica, model=served.id if served else self.resolved.name,
                breaker=CircuitBreaker(self.config.breaker_failures, self.config.breaker_cooldown_s),
            )
            state.client = AsyncOpenAI(
                base_url=replica.base_url, api_key=self.config.api_key_for(replica) or "not-needed", max_retries=0,
                timeout=httpx.Timeout(self.config.request_timeout_s, connect=self.config.connect_timeout_s),
                http_client=httpx.AsyncClient(limits=httpx.Limits(max_connections=replica.max_in_flight + 4)),
            )
            states.append(state)
        self._tickets: dict[int, _Ticket] = {}
        self._hedges_granted = 0  # hedges the monitor allowed that are not sent yet
        self._next_ticket = 0
        self._stalled: set[str] = set()  # replicas the monitor found stalled (routing avoids them)
        self._background = [asyncio.ensure_future(self._hedge_monitor())]
        # Set while the replicas' queues have been read since requests started going out; requests
        # wait for that first read (at most a second), so a process joining a busy fleet does not
        # fill replicas that other processes already keep full.
        self._metrics_fresh = asyncio.Event()
        self._wake_reader = asyncio.Event()
        if self.config.metrics_interval_s > 0:
            self._background.append(asyncio.ensure_future(self._read_metrics(states)))
        else:
            self._metrics_fresh.set()
        return states

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        async def shutdown() -> None:
            for task in self._background:
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)
            for state in self.replicas:
                await state.client.close()

        try:
            self._call(shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    # ---- public API --------------------------------------------------------------------------
    @property
    def model(self) -> str:
        """The served name (what requests send)."""
        return self.resolved.name

    @property
    def weights(self) -> str:
        """The weights behind the served name (root, parent+root for an adapter): keys the index version
        and the header cache."""
        return self.resolved.weights

    @property
    def context_limit(self) -> int | None:
        return self.resolved.context_limit

    def submit(self, request: FleetRequest) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(self._complete(request), self._loop)

    def run(self, requests: list[FleetRequest]) -> list[FleetResult | BaseException]:
        futures = [self.submit(r) for r in requests]
        results: list[FleetResult | BaseException] = []
        for future in futures:
            try:
                results.append(future.result())
            except BaseException as exc:  # noqa: BLE001 - returned per request
                results.append(exc)
        return results

    # ---- internals ---------------------------------------------------------------------------
    def _retry_allowed(self) -> bool:
        budget = max(self.config.retry_budget_min, int(self.config.retry_budget_ratio * self.counters.sent))
        return self.counters.retries < budget

    def _update_down(self) -> None:
        if any(s.breaker.state == "closed" for s in self.replicas):
            self.down_since = None
        elif self.down_since is None:
            self.down_since = time.monotonic()

    def _raise_if_down(self, label: str) -> None:
        """Every replica failing for longer than `unavailable_timeout_s`: fail fast and say why."""
        probing = any(s.breaker.probe_in_flight for s in self.replicas)  # wait for its verdict first
        if (self.down_since is not None and not probing
                and time.monotonic() - self.down_since > self.config.unavailable_timeout_s):
            detail = "; ".join(f"{s.url}: {s.last_error or s.breaker.state}" for s in self.replicas)
            raise FleetUnavailableError(
                f"{label}: every replica has been failing for over {self.config.unavailable_timeout_s:.0f} s ({detail})"
            )

    def _pick(self, tried: set[str], cost: int) -> ReplicaState | None:
        return routing.pick_replica(self.replicas, tried, cost, self._waiting, now=time.monotonic(),
                                    stalled=self._stalled)

    def _take(self, state: ReplicaState, cost: int) -> ReplicaState:
        state.in_flight += 1
        state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
        state.outstanding_tokens += cost
        state.breaker.on_dispatch()
        return state

    async def _try_acquire(self, tried: set[str], cost: int) -> ReplicaState | None:
        """A slot now, or None (a tail hedge never queues behind work that has no slot yet)."""
        async with self._cond:
            state = self._pick(tried, cost)
            return self._take(state, cost) if state is not None else None

    async def _acquire(self, request: FleetRequest, tried: set[str]) -> ReplicaState:
        cost = request.est_prompt_tokens + request.max_tokens
        if not self._metrics_fresh.is_set():
            self._wake_reader.set()
            try:
                await asyncio.wait_for(self._metrics_fresh.wait(), timeout=1.0)
            except asyncio.TimeoutError:
                pass  # a slow /metrics never holds requests back for long
        async with self._cond:
            while True:
                state = self._pick(tried, cost)
                if state is None:
                    # Only when nothing can take the request: a half-open replica still gets its probe.
                    self._update_down()
                    self._raise_if_down(request.label)
                if state is not None:
                    return self._take(state, cost)
                if all(not s.breaker.allow() for s in self.replicas):
                    wait = max(0.05, min(s.breaker.seconds_until_probe() for s in self.replicas))
                else:
                    wait = 1.0
                self._waiting += 1
                try:
                    await asyncio.wait_for(self._cond.wait(), timeout=wait)
                except asyncio.TimeoutError:
                    pass
                finally:
                    self._waiting -= 1

    async def _release(self, state: ReplicaState, cost: int) -> None:
        async with self._cond:
            state.in_flight -= 1
            state.outstanding_tokens -= cost
            self._cond.notify(1)

    async def _attempt(self, request: FleetRequest, tried: set[str], attempt: int,
                       ticket: _Ticket | None = None, acquired: ReplicaState | None = None) -> FleetResult:
        """One try on one replica: `acquired` (a hedge's slot, already taken) or the routed one."""
        state = acquired or await self._acquire(request, tried)
        failover = bool(tried) and state.url not in tried
        if failover and acquired is None:
            self.counters.failovers += 1
        tried.add(state.url)
        cost = request.est_prompt_tokens + request.max_tokens
        started = time.monotonic()
        request_id = self._next_ticket = self._next_ticket + 1
        state.open_requests[request_id] = (started, cost)
        if ticket is not None and acquired is None:
            ticket.state, ticket.dispatched = state, started
        self.counters.sent += 1
        try:
            from openai import APIStatusError, BadRequestError

            try:
                response = await state.client.chat.completions.create(
                    model=state.model, messages=request.messages, max_tokens=request.max_tokens,
                    temperature=0.0 if attempt == 1 else 0.7, extra_body=request.extra_body,
                )
            except BadRequestError as exc:
                # The replica answered: it is healthy, the request is not. Retrying cannot help.
                state.breaker.record_success()
                message = str(exc)
                self._count_error("http_400")
                if "context" in message.lower() or "too long" in message.lower() or "maximum" in message.lower():
                    raise RequestTooLargeError(f"{request.label}: {state.url} refused the prompt: {message[:200]}")
                raise RequestRejectedError(f"{request.label}: {state.url} rejected the request: {message[:200]}")
            except APIStatusError as exc:
                self._count_error(f"http_{exc.status_code}")
                state.last_error = f"HTTP {exc.status_code}: {str(exc)[:120]}"
                if exc.status_code >= 500 or exc.status_code in (408, 429):
                    state.failures += 1
                    state.breaker.record_failure()
                    raise RetryableFleetError(f"{state.url}: {state.last_error}") from None
                state.breaker.record_success()  # 401/403/404...: the replica is up; retry elsewhere
                raise RetryableFleetError(f"{state.url}: {state.last_error}") from None
            state.breaker.record_success()
            raw = (response.choices[0].message.content or "") if response.choices else ""
            usage = response.usage
            try:
                value = request.validate(raw) if request.validate else raw
            except Exception as exc:  # validation rejected the answer
                self.counters.invalid += 1
                raise InvalidAnswerError(f"invalid answer from {state.url} ({exc})") from None
            state.completed += 1
            now = time.monotonic()
            state.observe(now - started, cost, now)
            return FleetResult(
                value=value, raw=raw, replica=state.url, model=state.model,
                prompt_tokens=(usage.prompt_tokens or 0) if usage else 0,
                completion_tokens=(usage.completion_tokens or 0) if usage else 0,
                latency_s=now - started, attempts=attempt, failovers=0,
            )
        except (RetryableFleetError, RequestTooLargeError, RequestRejectedError):
            raise
        except Exception as exc:  # connection refused/reset, timeouts, protocol errors
            state.failures += 1
            state.last_error = f"{type(exc).__name__}: {str(exc)[:120]}"
            state.breaker.record_failure()
            self._count_error(type(exc).__name__)
            raise RetryableFleetError(f"{state.url}: {state.last_error}") from None
        finally:
            state.open_requests.pop(request_id, None)
            if state.breaker.probe_in_flight:  # a probe that ended without a verdict (e.g. cancelled)
                state.breaker.record_failure()
            await self._release(state, cost)

    async def _hedged_attempt(self, request: FleetRequest, tried: set[str], attempt: int) -> FleetResult:
        """`_attempt`, with a duplicate on another replica when the monitor says so: the first valid
        answer wins and the other request is cancelled (its client disconnects; vLLM aborts it)."""
        if not self.config.hedge:
            return await self._attempt(request, tried, attempt)
        ticket = _Ticket(cost=request.est_prompt_tokens + request.max_tokens)
        key = self._next_ticket = self._next_ticket + 1
        self._tickets[key] = ticket
        primary = asyncio.ensure_future(self._attempt(request, tried, attempt, ticket))
        running = {primary}
        signal = asyncio.ensure_future(ticket.hedge.wait())
        hedge: asyncio.Future | None = None
        error: BaseException | None = None
        try:
            while running:
                done, _ = await asyncio.wait({*running, signal}, return_when=asyncio.FIRST_COMPLETED)
                if signal in done:
                    hedge = await self._start_hedge(request, tried, attempt, ticket)
                    if hedge is not None:
                        running.add(hedge)
                        signal = asyncio.ensure_future(asyncio.Event().wait())  # one hedge per attempt
                    else:  # no slot elsewhere yet: the monitor asks again on a later check
                        ticket.hedge.clear()
                        signal = asyncio.ensure_future(ticket.hedge.wait())
                for task in done & running:
                    running.discard(task)
                    if task.exception() is None:
                        result = task.result()
                        result.hedged = ticket.hedged
                        result.hedge_won = task is hedge
                        if task is hedge:
                            self.counters.hedge_wins += 1
                            if ticket.stalled and ticket.state is not None:
                                # Overtaken on a stalled replica: a failure for its breaker.
                                ticket.state.breaker.record_failure()
                        return result
                    error = task.exception()
            assert error is not None
            raise error
        finally:
            self._tickets.pop(key, None)
            signal.cancel()
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _start_hedge(self, request: FleetRequest, tried: set[str], attempt: int,
                           ticket: _Ticket) -> asyncio.Future | None:
        """The duplicate's task, or None when no other replica has a slot now. A stalled replica's
        request queues for a slot like any other (its replica will not answer); a tail hedge does not."""
        self._hedges_granted -= 1
        if ticket.state is None or ticket.hedged:
            return None
        cost = ticket.cost
        exclude = tried | {ticket.state.url}
        try:
            if ticket.stalled:
                state = await self._acquire(request, exclude)
            else:
                state = await self._try_acquire(exclude, cost)
        except HeaderGenerationError:  # nothing else is up: the primary is all there is
            return None
        if state is ticket.state:  # routing's fallback to a tried replica: a copy on the same one never helps
            await self._release(state, cost)
            return None
        if state is None:
            return None
        ticket.hedged = True
        self.counters.hedges += 1
        return asyncio.ensure_future(self._attempt(request, tried, attempt, acquired=state))

    async def _hedge_monitor(self) -> None:
        """Every `HEDGE_CHECK_S`: which replicas are stalled, and which open requests get a duplicate."""
        config = self.config
        while True:
            await asyncio.sleep(HEDGE_CHECK_S)
            if not self._tickets and not self._stalled:
                continue
            now = time.monotonic()
            per_token = {s.url: routing.latency_quantile(s, self.replicas, config.hedge_quantile)
                         for s in self.replicas}
            stalled = {s.url for s in self.replicas
                       if routing.is_stalled(s, now, per_token[s.url], config.hedge_min_s)}
            if stalled != self._stalled:
                self._stalled = stalled
                async with self._cond:
                    self._cond.notify_all()
            budget = routing.hedge_budget(self.counters.sent, config.hedge_budget_ratio, config.hedge_budget_min)
            for ticket in list(self._tickets.values()):
                if self.counters.hedges + self._hedges_granted >= budget:
                    break
                if ticket.state is None or ticket.hedged or ticket.hedge.is_set():
                    continue
                threshold = routing.hedge_threshold(per_token[ticket.state.url], ticket.cost, config.hedge_min_s)
                on_stalled = ticket.state.url in stalled
                if routing.hedge_due(now - ticket.dispatched, threshold, self._waiting, on_stalled):
                    ticket.stalled = on_stalled
                    self._hedges_granted += 1  # counted against the budget until sent or given up
                    ticket.hedge.set()

    async def _read_metrics(self, states: list[ReplicaState]) -> None:
        """Each replica's own view of its queue, every `metrics_interval_s` while requests are out."""
        retry_at = {s.url: 0.0 for s in states}
        headers = {}
        async with httpx.AsyncClient(timeout=httpx.Timeout(1.0)) as client:
            async def read(state: ReplicaState) -> None:
                now = time.monotonic()
                if now < retry_at[state.url]:
                    return
                local = state.in_flight
                key = self.config.api_key_for(state.config)
                try:
                    response = await client.get(metrics_url(state.url),
                                                headers={"Authorization": f"Bearer {key}"} if key else headers)
                    response.raise_for_status()
                    values = parse_vllm_metrics(response.text)
                except Exception:  # no metrics (not vLLM, or down): route on local counts alone
                    retry_at[state.url] = now + METRICS_RETRY_S
                    state.report, state.slow_start = None, False
                    return
                if "vllm:num_requests_running" not in values:
                    retry_at[state.url] = now + METRICS_RETRY_S
                    state.report, state.slow_start = None, False
                    return
                kv = next((values[name] for name in KV_GAUGES if name in values), None)
                report = ReplicaReport(at=time.monotonic(), running=values["vllm:num_requests_running"],
                                       waiting=values.get("vllm:num_requests_waiting", 0.0), kv_usage=kv,
                                       local_in_flight=local)
                state.limit = routing.adapted_limit(state, report, state.report)
                state.report = report
                if state.slow_start and routing.ends_slow_start(report):
                    state.slow_start = False

            reads = 0  # since requests last started going out
            while True:
                if self._waiting == 0 and not any(s.in_flight for s in states):
                    self._metrics_fresh.clear()
                    self._wake_reader.clear()
                    for state in states:
                        state.slow_start = True
                    reads = 0
                    await self._wake_reader.wait()  # idle: read again when requests go out
                await asyncio.gather(*(read(s) for s in states))
                reads += 1
                if reads >= SLOW_START_READS:  # answers too short to be caught in flight: stop waiting
                    for state in states:
                        state.slow_start = False
                self._metrics_fresh.set()
                async with self._cond:
                    self._cond.notify_all()  # room may have opened on a replica other processes used
                # In slow start, read again soon: it ends at the first read that shows our requests.
                slow = any(s.slow_start for s in states)
                await asyncio.sleep(min(0.1, self.config.metrics_interval_s) if slow else self.config.metrics_interval_s)

    def _count_error(self, kind: str) -> None:
        self.counters.errors[kind] = self.counters.errors.get(kind, 0) + 1

    async def _complete(self, request: FleetRequest) -> FleetResult:
        tried: set[str] = set()
        errors: list[str] = []
        attempt_no = 0

        def before_sleep(retry_state) -> None:
            self._update_down()
            self._raise_if_down(request.label)
            if not self._retry_allowed():
                raise HeaderGenerationError(
                    f"{request.label}: fleet retry budget exhausted after {self.counters.retries} retries "
                    f"(last errors: {' | '.join(errors[-3:])})"
                )
            self.counters.retries += 1

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_attempts),
            wait=wait_random_exponential(multiplier=0.1, max=5.0),
            retry=retry_if_exception_type(RetryableFleetError),
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempt_no += 1
                    try:
                        result = await self._hedged_attempt(request, tried, attempt_no)
                    except RetryableFleetError as exc:
                        errors.append(str(exc))
                        raise
                    result.failovers = max(0, len(tried) - 1 - int(result.hedged))
                    return result
        except RetryableFleetError:
            raise HeaderGenerationError(
                f"{request.label}: no valid answer after {attempt_no} attempts: {' | '.join(errors[-3:])}"
            ) from None
        raise HeaderGenerationError(f"{request.label}: no answer")  # pragma: no cover - loop always returns


# Process-wide pools, one per fleet configuration (explicit cache; `close_fleets()` empties it).
_FLEETS: dict[str, HeaderFleet] = {}
_FLEETS_LOCK = threading.Lock()


def get_fleet(config: FleetConfig, discovery: ModelDiscovery | None = None) -> HeaderFleet:
    key = config.model_dump_json()
    with _FLEETS_LOCK:
        fleet = _FLEETS.get(key)
        if fleet is None:
            fleet = HeaderFleet(config, discovery)
            _FLEETS[key] = fleet
        return fleet


def close_fleets() -> None:
    with _FLEETS_LOCK:
        for fleet in _FLEETS.values():
            fleet.close()
        _FLEETS.clear()
