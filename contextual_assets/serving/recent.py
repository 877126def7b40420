"""A value read again at most every few seconds: what the search service asks the store or the settings
per request (the alias's target, the settings' version, a version's chunk count) without a query each time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Recent(Generic[T]):
    """`get()`: the last value `read` gave, read again when it is `max_age_s` old (0: every time). The
    read runs outside the lock, so a slow store never holds up the requests that find a fresh value. A value
    `keep` refuses is read again at the next `get()`."""

    def __init__(self, read: Callable[[], T], max_age_s: float, keep: Callable[[T], bool] = lambda value: True):
        self._read, self.max_age_s, self._keep = read, max_age_s, keep
        self._lock = threading.Lock()
        self._seen: tuple[float, T] | None = None

    def get(self) -> T:
        now = time.monotonic()
        with self._lock:
            if self._seen is not None and now - self._seen[0] < self.max_age_s:
                return self._seen[1]
        value = self._read()
        with self._lock:
            self._seen = (now, value) if self._keep(value) else None
        return value
