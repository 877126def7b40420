"""bench.ingest's driver: the modes `--modes` names (each in its own module, bench/ingest_mode_*.py),
one round of every mode, and every round at one time scale with its floors and summary
(bench/ingest_summary.py)."""

from __future__ import annotations

from pathlib import Path

from bench import ingest_options
from bench.ingest_fleet import (
    fleet_work_per_process,
    model_floor,
    oracle_figures,
    with_model_floor,
    with_utilization,
)
from bench.ingest_mode_floor import run_floor
from bench.ingest_mode_legacy import run_legacy
from bench.ingest_mode_peer import run_peer
from bench.ingest_mode_platform import run_platform
from bench.ingest_mode_shared_fleet import run_shared_fleet
from bench.ingest_mode_stream import run_stream, wave_batches
from bench.ingest_summary import summarize
from bench.ingest_workloads import workload_speeds
from bench.sim_validity import with_sim_validity

PLATFORM_RUNS = {"stream": run_stream, "shared-fleet": run_shared_fleet}  # others: run_platform


def one_round(workdir: Path, time_scale: float, paths, docs, counter, settings, modes: list[str],
              workload: str = "seed", floors: dict | None = None, platform_options: dict | None = None,
              round_index: int = 0) -> dict:
    expected = sum(len(d.chunks) for d in docs)
    speeds = workload_speeds(workload)
    out: dict = {}
    if "floor" in modes:
        out["floor"] = run_floor(workdir, time_scale, docs, counter, settings, speeds)
    if "platform" in modes:
        run = PLATFORM_RUNS.get(workload, run_platform)
        out["platform"] = run(workdir, time_scale, paths, expected, speeds=speeds, **(platform_options or {}))
    if "legacy" in modes:
        out["legacy"] = run_legacy(workdir, time_scale, docs, counter, settings, speeds)
    for name, prompt in peer_runs(modes):
        for balancer in ingest_options.BALANCERS_RUN:
            out[f"{name}/{prompt}/{balancer}"] = run_peer(workdir, time_scale, paths, docs, counter, settings, name,
                                                          prompt, speeds, seed=round_index, balancer=balancer)
    for result in out.values():
        with_sim_validity(with_utilization(result, time_scale))
        if floors is not None:
            with_model_floor(result, floors)
    return out


PEER_MODES = ("peer_llamaindex", "peer_cookbook")
BASE_MODES = ("floor", "platform", "legacy")


def peer_runs(modes: list[str]) -> list[tuple[str, str]]:
    """(peer, prompt) pairs of the modes: `peer_x` runs both prompts, `peer_x:own` or `peer_x:ours` one."""
    runs = []
    for mode in modes:
        name, _, prompt = mode.partition(":")
        if name in PEER_MODES:
            runs += [(name, p) for p in (("own", "ours") if not prompt else (prompt,))]
    return runs


def check_modes(modes: list[str]) -> str | None:
    """None, or the one-line complaint about the first mode --modes does not know."""
    for mode in modes:
        name, _, prompt = mode.partition(":")
        if not (mode in BASE_MODES or (name in PEER_MODES and prompt in ("", "own", "ours"))):
            return (f"--modes: unknown mode {mode!r}; use {', '.join(BASE_MODES + PEER_MODES)} "
                    f"(a peer alone with one prompt: peer_cookbook:own or peer_cookbook:ours)")
    return None


def parse_scales(text: str) -> list[float]:
    scales = [float(x) for x in text.split(",") if x.strip()]
    if not scales or any(x <= 0 for x in scales):
        raise ValueError("time scales must be positive numbers, e.g. 0.5,1,2,4,8")
    return scales


def run_scale(workdir: Path, time_scale: float, paths, docs, counter, settings, modes: list[str], workload: str,
              runs: int, waves: int, wave_interval: float | None) -> dict:
    """Every round of every mode at one time scale: the rounds and their summary."""
    speeds = workload_speeds(workload)
    model = model_floor(docs, counter, settings, time_scale, speeds)
    options, arrivals = {}, None
    if workload == "stream":
        # Files arrive twice as fast as the fleet could serve them: it never waits for the inbox.
        interval = wave_interval if wave_interval is not None else \
            round(max(1.0, model["model_floor_s"] / 2 / max(1, waves - 1)), 2)
        options = {"waves": waves, "wave_interval_s": interval}
        # The oracle gets each file when its wave is dropped (docs are in the paths' order).
        arrivals = {doc.doc_id: k * interval
                    for k, batch in enumerate(wave_batches(list(docs), waves)) for doc in batch}
    if workload == "shared-fleet":  # enough work per process for the shares to settle (>= 30 s wanted)
        model["fleet_work_s_per_process"] = fleet_work_per_process(docs, counter, settings, time_scale, speeds)
        print(f"fleet work per process (model floor): {model['fleet_work_s_per_process']} s", flush=True)
    model.update(oracle_figures(docs, counter, settings, time_scale, speeds, arrivals))
    rounds = []
    for i in range(runs):
        rounds.append(one_round(workdir, time_scale, paths, docs, counter, settings, modes, workload,
                                model, options, round_index=i))
        print(f"time scale {time_scale}, round {i + 1}: "
              + ", ".join(f"{m} {r['wall_s']} s" for m, r in rounds[-1].items()), flush=True)
    return {"time_scale": time_scale, **model, "rounds": rounds, **summarize(rounds)}
