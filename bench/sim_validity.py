"""Is a fleet benchmark's measurement the simulator's or the machine's? The simulated engines sleep
``cost * time_scale`` per step against a deadline (bench/sim/fleet.py, ``Replica._engine``);
``stats()[i]["max_lag_s"]`` is the furthest behind that deadline replica i's engine loop ever woke (wall
seconds). A lag under 0.2 s is caught up by the next steps; beyond it the engine re-anchors
(``reanchors``) and that time is lost for good, so lags also add up: ``sim_lost_s`` is the worst
replica's busy wall time beyond its simulated busy time x the time scale (``busy_wall_s - busy_s x
time_scale``, per engine). A CPU-starved simulator answers late, and its wall no longer measures the
client: a round or mode with either figure over the bound is marked ``sim_valid: false``.

The bound, ``max(SIM_LAG_MAX_S, SIM_LAG_MAX_SHARE x the mode's wall)``:

* 0.05 s: half the pool's fastest /metrics read interval (``capacity.CLIMB_READ_S``, 0.1 s) and 5 % of
  its rate window (``LEVEL_WINDOW_S``, 1 s): a loop that late still shows each read the engine at most
  one read old, and the capacity search's rates move by at most a few percent. An idle 2-core box
  wakes within ~4 ms (fleet.py's capacity note), so only a starved simulator crosses it;
* 2 % of the wall: time the engines lost lengthens the wall by up to as much, so the wall over the
  oracle floor (simulated time) is off by up to lost / wall; 2 % is below the spread of single
  rounds (several percent), so a valid round's ratio means what it says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SIM_LAG_MAX_S = 0.05  # absolute floor of the bound (see the module docstring)
SIM_LAG_MAX_SHARE = 0.02  # share of the mode's wall


def sim_lag_bound_s(wall_s: float | None) -> float:
    """The largest engine-loop lag a measurement of `wall_s` tolerates."""
    return max(SIM_LAG_MAX_S, SIM_LAG_MAX_SHARE * (wall_s or 0.0))


def lost_s(stat: Mapping[str, Any], time_scale: float) -> float | None:
    """Wall seconds one replica's engines spent busy beyond their simulated busy time (per engine)."""
    if stat.get("busy_wall_s") is None or stat.get("busy_s") is None:
        return None
    return max(0.0, stat["busy_wall_s"] - stat["busy_s"] * time_scale) / max(1, int(stat.get("engines", 1)))


def sim_lag(stats: Sequence[Mapping[str, Any]], time_scale: float | None = None) -> dict:
    """The fleet's own lateness from its `stats()`: the worst replica's `max_lag_s`, the engines'
    re-anchors and, given the fleet's `time_scale`, the worst replica's lost time; None for a figure
    the stats do not give (an older simulator)."""
    lags = [s["max_lag_s"] for s in stats if s.get("max_lag_s") is not None]
    lost = [x for s in stats if time_scale is not None and (x := lost_s(s, time_scale)) is not None]
    return {"sim_max_lag_s": round(max(lags), 4) if lags else None,
            "sim_reanchors": sum(int(s.get("reanchors", 0)) for s in stats),
            "sim_lost_s": round(max(lost), 4) if lost else None}


def sim_validity(max_lag_s: float | None, wall_s: float | None, lost: float | None = None) -> dict:
    """`sim_valid` (None when the lag is unknown) with the bound both the lag and the lost time were
    held to."""
    bound = sim_lag_bound_s(wall_s)
    valid = None if max_lag_s is None else bool(max_lag_s <= bound and (lost is None or lost <= bound))
    return {"sim_lag_bound_s": round(bound, 4), "sim_valid": valid}


def with_sim_validity(result: dict) -> dict:
    """A mode's result (with `wall_s`, `sim_max_lag_s` and `sim_lost_s`, see `sim_lag`) marked valid
    or not."""
    result.update(sim_validity(result.get("sim_max_lag_s"), result.get("wall_s"), result.get("sim_lost_s")))
    return result


def invalid_modes(round_: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The modes of one round whose simulator fell behind its bound."""
    return [mode for mode, result in round_.items() if result.get("sim_valid") is False]


def validity_summary(rounds: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict:
    """`invalid_rounds`: 1-based rounds with a mode over the bound (its modes in `invalid_modes`);
    `sim_max_lag_s`: the worst lag of any mode of any round."""
    lags = [r["sim_max_lag_s"] for round_ in rounds for r in round_.values() if r.get("sim_max_lag_s") is not None]
    bad = {i: invalid_modes(round_) for i, round_ in enumerate(rounds, 1)}
    return {"invalid_rounds": [i for i, modes in bad.items() if modes],
            "invalid_modes": {str(i): modes for i, modes in bad.items() if modes},
            "sim_max_lag_s": max(lags, default=None)}


def lag_flag(round_: Mapping[str, Mapping[str, Any]]) -> str:
    """What the printed table appends to a round: nothing, or which modes are invalid and why."""
    modes = invalid_modes(round_)
    if not modes:
        return ""
    return " INVALID (simulator behind: " + ", ".join(
        f"{m} lag {round_[m]['sim_max_lag_s']:.3f} s, lost {round_[m].get('sim_lost_s') or 0:.3f} s > "
        f"{round_[m]['sim_lag_bound_s']:.3f} s" for m in modes) + ")"
