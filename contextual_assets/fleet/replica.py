"""`ReplicaState`: what the pool knows about one replica (load, health, speed).

Plain data with no event loop or network dependency, so the routing policy (`routing.py`) and its
unit tests can build replicas without starting a pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .breaker import CircuitBreaker
from .config import ReplicaConfig


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

    @property
    def url(self) -> str:
        return self.config.base_url

    def observe(self, latency_s: float, cost: int) -> None:
        sample = latency_s / max(1, cost)
        self.seconds_per_token = sample if self.seconds_per_token is None else (
            0.8 * self.seconds_per_token + 0.2 * sample)
