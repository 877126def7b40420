"""deploy/dagster.postgres.yaml: Dagster's run, event-log and schedule storage on a real Postgres
(pgserver, unix socket), with an ingest run recorded there; and the chunk store on Postgres too."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from tests.support import REPO_ROOT

POSTGRES_YAML = REPO_ROOT / "deploy" / "dagster.postgres.yaml"

NOTE_MD = """# Storage runbook

## Postgres storage

Dagster keeps runs and events in Postgres when the instance config says so. The tag
`storage-drill-7731` names this note's only drill.

## Recovery

Restore the newest base backup, then replay WAL up to the failure timestamp.
"""


@pytest.fixture
def pg_instance(tmp_path, monkeypatch, pg_url):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(POSTGRES_YAML, home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    # dagster-postgres needs psycopg2; SQLAlchemy >= 2.1 maps a bare postgresql:// to psycopg 3.
    monkeypatch.setenv("DAGSTER_PG_URL", pg_url.replace("postgresql://", "postgresql+psycopg2://", 1))
    instance = dg.DagsterInstance.get()
    try:
        yield instance
    finally:
        instance.dispose()


def _source(tmp_path: Path) -> tuple[str, Path]:
    path = tmp_path / "docs" / "storage_runbook.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(NOTE_MD, encoding="utf-8")
    return "storage_runbook.md", path


def _ingest_one(settings, instance: dg.DagsterInstance, key: str, path: Path) -> dg.ExecuteInProcessResult:
    from contextual_assets.cli.ingest_runs import register_sources
    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import ChunkStoreResource

    store = ChunkStoreResource(database_url=settings.database_url, duckdb_path=settings.duckdb_path).open()
    register_sources(store, instance, [(key, path)])
    assert key in instance.get_dynamic_partitions("documents")
    defs = build_definitions(settings)
    return defs.resolve_job_def("ingest_documents").execute_in_process(partition_key=key, instance=instance)


def _assert_recorded(instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult, key: str) -> None:
    assert result.success
    runs = instance.get_runs()
    assert result.run_id in {run.run_id for run in runs}
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
    assert run.tags.get("dagster/partition") == key

    event = instance.get_latest_materialization_event(dg.AssetKey("chunk_embeddings"))
    assert event is not None and event.run_id == result.run_id
    materialization = event.asset_materialization
    assert materialization is not None and materialization.partition == key
    assert materialization.metadata["chunks"].value >= 1

    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("chunk_embeddings"), asset_partitions=[key]), limit=10
    ).records
    assert [r.run_id for r in records] == [result.run_id]
    assert instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings")) == {key}


def test_postgres_instance_records_ingest_run(pg_instance, settings_factory, tmp_path):
    from contextual_assets.store import open_store

    instance = pg_instance
    # The yaml really selected dagster-postgres for every storage, not the SQLite default.
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
    assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
    assert instance.get_runs() == []

    settings = settings_factory()  # chunks in DuckDB, Dagster state in Postgres
    key, path = _source(tmp_path)
    result = _ingest_one(settings, instance, key, path)
    _assert_recorded(instance, result, key)

    store = open_store(None, settings.duckdb_path)
    assert store.corpus.count_chunks(doc_id=key) >= 1
    assert [d.doc_id for d in store.corpus.documents()] == [key]


def test_postgres_instance_and_postgres_chunk_store(pg_instance, pg_server, settings_factory, tmp_path):
    """Dagster storage and the chunk store both on Postgres, in separate databases."""
    import uuid

    from contextual_assets.store import open_store

    instance = pg_instance
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg_server.psql(f"CREATE DATABASE {name};")
    chunks_url = pg_server.get_uri().replace("/postgres?", f"/{name}?", 1)

    settings = settings_factory(database_url=chunks_url)
    key, path = _source(tmp_path)
    result = _ingest_one(settings, instance, key, path)
    _assert_recorded(instance, result, key)

    event = instance.get_latest_materialization_event(dg.AssetKey("chunk_embeddings"))
    assert str(event.asset_materialization.metadata["store"].value).startswith("postgres")

    store = open_store(chunks_url, settings.duckdb_path)
    try:
        assert store.dialect == "postgres"
        assert store.corpus.count_chunks(doc_id=key) >= 1
        assert [d.doc_id for d in store.corpus.documents()] == [key]
        assert not Path(settings.duckdb_path).exists()
    finally:
        store.close()
