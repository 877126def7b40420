"""Per-replica circuit breaker: closed -> open after consecutive failures -> half-open after a
cooldown, where one probe request decides between closed and open again."""

from __future__ import annotations

import time
from collections.abc import Callable


class CircuitBreaker:
    def __init__(self, failure_threshold: int = 5, cooldown_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.consecutive_failures = 0
        self.opened_at: float | None = None
        self.probe_in_flight = False
        self.trips = 0

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        if self.clock() - self.opened_at >= self.cooldown_s:
            return "half-open"
        return "open"

    def allow(self) -> bool:
        state = self.state
        if state == "closed":
            return True
        if state == "half-open" and not self.probe_in_flight:
            return True
        return False

    def on_dispatch(self) -> None:
        if self.state == "half-open":
            self.probe_in_flight = True

    def record_success(self) -> None:
        self.consecutive_failures = 0
        self.opened_at = None
        self.probe_in_flight = False

    def record_failure(self) -> None:
        self.consecutive_failures += 1
        if self.state == "half-open" or self.consecutive_failures >= self.failure_threshold:
            if self.opened_at is None or self.state == "half-open":
                self.trips += 1
            self.opened_at = self.clock()
        self.probe_in_flight = False

    def seconds_until_probe(self) -> float:
        if self.opened_at is None:
            return 0.0
        return max(0.0, self.cooldown_s - (self.clock() - self.opened_at))
