"""`Slots`: taking and giving back a place on a replica, under the pool's one asyncio condition.

Which replica a request gets is `routing.pick_replica`'s decision; this module holds what that
decision reads and changes under the lock (in-flight counts, the queue of requests waiting for a
slot, the replicas the hedging monitor found stalled), and fails requests fast when every replica
has been down for too long. Everything here runs on the pool's event-loop thread.
"""

from __future__ import annotations

import asyncio
import time

from . import routing
from .config import FleetConfig
from .replica import ReplicaState
from .types import FleetRequest, FleetUnavailableError

FRESH_METRICS_WAIT_S = 1.0  # the longest a request waits for the first /metrics read


class Slots:
    def __init__(self, config: FleetConfig, replicas: list[ReplicaState]):
        self.config = config
        self.replicas = replicas
        self.cond = asyncio.Condition()
        self.waiting = 0  # requests waiting for a slot (the routing policy's queue length)
        self.stalled: set[str] = set()  # replicas the monitor found stalled (routing avoids them)
        self.down_since: float | None = None  # since when no replica has had a closed breaker
        # Set while the replicas' queues have been read since requests started going out; requests
        # wait for that first read (at most a second), so a process joining a busy fleet does not
        # fill replicas that other processes already keep full. The `/metrics` reader sets it, and
        # `acquire` sets `wake_reader` to end the reader's idle wait.
        self.metrics_fresh = asyncio.Event()
        self.wake_reader = asyncio.Event()

    async def notify_all(self) -> None:
        """Wake every waiting request: room may have opened, or routing's view changed."""
        async with self.cond:
            self.cond.notify_all()

    async def mark_stalled(self, stalled: set[str]) -> None:
        if stalled != self.stalled:
            self.stalled = stalled
            await self.notify_all()

    def update_down(self) -> None:
        if any(s.breaker.state == "closed" for s in self.replicas):
            self.down_since = None
        elif self.down_since is None:
            self.down_since = time.monotonic()

    def raise_if_down(self, label: str) -> None:
        """Every replica failing for longer than `unavailable_timeout_s`: fail fast and say why."""
        probing = any(s.breaker.probe_in_flight for s in self.replicas)  # wait for its verdict first
        if (self.down_since is not None and not probing
                and time.monotonic() - self.down_since > self.config.unavailable_timeout_s):
            detail = "; ".join(f"{s.url}: {s.last_error or s.breaker.state}" for s in self.replicas)
            raise FleetUnavailableError(
                f"{label}: every replica has been failing for over {self.config.unavailable_timeout_s:.0f} s ({detail})"
            )

    def _pick(self, tried: set[str], cost: int) -> ReplicaState | None:
        return routing.pick_replica(self.replicas, tried, cost, self.waiting, now=time.monotonic(),
                                    stalled=self.stalled)

    def _take(self, state: ReplicaState, cost: int) -> ReplicaState:
        state.in_flight += 1
        state.record_in_flight(time.monotonic())
        state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
        state.outstanding_tokens += cost
        state.breaker.on_dispatch()
        return state

    async def try_acquire(self, tried: set[str], cost: int) -> ReplicaState | None:
        """A slot now, or None (a tail hedge never queues behind work that has no slot yet)."""
        async with self.cond:
            state = self._pick(tried, cost)
            return self._take(state, cost) if state is not None else None

    async def _await_fresh_metrics(self) -> None:
        if not self.metrics_fresh.is_set():
            self.wake_reader.set()
            try:
                await asyncio.wait_for(self.metrics_fresh.wait(), timeout=FRESH_METRICS_WAIT_S)
            except asyncio.TimeoutError:
                pass  # a slow /metrics never holds requests back for long

    async def acquire(self, request: FleetRequest, tried: set[str]) -> ReplicaState:
        """A slot for `request` on a replica routing picks, waiting in the queue until one frees."""
        cost = request.cost
        await self._await_fresh_metrics()
        async with self.cond:
            while True:
                state = self._pick(tried, cost)
                if state is None:
                    # Only when nothing can take the request: a half-open replica still gets its probe.
                    self.update_down()
                    self.raise_if_down(request.label)
                if state is not None:
                    return self._take(state, cost)
                if all(not s.breaker.allow() for s in self.replicas):
                    wait = max(0.05, min(s.breaker.seconds_until_probe() for s in self.replicas))
                else:
                    wait = 1.0
                self.waiting += 1
                try:
                    await asyncio.wait_for(self.cond.wait(), timeout=wait)
                except asyncio.TimeoutError:
                    pass
                finally:
                    self.waiting -= 1

    async def release(self, state: ReplicaState, cost: int) -> None:
        async with self.cond:
            state.in_flight -= 1
            state.record_in_flight(time.monotonic())
            state.outstanding_tokens -= cost
            self.cond.notify(1)
