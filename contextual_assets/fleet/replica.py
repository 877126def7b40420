"""`ReplicaState`: what the pool knows about one replica (load, health, speed, and what the replica
itself reports in `/metrics`).

Plain data with no event loop or network dependency, so the routing policy (`routing.py`) and its
unit tests can build replicas without starting a pool.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .breaker import CircuitBreaker
from .config import ReplicaConfig
from .prefix import PrefixMemory

LATENCY_SAMPLES = 256  # recent answers per replica behind the hedging percentile


@dataclass
class ReplicaReport:
    """One read of a replica's `/metrics`: the engine's view of its own queue, with our count beside it."""

    at: float  # monotonic time of the read
    running: float
    waiting: float
    kv_usage: float | None  # the fullest engine's KV-cache use; None when the server does not say
    local_in_flight: int  # this pool's requests on the replica when the read was made
    preemptions: float | None = None  # the replica's preemption counter (None: not published)
    # Work done, for the capacity probe: the replica's generation-token counter (all its clients), or
    # when it publishes none, the tokens of cost this pool has had answered there.
    work_tokens: float | None = None
    work_is_local: bool = False
    # How many of this pool's requests the read counts as the pool's own (None: `local_in_flight`): the
    # most it had out while the read was in flight (the server took its snapshot somewhere in there),
    # or, when the gauges may lag, the fewest over the lag (see `MetricsReader._read`).
    local_counted: int | None = None
    completed: int = 0  # answers this pool had from the replica by the read (its answer rate between reads)
    engine: str = "vllm"  # whose metric names the read used (`engine_metrics.DIALECTS`)
    engines: int = 1  # data-parallel engines behind the replica (label sets of its running gauge)


@dataclass
class CapacityProbe:
    """What the capacity search (`capacity.adapted_limit`) has learnt about one replica: the work rate
    measured at each level over a settled window, and where the last raise came from."""

    level: int | None = None  # the limit being measured (None: nothing measured yet)
    reads: int = 0  # binding reads at this level after the window started (its first read starts it)
    since: float = 0.0  # when this level's window started (monotonic)
    since_work: float = 0.0  # the work counter then
    rates: dict[int, float] = field(default_factory=dict)  # level -> work rate over its window (tokens/s)
    previous_level: int | None = None  # the level the last raise came from
    knee_at: float | None = None  # when the search last settled (None: still climbing)


@dataclass
class ReplicaState:
    config: ReplicaConfig
    model: str
    breaker: CircuitBreaker
    client: Any = None  # the pool's `ChatClient` (fleet/chat_client.py); None where no pool owns the replica (tests)
    in_flight: int = 0
    peak_in_flight: int = 0
    outstanding_tokens: int = 0
    completed: int = 0
    failures: int = 0
    last_error: str = ""
    seconds_per_token: float | None = None  # moving average of answer latency per token of cost
    # Recent answer latencies per token of cost (hedging compares a request with these).
    latency_samples: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))
    # Requests out on this replica: ticket -> (dispatched at, cost), so a stalled replica shows.
    open_requests: dict[int, tuple[float, int]] = field(default_factory=dict)
    last_answer_at: float | None = None
    report: ReplicaReport | None = None  # the latest /metrics read, if the server publishes one
    limit: int | None = None  # adaptive concurrency limit; None: the starting limit (`capacity.concurrency_limit`)
    capacity: CapacityProbe = field(default_factory=CapacityProbe)
    answered_tokens: int = 0  # tokens of cost answered here (the work rate of a server without metrics)
    # (monotonic time, in-flight count) after each change: what a lagging /metrics may still be showing.
    in_flight_history: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=4096))
    # Until the replica's own count has caught up with this process's requests, another process that
    # started at the same moment may be filling it too: half the cap (see capacity.concurrency_limit).
    slow_start: bool = False
    prefixes: PrefixMemory = field(default_factory=PrefixMemory)  # prompt blocks sent here (cache-aware routing)

    @property
    def url(self) -> str:
        return self.config.base_url

    def record_in_flight(self, now: float) -> None:
        self.in_flight_history.append((now, self.in_flight))

    def most_in_flight_since(self, since: float) -> int:
        """The most requests this pool had here from `since` to now."""
        most = self.in_flight
        for at, count in reversed(self.in_flight_history):
            if at <= since:
                return max(most, count)  # the count that held at `since`
            most = max(most, count)
        return most

    def least_in_flight_since(self, since: float) -> int:
        """The fewest requests this pool had here from `since` to now: the most of ours a /metrics
        read lagging by up to `now - since` can be counting."""
        least = self.in_flight
        for at, count in reversed(self.in_flight_history):
            if at <= since:
                least = min(least, count)  # the count that held at `since`
                break
            least = min(least, count)
        return least

    def observe(self, latency_s: float, cost: int, now: float | None = None) -> None:
        sample = latency_s / max(1, cost)
        self.seconds_per_token = sample if self.seconds_per_token is None else (
            0.8 * self.seconds_per_token + 0.2 * sample)
        self.latency_samples.append(sample)
        self.answered_tokens += cost
        if now is not None:
            self.last_answer_at = now
