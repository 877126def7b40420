"""The instance settings shipped for Postgres (deploy/dagster.postgres.yaml) and for compose
(deploy/dagster.compose.yaml) keep the run queue and ingest pool of the default ones, and Dagster itself
reads them that way: its instance-config validation accepts the files, and an instance built from each
limits the ingest step's pool (`ctx_ingest`) to two slots, has the run launcher the file names (the
DockerRunLauncher for compose, with its network, variables and volumes) and run monitoring on. The Helm
values' run monitoring is rendered as the chart renders it and built into an instance with the
K8sRunLauncher. No Postgres, Docker or cluster is needed: the Postgres files are validated as they are,
and the instances are built from the same settings with the storage swapped for SQLite in a temporary
DAGSTER_HOME (tests/integration/test_dagster_postgres_storage.py runs the Postgres file unchanged against
a real Postgres)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from tests.support import REPO_ROOT

SHIPPED = REPO_ROOT / "dagster.yaml"
POSTGRES = REPO_ROOT / "deploy" / "dagster.postgres.yaml"
COMPOSE = REPO_ROOT / "deploy" / "dagster.compose.yaml"
HELM_VALUES = REPO_ROOT / "deploy" / "helm" / "values.yaml"
# The run launcher each file gives its instance (the shipped and Postgres files leave Dagster's default).
LAUNCHERS = {SHIPPED: "DefaultRunLauncher", POSTGRES: "DefaultRunLauncher", COMPOSE: "DockerRunLauncher"}
# The keys of dagsterDaemon.runMonitoring that the Dagster chart renders into the instance's run_monitoring
# block (helm/dagster/templates/configmap-instance.yaml), with the instance key each becomes; the chart's
# values schema accepts any key there, so an invented one would be silently dropped.
HELM_RUN_MONITORING_KEYS = {
    "enabled": "enabled",
    "startTimeoutSeconds": "start_timeout_seconds",
    "maxResumeRunAttempts": "max_resume_run_attempts",
    "pollIntervalSeconds": "poll_interval_seconds",
}

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


def _without_launcher(config: dict) -> dict:
    """An instance config less what differs between the compose and Postgres files by design: the run
    launcher and how often a dead run worker is resumed (only a container launcher can)."""
    config = {key: value for key, value in config.items() if key != "run_launcher"}
    config["run_monitoring"] = {k: v for k, v in config["run_monitoring"].items() if k != "max_resume_run_attempts"}
    return config


def helm_run_monitoring(values: dict) -> dict:
    """dagsterDaemon.runMonitoring as the chart renders it: enabled, start_timeout_seconds and
    poll_interval_seconds always, max_resume_run_attempts when set (configmap-instance.yaml)."""
    monitoring = values["dagsterDaemon"]["runMonitoring"]
    unknown = set(monitoring) - set(HELM_RUN_MONITORING_KEYS)
    assert not unknown, f"dagsterDaemon.runMonitoring keys the chart does not render: {sorted(unknown)}"
    return {HELM_RUN_MONITORING_KEYS[key]: value for key, value in monitoring.items()}


def _k8s_launcher(home: Path) -> dict:
    """The chart's K8sRunLauncher, configured offline: a kubeconfig file that names a cluster nobody calls."""
    kubeconfig = home / "kubeconfig"
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "offline",
        "clusters": [{"name": "offline", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "offline", "user": {"token": "unused"}}],
        "contexts": [{"name": "offline", "context": {"cluster": "offline", "user": "offline"}}],
    }))
    return {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": {
        "service_account_name": "ctx-dagster", "instance_config_map": "ctx-dagster-instance",
        "dagster_home": "/opt/dagster/dagster_home", "job_namespace": "ctx",
        "load_incluster_config": False, "kubeconfig_file": str(kubeconfig),
    }}


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
    # Run monitoring on; no resumes: the default launcher cannot resume a run (Dagster enforces it).
    assert validated["run_monitoring"]["enabled"] is True
    assert validated["run_monitoring"]["max_resume_run_attempts"] == 0


def test_compose_instance_is_the_postgres_instance_with_the_docker_run_launcher():
    postgres = yaml.safe_load(POSTGRES.read_text())
    compose = yaml.safe_load(COMPOSE.read_text())
    assert "run_launcher" not in postgres, "outside compose: Dagster's default launcher"
    assert compose["run_launcher"]["class"] == "DockerRunLauncher"
    assert _without_launcher(compose) == _without_launcher(postgres)


