"""Ingest throughput on the fleet simulator: model floor, floor, platform (a real UI backfill),
legacy loop and the peers, every wall timed from submission to the last commit.

    python -m bench.ingest --workload seed --runs 3 --json bench/out/ingest_seed.json
    python -m bench.ingest --workload seed --time-scales 0.5,1,2,4,8 --json ...   # a sweep

Fleet: 4 simulated vLLM replicas (speeds 1, 1, 0.775, 0.775) with the simulator's vLLM-like engine
(bench/sim/: `max_num_seqs` 256, KV-bounded admission, preemption, chunked prefill), run as a
separate process with a cold cache for every measurement. **No `max_in_flight` is configured**: the
platform's pool finds each replica's useful concurrency (`--cap N` configures a ceiling, reported as
`cap_configured`). `--time-scale X` (real seconds per simulated second, default 1: the modelled GPU)
fixes the scale; `--time-scales` sweeps it and the headline is the worst scale's. `--embedder remote`
(default) embeds through a simulated GPU embedding server (`/v1/embeddings` with a GPU-like cost), as a
deployment with a GPU embedder or TEI does; `--embedder local` embeds with MiniLM on this CPU.
`--cost-model legacy` runs the simulator's old cost model, to compare.

Headline (`wall_over_model_floor`): wall from submission to the last commit over the model floor
(`model_floor_s`, bench/model_floor.py: the simulator's cost model alone, ideal packing, never
through the platform's pool), for the platform and every peer alike. Beside it the reachable floor
(`oracle_floor_s`, `wall_over_oracle`; bench/oracle_floor.py: the simulator's own engines in simulated
time, every request at t=0, or at its file's drop for the stream, split by the best of several
oracles) and `platform_minus_floor_s` (what Dagster adds to the pool alone in the same round).

* floor: every header request of the corpus sent straight to the fleet through the platform's own
  request pool, all at once: a diagnostic of the pool, never a headline;
* platform: a backfill of every document partition launched through the webserver's GraphQL API
  (the UI's mutation), executed by `dagster-daemon` with the run queue and executor shipped in
  dagster.yaml: real parsing, headers from the fleet, embedding, commits to DuckDB. wall_s runs from
  the backfill's submission to the last commit (`launch_to_commit_s` and `submit_to_launch_s` apart);
* legacy: the same components in a document-by-document loop in this process;
* peer_llamaindex, peer_cookbook (bench/peers.py, the `bench` extra): what a user would run instead,
  with its own prompt and with the platform's requests (`peer_x:ours`), each behind a random draw over
  the replicas and behind a least-outstanding-requests balancer (`--balancers`), from the files to
  one bulk insert. JSON `peers`: per peer, prompt and balancer, the median over the rounds of each
  round's peer wall over its platform wall (`over_platform`) with a 95 % bootstrap interval.

Fleet figures: `utilization` (the engines' busy time over replicas x wall), `mean_batch_occupancy`
(mean running sequences while busy over max_num_seqs), `idle_while_pending_s` (fleet-seconds with
nothing running on a replica between the first and the last admission, weighted per replica),
`preemptions`, each replica's share of requests against its capacity share, its peak of open
requests (all clients) and its peak batch (`overshoot`: open over running, the requests all clients
held beyond what the engine ran).

Workloads (--workload; --documents N resizes those with a document count):

* seed, codebase, small: long PDFs, the codebase set, 200 short notes (platform = one backfill);
* skewed: 40 Markdown documents, one of them 15x the median chunk count and named to sort last;
* stream: 2,000 small-to-medium Markdown documents dropped into the inbox in --waves waves and
  ingested by the `new_documents` sensor of a real daemon, in as many runs as it makes, timed from
  the first drop; `run_boundaries` has the gap between consecutive runs' commits and the idle time
  inside it;
* shared-fleet: `--processes` `ctx ingest` processes at once (a part of the corpus each, Postgres
  store) on one fleet of unequal replicas (speeds 1, 1, 0.6, 0.4), each part >= 30 s of model-floor
  work (`fleet_work_s_per_process`); `work_share_error` compares engine work, not requests;
* kv-stress: long header prompts (4,000-token context) on replicas with a 12 GB card's KV pool
  (bench/ingest_workloads.py): admission stops at the KV bound and the engines preempt.

Every mode records the simulator's own lateness (`sim_max_lag_s`, `sim_lost_s`) and is marked
`sim_valid` against bench/sim_validity.py's bound; the summary lists `invalid_rounds`.
"""

