"""Per-client rate limiting of the search service: a token bucket per client (its key's name, else its
address), `CTX_SERVE_RATE_LIMIT_PER_S` tokens a second up to `CTX_SERVE_RATE_BURST`."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

MAX_CLIENTS = 10_000  # buckets kept; past it, those full again (idle long enough) are dropped


class RateLimiter:
    """`take(client)`: None when the request may go, else the whole seconds to wait (at least 1).
    A rate of 0 limits nothing."""

    def __init__(self, per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_s, self.burst, self._clock = per_s, max(1, burst), clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, when counted)
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.per_s > 0

    def take(self, client: str) -> int | None:
        """Spend one token of `client`'s bucket; when it has none, the seconds until it has one."""
        if not self.enabled:
            return None
        now = self._clock()
        with self._lock:
            tokens, counted = self._buckets.get(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - counted) * self.per_s)
            if tokens >= 1.0 - 1e-9:  # the refill's float sum may fall short of a whole token by a hair
                self._buckets[client] = (tokens - 1.0, now)
                if len(self._buckets) > MAX_CLIENTS:
                    self._forget_full(now)
                return None
            self._buckets[client] = (tokens, now)
            return max(1, math.ceil((1.0 - tokens) / self.per_s))

    def _forget_full(self, now: float) -> None:
        """Drop the buckets that have refilled (their clients are where a new one would start)."""
        full = [c for c, (tokens, counted) in self._buckets.items()
                if tokens + (now - counted) * self.per_s >= self.burst]
        for client in full:
            del self._buckets[client]
