"""What bench.ingest's modes share beside the fleet (bench/ingest_fleet.py): the bench's Dagster home
(SQLite or Postgres), a pgserver Postgres, the platform's settings for the simulated fleet, the UI's
sensor toggle, the stores the modes write (sources registered, chunks committed), one timed sensor tick,
and the client's CPU figure. The modes themselves are bench/ingest_mode_*.py."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import ingest_options
from bench.ingest_options import REPO_ROOT
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


def register_sources(duckdb_path: Path, keys: list[str], paths: list[Path]) -> None:
    """A DuckDB store with each file registered as the source of its partition key."""
    from contextual_assets.ingest.inbox.tick_plan import file_sha256
    from contextual_assets.models import SourceRecord
    from contextual_assets.store import open_store

    store = open_store(None, duckdb_path)
    for key, path in zip(keys, paths):
        store.corpus.register_source(SourceRecord(doc_id=key, path=str(path), file_hash=file_sha256(path)))
    store.close()


def committed(database_url: str | None, duckdb_path: Path) -> tuple[int, int]:
    """(chunks, documents) committed to the store (Postgres at `database_url`, else DuckDB)."""
    from contextual_assets.store import open_store

    store = open_store(database_url, duckdb_path)
    try:
        return store.corpus.count_chunks(), len(store.corpus.documents())
    finally:
        store.close()


def fleet_settings(sim: SimFleet) -> dict[str, str]:
    """The platform's settings for the simulated fleet (and CTX_PARTITIONS_PER_RUN when given)."""
    return {"CTX_HEADER_SOURCE": "openai", "CTX_LLM_BASE_URLS": ",".join(sim.base_urls),
            "CTX_LLM_MAX_IN_FLIGHT": str(ingest_options.OPTIONS.cap or 0),
            **({"CTX_CONTEXT_TOKENS": str(ingest_options.OPTIONS.context_tokens)} if ingest_options.OPTIONS.context_tokens else {}),
            **{k: v for k, v in os.environ.items() if k == "CTX_PARTITIONS_PER_RUN"}}

# ---- the inbox sensor, turned on as the UI does it -----------------------------------------------

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


# ---- Postgres: the shared fleet's store, and the Dagster storage of `--dagster-storage postgres` ----

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


def stop_round(sampler, deployment, instance, dagster_home, sim, embed) -> None:
    """Everything a platform or stream round started, stopped (also after a failure)."""
    if sampler is not None:
        sampler.stop()
    deployment.stop_all()
    instance.dispose()
    dagster_home.stop()
    sim.stop()
    embed.stop()
