"""bench.ingest's shared-fleet mode (the platform mode of `--workload shared-fleet`): `--processes`
`ctx ingest` processes at once (a part of the corpus each, Postgres store) on one fleet of unequal
replicas; `work_share_error` compares engine work, not requests."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from bench import ingest_options
from bench.ingest_fleet import EmbedServer, corpus_halves, fleet_figures, start_fleet
from bench.ingest_harness import committed, fleet_settings, start_postgres
from bench.ingest_options import REPO_ROOT
from bench.ingest_workloads import WORKLOAD_SPEEDS


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
        envs = process_envs(root, len(folders), source_root, url, sim, embed)
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started = time.time()
        start_ingests(root, folders, envs, procs, logs)
        ends = wait_processes(procs, timeout_s)
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline, speeds, time_scale)
        chunks, documents = committed(url, root / "unused.duckdb")
    finally:
        if sampler is not None:
            sampler.stop()
        kill_unfinished(procs)
        sim.stop()
        embed.stop()
        server.cleanup()
        shutil.rmtree(pg_dir, ignore_errors=True)
    outcomes = process_outcomes(procs, logs)
    return shared_fleet_result(started, ends, outcomes, figures, speeds,
                               {"documents": documents, "chunks": chunks, "chunks_expected": expected_chunks})


def process_envs(root: Path, processes: int, source_root: Path, url: str, sim, embed) -> list[dict[str, str]]:
    """Each process's environment: its own CTX_HOME and DAGSTER_HOME (its storage created now, before
    the clock), the one inbox root, the Postgres store and the fleet."""
    import dagster as dg

    from bench.sim.deployment import deployment_env, seed_dagster_home

    envs = []
    for i in range(processes):
        home = seed_dagster_home(root / f"p{i}" / "dagster_home")
        dg.DagsterInstance.from_config(str(home)).dispose()  # its storage created before the clock too
        envs.append(deployment_env(home, CTX_HOME=str(root / f"p{i}" / ".ctx"), CTX_INBOX=str(root / "inbox"),
                                   CTX_SOURCE_ROOT=str(source_root), DATABASE_URL=url, **fleet_settings(sim),
                                   **embed.env()))
    return envs


def start_ingests(root: Path, folders: list[Path], envs: list[dict[str, str]], procs: list, logs: list) -> None:
    """One `ctx ingest --json FOLDER` per folder, in its own session; each process is appended to
    `procs` and its (stdout, stderr) files to `logs` as it starts (a failure later still stops those)."""
    import subprocess

    for i, (folder, env) in enumerate(zip(folders, envs)):
        out, err = root / f"p{i}" / "stdout.json", root / f"p{i}" / "stderr.log"
        logs.append((out, err))
        with out.open("wb") as stdout, err.open("wb") as stderr:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "contextual_assets.cli.main", "ingest", "--json", str(folder)],
                cwd=REPO_ROOT, env=env, stdout=stdout, stderr=stderr, start_new_session=True))


def kill_unfinished(procs: list) -> None:
    """Kill (their groups) the processes still running: only after an error, a finished bench waited
    for them."""
    import signal

    for proc in procs:
        if proc.poll() is None:  # only after an error: a finished bench waited for them
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def process_outcomes(procs: list, logs: list) -> list[list]:
    """Each process's `ctx ingest --json` outcomes; a process that failed, or failed a document, ends
    the bench."""
    outcomes = []
    for proc, (out, err) in zip(procs, logs):
        try:
            outcomes.append(json.loads(out.read_text() or "[]"))
        except json.JSONDecodeError:
            outcomes.append([])
        if proc.returncode != 0 or not all(o["success"] for o in outcomes[-1]):
            raise SystemExit(f"shared-fleet: ctx ingest rc {proc.returncode}\n{err.read_text()[-3000:]}")
    return outcomes


def shared_fleet_result(started: float, ends: list[float], outcomes: list[list], figures: dict,
                        speeds: tuple[float, ...], counts: dict) -> dict:
    """The shared fleet's figures: the wall to the last process's exit, each process's, and whether any
    replica had more open requests than one process's cap. `counts`: documents, chunks and
    chunks_expected, in that order."""
    offset = time.time() - time.monotonic()
    first_request = figures["first_request_t"] + offset if figures["first_request_t"] is not None else None
    peaks = figures["peak_open_requests"]
    cap = ingest_options.OPTIONS.cap
    return {
        "wall_s": round(max(ends) - started, 2),
        "process_wall_s": [round(e - started, 2) for e in ends],
        "process_documents": [len(o) for o in outcomes],
        "startup_s": round(first_request - started, 2) if first_request else None,
        "tail_s": round(max(ends) - (figures["last_admission_t"] + offset), 2),
        **counts,
        "speeds": list(speeds),
        "cap": cap,
        "peak_over_cap": None if None in peaks or cap is None else any(p > cap for p in peaks),
        **figures,
    }
