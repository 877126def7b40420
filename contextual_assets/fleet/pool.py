"""`HeaderFleet`: one async request pool per process, shared by every document in flight.

The pool runs on its own event-loop thread. Any thread (a Dagster step, a CLI worker) submits
requests and gets `concurrent.futures.Future`s back, so documents ingested concurrently share the
replicas' in-flight caps instead of each bringing its own.

This module is the facade: it owns the event loop, the replicas' clients (`chat_client.py`) and the
process-wide pools (`get_fleet`, `close_fleets`), and wires the parts together. Routing policy is
`routing.py`; slots under the one condition `slots.py`; one HTTP try `attempts.py`; retries and their budget
`retries.py`; duplicates of slow requests `hedging.py`; the `/metrics` reader `metrics_reader.py`;
requests, results, errors and counters `types.py` (re-exported here, where callers import them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import sys
import threading

from ..process_cache import ProcessCache
from .attempts import Attempts
from .breaker import CircuitBreaker
from .chat_client import ChatClient
from .config import FleetConfig, ReplicaConfig
from .discovery import DEFAULT_DISCOVERY, ModelDiscovery, ResolvedModel
from .hedging import Hedging
from .metrics_reader import MetricsReader
from .replica import ReplicaState
from .retries import complete
from .slots import Slots
from .types import (
    FleetCounters,
    FleetRequest,
    FleetResult,
    FleetUnavailableError,
    InvalidAnswerError,
    RequestRejectedError,
    RequestTooLargeError,
    RetryableFleetError,
)

# The pool's event-loop thread sends and reads every request; the process's other threads (parsing,
# fitting prompts, writing Dagster events) hold the GIL for up to the switch interval each time it asks.
# At Python's default 5 ms the loop waited ~0.9 s to send a run's first requests (seed PDFs, measured);
# at 0.5 ms, 0.16 s. Set for the process once a pool exists, and never raised.
GIL_SWITCH_INTERVAL_S = 0.0005

__all__ = [
    "FleetCounters", "FleetRequest", "FleetResult", "FleetUnavailableError", "HeaderFleet",
    "InvalidAnswerError", "RequestRejectedError", "RequestTooLargeError", "RetryableFleetError",
    "close_fleets", "get_fleet",
]


class HeaderFleet:
    def __init__(self, config: FleetConfig, discovery: ModelDiscovery | None = None):
        self.config = config
        self.discovery = discovery or DEFAULT_DISCOVERY
        self.resolved: ResolvedModel = self.discovery.resolve_fleet(config)
        self.counters = FleetCounters()
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_INTERVAL_S))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="header-fleet", daemon=True)
        self._thread.start()
        self._closed = False
        self.replicas: list[ReplicaState] = self._call(self._setup())

    # ---- lifecycle ---------------------------------------------------------------------------
    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _replica_state(self, replica: ReplicaConfig) -> ReplicaState:
        served = self.resolved.per_endpoint.get(replica.base_url)
        state = ReplicaState(
            config=replica, model=served.id if served else self.resolved.name,
            breaker=CircuitBreaker(self.config.breaker_failures, self.config.breaker_cooldown_s),
        )
        # Its own connection pool, unbounded: the slots cap the requests in flight (see chat_client.py).
        state.client = ChatClient(
            replica.base_url, api_key=self.config.api_key_for(replica) or "not-needed",
            request_timeout_s=self.config.request_timeout_s, connect_timeout_s=self.config.connect_timeout_s,
        )
        return state

    async def _setup(self) -> list[ReplicaState]:
        """The parts, built on the loop's thread (their asyncio primitives belong to it)."""
        states = [self._replica_state(replica) for replica in self.config.replicas]
        self._slots = Slots(self.config, states)
        ids = itertools.count(1)  # request and ticket numbers, one sequence for the pool
        attempts = Attempts(self._slots, self.counters, ids)
        self._hedging = Hedging(self.config, self._slots, self.counters, attempts, ids)
        self._background = [asyncio.ensure_future(self._hedging.monitor())]
        if self.config.metrics_interval_s > 0:
            self._background.append(asyncio.ensure_future(MetricsReader(self.config, self._slots).run()))
        else:
            self._slots.metrics_fresh.set()  # no reader: nothing to wait for
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

    def routing_signals(self) -> dict[str, str]:
        """Per replica, what its load was last read from: the engine's own `/metrics` ("llama.cpp /metrics"),
        or this process's counts alone ("local counts": no metrics read, or none published)."""
        return {s.url: f"{s.report.engine} /metrics" if s.report else "local counts" for s in self.replicas}

    @property
    def down_since(self) -> float | None:
        """Since when no replica has had a closed breaker (None: one has)."""
        return self._slots.down_since

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

    async def _complete(self, request: FleetRequest) -> FleetResult:
        return await complete(request, self._hedging.attempt, config=self.config, counters=self.counters,
                              slots=self._slots)


# Process-wide pools, one per fleet configuration (`close_fleets()` closes them).
_FLEETS: ProcessCache[HeaderFleet] = ProcessCache()


def get_fleet(config: FleetConfig, discovery: ModelDiscovery | None = None) -> HeaderFleet:
    return _FLEETS.get(config.model_dump_json(), lambda: HeaderFleet(config, discovery))


def close_fleets() -> None:
    _FLEETS.close_all()
