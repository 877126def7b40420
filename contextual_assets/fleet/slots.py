"""`Slots`: taking and giving back a place on a replica, and the queue of requests waiting for one.

Which replica a request gets is `routing.pick_replica`'s decision, and which waiting request a freed
slot goes to is `routing.next_waiter`'s; this module holds what those decisions read and change (in-flight
counts, the queue, the replicas the hedging monitor found stalled), and fails requests fast when every
replica has been down for too long. Everything here runs on the pool's event-loop thread, and no
decision awaits between reading the state and changing it, so no lock is needed.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from . import capacity, routing
from .config import FleetConfig
from .replica import ReplicaState
from .types import FleetRequest, FleetUnavailableError

FRESH_METRICS_WAIT_S = 1.0  # the longest a request waits for the first /metrics read


@dataclass(eq=False)
class Waiter:
    """A request waiting for a slot: its prompt blocks (for `routing.next_waiter`), the event a freed
    slot sets, and how often a later request was preferred to it."""

    prefix: tuple[int, ...]
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    passed: int = 0


class Slots:
    def __init__(self, config: FleetConfig, replicas: list[ReplicaState]):
        self.config = config
        self.replicas = replicas
        self.queue: list[Waiter] = []  # requests waiting for a slot, oldest first
        self.stalled: set[str] = set()  # replicas the monitor found stalled (routing avoids them)
        self.down_since: float | None = None  # since when no replica has had a closed breaker
        # Set while the replicas' queues have been read since requests started going out; requests
        # wait for that first read (at most a second), so a process joining a busy fleet does not
        # fill replicas that other processes already keep full. The `/metrics` reader sets it, and
        # `acquire` sets `wake_reader` to end the reader's idle wait.
        self.metrics_fresh = asyncio.Event()
        self.wake_reader = asyncio.Event()

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot (the routing policy's queue length)."""
        return len(self.queue)

    async def notify_all(self) -> None:
        """Wake every waiting request: room may have opened, or routing's view changed."""
        for waiter in self.queue:
            waiter.woken.set()

    def offer_room(self) -> None:
        """After a `/metrics` read (limits raised, other processes' requests gone): each free slot goes
        to the waiter routing gives it to (`_wake_one`), as a slot freed by an answer does, so a rise
        in the limits keeps prompts where their prefix is cached instead of handing the new room out
        in queue order; waiters left over still retry within a second."""
        now = time.monotonic()
        for state in self.replicas:
            room = capacity.concurrency_limit(state) - state.in_flight - routing.foreign_load(state, now)
            for _ in range(max(0, min(room, len(self.queue)))):
                if not self._wake_one(state):
                    return  # every waiter is woken already

    def _wake_one(self, freed: ReplicaState) -> bool:
        """A slot freed on `freed`: wake the waiter routing gives it to (among those not woken yet)."""
        candidates: list[Waiter] = []
        for waiter in self.queue:
            if not waiter.woken.is_set():
                candidates.append(waiter)
                if len(candidates) >= routing.WAITER_LOOKAHEAD:
                    break
        index = routing.next_waiter([(w.prefix, w.passed) for w in candidates], freed, self.replicas)
        if index is None:
            return False
        for waiter in candidates[:index]:
            waiter.passed += 1
        candidates[index].woken.set()
        return True

    def _wake_any(self) -> None:
        """Hand a wake-up a waiter did not use (it left the queue) to the oldest waiter not woken."""
        for waiter in self.queue:
            if not waiter.woken.is_set():
                waiter.woken.set()
                return

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

    def _prefix(self, request: FleetRequest) -> tuple[int, ...]:
        """The prompt's block hashes, or none with a single replica (there is no choice to make: the
        hashing would be pure cost on the request path)."""
        return request.prefix if len(self.replicas) > 1 else ()

    def _pick(self, tried: set[str], cost: int, prefix: tuple[int, ...], others_waiting: int,
              wait_for_home: bool = False) -> ReplicaState | None:
        return routing.pick_replica(self.replicas, tried, cost, others_waiting, now=time.monotonic(),
                                    stalled=self.stalled, prefix=prefix, wait_for_home=wait_for_home)

    def _take(self, state: ReplicaState, cost: int, prefix: tuple[int, ...]) -> ReplicaState:
        state.in_flight += 1
        state.record_in_flight(time.monotonic())
        state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
        state.outstanding_tokens += cost
        state.prefixes.remember(prefix)
        state.breaker.on_dispatch()
        return state

    async def try_acquire(self, request: FleetRequest, tried: set[str]) -> ReplicaState | None:
        """A slot now, or None (a tail hedge never queues behind work that has no slot yet)."""
        prefix = self._prefix(request)
        state = self._pick(tried, request.cost, prefix, self.waiting)
        return self._take(state, request.cost, prefix) if state is not None else None

    async def _await_fresh_metrics(self) -> None:
        if not self.metrics_fresh.is_set():
            self.wake_reader.set()
            try:
                await asyncio.wait_for(self.metrics_fresh.wait(), timeout=FRESH_METRICS_WAIT_S)
            except asyncio.TimeoutError:
                pass  # a slow /metrics never holds requests back for long

    async def acquire(self, request: FleetRequest, tried: set[str]) -> ReplicaState:
        """A slot for `request` on a replica routing picks, waiting in the queue until one frees."""
        cost, prefix = request.cost, self._prefix(request)
        await self._await_fresh_metrics()
        waiter: Waiter | None = None  # its place in the queue, kept across wake-ups
        try:
            while True:
                state = self._pick(tried, cost, prefix, self.waiting - (waiter is not None), wait_for_home=waiter is None)
                if state is not None:
                    if waiter is not None:
                        waiter.woken.clear()  # its wake-up is used
                    return self._take(state, cost, prefix)
                # Only when nothing can take the request: a half-open replica still gets its probe.
                self.update_down()
                self.raise_if_down(request.label)
                if all(not s.breaker.allow() for s in self.replicas):
                    wait = max(0.05, min(s.breaker.seconds_until_probe() for s in self.replicas))
                else:
                    wait = 1.0
                if waiter is None:
                    waiter = Waiter(prefix)
                    self.queue.append(waiter)
                waiter.woken.clear()
                try:
                    await asyncio.wait_for(waiter.woken.wait(), timeout=wait)
                except asyncio.TimeoutError:
                    pass
        finally:
            if waiter is not None:
                self.queue.remove(waiter)
                if waiter.woken.is_set():  # woken for a slot it did not take: pass the wake-up on
                    self._wake_any()

    async def release(self, state: ReplicaState, cost: int) -> None:
        state.in_flight -= 1
        state.record_in_flight(time.monotonic())
        state.outstanding_tokens -= cost
        self._wake_one(state)
