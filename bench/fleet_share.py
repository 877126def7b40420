"""Per-replica share of completed requests and of engine work on a heterogeneous simulated fleet
against each replica's share of capacity (speeds 1, 1, 0.775, 0.775). The client is not told the
speeds: routing by least outstanding work under the pool's per-replica limits must find them.
``--cap N`` configures max_in_flight per replica (default: none, the pool finds each replica's limit;
reported per replica as ``peak_in_flight`` and ``limit``).

Beside the wall: the model floor and the oracle floor of the same requests (bench/model_floor.py,
bench/oracle_floor.py) and the simulator's own lateness (``sim_max_lag_s``, ``sim_valid``:
bench/sim_validity.py).

    python -m bench.fleet_share --json bench/out/fleet_share.json
"""

from __future__ import annotations

import argparse
import statistics
import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.model_floor import CostModel, engine_speeds, floor_figures
from bench.oracle_floor import oracle_floor
from bench.report import write_json
from bench.sim import FleetSimulator, ReplicaSpec
from bench.sim_validity import sim_lag, sim_validity

SPEEDS = (1.0, 1.0, 0.775, 0.775)
MAX_TOKENS = 60


def shares(values: Sequence[float]) -> list[float]:
    total = sum(values)
    return [v / total if total else 0.0 for v in values]


def max_relative_error(share: Sequence[float], capacity: Sequence[float]) -> float:
    return max(abs(a - b) / b for a, b in zip(share, capacity))


def work_share_figures(stats: Sequence[Mapping[str, Any]], speeds: Sequence[float]) -> dict:
    """Each replica's share of the engines' work against its capacity share, and the largest relative
    error: shares of work, not of requests (a cached prefix makes a request cheap). The work is the
    busy time (`busy_s`, simulated seconds at the replica's speed) x speed: raw busy times would be
    equal on a fleet kept busy to the end, whatever the speeds."""
    busy = [float(s.get("busy_s", 0.0)) for s in stats]
    work = shares([b * v for b, v in zip(busy, speeds)])
    capacity = shares(speeds)
    return {"work_share": [round(x, 4) for x in work],
            "work_share_error": round(max_relative_error(work, capacity), 4) if sum(busy) else None}


def request_bodies(n_requests: int, prompt_words: int) -> list[dict]:
    """The chat bodies the pool sends (distinct prompts: no prefix shared), as bench.ingest's
    `corpus_bodies` gives them to the floors."""
    return [{"messages": [{"role": "user", "content": " ".join(f"r{i}w{j}" for j in range(prompt_words))}],
             "max_tokens": MAX_TOKENS} for i in range(n_requests)]


def floors(bodies: list[dict], time_scale: float, spec: ReplicaSpec) -> dict:
    """The model floor and the oracle floor of `bodies` on SPEEDS with `spec`'s engines (no network)."""
    model = floor_figures(bodies, engine_speeds(SPEEDS, spec.engines), time_scale, CostModel.of(spec))
    oracle = oracle_floor(bodies, SPEEDS, time_scale, spec)
    return {"model_floor_s": model["model_floor_s"], "oracle_floor_s": round(oracle["oracle_floor_s"], 3),
            "oracle_policy": oracle["oracle_policy"], "oracle_preemptions": oracle["oracle_preemptions"]}


def run_pool(sim: FleetSimulator, bodies: list[dict], cap: int | None) -> tuple[float, list, list[dict]]:
    """(wall, results, per-replica limits) of every body sent at once through the platform's pool."""
    from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
    from contextual_assets.fleet.discovery import ModelDiscovery
    from contextual_assets.fleet.pool import FleetRequest, HeaderFleet

    fleet = HeaderFleet(FleetConfig(replicas=[ReplicaConfig(base_url=u, max_in_flight=cap) for u in sim.base_urls]),
                        discovery=ModelDiscovery())
    try:
        requests = [FleetRequest(messages=b["messages"], est_prompt_tokens=len(b["messages"][0]["content"].split()),
                                 max_tokens=b["max_tokens"], label=f"request {i}") for i, b in enumerate(bodies)]
        started = time.monotonic()
        results = fleet.run(requests)
        wall = time.monotonic() - started
        # What the pool found (getattr: the capacity search's state is the pool's own business).
        limits = [{"peak_in_flight": getattr(r, "peak_in_flight", None), "limit": getattr(r, "limit", None)}
                  for r in fleet.replicas]
    finally:
        fleet.close()
    return wall, results, limits


def measure(n_requests: int, prompt_words: int, time_scale: float, cap: int | None = None,
            spec: ReplicaSpec | None = None) -> dict:
    spec = spec or ReplicaSpec()
    bodies = request_bodies(n_requests, prompt_words)
    result: dict = {"requests": n_requests, "prompt_words": prompt_words, "time_scale": time_scale, "cap": cap,
                    "engines": spec.engines, **floors(bodies, time_scale, spec)}
    with FleetSimulator([dataclasses.replace(spec, speed=s) for s in SPEEDS], time_scale=time_scale) as sim:
        wall, results, limits = run_pool(sim, bodies, cap)
        stats = sim.stats()
        urls = list(sim.base_urls)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed: {failed[0]}")
    return {**result, **summary(wall, stats, urls, limits, result, time_scale)}


