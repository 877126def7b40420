"""The instance settings shipped for Postgres keep the run queue and ingest pool of the default ones."""

from __future__ import annotations

import yaml

from tests.support import REPO_ROOT


def test_postgres_instance_keeps_the_shipped_concurrency_settings():
    shipped = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text())
    postgres = yaml.safe_load((REPO_ROOT / "deploy" / "dagster.postgres.yaml").read_text())
    assert "run_queue" not in postgres, "the old run_queue block: use concurrency.runs"
    assert postgres["concurrency"] == shipped["concurrency"]
    assert postgres["concurrency"]["pools"]["default_limit"] == 1
    assert postgres["storage"]["postgres"]["postgres_url"] == {"env": "DAGSTER_PG_URL"}
