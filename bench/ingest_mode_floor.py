"""bench.ingest's floor mode (`--modes floor`): every header request of the corpus sent straight to the
fleet through the platform's own request pool, all at once: a diagnostic of the pool, never a headline."""

from __future__ import annotations

import time
from pathlib import Path

from bench.ingest_fleet import (
    corpus_requests,
    fleet_figures,
    header_fleet,
    header_source,
    start_fleet,
)
from bench.ingest_options import SPEEDS


def run_floor(workdir: Path, time_scale: float, docs, counter, settings, speeds: tuple[float, ...] = SPEEDS) -> dict:
    from contextual_assets.fleet.metrics_timeline import MetricsSampler

    sim = start_fleet(workdir, time_scale, speeds)
    fleet = header_fleet(sim.base_urls)
    try:
        source = header_source(fleet, counter)
        requests = corpus_requests(docs, counter, settings, source, fleet.context_limit)
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started, cpu = time.monotonic(), time.process_time()
        results = fleet.run(requests)
        wall = time.monotonic() - started
        timeline = sampler.stop()
        # This process's CPU is the client's (the simulator runs in its own), less the bench's sampler.
        client_cpu = time.process_time() - cpu - sampler.thread_cpu_s
        found = pool_limits(fleet)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise SystemExit(f"floor: {len(failed)} requests failed: {failed[0]}")
        figures = fleet_figures(sim, timeline, speeds, time_scale)
    finally:
        fleet.close()
        sim.stop()
    figures.pop("timeline")
    return {"wall_s": round(wall, 2), "client_cpu_ms_per_request": round(client_cpu * 1000 / max(1, len(requests)), 3),
            **found, **figures}


def pool_limits(fleet) -> dict:
    """The concurrency each replica's capacity search settled at (`limit_found`) and the most requests
    the pool had on it (`peak_in_flight`): what the client's CPU per request was measured at."""
    from contextual_assets.fleet.capacity import concurrency_limit

    return {"limit_found": [concurrency_limit(s) for s in fleet.replicas],
            "peak_in_flight": [s.peak_in_flight for s in fleet.replicas]}
