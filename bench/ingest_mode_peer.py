"""bench.ingest's peer modes (`--modes peer_llamaindex,peer_cookbook`, `:own` or `:ours` for one prompt):
what a user would run instead (bench/peers.py, the `bench` extra), from the files to its committed index,
behind each balancer of `--balancers`."""

from __future__ import annotations

import time
from pathlib import Path

from bench import ingest_options
from bench.ingest_fleet import (
    EmbedServer,
    chunk_requests,
    fleet_figures,
    header_source,
    start_fleet,
)
from bench.ingest_harness import bench_store
from bench.ingest_options import SPEEDS


def run_peer(workdir: Path, time_scale: float, paths: list[Path], docs, counter, settings, name: str, prompt: str,
             speeds: tuple[float, ...] = SPEEDS, seed: int = 0, balancer: str = "random") -> dict:
    """A peer (bench/peers.py) from the files to its committed index, on a cold fleet of its own; the
    embedder is loaded beforehand (the platform loads its own inside its wall time). `seed` draws its
    random replicas (bench.ingest gives each round its own); `balancer`: `random` (LiteLLM's
    simple-shuffle) or `least_busy` (a least-outstanding-requests balancer in front of the fleet)."""
    from functools import partial

    from bench.peers import PEERS, PeerJob
    from contextual_assets.fleet.discovery import ModelDiscovery
    from contextual_assets.fleet.metrics_timeline import MetricsSampler

    embed = EmbedServer(workdir, time_scale)
    embedder = embed.embedder()
    sim = start_fleet(workdir, time_scale, speeds)
    store = sampler = None
    try:
        # What a peer's user reads off /v1/models once and writes into their script.
        served = ModelDiscovery().resolve({url: None for url in sim.base_urls})
        model, context_limit = served.name, served.context_limit
        store, version = bench_store(workdir / f"{name}-{prompt}-{time.monotonic_ns()}.duckdb", docs,
                                     {"header_source": name, "header_model": model, "prompt_version": prompt},
                                     embedder, settings)
        job = PeerJob(paths=paths, base_urls=sim.base_urls, model=model, context_limit=context_limit,
                      workers=ingest_options.OPTIONS.peer_workers, prompt=prompt, counter=counter, settings=settings,
                      embedder=embedder, store=store, index_version=version, seed=seed, balancer=balancer,
                      ours_requests=partial(chunk_requests, counter=counter, settings=settings,
                                            source=header_source(None, counter), context_limit=context_limit))
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started = time.monotonic()
        result = PEERS[name](job)
        wall = time.monotonic() - started
        figures = fleet_figures(sim, sampler.stop(), speeds, time_scale)
        committed = store.corpus.count_chunks(version)
    finally:
        if sampler is not None:
            sampler.stop()
        sim.stop()
        embed.stop()
        if store is not None:
            store.close()
    figures.pop("timeline")
    if committed != result.chunks:
        raise SystemExit(f"{name} ({prompt} prompts): {committed} chunks committed of {result.chunks}")
    return {"wall_s": round(wall, 2), "prompt": prompt, "balancer": balancer, **result.figures(), **figures}
