"""bench.ingest's platform, legacy and peer modes, and the Dagster sensor helpers they share."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import ingest_options
from bench.ingest_fleet import (
    EmbedServer,
    chunk_requests,
    fleet_figures,
    header_fleet,
    header_source,
    start_fleet,
)
from bench.ingest_options import REPO_ROOT, SPEEDS
from bench.run_events import event_counts, first_request_after
from bench.sim import SimFleet


def client_cpu_figure() -> float | None:
    """The header client's CPU per request, from the committed `bench.client_cpu` result (its own
    benchmark: CPU time is measured there with nothing else in the process)."""
    path = REPO_ROOT / "bench" / "results" / "client_cpu.json"
    try:
        return json.loads(path.read_text()).get("client_cpu_ms_per_request")
    except (OSError, ValueError):
        return None


def bench_store(path: Path, docs, source_identity: dict[str, str], embedder, settings):
    """A DuckDB store with the corpus's sources and one index version registered: (store, version)."""
    from contextual_assets.index_version import index_fingerprint, index_version_of
    from contextual_assets.models import SourceRecord
    from contextual_assets.store import open_store

    store = open_store(None, path)
    fingerprint = index_fingerprint(source_identity, embedder.identity, settings.chunk_tokens)
    version = index_version_of(fingerprint)
    store.corpus.register_index_version(version, fingerprint)
    for doc in docs:
        store.corpus.register_source(SourceRecord(doc_id=doc.doc_id, path=doc.source_path, file_hash=doc.file_hash))
    return store, version


def run_legacy(workdir: Path, time_scale: float, docs, counter, settings, speeds: tuple[float, ...] = SPEEDS) -> dict:
    from contextual_assets.embedding import embed_chunks
    from contextual_assets.fleet.metrics_timeline import MetricsSampler
    from contextual_assets.headers.context import header_requests
    from contextual_assets.models import DocumentRecord, HeaderedChunk

    embed = EmbedServer(workdir, time_scale)
    embedder = embed.embedder()
    sim = start_fleet(workdir, time_scale, speeds)
    fleet = header_fleet(sim.base_urls)
    store = None
    try:
        store, version = bench_store(workdir / f"legacy-{time.monotonic_ns()}.duckdb", docs,
                                     header_source(fleet, counter).identity, embedder, settings)
        source = header_source(fleet, counter, store=store)
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started = time.monotonic()
        for doc in docs:
            # The legacy loop: one document at a time, its headers, then its embedding and commit.
            results = source.generate(header_requests(doc, counter, settings.context_tokens))
            headered = [HeaderedChunk(**chunk.model_dump(), header=result.header, header_source=result.source,
                                      header_model=result.model) for chunk, result in zip(doc.chunks, results)]
            embedded = embed_chunks(headered, embedder)
            store.corpus.replace_document(DocumentRecord(
                doc_id=doc.doc_id, index_version=version, source_path=doc.source_path, kind=doc.kind, title=doc.title,
                file_hash=doc.file_hash, n_chunks=len(embedded), updated_at=""), embedded)
        wall = time.monotonic() - started
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline, speeds, time_scale)
        chunks = store.corpus.count_chunks(version)
    finally:
        fleet.close()
        sim.stop()
        embed.stop()
        if store is not None:
            store.close()
    return {"wall_s": round(wall, 2), "chunks": chunks, **figures}


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


def run_platform(workdir: Path, time_scale: float, paths: list[Path], expected_chunks: int,
                 speeds: tuple[float, ...] = SPEEDS, timeout_s: float = 1800) -> dict:
    import dagster as dg

    from bench.sim.deployment import DagsterDeployment, deployment_env
    from contextual_assets.fleet.metrics_timeline import MetricsSampler
    from contextual_assets.ingest.inbox.document_keys import partition_key_for
    from contextual_assets.ingest.inbox.tick_plan import file_sha256
    from contextual_assets.models import SourceRecord
    from contextual_assets.store import open_store

    root = workdir / f"platform-{time.monotonic_ns()}"
    dagster_home = BenchDagsterHome(root / "dagster_home")
    home = dagster_home.home
    duckdb_path = root / "index.duckdb"
    sim = start_fleet(workdir, time_scale, speeds)
    embed = EmbedServer(workdir, time_scale)
    env = deployment_env(home, CTX_HOME=str(root / ".ctx"), CTX_INBOX=str(root / "inbox"),
                         CTX_DUCKDB_PATH=str(duckdb_path), **fleet_settings(sim), **embed.env(), **dagster_home.env)
    keys = [partition_key_for(p.name) for p in paths]
    store = open_store(None, duckdb_path)
    for key, path in zip(keys, paths):
        store.corpus.register_source(SourceRecord(doc_id=key, path=str(path), file_hash=file_sha256(path)))
    store.close()
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
        commits = [record.timestamp for record in instance.fetch_materializations(
            dg.AssetKey("chunk_embeddings"), limit=10000).records]
        materialized = instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings"))
        events = event_counts(instance, [run["runId"] for run in runs], len(keys))
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
        chunks = store.corpus.count_chunks()
        documents = len(store.corpus.documents())
    finally:
        store.close()
    if backfill["status"] not in ("COMPLETED", "COMPLETED_SUCCESS") or len(materialized) != len(keys):
        raise SystemExit(f"platform backfill {backfill['status']}: {len(materialized)} of {len(keys)} partitions\n"
                         f"{deployment.logs()[-5000:]}")
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
        "runs": len(runs),
        **events, "cpu_ms_per_event": ingest_options.CPU_MS_PER_EVENT.get(ingest_options.OPTIONS.dagster_storage),
        "documents": documents,
        "chunks": chunks,
        "chunks_expected": expected_chunks,
        **figures,
    }


