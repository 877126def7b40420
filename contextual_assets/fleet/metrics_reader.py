"""`MetricsReader`: the pool's background loop that reads each replica's `/metrics` while requests are out.

A replica's own count of running and waiting requests includes other processes' requests, so
processes sharing a fleet see each other's load; each read also adapts the replica's concurrency
limit (`capacity.adapted_limit`: the capacity search) and ends its slow start. The gauges are the engine's own
(vLLM, llama.cpp, SGLang or TGI names: `engine_metrics`). A replica without usable metrics (a proxy, a server
started without them, or down) is routed on local counts alone and read again after `METRICS_RETRY_S`.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from . import capacity
from .config import FleetConfig
from .engine_metrics import metrics_url, read_engine_metrics
from .replica import ReplicaReport, ReplicaState
from .slots import Slots

METRICS_RETRY_S = 10.0  # a replica whose /metrics failed is read again after this
SLOW_START_READS = 2  # slow start ends by this many reads (0.1 s apart) whatever they show
SLOW_START_INTERVAL_S = 0.1  # reads this often (at most) while a replica is in slow start


class MetricsReader:
    def __init__(self, config: FleetConfig, slots: Slots):
        self.config = config
        self.slots = slots
        self.replicas = slots.replicas
        self.retry_at = {s.url: 0.0 for s in self.replicas}

    async def run(self) -> None:
        """Each replica's own view of its queue, every `metrics_interval_s` while requests are out."""
        slots, interval = self.slots, self.config.metrics_interval_s
        async with httpx.AsyncClient(timeout=httpx.Timeout(1.0)) as client:
            reads = 0  # since requests last started going out
            while True:
                if slots.waiting == 0 and not any(s.in_flight for s in self.replicas):
                    await self._idle()
                    reads = 0
                await asyncio.gather(*(self._read(client, s) for s in self.replicas))
                reads += 1
                if reads >= SLOW_START_READS:  # answers too short to be caught in flight: stop waiting
                    for state in self.replicas:
                        state.slow_start = False
                slots.metrics_fresh.set()
                slots.offer_room()  # room may have opened: a raised limit, or other processes' requests gone
                # In slow start, read again soon: it ends at the first read that shows our requests;
                # while a replica's capacity is still being found, read often enough to climb fast.
                if any(s.slow_start for s in self.replicas):
                    await asyncio.sleep(min(SLOW_START_INTERVAL_S, interval))
                elif any(capacity.climbing(s, slots.waiting) for s in self.replicas):
                    await asyncio.sleep(min(capacity.CLIMB_READ_S, interval))
                else:
                    await asyncio.sleep(interval)

    async def _idle(self) -> None:
        """Nothing out: stop reading until requests go out again, and start those in slow start."""
        self.slots.metrics_fresh.clear()
        self.slots.wake_reader.clear()
        for state in self.replicas:
            state.slow_start = True
        await self.slots.wake_reader.wait()

    async def _read(self, client: httpx.AsyncClient, state: ReplicaState) -> None:
        now = time.monotonic()
        if now < self.retry_at[state.url]:
            return
        key = self.config.api_key_for(state.config)
        try:
            response = await client.get(metrics_url(state.url),
                                        headers={"Authorization": f"Bearer {key}"} if key else {})
            response.raise_for_status()
            metrics = read_engine_metrics(response.text)
        except Exception:  # no metrics (none published, or down): route on local counts alone
            metrics = None
        if metrics is None:
            self.retry_at[state.url] = now + METRICS_RETRY_S
            state.report, state.slow_start = None, False
            return
        # Ours as the replica counted them: its snapshot was taken while the read was out, so at most the
        # most we had out meanwhile (requests that started during the read are not others'). A gauge that
        # may lag `metrics_lag_s` predates requests sent since: then ours at their fewest over the lag,
        # so a stale read never hides another process's load.
        lag = self.config.metrics_lag_s
        counted = state.least_in_flight_since(now - lag) if lag > 0 else state.most_in_flight_since(now)
        local_work = metrics.generation_tokens is None
        report = ReplicaReport(at=time.monotonic(), running=metrics.running, waiting=metrics.waiting,
                               kv_usage=metrics.kv_usage, local_in_flight=state.in_flight, local_counted=counted,
                               completed=state.completed,
                               preemptions=metrics.preemptions,
                               work_tokens=float(state.answered_tokens) if local_work else metrics.generation_tokens,
                               work_is_local=local_work, engine=metrics.engine, engines=max(1, metrics.engines))
        state.limit, state.capacity = capacity.adapted_limit(state, report, state.report)
        state.report = report
        if state.slow_start and capacity.ends_slow_start(report):
            state.slow_start = False
