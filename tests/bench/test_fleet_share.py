"""`bench.fleet_share` on the fleet simulator: per-replica shares of completed requests follow each
replica's share of capacity, with no speed given to the client (moved from
tests/integration/test_fleet_pool.py, which may import only bench.sim and bench.corpora)."""

from __future__ import annotations

from bench.fleet_share import measure


def test_heterogeneous_fleet_share_follows_capacity():
    # Real-time-like pacing so that the client keeps every replica at its cap (saturated fleet):
    # then free slots, and so requests, follow each replica's speed with no speed given to the client.
    result = measure(n_requests=448, prompt_words=800, time_scale=1.5)
    assert [r["speed"] for r in result["replicas"]] == [1.0, 1.0, 0.775, 0.775]
    assert sum(r["completed"] for r in result["replicas"]) == 448
    assert result["max_relative_error"] <= 0.05, result["replicas"]
