"""A held DuckDB connection: kept open across requests (a search service) or an ingest step's many small
transactions, handed to other processes on demand.

DuckDB lets one process open a file at a time. Opening it costs ~15 ms and starts from a cold buffer pool
(a request re-reads and decompresses what the previous one had just read), so a search service that
opens the file per request spends more on that than on searching. `HeldConnection` keeps one connection
open while requests keep coming and gives the file up:
- when no request has used it for `idle_release_s`;
- when another process asked for it: a process whose open fails on the lock touches `<file>.wanted`
  (`signal_wanted`) before it retries; the holder's watcher sees it within 50 ms, the requests in flight
  finish, the connection closes, and the holder stays out for `yield_s` so the other process gets in
  (its retries come at most 0.2 s apart).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def wanted_marker(path: Path) -> Path:
    """The file another process touches to ask a holder for `path`."""
    return path.with_name(path.name + ".wanted")


def signal_wanted(path: Path) -> None:
    """Ask whoever holds `path` open to let go (best effort: a read-only folder just means no signal)."""
    try:
        wanted_marker(path).touch()
    except OSError:
        pass


class HeldConnection:
    def __init__(self, open_connection: Callable[[], Any], path: Path, idle_release_s: float = 0.5,
                 yield_s: float = 0.25):
        self._open, self._marker = open_connection, wanted_marker(path)
        self.idle_release_s, self.yield_s = idle_release_s, yield_s
        self._con: Any = None
        self._opened_ns = 0
        self._users = 0
        self._last_used = 0.0
        self._out_until = 0.0
        self._draining = False
        self._closed = False
        self._cond = threading.Condition()
        self._watcher: threading.Thread | None = None
        self._depth = threading.local()  # cursors this thread holds now

    @property
    def is_open(self) -> bool:
        return self._con is not None

    def _asked(self) -> bool:
        """Whether another process asked for the file since this one opened it."""
        try:
            return self._marker.stat().st_mtime_ns >= self._opened_ns
        except OSError:
            return False

    def _close_locked(self) -> None:
        if self._con is not None:
            try:
                self._con.close()
            finally:
                self._con, self._draining = None, False
                self._out_until = time.monotonic() + self.yield_s
                self._cond.notify_all()

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """A cursor on the held connection (opened if needed) for one request's reads, or one transaction."""
        nested = getattr(self._depth, "n", 0) > 0
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the store is closed")
                if self._draining and not nested:  # asked for: no new request joins; the last one out closes
                    # (A thread that already holds a cursor takes another at once: waiting for the drain
                    # would wait for itself.)
                    self._cond.wait(0.05)
                    continue
                if self._con is None:
                    wait = self._out_until - time.monotonic()
                    if wait > 0:
                        self._cond.wait(wait)
                        continue
                    self._con = self._open()  # retried while another process holds the file
                    self._opened_ns = time.time_ns()  # after: our own signals while we waited don't count
                    self._start_watcher()
                self._users += 1
                break
            con = self._con
        self._depth.n = getattr(self._depth, "n", 0) + 1
        cur = con.cursor()
        try:
            yield cur
        finally:
            cur.close()
            self._depth.n -= 1
            with self._cond:
                self._users -= 1
                self._last_used = time.monotonic()
                if self._users == 0 and self._draining:
                    self._close_locked()

    def _start_watcher(self) -> None:
        if self._watcher is None or not self._watcher.is_alive():
            self._watcher = threading.Thread(target=self._watch, daemon=True, name="duckdb-held-connection")
            self._watcher.start()

    def _watch(self) -> None:
        """Reads the marker (off the request path) and closes the connection once idle or asked for;
        ends when it is closed."""
        period = min(0.05, self.idle_release_s / 4)
        while True:
            time.sleep(period)
            with self._cond:
                if self._con is None:
                    self._watcher = None
                    return
                self._draining = self._draining or self._asked()
                if self._users == 0 and (self._draining or time.monotonic() - self._last_used >= self.idle_release_s):
                    self._close_locked()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            while self._users:
                self._cond.wait(0.05)
            self._close_locked()
