"""`Hedging`: a duplicate of a slow request on another replica, the first valid answer winning.

A monitor checks the open requests every `HEDGE_CHECK_S`: it finds stalled replicas (routing then
avoids them) and grants a duplicate to a request out past its threshold, within the hedge budget
(the policy is `routing.hedge_*`). A request's attempt runs here beside its duplicate, if any; the
loser is cancelled (its client disconnects, and vLLM aborts it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from ..errors import HeaderGenerationError
from . import routing
from .attempts import Attempts
from .config import FleetConfig
from .slots import Slots
from .ticket import Ticket
from .types import FleetCounters, FleetRequest, FleetResult

HEDGE_CHECK_S = 0.2  # how often open requests are checked for hedging


class Hedging:
    def __init__(self, config: FleetConfig, slots: Slots, counters: FleetCounters, attempts: Attempts,
                 ids: Iterator[int]):
        self.config = config
        self.slots = slots
        self.counters = counters
        self.attempts = attempts
        self.ids = ids
        self.tickets: dict[int, Ticket] = {}
        self.granted = 0  # hedges the monitor allowed that are not sent yet

    async def attempt(self, request: FleetRequest, tried: set[str], attempt: int) -> FleetResult:
        """`Attempts.send`, with a duplicate on another replica when the monitor says so: the first
        valid answer wins and the other request is cancelled (its client disconnects; vLLM aborts it)."""
        if not self.config.hedge:
            return await self.attempts.send(request, tried, attempt)
        ticket = Ticket(cost=request.cost)
        key = next(self.ids)
        self.tickets[key] = ticket
        primary = asyncio.ensure_future(self.attempts.send(request, tried, attempt, ticket))
        running = {primary}
        signal = asyncio.ensure_future(ticket.hedge.wait())
        hedge: asyncio.Future | None = None
        error: BaseException | None = None
        try:
            while running:
                done, _ = await asyncio.wait({*running, signal}, return_when=asyncio.FIRST_COMPLETED)
                if signal in done:
                    hedge = await self._start(request, tried, attempt, ticket)
                    if hedge is not None:
                        running.add(hedge)
                        signal = asyncio.ensure_future(asyncio.Event().wait())  # one hedge per attempt
                    else:  # no slot elsewhere yet: the monitor asks again on a later check
                        ticket.hedge.clear()
                        signal = asyncio.ensure_future(ticket.hedge.wait())
                for task in done & running:
                    running.discard(task)
                    if task.exception() is None:
                        return self._won(task.result(), ticket, task is hedge)
                    error = task.exception()
            assert error is not None
            raise error
        finally:
            self.tickets.pop(key, None)
            signal.cancel()
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    def _won(self, result: FleetResult, ticket: Ticket, by_hedge: bool) -> FleetResult:
        result.hedged = ticket.hedged
        result.hedge_won = by_hedge
        if by_hedge:
            self.counters.hedge_wins += 1
            if ticket.stalled and ticket.state is not None:
                # Overtaken on a stalled replica: a failure for its breaker.
                ticket.state.breaker.record_failure()
        return result

    async def _start(self, request: FleetRequest, tried: set[str], attempt: int,
                     ticket: Ticket) -> asyncio.Future | None:
        """The duplicate's task, or None when no other replica has a slot now. A stalled replica's
        request queues for a slot like any other (its replica will not answer); a tail hedge does not."""
        self.granted -= 1
        if ticket.state is None or ticket.hedged:
            return None
        cost = ticket.cost
        exclude = tried | {ticket.state.url}
        try:
            if ticket.stalled:
                state = await self.slots.acquire(request, exclude)
            else:
                state = await self.slots.try_acquire(request, exclude)
        except HeaderGenerationError:  # nothing else is up: the primary is all there is
            return None
        if state is ticket.state:  # routing's fallback to a tried replica: a copy on the same one never helps
            await self.slots.release(state, cost)
            return None
        if state is None:
            return None
        ticket.hedged = True
        self.counters.hedges += 1
        return asyncio.ensure_future(self.attempts.send(request, tried, attempt, acquired=state))

    async def monitor(self) -> None:
        """Every `HEDGE_CHECK_S`: which replicas are stalled, and which open requests get a duplicate."""
        config, replicas = self.config, self.slots.replicas
        while True:
            await asyncio.sleep(HEDGE_CHECK_S)
            if not self.tickets and not self.slots.stalled:
                continue
            now = time.monotonic()
            per_token = {s.url: routing.latency_quantile(s, replicas, config.hedge_quantile) for s in replicas}
            stalled = {s.url for s in replicas if routing.is_stalled(s, now, per_token[s.url], config.hedge_min_s)}
            await self.slots.mark_stalled(stalled)
            if self.slots.waiting and not stalled:
                continue  # requests queued for a slot and none stalled: no duplicate is due (`hedge_due`)
            budget = routing.hedge_budget(self.counters.sent, config.hedge_budget_ratio, config.hedge_budget_min)
            for ticket in list(self.tickets.values()):
                if self.counters.hedges + self.granted >= budget:
                    break
                if ticket.state is None or ticket.hedged or ticket.hedge.is_set():
                    continue
                threshold = routing.hedge_threshold(per_token[ticket.state.url], ticket.cost, config.hedge_min_s)
                on_stalled = ticket.state.url in stalled
                if routing.hedge_due(now - ticket.dispatched, threshold, self.slots.waiting, on_stalled):
                    ticket.stalled = on_stalled
                    self.granted += 1  # counted against the budget until sent or given up
                    ticket.hedge.set()
