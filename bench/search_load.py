"""The search benchmark's load: distinct queries handed out in turn, closed-loop clients and an
open-loop arrival schedule against the search service's HTTP API, latencies summarised."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from bench.synthetic_corpus import K, ms, percentile


class Queries:
    """Distinct query texts handed out in turn to every load phase (none is asked twice)."""

    def __init__(self, texts: list[str]):
        self._texts, self._next, self._lock = texts, 0, threading.Lock()

    def next(self) -> str:
        with self._lock:
            text = self._texts[self._next % len(self._texts)]
            self._next += 1
        return text


def summary(latencies: list[float], errors: int, wall: float) -> dict:
    return {"requests": len(latencies), "errors": errors, "p50_ms": ms(percentile(latencies, 50)),
            "p95_ms": ms(percentile(latencies, 95)), "p99_ms": ms(percentile(latencies, 99)),
            "qps": round(len(latencies) / wall, 1)}


class Latencies:
    """Searches sent and their latencies (or errors), from any number of threads."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.errors = 0
        self._lock = threading.Lock()

    def search(self, http, query: str, mode: str, since: float) -> None:
        """One search; its latency runs from `since` (when it was sent, or due)."""
        import httpx

        try:
            ok = http.post("/v1/search", json={"query": query, "k": K, "mode": mode}).status_code == 200
        except httpx.HTTPError:
            ok = False
        elapsed = time.perf_counter() - since
        with self._lock:
            if ok:
                self.seconds.append(elapsed)
            else:
                self.errors += 1


def closed_loop(base: str, queries: Queries, clients: int, duration_s: float, mode: str) -> dict:
    """`clients` threads, each sending searches back to back for `duration_s`."""
    import httpx

    recorded = Latencies()
    stop_at = time.perf_counter() + duration_s

    def client() -> None:
        with httpx.Client(base_url=base, timeout=120) as http:
            while time.perf_counter() < stop_at:
                query = queries.next()
                recorded.search(http, query, mode, time.perf_counter())
    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summary(recorded.seconds, recorded.errors, time.perf_counter() - started)


def open_loop(base: str, queries: Queries, rate: float, duration_s: float, seed: int, workers: int = 64) -> dict:
    """rate x duration_s hybrid searches (at least one) due at Poisson arrival times of mean `rate` per
    second; each latency runs from the moment its request was due; a failed request counts as an error."""
    import httpx

    rng = np.random.default_rng(seed)
    due = np.cumsum(rng.exponential(1.0 / rate, max(1, round(rate * duration_s))))  # ~duration_s of arrivals
    recorded = Latencies()
    local = threading.local()

    def send(at: float, query: str) -> None:
        http = getattr(local, "http", None)
        if http is None:
            http = local.http = httpx.Client(base_url=base, timeout=120)
        recorded.search(http, query, "hybrid", at)

    pool = ThreadPoolExecutor(max_workers=workers)
    started = time.perf_counter()
    for offset in due:
        at = started + float(offset)
        delay = at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        pool.submit(send, at, queries.next())
    pool.shutdown(wait=True)
    wall = time.perf_counter() - started
    out = summary(recorded.seconds, recorded.errors, wall)
    out.update({"offered_qps": round(rate, 2), "sent": int(len(due)), "achieved_qps": out.pop("qps")})
    return out