def summary(wall: float, stats: list[dict], urls: list[str], limits: list[dict], floors_: dict,
            time_scale: float) -> dict:
    """The measured figures: per-replica rows, the worst share errors, the walls over the floors and
    whether the simulator kept up."""
    wall = round(wall, 2)  # the ratios from the wall as reported, as bench.ingest's
    share, capacity = shares([s["completed"] for s in stats]), shares(SPEEDS)
    work = work_share_figures(stats, SPEEDS)
    rows = [{"replica": url, "speed": speed, "completed": s["completed"], "share": round(share[i], 4),
             "capacity_share": round(capacity[i], 4),
             "relative_error": round(abs(share[i] - capacity[i]) / capacity[i], 4),
             "busy_s": round(s["busy_s"], 3), "work_share": work["work_share"][i],
             "peak_open_requests": s.get("peak_open_requests"), "max_lag_s": round(s.get("max_lag_s", 0.0), 4),
             "preemptions": s.get("preemptions", 0), **limits[i]}
            for i, (url, speed, s) in enumerate(zip(urls, SPEEDS, stats))]
    lag = sim_lag(stats, time_scale)
    return {"wall_s": wall, "replicas": rows, "max_relative_error": max(r["relative_error"] for r in rows),
            "work_share_error": work["work_share_error"], "preemptions": sum(r["preemptions"] for r in rows),
            "wall_over_model_floor": round(wall / floors_["model_floor_s"], 3) if floors_["model_floor_s"] else None,
            "wall_over_oracle": round(wall / floors_["oracle_floor_s"], 3) if floors_["oracle_floor_s"] else None,
            **lag, **sim_validity(lag["sim_max_lag_s"], wall, lag["sim_lost_s"])}


def print_result(result: dict) -> None:
    print(f"{'replica':28s} {'speed':>6s} {'done':>6s} {'share':>7s} {'work':>7s} {'capacity':>9s} {'rel.err':>8s} "
          f"{'peak':>5s} {'limit':>6s} {'lag s':>7s}")
    for row in result["replicas"]:
        print(f"{row['replica']:28s} {row['speed']:6.3f} {row['completed']:6d} {row['share']:7.3f} "
              f"{row['work_share']:7.3f} {row['capacity_share']:9.3f} {row['relative_error']:8.3f} "
              f"{row['peak_in_flight']!s:>5s} {row['limit']!s:>6s} {row['max_lag_s']:7.3f}")
    valid = "" if result["sim_valid"] is not False else \
        f" INVALID: simulator lag {result['sim_max_lag_s']} s or lost {result['sim_lost_s']} s > " \
        f"{result['sim_lag_bound_s']} s"
    print(f"wall {result['wall_s']} s (cap {result['cap']}); model floor {result['model_floor_s']} s, oracle floor "
          f"{result['oracle_floor_s']} s, wall/oracle {result['wall_over_oracle']}; max relative error: requests "
          f"{result['max_relative_error']:.3f}, work {result['work_share_error']}{valid}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=896)
    parser.add_argument("--prompt-words", type=int, default=1000)
    parser.add_argument("--time-scale", type=float, default=1.5)
    parser.add_argument("--cap", type=int, default=None,
                        help="max_in_flight per replica (default: none; the pool finds each replica's limit)")
    parser.add_argument("--runs", type=int, default=1, help="rounds, each on a cold fleet; medians are reported")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rounds = []
    for _ in range(args.runs):
        rounds.append(measure(args.requests, args.prompt_words, args.time_scale, cap=args.cap))
        print_result(rounds[-1])
    write_json(args.json, rounds[0] if args.runs == 1 else {**medians(rounds), "rounds": rounds})
    return 0


def medians(rounds: list[dict]) -> dict:
    """The median of each headline figure over the rounds (the floors are the same in every round)."""
    keys = ("wall_s", "wall_over_oracle", "wall_over_model_floor", "max_relative_error", "work_share_error")
    out = {k: round(statistics.median(r[k] for r in rounds if r.get(k) is not None), 3) for k in keys}
    out["limits_found"] = [[row.get("limit") for row in r["replicas"]] for r in rounds]
    out["invalid_rounds"] = [i for i, r in enumerate(rounds) if r.get("sim_valid") is False]
    print(f"median of {len(rounds)}: " + ", ".join(f"{k} {v}" for k, v in out.items() if k in keys))
    return {"model_floor_s": rounds[0].get("model_floor_s"), "oracle_floor_s": rounds[0].get("oracle_floor_s"), **out}


if __name__ == "__main__":
    sys.exit(main())
