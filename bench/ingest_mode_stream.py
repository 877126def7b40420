"""bench.ingest's stream mode (the platform mode of `--workload stream`): the corpus dropped into the
inbox in `--waves` waves and ingested by the `new_documents` sensor of a real daemon, in as many runs as
it makes, timed from the first drop; `run_boundaries` has the gap between consecutive runs' commits and
the idle time inside it."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from bench import ingest_options
from bench.ingest_fleet import EmbedServer, fleet_figures, idle_time, start_fleet
from bench.ingest_harness import (
    BenchDagsterHome,
    committed,
    fleet_settings,
    start_sensor,
    stop_round,
)
from bench.ingest_options import SPEEDS
from bench.run_events import event_counts, first_request_after


def wave_batches(paths: list[Path], waves: int) -> list[list[Path]]:
    """`paths` in order, cut into `waves` batches of (nearly) equal size."""
    waves = max(1, min(waves, len(paths)))
    bounds = [round(i * len(paths) / waves) for i in range(waves + 1)]
    return [paths[a:b] for a, b in itertools.pairwise(bounds)]


def drop_files(batch: list[Path], inbox: Path) -> None:
    """Copy under a hidden name (the sensor skips those), then rename: no half-written file is listed."""
    import shutil

    for path in batch:
        partial = inbox / f".{path.name}.part"
        shutil.copyfile(path, partial)
        os.replace(partial, inbox / path.name)


def feed_inbox(instance, deployment, batches: list[list[Path]], inbox: Path, interval_s: float,
               timeout_s: float) -> list[float]:
    """Drops batch i at i * interval_s, then waits until every file's partition of chunk_embeddings
    is materialized. Returns the wall-clock time of each drop. A failed run ends the bench (the
    sensor's retries would hide it)."""
    import dagster as dg

    expected = sum(len(b) for b in batches)
    start = time.monotonic()
    deadline = start + timeout_s
    dropped: list[float] = []
    while True:
        now = time.monotonic()
        while len(dropped) < len(batches) and now >= start + len(dropped) * interval_s:
            drop_files(batches[len(dropped)], inbox)
            dropped.append(time.time())
        if len(dropped) == len(batches) and \
                len(instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))) >= expected:
            return dropped
        for name, proc, _ in deployment.processes:
            if proc.poll() is not None:
                raise SystemExit(f"{name} exited with {proc.returncode}\n{deployment.logs()[-5000:]}")
        failed = instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]), limit=1)
        if failed:
            raise SystemExit(f"stream: run {failed[0].dagster_run.run_id} failed\n{deployment.logs()[-5000:]}")
        if now > deadline:
            raise SystemExit(f"stream: not every document committed after {timeout_s} s\n{deployment.logs()[-5000:]}")
        time.sleep(1.0)


def commit_times(instance) -> dict[str, list[float]]:
    """Run id -> wall-clock times of its chunk_embeddings materializations (one per document)."""
    import dagster as dg

    found: dict[str, list[float]] = {}
    records_filter = dg.AssetRecordsFilter(asset_key=dg.AssetKey("chunk_embeddings"))
    cursor = None
    while True:
        page = instance.fetch_materializations(records_filter, limit=1000, cursor=cursor)
        for record in page.records:
            found.setdefault(record.run_id, []).append(record.timestamp)
        if not page.has_more:
            return found
        cursor = page.cursor


def sensor_runs(instance) -> list[dict]:
    """The runs the sensor requested, in creation order: size, created, launched (its process
    started), started (the run began), first and last commit; wall-clock seconds."""
    import dagster as dg

    commits = commit_times(instance)
    records = instance.get_run_records(filters=dg.RunsFilter(tags={"ctx/trigger": "inbox"}),
                                       order_by="create_timestamp", ascending=True)
    runs = []
    for record in records:
        run = record.dagster_run
        events = {}
        for entry in instance.all_logs(run.run_id, of_type={dg.DagsterEventType.RUN_STARTING,
                                                              dg.DagsterEventType.RUN_START}):
            events.setdefault(entry.dagster_event.event_type, entry.timestamp)
        times = commits.get(run.run_id, [])
        runs.append({"run_id": run.run_id, "documents": int(run.tags.get("ctx/documents", "1")),
                     "created": record.create_timestamp.timestamp(),
                     "launched": events.get(dg.DagsterEventType.RUN_STARTING),
                     "started": events.get(dg.DagsterEventType.RUN_START),
                     "first_commit": min(times) if times else None, "last_commit": max(times) if times else None,
                     "commits": len(times)})
    return runs


def run_boundaries(spans: list[tuple[float, float]], timeline, offset: float, t0: float) -> list[dict]:
    """For consecutive runs (`spans`: each run's first and last commit, wall clock): the gap from one
    run's last commit to the next run's first, and the fleet's idle time inside it (`idle_time`;
    `offset` maps the timeline's monotonic clock onto the wall clock). `after_s`: the gap's start
    from t0."""
    out = []
    for (_, last), (first, _) in itertools.pairwise(sorted(spans)):
        idle = idle_time(timeline, last - offset, first - offset)["idle_while_pending_s"] if first > last else 0.0
        out.append({"after_s": round(last - t0, 2), "gap_s": round(first - last, 2), "idle_while_pending_s": idle})
    return out