def test_dagster_validates_the_compose_instance_file_as_shipped(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_URL", "postgresql+psycopg2://ctx:unused@db.invalid:5432/dagster")
    validated = _validated_by_dagster(yaml.safe_load(COMPOSE.read_text()), tmp_path / "home")
    assert validated["run_launcher"]["module"] == "dagster_docker"
    assert validated["run_monitoring"]["enabled"] is True
    assert validated["concurrency"]["pools"]["default_limit"] == 2


def test_compose_instance_launches_each_run_in_a_container_it_monitors(tmp_path):
    from dagster_docker import DockerRunLauncher

    config = yaml.safe_load(COMPOSE.read_text())
    instance = _instance_with_sqlite_storage(config, tmp_path / "home")
    try:
        launcher = instance.run_launcher
        assert isinstance(launcher, DockerRunLauncher)
        launcher_config = config["run_launcher"]["config"]
        assert launcher.networks == [launcher_config["network"]]
        assert launcher.env_vars == launcher_config["env_vars"]
        assert launcher.container_kwargs["volumes"] == launcher_config["container_kwargs"]["volumes"]
        # Run monitoring can check a run's container and start a new one for a dead one.
        assert launcher.supports_check_run_worker_health and launcher.supports_resume_run
        assert instance.run_monitoring_enabled
        assert instance.get_settings("run_monitoring")["max_resume_run_attempts"] == 1
    finally:
        instance.dispose()


def test_helm_run_monitoring_is_accepted_by_dagster_with_the_k8s_run_launcher(tmp_path, monkeypatch):
    """The chart's instance: the Postgres file's settings with the K8sRunLauncher and the run_monitoring
    block the chart renders from deploy/helm/values.yaml, validated and built by Dagster."""
    from dagster_k8s import K8sRunLauncher

    monitoring = helm_run_monitoring(yaml.safe_load(HELM_VALUES.read_text()))
    compose = yaml.safe_load(COMPOSE.read_text())["run_monitoring"]
    assert monitoring["enabled"] is True
    assert {**monitoring, "start_timeout_seconds": None} == {**compose, "start_timeout_seconds": None}
    config = {**yaml.safe_load(POSTGRES.read_text()), "run_monitoring": monitoring,
              "run_launcher": _k8s_launcher(tmp_path)}
    monkeypatch.setenv("DAGSTER_PG_URL", "postgresql+psycopg2://ctx:unused@db.invalid:5432/dagster")
    assert _validated_by_dagster(config, tmp_path / "validated")["run_monitoring"] == monitoring
    instance = _instance_with_sqlite_storage(config, tmp_path / "home")
    try:
        assert isinstance(instance.run_launcher, K8sRunLauncher) and instance.run_launcher.supports_resume_run
        assert instance.run_monitoring_enabled
    finally:
        instance.dispose()


def test_run_monitoring_checks_catch_what_dagster_or_the_chart_would_not_apply(tmp_path, monkeypatch):
    """A resume count with a launcher that cannot resume: Dagster refuses the instance. A runMonitoring
    key the chart does not render: the check names it. A wrong type: Dagster's validation rejects it."""
    postgres = yaml.safe_load(POSTGRES.read_text())
    resuming = {**postgres, "run_monitoring": {**postgres["run_monitoring"], "max_resume_run_attempts": 1}}
    with pytest.raises(Exception, match="does not support resuming runs"):
        _instance_with_sqlite_storage(resuming, tmp_path / "resuming")

    values = yaml.safe_load(HELM_VALUES.read_text())
    values["dagsterDaemon"]["runMonitoring"]["cancelTimeoutSecond"] = 60
    with pytest.raises(AssertionError, match="cancelTimeoutSecond"):
        helm_run_monitoring(values)

    monkeypatch.setenv("DAGSTER_PG_URL", "postgresql+psycopg2://ctx:unused@db.invalid:5432/dagster")
    typo = {**postgres, "run_monitoring": {**postgres["run_monitoring"], "poll_interval_seconds": "often"}}
    with pytest.raises(Exception, match="poll_interval_seconds"):
        _validated_by_dagster(typo, tmp_path / "typo")


@pytest.mark.parametrize("path", [SHIPPED, POSTGRES, COMPOSE],
                         ids=["dagster.yaml", "deploy/dagster.postgres.yaml", "deploy/dagster.compose.yaml"])
def test_instance_limits_the_ingest_pool_and_queues_runs(path, tmp_path):
    pool = _ingest_pool()
    assert pool == "ctx_ingest"
    instance = _instance_with_sqlite_storage(yaml.safe_load(path.read_text()), tmp_path / "home")
    try:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert instance.run_coordinator.dequeue_interval_seconds == 1  # a freed ingest slot is taken within a second
        assert type(instance.run_launcher).__name__ == LAUNCHERS[path]
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
