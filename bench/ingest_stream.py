"""bench.ingest's stream and shared-fleet modes: inbox feeding, run boundaries, and the bench's
Dagster home (sqlite or postgres)."""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

from bench import ingest_options
from bench.ingest_fleet import (
    WORKLOAD_SPEEDS,
    EmbedServer,
    corpus_halves,
    fleet_figures,
    idle_time,
    start_fleet,
)
from bench.ingest_options import REPO_ROOT, SPEEDS
from bench.ingest_platform import (
    BenchDagsterHome,
    fleet_settings,
    start_postgres,
    start_sensor,
)
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
    from contextual_assets.store import open_store

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
        if sampler is not None:
            sampler.stop()
        deployment.stop_all()
        instance.dispose()
        dagster_home.stop()
        sim.stop()
        embed.stop()
    store = open_store(None, duckdb_path)
    try:
        chunks, documents = store.corpus.count_chunks(), len(store.corpus.documents())
    finally:
        store.close()
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
        "documents": documents,
        "chunks": chunks,
        "chunks_expected": expected_chunks,
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


def wait_processes(procs: list, timeout_s: float) -> list[float]:
    """Wall-clock exit time of each process; all are killed (their groups) past the timeout."""
    import signal

    ends: list[float | None] = [None] * len(procs)
    deadline = time.monotonic() + timeout_s
    while any(e is None for e in ends):
        for i, proc in enumerate(procs):
            if ends[i] is None and proc.poll() is not None:
                ends[i] = time.time()
        if time.monotonic() > deadline:
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
            raise SystemExit(f"shared-fleet: ingest still running after {timeout_s} s")
        time.sleep(0.1)
    return [e for e in ends if e is not None]


def run_shared_fleet(workdir: Path, time_scale: float, paths: list[Path], expected_chunks: int,
                     speeds: tuple[float, ...] = WORKLOAD_SPEEDS["shared-fleet"], timeout_s: float = 1800) -> dict:
    """One `ctx ingest --json FOLDER` per half of the corpus, started together, each with its own
    CTX_HOME and DAGSTER_HOME (two machines) and one Postgres store, on one fleet. Each process caps
    its own requests at CAP per replica; the simulator counts what all of them have open."""
    import shutil
    import signal
    import subprocess

    import dagster as dg

    from bench.sim.deployment import deployment_env, seed_dagster_home
    from contextual_assets.fleet.metrics_timeline import MetricsSampler
    from contextual_assets.store import open_store

    root = workdir / f"shared-{time.monotonic_ns()}"
    folders = corpus_halves(paths)
    source_root = Path(os.path.commonpath([str(f) for f in folders])) if len(folders) > 1 else folders[0].parent
    server, url, pg_dir = start_postgres()
    sim = start_fleet(workdir, time_scale, speeds)
    embed = EmbedServer(workdir, time_scale)
    procs, logs, sampler = [], [], None
    try:
        open_store(url, root / "unused.duckdb").close()  # schema migrated once, before the clock starts
        envs = []
        for i in range(len(folders)):
            home = seed_dagster_home(root / f"p{i}" / "dagster_home")
            dg.DagsterInstance.from_config(str(home)).dispose()  # its storage created before the clock too
            envs.append(deployment_env(home, CTX_HOME=str(root / f"p{i}" / ".ctx"), CTX_INBOX=str(root / "inbox"),
                                       CTX_SOURCE_ROOT=str(source_root), DATABASE_URL=url, **fleet_settings(sim),
                                       **embed.env()))
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started = time.time()
        for i, (folder, env) in enumerate(zip(folders, envs)):
            out, err = root / f"p{i}" / "stdout.json", root / f"p{i}" / "stderr.log"
            logs.append((out, err))
            with out.open("wb") as stdout, err.open("wb") as stderr:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "contextual_assets.cli.main", "ingest", "--json", str(folder)],
                    cwd=REPO_ROOT, env=env, stdout=stdout, stderr=stderr, start_new_session=True))
        ends = wait_processes(procs, timeout_s)
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline, speeds, time_scale)
        store = open_store(url, root / "unused.duckdb")
        try:
            chunks, documents = store.corpus.count_chunks(), len(store.corpus.documents())
        finally:
            store.close()
    finally:
        if sampler is not None:
            sampler.stop()
        for proc in procs:
            if proc.poll() is None:  # only after an error: a finished bench waited for them
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        sim.stop()
        embed.stop()
        server.cleanup()
        shutil.rmtree(pg_dir, ignore_errors=True)
    outcomes = []
    for proc, (out, err) in zip(procs, logs):
        try:
            outcomes.append(json.loads(out.read_text() or "[]"))
        except json.JSONDecodeError:
            outcomes.append([])
        if proc.returncode != 0 or not all(o["success"] for o in outcomes[-1]):
            raise SystemExit(f"shared-fleet: ctx ingest rc {proc.returncode}\n{err.read_text()[-3000:]}")
    offset = time.time() - time.monotonic()
    first_request = figures["first_request_t"] + offset if figures["first_request_t"] is not None else None
    peaks = figures["peak_open_requests"]
    return {
        "wall_s": round(max(ends) - started, 2),
        "process_wall_s": [round(e - started, 2) for e in ends],
        "process_documents": [len(o) for o in outcomes],
        "startup_s": round(first_request - started, 2) if first_request else None,
        "tail_s": round(max(ends) - (figures["last_admission_t"] + offset), 2),
        "documents": documents,
        "chunks": chunks,
        "chunks_expected": expected_chunks,
        "speeds": list(speeds),
        "cap": ingest_options.OPTIONS.cap,
        "peak_over_cap": None if None in peaks or ingest_options.OPTIONS.cap is None else any(p > ingest_options.OPTIONS.cap for p in peaks),
        **figures,
    }


PLATFORM_RUNS = {"stream": run_stream, "shared-fleet": run_shared_fleet}  # others: run_platform
