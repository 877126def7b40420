"""`HeaderRunStats`: what one `OpenAIHeaderSource.stream_with_stats` call counted, and its summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..fleet.types import FleetCounters, FleetResult


@dataclass
class HeaderRunStats(FleetCounters):
    """One `stream_with_stats` call: the fleet's counters for this call's requests (summed from its
    results: the pool's own `FleetCounters` mix every document sharing it), and the header source's.
    """

    chunks: int = 0
    batch_requests: int = 0
    batch_fallbacks: int = 0
    cache_hits: int = 0
    fallbacks: int = 0  # chunks the model gave no valid header: structural header instead, never cached
    refits: int = 0  # prompts the server refused as over its context, fitted again with more margin
    cut_chunks: int = 0  # chunks over the model's context alone: the prompt showed their start
    prompt_tokens: int = 0
    completion_tokens: int = 0
    trimmed_contexts: int = 0
    latencies: list[float] = field(default_factory=list)
    per_replica: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def requests(self) -> int:
        """Requests sent for this call's answers (`sent`, under the name run metadata reports)."""
        return self.sent

    def add(self, result: FleetResult) -> None:
        super().add(result)
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        self.latencies.append(result.latency_s)
        self.per_replica[result.replica] = self.per_replica.get(result.replica, 0) + 1

    def summary(self) -> dict[str, Any]:
        """The counts a run reports per document (`invalid` and `errors` are the pool's, not a call's)."""
        sent = sum(self.per_replica.values())
        counts = {name: getattr(self, name) for name in SUMMARY_COUNTS}
        return {**counts, "latency_p50_s": round(percentile(self.latencies, 0.5), 4),
                "latency_p95_s": round(percentile(self.latencies, 0.95), 4),
                "replica_share": {url: round(n / sent, 4) for url, n in sorted(self.per_replica.items())} if sent else {}}


# What `HeaderRunStats.summary` reports, in this order.
SUMMARY_COUNTS = ("requests", "batch_requests", "batch_fallbacks", "cache_hits", "fallbacks", "refits", "retries",
                  "failovers", "hedges", "hedge_wins", "prompt_tokens", "completion_tokens", "trimmed_contexts",
                  "cut_chunks")


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank `q` quantile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