def fleet_settings(sim: SimFleet) -> dict[str, str]:
    """The platform's settings for the simulated fleet (and CTX_PARTITIONS_PER_RUN when given)."""
    return {"CTX_HEADER_SOURCE": "openai", "CTX_LLM_BASE_URLS": ",".join(sim.base_urls),
            "CTX_LLM_MAX_IN_FLIGHT": str(ingest_options.OPTIONS.cap or 0),
            **({"CTX_CONTEXT_TOKENS": str(ingest_options.OPTIONS.context_tokens)} if ingest_options.OPTIONS.context_tokens else {}),
            **{k: v for k, v in os.environ.items() if k == "CTX_PARTITIONS_PER_RUN"}}


# ---- stream: the inbox sensor of a real daemon, files arriving in waves -----------------------------

START_SENSOR = """
mutation ($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { status } }
    ... on Error { message }
  }
}
"""
# workspace.yaml's code location, and Dagster's name for the repository of a module's Definitions.
SENSOR_SELECTOR = {"repositoryLocationName": "contextual_retrieval", "repositoryName": "__repository__",
                   "sensorName": "new_documents"}


def start_sensor(deployment) -> None:
    """The UI's sensor toggle: the `startSensor` mutation."""
    started = deployment.graphql(START_SENSOR, {"selector": SENSOR_SELECTOR})["startSensor"]
    if started["__typename"] != "Sensor" or started["sensorState"]["status"] != "RUNNING":
        raise SystemExit(f"new_documents sensor not started: {started}")


# ---- shared-fleet: two `ctx ingest` processes on one fleet, Postgres store -------------------------

def start_postgres():
    """A pgserver Postgres with pgvector and a fresh database, as bench/faults.py gets one:
    (server, database URL, data folder)."""
    import uuid

    import pgserver

    # Not under a 0700 directory: as root, pgserver runs Postgres as its own user.
    data = Path(tempfile.mkdtemp(prefix="bench-ingest-pg-"))
    server = pgserver.get_server(data, cleanup_mode="stop")
    server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
    name = f"ingest_{uuid.uuid4().hex[:12]}"
    server.psql(f"CREATE DATABASE {name};")
    return server, server.get_uri().replace("/postgres?", f"/{name}?", 1), data


class BenchDagsterHome:
    """The bench's DAGSTER_HOME: the shipped dagster.yaml (SQLite under the home), or with
    `--dagster-storage postgres` deploy/dagster.postgres.yaml on a pgserver Postgres of its own, as a
    deployment runs it (run and event-log storage in Postgres; the bench process reads it too)."""

    def __init__(self, home: Path):
        from bench.sim.deployment import seed_dagster_home

        self.server = None
        self.env: dict[str, str] = {}
        if ingest_options.OPTIONS.dagster_storage == "postgres":
            self.server, url, self.data = start_postgres()
            # dagster-postgres is written for psycopg2 (see deploy/dagster.postgres.yaml).
            self.env["DAGSTER_PG_URL"] = url.replace("postgresql://", "postgresql+psycopg2://", 1)
            os.environ.update(self.env)
        self.home = seed_dagster_home(home, ingest_slots=ingest_options.OPTIONS.ingest_slots, postgres=self.server is not None)

    def stop(self) -> None:
        if self.server is not None:
            self.server.cleanup()
            shutil.rmtree(self.data, ignore_errors=True)


def run_sensor_tick(workdir: Path, paths: list[Path]) -> dict:
    """One `new_documents` tick over an inbox holding the corpus (every file new), as the daemon
    evaluates it: how long the tick takes and how many runs it requests."""
    import shutil

    import dagster as dg

    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources
    from contextual_assets.settings import PlatformSettings

    root = workdir / f"sensor-{time.monotonic_ns()}"
    inbox = root / "inbox"
    inbox.mkdir(parents=True)
    for path in paths:
        shutil.copyfile(path, inbox / path.name)
    # Settle 0: the files were copied just now and the tick is timed at once.
    settings = PlatformSettings(home=str(root), inbox=str(inbox), duckdb_path=str(root / "index.duckdb"),
                                header_source="structural", inbox_settle_s=0)
    defs = build_definitions(settings)
    sensor = defs.resolve_sensor_def("new_documents")
    (root / "dagster_home").mkdir()
    instance = dg.DagsterInstance.local_temp(str(root / "dagster_home"))
    try:
        started = time.monotonic()
        with dg.build_sensor_context(instance_ref=instance.get_ref(), cursor=None, definitions=defs,
                                     resources={"store": build_resources(settings)["store"]}) as context:
            data = sensor.evaluate_tick(context)
        tick_s = time.monotonic() - started
    finally:
        instance.dispose()
    return {"documents": len(paths), "tick_s": round(tick_s, 2), "run_requests": len(data.run_requests)}