def run_stream(workdir: Path, time_scale: float, paths: list[Path], expected_chunks: int,
               speeds: tuple[float, ...] = SPEEDS, waves: int = 8, wave_interval_s: float = 10.0,
               settle_s: float = 1.0, timeout_s: float = 3600) -> dict:
    """The corpus dropped into the inbox in `waves` waves, `wave_interval_s` apart, with webserver
    and daemon running and the `new_documents` sensor turned on as the UI does it; until every
    document is committed. wall_s: from the first run's launch to the last commit."""
    import dagster as dg

    from bench.sim.deployment import DagsterDeployment, deployment_env
    from contextual_assets.fleet.metrics_timeline import MetricsSampler

    root = workdir / f"stream-{time.monotonic_ns()}"
    dagster_home = BenchDagsterHome(root / "dagster_home")
    home = dagster_home.home
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    duckdb_path = root / "index.duckdb"
    sim = start_fleet(workdir, time_scale, speeds)
    embed = EmbedServer(workdir, time_scale)
    env = deployment_env(home, CTX_HOME=str(root / ".ctx"), CTX_INBOX=str(inbox), CTX_INBOX_SETTLE_S=str(settle_s),
                         CTX_DUCKDB_PATH=str(duckdb_path), **fleet_settings(sim), **embed.env(),
                         **dagster_home.env)
    instance = dg.DagsterInstance.from_config(str(home))
    deployment = DagsterDeployment(root=root, env=env)
    sampler = None
    try:
        deployment.start_webserver()
        start_sensor(deployment)
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        deployment.start_daemon()
        drops = feed_inbox(instance, deployment, wave_batches(paths, waves), inbox, wave_interval_s, timeout_s)
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline, speeds, time_scale)
        runs = sensor_runs(instance)
        events = event_counts(instance, [r["run_id"] for r in runs], len(paths))
    finally:
        stop_round(sampler, deployment, instance, dagster_home, sim, embed)
    chunks, documents = committed(None, duckdb_path)
    return stream_result(runs, drops, timeline, figures, events, wave_interval_s,
                         {"documents": documents, "chunks": chunks, "chunks_expected": expected_chunks})


def stream_result(runs: list[dict], drops: list[float], timeline, figures: dict, events: dict,
                  wave_interval_s: float, counts: dict) -> dict:
    """The stream's figures: its walls from the first drop and the first run's launch, each run's
    timeline from that launch (`sensor_runs`), the gaps between runs, and the fleet's figures. `counts`:
    documents, chunks and chunks_expected, in that order."""
    first_launch = min(r["launched"] for r in runs if r["launched"] is not None)
    last_commit = max(r["last_commit"] for r in runs if r["last_commit"] is not None)
    offset = time.time() - time.monotonic()  # sampler times are monotonic; event-log times wall-clock
    first_request = figures["first_request_t"] + offset if figures["first_request_t"] is not None else None
    boundaries = run_boundaries([(r["first_commit"], r["last_commit"]) for r in runs if r["commits"]],
                                timeline, offset, first_launch)

    def rel(t: float | None) -> float | None:
        return round(t - first_launch, 2) if t is not None else None

    return {
        # From the first drop into the inbox (the user's submission) to the last commit.
        "wall_s": round(last_commit - drops[0], 2),
        "launch_to_commit_s": round(last_commit - first_launch, 2),
        "submit_to_launch_s": round(first_launch - drops[0], 2),
        "startup_s": round(first_request - first_launch, 2) if first_request else None,
        # From the first drop (the sensor's interval and settle time included), and from the first run's
        # creation (the tick's run request) to the fleet's first request.
        "submit_to_first_request_s": first_request_after(first_request, drops[0]),
        "request_to_first_request_s": first_request_after(first_request, min(r["created"] for r in runs)),
        "run_start_s": rel(min((r["started"] for r in runs if r["started"] is not None), default=None)),
        **events, "cpu_ms_per_event": ingest_options.CPU_MS_PER_EVENT.get(ingest_options.OPTIONS.dagster_storage),
        "tail_s": round(last_commit - (figures["last_admission_t"] + offset), 2),
        "runs": len(runs),
        **counts,
        "waves": len(drops), "wave_interval_s": wave_interval_s, "drops_s": [rel(t) for t in drops],
        "run_sizes": [r["documents"] for r in runs],
        "run_timeline": [{"documents": r["documents"], "created_s": rel(r["created"]), "launched_s": rel(r["launched"]),
                          "started_s": rel(r["started"]), "first_commit_s": rel(r["first_commit"]),
                          "last_commit_s": rel(r["last_commit"])} for r in runs],
        "run_boundaries": boundaries,
        "boundary_gap_s": round(sum(max(0.0, b["gap_s"]) for b in boundaries), 2),
        "boundary_idle_s": sum(b["idle_while_pending_s"] for b in boundaries),
        **figures,
    }
