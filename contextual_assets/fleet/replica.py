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

LATENCY_SAMPLES = 256  # recent answers per replica behind the hedging percentile


@dataclass
class ReplicaReport:
    """One read of a replica's `/metrics`: vLLM's view of its own queue, with our count beside it."""

    at: float  # monotonic time of the read
    running: float
    waiting: float
    kv_usage: float | None  # fraction of the KV cache in use; None when the server does not say
    local_in_flight: int  # this pool's requests on the replica when the read was made


@dataclass
class ReplicaState:
    config: ReplicaConfig
    model: str
    breaker: CircuitBreaker
    client: Any = None  # the pool's AsyncOpenAI client; None where no pool owns the replica (tests)
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
    limit: int | None = None  # adaptive concurrency limit; None: the configured cap
    # Until the replica's own count has caught up with this process's requests, another process that
    # started at the same moment may be filling it too: half the cap (see routing.concurrency_limit).
    slow_start: bool = False

    @property
    def url(self) -> str:
        return self.config.base_url

    def observe(self, latency_s: float, cost: int, now: float | None = None) -> None:
        sample = latency_s / max(1, cost)
        self.seconds_per_token = sample if self.seconds_per_token is None else (
            0.8 * self.seconds_per_token + 0.2 * sample)
        self.latency_samples.append(sample)
        if now is not None:
            self.last_answer_at = now
