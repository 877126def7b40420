"""bench.ingest's platform mode (`--modes platform`, workloads other than stream and shared-fleet): a
backfill of every document partition launched through the webserver's GraphQL API (the UI's mutation),
executed by `dagster-daemon` with the run queue and executor shipped in dagster.yaml: real parsing,
headers from the fleet, embedding, commits to DuckDB. wall_s runs from the backfill's submission to the
last commit (`launch_to_commit_s` and `submit_to_launch_s` apart)."""

from __future__ import annotations

import time
from pathlib import Path

from bench import ingest_options
from bench.ingest_fleet import EmbedServer, fleet_figures, start_fleet
from bench.ingest_harness import (
    BenchDagsterHome,
    committed,
    fleet_settings,
    register_sources,
    stop_round,
)
from bench.ingest_options import SPEEDS
from bench.run_events import event_counts, first_request_after


def run_platform(workdir: Path, time_scale: float, paths: list[Path], expected_chunks: int,
                 speeds: tuple[float, ...] = SPEEDS, timeout_s: float = 1800) -> dict:
    import dagster as dg

    from bench.sim.deployment import DagsterDeployment, deployment_env
    from contextual_assets.fleet.metrics_timeline import MetricsSampler
    from contextual_assets.ingest.inbox.document_keys import partition_key_for

    root = workdir / f"platform-{time.monotonic_ns()}"
    dagster_home = BenchDagsterHome(root / "dagster_home")
    home = dagster_home.home
    duckdb_path = root / "index.duckdb"
    sim = start_fleet(workdir, time_scale, speeds)
    embed = EmbedServer(workdir, time_scale)
    env = deployment_env(home, CTX_HOME=str(root / ".ctx"), CTX_INBOX=str(root / "inbox"),
                         CTX_DUCKDB_PATH=str(duckdb_path), **fleet_settings(sim), **embed.env(), **dagster_home.env)
    keys = [partition_key_for(p.name) for p in paths]
    register_sources(duckdb_path, keys, paths)
    instance = dg.DagsterInstance.from_config(str(home))
    instance.add_dynamic_partitions("documents", keys)
    deployment = DagsterDeployment(root=root, env=env)
    sampler = None
    try:
        deployment.start_webserver()
        if ingest_options.OPTIONS.daemon_first:  # as a user meets it: the daemon has been running a while
            deployment.start_daemon()
            deployment.wait_daemons()
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        submitted = time.time()
        backfill_id = deployment.launch_backfill(keys, title=f"bench.ingest {len(keys)} documents")
        if not ingest_options.OPTIONS.daemon_first:
            # Started now, its first backfill iteration picks the backfill up at once (a running daemon's
            # backfill loop wakes every 30 s, Dagster's DEFAULT_DAEMON_INTERVAL_SECONDS: 0-30 s more).
            deployment.start_daemon()
        backfill = deployment.wait_backfill(backfill_id, timeout_s=timeout_s)
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline, speeds, time_scale)
        runs = backfill["runs"]
        launches, run_starts = run_event_times(instance, runs)
        commits = [record.timestamp for record in instance.fetch_materializations(
            dg.AssetKey("chunk_embeddings"), limit=10000).records]
        materialized = instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))
        events = event_counts(instance, [run["runId"] for run in runs], len(keys))
    finally:
        stop_round(sampler, deployment, instance, dagster_home, sim, embed)
    chunks, documents = committed(None, duckdb_path)
    if backfill["status"] not in ("COMPLETED", "COMPLETED_SUCCESS") or len(materialized) != len(keys):
        raise SystemExit(f"platform backfill {backfill['status']}: {len(materialized)} of {len(keys)} partitions\n"
                         f"{deployment.logs()[-5000:]}")
    return platform_result(submitted, launches, run_starts, commits, len(runs), events, figures,
                           documents, chunks, expected_chunks)


def run_event_times(instance, runs: list[dict]) -> tuple[list[float], list[float]]:
    """When each of the backfill's runs was launched (RUN_STARTING) and began (RUN_START), from the
    event log."""
    import dagster as dg

    launches, run_starts = [], []
    for run in runs:
        for record in instance.all_logs(run["runId"]):
            event = record.dagster_event
            if event is None:
                continue
            if event.event_type == dg.DagsterEventType.RUN_STARTING:
                launches.append(record.timestamp)
            elif event.event_type == dg.DagsterEventType.RUN_START:
                run_starts.append(record.timestamp)
    return launches, run_starts


def platform_result(submitted: float, launches: list[float], run_starts: list[float], commits: list[float],
                    runs: int, events: dict, figures: dict, documents: int, chunks: int,
                    expected_chunks: int) -> dict:
    """The platform mode's figures: its walls from the backfill's submission, launch and start, and the
    fleet's figures."""
    first_launch, last_commit = min(launches), max(commits)
    # Sampler times are monotonic; map the first request onto the wall clock of the event log.
    offset = time.time() - time.monotonic()
    first_request = figures["first_request_t"] + offset if figures["first_request_t"] is not None else None
    return {
        # From the backfill's submission (what the user waits for), as the peers are timed.
        "wall_s": round(last_commit - submitted, 2),
        "launch_to_commit_s": round(last_commit - first_launch, 2),
        "submit_to_launch_s": round(first_launch - submitted, 2),
        "startup_s": round(first_request - first_launch, 2) if first_request else None,
        "submit_to_first_request_s": first_request_after(first_request, submitted),
        "run_start_s": round(min(run_starts) - first_launch, 2) if run_starts else None,
        "tail_s": round(last_commit - (figures["last_admission_t"] + offset), 2),
        "runs": runs,
        **events, "cpu_ms_per_event": ingest_options.CPU_MS_PER_EVENT.get(ingest_options.OPTIONS.dagster_storage),
        "documents": documents,
        "chunks": chunks,
        "chunks_expected": expected_chunks,
        **figures,
    }
