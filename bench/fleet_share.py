"""Per-replica share of completed requests on a heterogeneous simulated fleet against each
replica's share of capacity (speeds 1, 1, 0.775, 0.775; in-flight cap 16 each). The client is not
told the speeds: routing by least outstanding work under per-replica caps must find them.

    python -m bench.fleet_share --json bench/out/fleet_share.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.report import write_json
from bench.sim import FleetSimulator, ReplicaSpec
from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
from contextual_assets.fleet.discovery import ModelDiscovery
from contextual_assets.fleet.pool import FleetRequest, HeaderFleet

SPEEDS = (1.0, 1.0, 0.775, 0.775)


def measure(n_requests: int, prompt_words: int, time_scale: float, cap: int = 16) -> dict:
    with FleetSimulator([ReplicaSpec(speed=s) for s in SPEEDS], time_scale=time_scale) as sim:
        fleet = HeaderFleet(FleetConfig(replicas=[ReplicaConfig(base_url=u, max_in_flight=cap) for u in sim.base_urls]),
                            discovery=ModelDiscovery())
        try:
            requests = [
                FleetRequest(messages=[{"role": "user", "content": " ".join(f"r{i}w{j}" for j in range(prompt_words))}],
                             est_prompt_tokens=prompt_words, max_tokens=60, label=f"request {i}")
                for i in range(n_requests)
            ]
            started = time.monotonic()
            results = fleet.run(requests)
            wall = time.monotonic() - started
        finally:
            fleet.close()
        stats = sim.stats()
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed: {failed[0]}")
    completed = [s["completed"] for s in stats]
    total = sum(completed)
    capacity = [s / sum(SPEEDS) for s in SPEEDS]
    rows = []
    for index, (url, speed) in enumerate(zip([s for s in sim.base_urls], SPEEDS)):
        share = completed[index] / total
        rows.append({"replica": url, "speed": speed, "completed": completed[index], "share": round(share, 4),
                     "capacity_share": round(capacity[index], 4),
                     "relative_error": round(abs(share - capacity[index]) / capacity[index], 4)})
    return {"requests": n_requests, "prompt_words": prompt_words, "time_scale": time_scale, "wall_s": round(wall, 2),
            "replicas": rows, "max_relative_error": max(r["relative_error"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=896)
    parser.add_argument("--prompt-words", type=int, default=1000)
    parser.add_argument("--time-scale", type=float, default=1.5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = measure(args.requests, args.prompt_words, args.time_scale)
    print(f"{'replica':28s} {'speed':>6s} {'done':>6s} {'share':>7s} {'capacity':>9s} {'rel.err':>8s}")
    for row in result["replicas"]:
        print(f"{row['replica']:28s} {row['speed']:6.3f} {row['completed']:6d} {row['share']:7.3f} "
              f"{row['capacity_share']:9.3f} {row['relative_error']:8.3f}")
    print(f"wall {result['wall_s']} s; max relative error {result['max_relative_error']:.3f}")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
