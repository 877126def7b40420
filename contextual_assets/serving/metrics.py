"""The search service's own Prometheus metrics (`GET /metrics`), in a registry per app so that two
services in one process (tests, a bench) count apart."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Search latency spans a cached lexical query (~1 ms) to a reranked hybrid one on a cold store (seconds).
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServiceMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("ctx_search_requests", "HTTP requests answered, by route and status",
                                ["route", "status"], registry=self.registry)
        self.errors = Counter("ctx_search_errors", "HTTP requests answered with a status of 400 or more",
                              ["route", "status"], registry=self.registry)
        self.latency = Histogram("ctx_search_request_duration_seconds", "time to answer, by route", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.version = Gauge("ctx_search_served_version", "1 for the index version the last search served "
                             "(and the alias it came through, '' for none)", ["index_version", "alias"],
                             registry=self.registry)
        self.in_memory = Gauge("ctx_search_in_memory", "1 for each index version whose part (vectors, postings, "
                               "rows) the service holds in memory now", ["part", "index_version"],
                               registry=self.registry)
        self._served: tuple[str, str] | None = None

    def observe(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        if status >= 400:
            self.errors.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def served(self, index_version: str, alias: str | None) -> None:
        labels = (index_version, alias or "")
        if labels != self._served:  # one series at 1: a promotion moves it
            if self._served is not None:
                self.version.remove(*self._served)
            self.version.labels(*labels).set(1)
            self._served = labels

    def held(self, parts: dict[str, list[str]]) -> None:
        """What the service holds in memory now (a search answered from the store meanwhile)."""
        self.in_memory.clear()
        for part, versions in parts.items():
            for version in versions:
                self.in_memory.labels(part, version).set(1)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
