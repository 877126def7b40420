"""One object per key per process (a store's connection pool, a fleet's request pool), created on
first use, shared by every caller, and closed together."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar


class Closable(Protocol):
    def close(self) -> None: ...


V = TypeVar("V", bound=Closable)


class ProcessCache(Generic[V]):
    def __init__(self) -> None:
        self._items: dict[Hashable, V] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, create: Callable[[], V]) -> V:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                item = self._items[key] = create()
            return item

    def close_all(self) -> None:
        with self._lock:
            for item in self._items.values():
                item.close()
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
