"""`bench.fleet_share` on the fleet simulator: per-replica shares of completed requests follow each
replica's share of capacity, with no speed given to the client (moved from
tests/integration/test_fleet_pool.py, which may import only bench.sim and bench.corpora); its result
carries the floors, the pool's limits and the simulator's lateness."""

from __future__ import annotations

from bench.fleet_share import SPEEDS, measure, work_share_figures


def test_heterogeneous_fleet_share_follows_capacity():
    # Real-time-like pacing so that the client keeps every replica at its cap (saturated fleet):
    # then free slots, and so requests, follow each replica's speed with no speed given to the client.
    result = measure(n_requests=448, prompt_words=800, time_scale=1.5, cap=16)
    assert [r["speed"] for r in result["replicas"]] == [1.0, 1.0, 0.775, 0.775]
    assert sum(r["completed"] for r in result["replicas"]) == 448
    assert result["max_relative_error"] <= 0.05, result["replicas"]


def test_result_has_the_floors_the_limits_found_and_the_simulator_lag():
    result = measure(n_requests=24, prompt_words=60, time_scale=0.1)  # no cap: the pool finds the limits
    assert result["cap"] is None
    assert 0 < result["model_floor_s"] <= result["oracle_floor_s"]
    assert result["wall_over_oracle"] == round(result["wall_s"] / result["oracle_floor_s"], 3)
    assert result["wall_over_model_floor"] is not None
    assert isinstance(result["sim_valid"], bool) and result["sim_max_lag_s"] >= 0
    assert result["sim_lag_bound_s"] >= 0.05
    rows = result["replicas"]
    assert sum(r["completed"] for r in rows) == 24
    assert all(isinstance(r["peak_in_flight"], int) and r["peak_in_flight"] >= 1 for r in rows)
    assert all(r["max_lag_s"] >= 0 and r["peak_open_requests"] >= 1 for r in rows)
    assert result["work_share_error"] is not None and len({r["work_share"] for r in rows}) >= 1


def test_work_shares_weigh_busy_time_by_speed():
    # Every replica busy for the whole run: its work follows its speed, so no error.
    even = work_share_figures([{"busy_s": 10.0}] * 4, SPEEDS)
    assert even["work_share"] == [0.2817, 0.2817, 0.2183, 0.2183] and even["work_share_error"] == 0.0
    # The slow replicas idle half the time: they did half their share.
    half = work_share_figures([{"busy_s": 10.0}, {"busy_s": 10.0}, {"busy_s": 5.0}, {"busy_s": 5.0}], SPEEDS)
    assert half["work_share_error"] == 0.3604  # 3.875 / 27.75 of the work against 0.775 / 3.55
    assert work_share_figures([{"busy_s": 0.0}] * 4, SPEEDS)["work_share_error"] is None
