"""What a long-lived reader keeps in memory per index version (dense vectors, BM25 postings, chunk rows),
keyed by the store's revision of that version.

A snapshot is loaded in the background the first time a version is searched and again whenever its
revision changes; until the load lands, `current` answers None and the caller searches the store, so
an answer never comes from data older than the store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Loaded(Generic[T]):
    revision: tuple
    value: T


class VersionCache(Generic[T]):
    """Snapshots per index version (`load(version)`), at most `max_versions` of them: the least recently
    searched is dropped. A load that returns None (e.g. a version too big to hold) is not retried until
    the version changes."""

    def __init__(self, load: Callable[[str], T | None], revision: Callable[[str], tuple], name: str,
                 check_every_s: float = 1.0, max_versions: int = 3):
        self._load, self._revision, self.name = load, revision, name
        self._check_every_s, self.max_versions = check_every_s, max_versions
        self._loaded: dict[str, _Loaded[T | None]] = {}
        self._used: dict[str, float] = {}
        self._checked: dict[str, tuple[float, tuple]] = {}
        self._loading: set[str] = set()
        self._lock = threading.Lock()

    @property
    def versions(self) -> list[str]:
        """The versions held in memory now (not those loaded as None)."""
        with self._lock:
            return sorted(v for v, loaded in self._loaded.items() if loaded.value is not None)

    def _current_revision(self, version: str) -> tuple:
        now = time.monotonic()
        with self._lock:
            seen = self._checked.get(version)
            if seen is not None and now - seen[0] < self._check_every_s:
                return seen[1]
        revision = self._revision(version)
        with self._lock:
            self._checked[version] = (now, revision)
        return revision

    def current(self, version: str) -> T | None:
        """The version's snapshot if it matches the store's revision now; else None (and a load starts)."""
        revision = self._current_revision(version)
        with self._lock:
            self._used[version] = time.monotonic()
            loaded = self._loaded.get(version)
            if loaded is not None and loaded.revision == revision:
                return loaded.value
            if version not in self._loading:
                self._loading.add(version)
                threading.Thread(target=self._reload, args=(version, revision), daemon=True,
                                 name=f"{self.name}-{version}").start()
        return None

    def _reload(self, version: str, revision: tuple) -> None:
        try:
            value = self._load(version)
        except Exception:  # noqa: BLE001 - the store answers meanwhile; the next search retries
            log.exception("loading %s of index version %s failed; searching the store instead", self.name, version)
            return
        finally:
            with self._lock:
                self._loading.discard(version)
        with self._lock:
            self._loaded[version] = _Loaded(revision, value)  # the old snapshot is freed
            while len(self._loaded) > self.max_versions:
                oldest = min((v for v in self._loaded if v != version), key=lambda v: self._used.get(v, 0.0))
                del self._loaded[oldest]