# Where things live: this module is the command line; each mode is bench/ingest_mode_<mode>.py (floor,
# platform, legacy, peer, stream, shared_fleet), each workload bench/ingest_workload_<workload>.py (their
# registry: bench/ingest_workloads.py); the fleet and the floors bench/ingest_fleet.py, what the modes
# share beside it bench/ingest_harness.py, the rounds bench/ingest_rounds.py, the summaries and tables
# bench/ingest_summary.py, the run-wide options bench/ingest_options.py.

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench import ingest_options

# Re-exported: bench.ingest's names, as tests and other bench modules import them.
from bench.ingest_fleet import (  # noqa: F401
    EMBED_SAMPLE,
    EmbedServer,
    chunk_requests,
    corpus_bodies,
    corpus_chunks,
    corpus_halves,
    corpus_requests,
    embed_seconds,
    fleet_figures,
    fleet_work_per_process,
    header_fleet,
    header_source,
    idle_figures,
    idle_time,
    loaded_embedder,
    model_floor,
    oracle_figures,
    request_body,
    start_fleet,
    with_model_floor,
    with_utilization,
)
from bench.ingest_harness import (  # noqa: F401
    SENSOR_SELECTOR,
    START_SENSOR,
    BenchDagsterHome,
    bench_store,
    client_cpu_figure,
    fleet_settings,
    run_sensor_tick,
    start_postgres,
    start_sensor,
)
from bench.ingest_mode_floor import pool_limits, run_floor  # noqa: F401
from bench.ingest_mode_legacy import run_legacy  # noqa: F401
from bench.ingest_mode_peer import run_peer  # noqa: F401
from bench.ingest_mode_platform import run_platform  # noqa: F401
from bench.ingest_mode_shared_fleet import run_shared_fleet, wait_processes  # noqa: F401
from bench.ingest_mode_stream import (  # noqa: F401
    commit_times,
    drop_files,
    feed_inbox,
    run_boundaries,
    run_stream,
    sensor_runs,
    wave_batches,
)
from bench.ingest_options import (  # noqa: F401
    EMBED_DIM,
    EMBED_MODEL,
    REPO_ROOT,
    SPEEDS,
    BenchOptions,
)
from bench.ingest_rounds import (  # noqa: F401
    BASE_MODES,
    PEER_MODES,
    PLATFORM_RUNS,
    check_modes,
    one_round,
    parse_scales,
    peer_runs,
    run_scale,
)
from bench.ingest_summary import (  # noqa: F401
    WORKLOAD_FIGURES,
    max_share_error,
    median_interval,
    peer_rows,
    print_peers,
    print_table,
    summarize,
)
from bench.ingest_workloads import (  # noqa: F401
    WORKLOAD_OPTIONS,
    WORKLOAD_SPEEDS,
    WORKLOADS,
    build_codebase,
    build_kv_stress,
    build_seed,
    build_shared_fleet,
    build_shared_parts,
    build_skewed,
    build_small,
    build_stream,
    workload_speeds,
)
from bench.report import write_json
from bench.run_events import cpu_ms_per_event


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    modes, scales = configure(parser, args)
    speeds = workload_speeds(args.workload)
    if {"platform"} & set(modes):
        ingest_options.CPU_MS_PER_EVENT[ingest_options.OPTIONS.dagster_storage] = cpu_ms_per_event(ingest_options.OPTIONS.dagster_storage)

    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        result = measure(args, modes, scales, speeds, workdir)
        write_json(args.json, result)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="seed")
    parser.add_argument("--runs", type=int, default=1, help="rounds of every mode; medians are reported")
    parser.add_argument("--modes", default="floor,platform,legacy")
    parser.add_argument("--time-scale", type=float, default=None,
                        help="the fleet's time scale: real seconds per simulated second (default 1: the modelled GPU)")
    parser.add_argument("--time-scales", default=None,
                        help="sweep: comma-separated time scales, e.g. 0.5,1,2,4,8 (the headline is the worst)")
    parser.add_argument("--embedder", choices=("remote", "local"), default="remote",
                        help="remote: a simulated GPU embedding server (/v1/embeddings); local: MiniLM on this CPU")
    parser.add_argument("--cap", type=int, default=None,
                        help="configure max_in_flight per replica (default: none; the pool finds each replica's)")
    parser.add_argument("--max-num-seqs", type=int, default=BenchOptions().max_num_seqs, help="the simulator's batch size")
    parser.add_argument("--cost-model", choices=("vllm", "legacy"), default="vllm",
                        help="legacy: the simulator's old cost model, to compare")
    parser.add_argument("--engines", type=int, default=1, help="data-parallel engines per simulated replica")
    parser.add_argument("--metrics-lag-s", type=float, default=0.0, help="how old the simulator's gauges are")
    parser.add_argument("--processes", type=int, default=2, help="shared-fleet: ingest processes on one fleet")
    parser.add_argument("--balancers", default="random,least_busy", help="peers: what routes their requests")
    parser.add_argument("--documents", type=int, default=None, help="documents of the workload (not codebase)")
    parser.add_argument("--waves", type=int, default=8, help="stream: waves of files dropped into the inbox")
    parser.add_argument("--wave-interval", type=float, default=None,
                        help="stream: seconds between waves (default: every file in by half the model floor)")
    parser.add_argument("--ingest-slots", type=int, default=None,
                        help="override dagster.yaml's ctx_ingest pool limit (ingest runs at once) for platform/stream")
    parser.add_argument("--dagster-storage", choices=("sqlite", "postgres"), default="sqlite",
                        help="platform/stream: the Dagster instance's storage: the shipped dagster.yaml (SQLite) or "
                             "deploy/dagster.postgres.yaml on a local Postgres (a deployment's)")
    parser.add_argument("--daemon-first", action="store_true",
                        help="platform: start the daemon before the UI backfill, as a user meets it (its backfill "
                             "loop wakes every 30 s); default: right after, so its first iteration takes it")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    return parser


