"""The instance settings shipped for Postgres keep the run queue and ingest pool of the default ones,
and Dagster itself reads them that way: its instance-config validation accepts the file, and an instance
built from it limits the ingest step's pool (`ctx_ingest`) to two slots. No Postgres is needed: the
Postgres file is validated as it is, and the instance is built from the same settings with the storage
swapped for SQLite in a temporary DAGSTER_HOME (tests/integration/test_dagster_postgres_storage.py runs
the file unchanged against a real Postgres)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from tests.support import REPO_ROOT

SHIPPED = REPO_ROOT / "dagster.yaml"
POSTGRES = REPO_ROOT / "deploy" / "dagster.postgres.yaml"

# An instance config in the shape this file had before: the run queue in the old top-level block and
# no `concurrency.pools`, which is what silently dropped the ctx_ingest limit.
OLD_STYLE = {
    "storage": {"postgres": {"postgres_url": {"env": "DAGSTER_PG_URL"}}},
    "run_queue": {
        "max_concurrent_runs": 4,
        "tag_concurrency_limits": [{"key": "ctx/kind", "value": "ingest", "limit": 4}],
    },
    "telemetry": {"enabled": False},
}


def _ingest_pool() -> str:
    """The pool the ingest step is in, read from the asset definition itself."""
    from contextual_assets.defs.ingest.assets import build_ingest_assets

    pool = build_ingest_assets(partitions_per_run=1).op.pool
    assert pool, "the ingest step is not in a concurrency pool"
    return pool


def _validated_by_dagster(config: dict, home: Path) -> dict:
    """Dagster's own instance-config validation (schema and the run_queue / concurrency rules), without
    building the storage, so a Postgres URL needs no server. It is the function DagsterInstance.get()
    calls first; dagster has no public name for it."""
    from dagster._core.instance.config import dagster_instance_config

    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    validated, _custom_class = dagster_instance_config(str(home))
    return validated


def _instance_with_sqlite_storage(config: dict, home: Path) -> dg.DagsterInstance:
    """A real instance (public API) from `config` with only its storage swapped for SQLite."""
    config = {**config, "storage": {"sqlite": {"base_dir": str(home / "storage")}}}
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return dg.DagsterInstance.from_config(str(home))


def _ingest_pool_limit(instance: dg.DagsterInstance, pool: str) -> int | None:
    """The slot limit Dagster applies to `pool` on this instance (the default limit unless one was set)."""
    storage = instance.event_log_storage
    storage.initialize_concurrency_limit_to_default(pool)
    return storage.get_concurrency_info(pool).limit


def test_postgres_instance_keeps_the_shipped_concurrency_settings():
    shipped = yaml.safe_load(SHIPPED.read_text())
    postgres = yaml.safe_load(POSTGRES.read_text())
    assert "run_queue" not in postgres, "the old run_queue block: use concurrency.runs"
    assert postgres["concurrency"] == shipped["concurrency"]
    assert postgres["concurrency"]["pools"]["default_limit"] == 2
    assert postgres["storage"]["postgres"]["postgres_url"] == {"env": "DAGSTER_PG_URL"}


def test_dagster_validates_the_postgres_instance_file_as_shipped(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_URL", "postgresql+psycopg2://ctx:unused@db.invalid:5432/dagster")
    validated = _validated_by_dagster(yaml.safe_load(POSTGRES.read_text()), tmp_path / "home")
    assert "run_queue" not in validated
    assert validated["storage"]["postgres"]["postgres_url"] == {"env": "DAGSTER_PG_URL"}
    assert validated["concurrency"]["pools"]["default_limit"] == 2
    assert validated["concurrency"]["pools"]["granularity"] == "run"


@pytest.mark.parametrize("path", [SHIPPED, POSTGRES], ids=["dagster.yaml", "deploy/dagster.postgres.yaml"])
def test_instance_limits_the_ingest_pool_and_queues_runs(path, tmp_path):
    pool = _ingest_pool()
    assert pool == "ctx_ingest"
    instance = _instance_with_sqlite_storage(yaml.safe_load(path.read_text()), tmp_path / "home")
    try:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert instance.run_coordinator.dequeue_interval_seconds == 1  # a freed ingest slot is taken within a second
        assert type(instance.run_launcher).__name__ == "DefaultRunLauncher"
        concurrency = instance.get_concurrency_config()
        assert concurrency.pool_config.default_pool_limit == 2
        assert concurrency.pool_config.pool_granularity.value == "run"
        assert concurrency.run_queue_config.max_concurrent_runs == 4
        assert concurrency.run_queue_config.tag_concurrency_limits == [
            {"key": "ctx/kind", "value": "ingest", "limit": 4}
        ]
        assert _ingest_pool_limit(instance, pool) == 2
    finally:
        instance.dispose()


def test_the_old_run_queue_block_loses_the_ingest_pool_limit(tmp_path, monkeypatch):
    """The failure the checks above guard against: Dagster accepts the old shape, and the pool is then
    unlimited; put beside `concurrency.pools`, Dagster rejects the old block."""
    monkeypatch.setenv("DAGSTER_PG_URL", "postgresql+psycopg2://ctx:unused@db.invalid:5432/dagster")
    validated = _validated_by_dagster(OLD_STYLE, tmp_path / "validated")
    assert "run_queue" in validated and "concurrency" not in validated

    instance = _instance_with_sqlite_storage(OLD_STYLE, tmp_path / "old")
    try:
        assert instance.get_concurrency_config().pool_config.default_pool_limit is None
        assert _ingest_pool_limit(instance, _ingest_pool()) is None
    finally:
        instance.dispose()

    both = {**OLD_STYLE, "concurrency": yaml.safe_load(POSTGRES.read_text())["concurrency"]}
    with pytest.raises(Exception, match="run_queue"):
        _validated_by_dagster(both, tmp_path / "both")
