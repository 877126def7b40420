"""Rate limiting primitives for the telemetry API.

Two algorithms are provided:

* ``TokenBucket`` smooths bursts. A bucket holds up to ``capacity`` tokens and refills
  continuously at ``refill_rate`` tokens per second; each request spends one or more tokens.
* ``SlidingWindowCounter`` enforces "at most N requests per window" per key, using the
  usual two-window approximation, which needs constant memory per key.

Both take an injectable clock so that they can be tested without sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

Clock = Callable[[], float]

DEFAULT_CAPACITY = 20
DEFAULT_REFILL_PER_SECOND = 5.0
_UNITS = {"s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0, "hour": 3600.0, "day": 86400.0}


def parse_rate(spec: str) -> tuple[int, float]:
    """Parse a rate such as ``"100/min"`` or ``"5/s"`` into ``(limit, window_seconds)``."""
    try:
        count_text, unit = spec.strip().split("/", 1)
        limit = int(count_text)
        window = _UNITS[unit.strip().lower()]
    except (ValueError, KeyError):
        raise ValueError(f"invalid rate {spec!r}; expected e.g. '100/min'") from None
    if limit <= 0:
        raise ValueError(f"rate limit must be positive, got {limit}")
    return limit, window


def retry_after_seconds(deficit: float, refill_rate: float) -> float:
    """Seconds until ``deficit`` tokens have been refilled, rounded up to whole seconds."""
    if deficit <= 0:
        return 0.0
    return float(math.ceil(deficit / refill_rate))


def rate_limit_headers(limit: int, remaining: float, reset_after: float) -> dict[str, str]:
    """Build the ``RateLimit-*`` response headers advertised to API clients."""
    return {
        "RateLimit-Limit": str(limit),
        "RateLimit-Remaining": str(max(0, math.floor(remaining))),
        "RateLimit-Reset": str(max(0, math.ceil(reset_after))),
    }


class TokenBucket:
    """A thread-safe token bucket.

    The bucket starts full. ``try_acquire`` never blocks; callers that want to wait can
    sleep for ``retry_after()`` seconds and try again.
    """

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        refill_rate: float = DEFAULT_REFILL_PER_SECOND,
        clock: Clock = time.monotonic,
    ) -> None:
        if capacity <= 0 or refill_rate <= 0:
            raise ValueError("capacity and refill_rate must be positive")
        self.capacity = capacity
        self.refill_rate = refill_rate
        self._clock = clock
        self._tokens = float(capacity)
        self._updated = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._updated)
        self._tokens = min(self.capacity, self._tokens + elapsed * self.refill_rate)
        self._updated = now

    @property
    def tokens(self) -> float:
        """Tokens currently available (after refilling up to now)."""
        with self._lock:
            self._refill()
            return self._tokens

    def try_acquire(self, cost: float = 1.0) -> bool:
        """Spend ``cost`` tokens if available; return whether the request may proceed."""
        if cost > self.capacity:
            raise ValueError(f"cost {cost} exceeds bucket capacity {self.capacity}")
        with self._lock:
            self._refill()
            if self._tokens >= cost:
                self._tokens -= cost
                return True
            return False

    def retry_after(self, cost: float = 1.0) -> float:
        """Seconds to wait before a request of ``cost`` tokens would be allowed."""
        with self._lock:
            self._refill()
            return retry_after_seconds(cost - self._tokens, self.refill_rate)


class SlidingWindowCounter:
    """Approximate sliding-window limit of ``limit`` requests per ``window`` seconds per key.

    The count for the current fixed window is combined with the previous window's count,
    weighted by how much of the previous window still overlaps the sliding window.
    """

    def __init__(self, limit: int, window: float, clock: Clock = time.time) -> None:
        if limit <= 0 or window <= 0:
            raise ValueError("limit and window must be positive")
        self.limit = limit
        self.window = window
        self._clock = clock
        self._counts: dict[str, tuple[int, int, int]] = {}
        self._lock = threading.Lock()

    def _estimate(self, key: str, now: float) -> tuple[int, int, int, float]:
        index = int(now // self.window)
        start, current, previous = self._counts.get(key, (index, 0, 0))
        if index == start + 1:
            current, previous = 0, current
        elif index > start + 1:
            current, previous = 0, 0
        overlap = 1.0 - (now - index * self.window) / self.window
        return index, current, previous, current + previous * overlap

    def allow(self, key: str) -> bool:
        """Count a request for ``key`` and return whether it is within the limit."""
        with self._lock:
            index, current, previous, estimate = self._estimate(key, self._clock())
            if estimate + 1 > self.limit:
                self._counts[key] = (index, current, previous)
                return False
            self._counts[key] = (index, current + 1, previous)
            return True

    def remaining(self, key: str) -> float:
        """How many more requests ``key`` may make right now."""
        with self._lock:
            *_, estimate = self._estimate(key, self._clock())
            return max(0.0, self.limit - estimate)


def limiter_from_spec(spec: str, clock: Clock = time.time) -> SlidingWindowCounter:
    """Create a sliding-window limiter from a rate such as ``"600/min"``."""
    limit, window = parse_rate(spec)
    return SlidingWindowCounter(limit, window, clock=clock)