def configure(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[str], list[float]]:
    """The run-wide options (bench/ingest_options.py) from the arguments, and the modes and time scales
    they name (a wrong combination ends in the parser's error)."""
    ingest_options.OPTIONS = BenchOptions(cap=args.cap, max_num_seqs=args.max_num_seqs, cost_model=args.cost_model,
                           engines=args.engines, metrics_lag_s=args.metrics_lag_s, embedder=args.embedder,
                           ingest_slots=args.ingest_slots, processes=args.processes,
                           dagster_storage=args.dagster_storage, daemon_first=args.daemon_first,
                           **WORKLOAD_OPTIONS.get(args.workload, {}))
    from bench.peers import BALANCERS

    ingest_options.BALANCERS_RUN = tuple(b.strip() for b in args.balancers.split(",") if b.strip())
    if unknown := [b for b in ingest_options.BALANCERS_RUN if b not in BALANCERS]:
        parser.error(f"--balancers: unknown {unknown}; use {', '.join(BALANCERS)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if problem := check_modes(modes):
        parser.error(problem)
    if args.documents is not None and args.workload == "codebase":
        parser.error("--documents: the codebase workload is a fixed set")
    if args.time_scale is not None and args.time_scales is not None:
        parser.error("--time-scale and --time-scales: give one")
    try:
        scales = parse_scales(args.time_scales) if args.time_scales else [args.time_scale or 1.0]
    except ValueError as exc:
        parser.error(f"--time-scales: {exc}")
    return modes, scales


def measure(args: argparse.Namespace, modes: list[str], scales: list[float], speeds: tuple[float, ...],
            workdir: Path) -> dict:
    """The workload built under `workdir`, every round of every mode at every time scale (tables printed
    as they finish), and the result bench.ingest writes."""
    build = WORKLOADS[args.workload]
    paths = build(workdir / "corpus") if args.documents is None else build(workdir / "corpus", args.documents)
    docs, counter, settings = corpus_chunks(paths)
    # Timing MiniLM on this CPU is for the platform's local-embedder rows: the pool alone needs none.
    embed_s = embed_seconds(docs) if set(modes) - {"floor"} else None
    per_scale = [run_scale(workdir, scale, paths, docs, counter, settings, modes, args.workload, args.runs,
                           args.waves, args.wave_interval) for scale in scales]
    for entry in per_scale:
        print_table(args.workload, entry["time_scale"], embed_s, entry["rounds"], entry)
    worst = max(per_scale, key=lambda e: e.get("wall_over_model_floor") or 0)
    summary = dict(worst)
    if args.workload == "small":
        with_sensor_tick(summary, workdir, paths)
    if len(per_scale) > 1:
        print("sweep: " + ", ".join(f"{e['time_scale']}: {e.get('wall_over_model_floor')}" for e in per_scale)
              + f" (worst {worst['time_scale']})")
    return result_of(args, paths, docs, settings, embed_s, scales, speeds, per_scale, worst, summary)


def with_sensor_tick(summary: dict, workdir: Path, paths: list[Path]) -> None:
    """The small workload's extra: one `new_documents` tick over the corpus, and what a document costs
    beyond its share of fleet time."""
    summary["sensor_tick"] = run_sensor_tick(workdir, paths)
    if summary.get("wall_s") and summary.get("floor_s"):
        # What a document costs beyond its share of fleet time, and where it goes.
        summary["per_document_overhead_s"] = round((summary["wall_s"] - summary["floor_s"]) / len(paths), 3)
    print(f"sensor tick over {len(paths)} new files: {summary['sensor_tick']['tick_s']} s, "
          f"{summary['sensor_tick']['run_requests']} run request(s); per-document overhead "
          f"{summary.get('per_document_overhead_s')} s")


def result_of(args: argparse.Namespace, paths: list[Path], docs, settings, embed_s: float | None,
              scales: list[float], speeds: tuple[float, ...], per_scale: list[dict], worst: dict,
              summary: dict) -> dict:
    """What bench.ingest writes (`--json`): the workload, the run-wide options, the worst scale's
    headline, every scale and the summary."""
    from contextual_assets.settings import PlatformSettings

    return {
        "workload": args.workload, "documents": len(paths), "chunks": sum(len(d.chunks) for d in docs),
        "embedder": args.embedder, "embed_s_local_cpu": None if embed_s is None else round(embed_s, 2),
        **({"time_scales": scales} if len(scales) > 1 else {"time_scale": scales[0]}),
        "wall_over_model_floor": worst.get("wall_over_model_floor"),
        "utilization": worst.get("utilization"), "mean_batch_occupancy": worst.get("mean_batch_occupancy"),
        "idle_while_pending_s": worst.get("idle_while_pending_s"),
        "client_cpu_ms_per_request": client_cpu_figure(),
        "max_num_seqs": ingest_options.OPTIONS.max_num_seqs, "cap_configured": ingest_options.OPTIONS.cap, "cost_model": ingest_options.OPTIONS.cost_model,
        "engines": ingest_options.OPTIONS.engines, "metrics_lag_s": ingest_options.OPTIONS.metrics_lag_s,
        "kv_cache_tokens": ingest_options.OPTIONS.sim_spec().kv_cache_tokens or None, "context_tokens": settings.context_tokens,
        "speeds": list(speeds), "peers": worst.get("peers", []),
        "partitions_per_run": PlatformSettings.from_env().partitions_per_run,
        "ingest_slots": ingest_options.OPTIONS.ingest_slots, "dagster_storage": ingest_options.OPTIONS.dagster_storage,
        "daemon_first": ingest_options.OPTIONS.daemon_first,
        "processes": ingest_options.OPTIONS.processes if args.workload == "shared-fleet" else None, "machine": f"{os.cpu_count()} cores",
        "scales": [{k: v for k, v in e.items() if k != "timeline"} for e in per_scale],
        "summary": {k: v for k, v in summary.items() if k not in ("rounds", "peers")},
    }


if __name__ == "__main__":
    sys.exit(main())
