"""bench/sim_validity.py: a measurement is valid while the simulator's engine loop stayed within
max(0.05 s, 2 % of the wall) of simulated time, at its worst step and in all."""

from __future__ import annotations

from bench.sim_validity import (
    SIM_LAG_MAX_S,
    lag_flag,
    sim_lag,
    sim_lag_bound_s,
    sim_validity,
    validity_summary,
    with_sim_validity,
)


def test_bound_is_the_absolute_floor_or_a_share_of_the_wall():
    assert sim_lag_bound_s(1.0) == SIM_LAG_MAX_S == 0.05
    assert sim_lag_bound_s(None) == 0.05
    assert sim_lag_bound_s(100.0) == 2.0


def test_valid_and_invalid_measurements():
    assert sim_validity(0.004, 1.0) == {"sim_lag_bound_s": 0.05, "sim_valid": True}
    assert sim_validity(0.05, 1.0)["sim_valid"] is True  # at the bound
    assert sim_validity(0.08, 1.0)["sim_valid"] is False
    assert sim_validity(0.25, 10.0)["sim_valid"] is False  # bound 0.2 s
    assert sim_validity(0.15, 10.0)["sim_valid"] is True
    assert sim_validity(None, 10.0)["sim_valid"] is None  # a simulator without the figure: unknown
    # Each stall short, but together the engines lost more than the bound: invalid.
    assert sim_validity(0.15, 10.0, lost=0.5)["sim_valid"] is False
    assert sim_validity(0.15, 10.0, lost=0.1)["sim_valid"] is True


def test_lag_and_lost_time_are_the_worst_replicas():
    stats = [{"max_lag_s": 0.01, "reanchors": 0, "busy_s": 10.0, "busy_wall_s": 5.02},
             {"max_lag_s": 0.4, "reanchors": 2, "busy_s": 10.0, "busy_wall_s": 6.0},
             {"max_lag_s": 0.3, "reanchors": 1, "busy_s": 20.0, "busy_wall_s": 11.0, "engines": 2}, {}]
    # At time scale 0.5: replica 1 lost 1 s; replica 2's two engines 1 s together, 0.5 s each.
    assert sim_lag(stats, 0.5) == {"sim_max_lag_s": 0.4, "sim_reanchors": 3, "sim_lost_s": 1.0}
    assert sim_lag(stats)["sim_lost_s"] is None  # without the time scale
    assert sim_lag([{}]) == {"sim_max_lag_s": None, "sim_reanchors": 0, "sim_lost_s": None}


def test_rounds_over_the_bound_are_listed_and_flagged():
    ok = with_sim_validity({"wall_s": 5.0, "sim_max_lag_s": 0.01})
    late = with_sim_validity({"wall_s": 5.0, "sim_max_lag_s": 0.5, "sim_lost_s": 0.6})
    rounds = [{"floor": ok, "platform": ok}, {"floor": ok, "platform": late}]
    summary = validity_summary(rounds)
    assert summary == {"invalid_rounds": [2], "invalid_modes": {"2": ["platform"]}, "sim_max_lag_s": 0.5}
    assert lag_flag(rounds[0]) == ""
    assert lag_flag(rounds[1]) == " INVALID (simulator behind: platform lag 0.500 s, lost 0.600 s > 0.100 s)"
