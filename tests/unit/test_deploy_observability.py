"""deploy/: migrations once, the search service's read-only role, Kubernetes as shipped (inbox, step logs,
resources, securityContext, disruption budget), observability (monitors, dashboard, JSON logs) and
reproducible images (constraints, pinned bases, immutable tags), checked offline like
tests/unit/test_deploy_files.py, whose helpers it uses. Each check is also run on a broken input.

- Migrations: compose's one-shot `migrate` service runs `ctx migrate` and every platform process waits for
  it to complete; the Helm hook chart deploy/helm/ctx-migrate runs `ctx migrate` as a pre-install,
  pre-upgrade Job from the code location's image, as the owner role.
- The read-only role: deploy/postgres-search-role.sql run for real (psql against pgserver's Postgres) as
  the owner: after the store's real migrations, ctx_search reads every table and can write none; compose
  and Kubernetes give the search service that role's URL, never the owner's.
- Kubernetes: every Dagster service, the run pods and search request resources and run non-root with a
  read-only root filesystem and no capabilities; the inbox is an object store or a PVC (the fail-fast
  check-inbox script run for real, and deploy/helm/values.ctx.schema.json); the run pods' resources are
  what dagster-k8s makes of the launcher's and the user deployment's; step logs go to S3 through
  dagster-aws (Dagster's own config validation of S3ComputeLogManager).
- Observability: the PodMonitors select the search and vLLM pods on their `http` port at /metrics; the
  dashboard parses and every metric it queries is one the code defines; JSON logs everywhere.
- Images: deploy/constraints.txt pins, at the installed version, every package the image's
  `pip install -e ".[s3,k8s,docker]"` installs, and the Dockerfile uses it; base images and tags are
  exact versions, never `latest`.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import jsonschema
import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import REPO_ROOT
from tests.unit.test_deploy_files import (
    COMPOSE_INSTANCE,
    DEPLOY,
    DOCKERFILE,
    HELM,
    README,
    SEARCH_SERVICE,
    VLLM_MANIFEST,
    _user_deployment,
    compose,
    dockerfile_instructions,
    env_example,
    helm_values,
    k8s_errors,
    pyproject,
)

MIGRATE_CHART = HELM / "ctx-migrate"
MIGRATE_JOB = MIGRATE_CHART / "templates" / "migrate-job.yaml"
SEARCH_ROLE_SQL = DEPLOY / "postgres-search-role.sql"
CTX_SCHEMA = HELM / "values.ctx.schema.json"
MONITORS = DEPLOY / "monitoring" / "monitors.yaml"
DASHBOARD = DEPLOY / "monitoring" / "ctx-dashboard.json"
CONSTRAINTS = DEPLOY / "constraints.txt"
SEARCH_ROLE = "ctx_search"
# The services of compose.yaml that run platform code against the store (all but postgres, vLLM, the proxy
# and the two one-shots).
PLATFORM_SERVICES = ("code-server", "webserver", "daemon", "search")


# ==================================================================================================
# migrations, once


def compose_migrate_problems(document: dict) -> list[str]:
    services = document["services"]
    migrate = services.get("migrate")
    if migrate is None:
        return ["no migrate service"]
    problems = []
    if migrate.get("command") != ["ctx", "migrate"]:
        problems.append(f"migrate runs {migrate.get('command')}, not `ctx migrate`")
    if migrate.get("restart") != "no":
        problems.append("migrate restarts: a one-shot must not")
    owner = urlparse(services["code-server"]["environment"]["DATABASE_URL"])
    url = urlparse(migrate.get("environment", {}).get("DATABASE_URL", ""))
    if (url.username, url.hostname, url.path) != (owner.username, owner.hostname, owner.path):
        problems.append("migrate does not connect as the owner role to the store the code server uses")
    if migrate.get("depends_on", {}).get("postgres", {}).get("condition") != "service_healthy":
        problems.append("migrate does not wait for postgres")
    for name in PLATFORM_SERVICES:
        condition = services[name].get("depends_on", {}).get("migrate", {}).get("condition")
        if condition != "service_completed_successfully":
            problems.append(f"{name} does not wait for migrate to complete")
    return problems


def test_compose_migrates_once_before_every_platform_process():
    assert compose_migrate_problems(compose()) == []


def test_compose_migrate_check_catches_mistakes():
    document = compose()
    migrate = document["services"]["migrate"]
    migrate["command"] = ["ctx", "migrate", "--check"]
    migrate["restart"] = "unless-stopped"
    document["services"]["search"]["depends_on"].pop("migrate")
    document["services"]["daemon"]["depends_on"]["migrate"] = {"condition": "service_started"}
    problems = compose_migrate_problems(document)
    for fragment in ("not `ctx migrate`", "migrate restarts", "search does not wait", "daemon does not wait"):
        assert any(fragment in p for p in problems), (fragment, problems)
    document = compose()
    del document["services"]["migrate"]
    assert compose_migrate_problems(document) == ["no migrate service"]


def test_ctx_migrate_is_a_command_of_the_installed_cli():
    result = subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "ctx"), "migrate", "--help"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "--check" in result.stdout


def migrate_hook_problems(job: dict, chart: dict, values: dict) -> list[str]:
    problems = []
    if chart.get("apiVersion") != "v2" or not chart.get("version"):
        problems.append("Chart.yaml is not a Helm 3 chart")
    if job.get("kind") != "Job":
        return problems + [f"the template is a {job.get('kind')}, not a Job"]
    hooks = set(job["metadata"].get("annotations", {}).get("helm.sh/hook", "").split(","))
    if not {"pre-install", "pre-upgrade"} <= hooks:
        problems.append(f"helm.sh/hook is {sorted(hooks)}: not pre-install and pre-upgrade")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    if (container.get("command") or []) + (container.get("args") or []) != ["ctx", "migrate"]:
        problems.append("the Job does not run `ctx migrate`")
    image = _user_deployment(values)["image"]
    if container["image"] != f"{image['repository']}:{image['tag']}":
        problems.append(f"the Job runs {container['image']}, not the code location's image")
    env = {e["name"]: e for e in container.get("env", [])}
    if env.get("DATABASE_URL", {}).get("valueFrom", {}).get("secretKeyRef") != {"name": "ctx-secrets", "key": "DATABASE_URL"}:
        problems.append("the Job does not migrate as the owner (ctx-secrets' DATABASE_URL)")
    if pod.get("restartPolicy") != "Never":
        problems.append("restartPolicy is not Never")
    return problems


def test_helm_hook_job_runs_ctx_migrate_before_install_and_upgrade():
    job = yaml.safe_load(MIGRATE_JOB.read_text())
    chart = yaml.safe_load((MIGRATE_CHART / "Chart.yaml").read_text())
    assert "{{" not in MIGRATE_JOB.read_text(), "plain YAML: validated as it is"
    assert migrate_hook_problems(job, chart, helm_values()) == []
    assert k8s_errors(job) == []


def test_helm_hook_check_catches_mistakes():
    job = yaml.safe_load(MIGRATE_JOB.read_text())
    chart = yaml.safe_load((MIGRATE_CHART / "Chart.yaml").read_text())
    broken = copy.deepcopy(job)
    broken["metadata"]["annotations"]["helm.sh/hook"] = "post-install"
    container = broken["spec"]["template"]["spec"]["containers"][0]
    container["args"] = ["ctx", "status"]
    container["image"] = "registry.example.com/ctx-platform:0.0.9"
    container["env"] = [e for e in container["env"] if e["name"] != "DATABASE_URL"]
    problems = migrate_hook_problems(broken, {**chart, "apiVersion": "v1"}, helm_values())
    for fragment in ("not pre-install and pre-upgrade", "does not run `ctx migrate`", "not the code location's image",
                     "as the owner", "not a Helm 3 chart"):
        assert any(fragment in p for p in problems), (fragment, problems)


# ==================================================================================================
# the search service's read-only role


def search_url_problems(document: dict, search_manifest: list[dict]) -> list[str]:
    """compose's search connects as ctx_search (and the others as the owner), the compose Postgres creates
    the role on first start, and the Kubernetes search reads its URL from its own Secret."""
    problems = []
    services = document["services"]
    url = urlparse(services["search"]["environment"]["DATABASE_URL"])
    if url.username != SEARCH_ROLE:
        problems.append(f"compose's search connects as {url.username}, not {SEARCH_ROLE}")
    for name in ("migrate", "code-server", "daemon"):
        if urlparse(services[name]["environment"]["DATABASE_URL"]).username == SEARCH_ROLE:
            problems.append(f"{name} connects as the read-only role")
    postgres = services["postgres"]
    inits = {c["target"]: document["configs"][c["source"]]["file"] for c in postgres.get("configs", [])}
    if not any(t.startswith("/docker-entrypoint-initdb.d/") and (DEPLOY / f).resolve() == SEARCH_ROLE_SQL.resolve()
               for t, f in inits.items()):
        problems.append("compose's postgres does not run postgres-search-role.sql on first start")
    if "search_db_password" not in postgres.get("secrets", []):
        problems.append("compose's postgres lacks the search_db_password secret the role file reads")
    deployment = next(d for d in search_manifest if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    ref = env.get("DATABASE_URL", {}).get("valueFrom", {}).get("secretKeyRef", {})
    if ref.get("name") in (None, "ctx-secrets"):
        problems.append("the Kubernetes search reads DATABASE_URL from ctx-secrets (the owner's)")
    if any(source.get("secretRef", {}).get("name") == "ctx-secrets" for source in container.get("envFrom", [])):
        problems.append("the Kubernetes search takes all of ctx-secrets (the owner's DATABASE_URL with it)")
    return problems


def test_search_connects_as_the_read_only_role():
    assert search_url_problems(compose(), list(yaml.safe_load_all(SEARCH_SERVICE.read_text()))) == []
    assert env_example()["CTX_SEARCH_DB_PASSWORD"] == "", "a required secret, empty in the template"


def test_search_role_check_catches_the_owner_url():
    document = compose()
    document["services"]["search"]["environment"]["DATABASE_URL"] = document["services"]["code-server"]["environment"]["DATABASE_URL"]
    document["services"]["postgres"]["configs"] = document["services"]["postgres"]["configs"][:1]
    manifest = list(yaml.safe_load_all(SEARCH_SERVICE.read_text()))
    container = manifest[0]["spec"]["template"]["spec"]["containers"][0]
    for e in container["env"]:
        if e["name"] == "DATABASE_URL":
            e["valueFrom"]["secretKeyRef"] = {"name": "ctx-secrets", "key": "DATABASE_URL"}
    container["envFrom"] = [{"secretRef": {"name": "ctx-secrets"}}]
    problems = search_url_problems(document, manifest)
    for fragment in ("connects as ctx", "does not run postgres-search-role.sql", "from ctx-secrets", "takes all of"):
        assert any(fragment in p for p in problems), (fragment, problems)


def _psql() -> str:
    import pgserver

    return str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql")


def _run_role_file(url: str, password: str, sql_file: Path) -> subprocess.CompletedProcess:
    return subprocess.run([_psql(), url, "-X", "-v", "ON_ERROR_STOP=1", "-v", f"search_password={password}",
                           "-f", str(sql_file)], capture_output=True, text=True, timeout=120, check=False)


def _as(url: str, user: str, password: str = "") -> str:
    parsed = urlparse(url)
    return parsed._replace(netloc=f"{user}:{password}@{parsed.hostname or ''}").geturl()


@pytest.fixture
def owned_store(pg_server):
    """A database owned by a login role `ctx_owner_<id>` (as the compose POSTGRES_USER, or the owner of a
    managed database), with the search role file run as that owner before the store's migrations."""
    import uuid

    suffix = uuid.uuid4().hex[:8]
    owner, database = f"ctx_owner_{suffix}", f"ctx_{suffix}"
    # The owner may create roles (compose's POSTGRES_USER is a superuser; a managed database's admin user
    # has CREATEROLE). ctx_search is cluster-wide: made by an earlier test's owner, this owner is given
    # admin of it as its creator would have.
    pg_server.psql(f"CREATE ROLE {owner} LOGIN CREATEROLE;")
    pg_server.psql("DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'ctx_search') THEN "
                   f"GRANT ctx_search TO {owner} WITH ADMIN TRUE, INHERIT FALSE, SET FALSE; END IF; END $$;")
    pg_server.psql(f"CREATE DATABASE {database} OWNER {owner};")
    pg_server.psql(f"\\c {database}\nCREATE EXTENSION IF NOT EXISTS vector;")
    base = pg_server.get_uri().replace("/postgres?", f"/{database}?", 1)
    return _as(base, owner), base


def test_the_search_role_reads_every_table_the_migrations_create_and_writes_none(pg_server, owned_store, tmp_path):
    import psycopg

    from contextual_assets.store import connect_store

    owner_url, base = owned_store
    result = _run_role_file(owner_url, "s3cret", SEARCH_ROLE_SQL)
    assert result.returncode == 0, result.stderr
    again = _run_role_file(owner_url, "s3cret", SEARCH_ROLE_SQL)  # idempotent: a re-run, a rotation
    assert again.returncode == 0, again.stderr

    # The migrations, as `ctx migrate` runs them: as the owner, after the role exists.
    store = connect_store(owner_url, str(tmp_path / "unused.duckdb"), pool_size=1)
    try:
        store.apply_migrations()
    finally:
        store.close()

    search_url = _as(base, SEARCH_ROLE, "s3cret")
    with psycopg.connect(search_url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()]
        assert "ctx_chunks" in tables and "ctx_schema_migrations" in tables
        for table in tables:
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # every table readable
        for statement in ("INSERT INTO ctx_sources VALUES ('d', 'p', 'h', 'now')", "DELETE FROM ctx_chunks",
                          "CREATE TABLE ctx_intruder (x int)", "DROP TABLE ctx_documents"):
            with pytest.raises(psycopg.Error):
                conn.execute(statement)
        assert conn.execute("SHOW default_transaction_read_only").fetchone()[0] == "on"
    # The search service's own startup check reads the schema version as that role.
    store = connect_store(search_url, str(tmp_path / "unused.duckdb"), pool_size=1)
    try:
        store.check_schema()
    finally:
        store.close()


def test_the_search_role_check_catches_a_role_without_default_privileges(pg_server, owned_store, tmp_path):
    """Without ALTER DEFAULT PRIVILEGES the role could read only the tables that existed when it was made:
    on a fresh volume, none of the store's."""
    import psycopg

    from contextual_assets.store import connect_store

    owner_url, base = owned_store
    stripped = tmp_path / "role.sql"
    stripped.write_text("\n".join(line for line in SEARCH_ROLE_SQL.read_text().splitlines()
                                  if not line.startswith("ALTER DEFAULT PRIVILEGES")))
    assert _run_role_file(owner_url, "s3cret", stripped).returncode == 0
    # Grants from earlier tests' databases do not reach this one: a new database, new tables.
    store = connect_store(owner_url, str(tmp_path / "unused.duckdb"), pool_size=1)
    try:
        store.apply_migrations()
    finally:
        store.close()
    with psycopg.connect(_as(base, SEARCH_ROLE, "s3cret"), autocommit=True) as conn, \
            pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT count(*) FROM ctx_chunks")


# ==================================================================================================
# Kubernetes as shipped


def ctx_schema_errors(values: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(json.loads(CTX_SCHEMA.read_text()))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(values)]


@pytest.mark.parametrize("gpu", [False, True], ids=["values.yaml", "values.yaml+values-gpu-embedding.yaml"])
def test_helm_values_follow_the_platforms_rules(gpu):
    values = helm_values(gpu=gpu)
    assert ctx_schema_errors(values) == []
    deployment = _user_deployment(values)
    assert urlparse(deployment["env"]["CTX_INBOX"]).scheme == "s3", "the inbox is an object-store prefix"
    (check,) = [c for c in deployment["initContainers"] if c["name"] == "check-inbox"]
    assert {e["name"]: e["value"] for e in check["env"]}["CTX_INBOX"] == deployment["env"]["CTX_INBOX"]
    assert check["image"] == f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    readme = README.read_text()
    assert "values.ctx.schema.json" in readme and "check-inbox" in readme


def test_platform_rules_catch_unsafe_values():
    values = helm_values()
    deployment = _user_deployment(values)
    deployment["env"]["CTX_INBOX"] = "/data/inbox"  # a folder inside each pod
    deployment["image"]["tag"] = "latest"
    del values["dagsterWebserver"]["resources"]
    values["dagsterDaemon"]["securityContext"] = {**values["dagsterDaemon"]["securityContext"], "readOnlyRootFilesystem": False}
    values["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["podSpecConfig"]["securityContext"] = {"runAsNonRoot": False}
    values["dagsterWebserver"]["env"] = {}
    values["computeLogManager"] = {"type": "NoOpComputeLogManager"}
    errors = ctx_schema_errors(values)
    for fragment in ("deployments/0/volumes", "'latest' does not match", "dagsterWebserver: 'resources'",
                     "readOnlyRootFilesystem: True was expected", "runAsNonRoot: True was expected",
                     "'CTX_LOG_FORMAT' is a required property", "NoOpComputeLogManager"):
        assert any(fragment in e for e in errors), (fragment, errors)
    # A path is fine on a named PVC.
    deployment["image"]["tag"] = "0.1.0"
    deployment["volumes"].append({"name": "inbox", "persistentVolumeClaim": {"claimName": "ctx-inbox"}})
    assert not [e for e in ctx_schema_errors(values) if "volumes" in e]


def _check_inbox_script() -> str:
    (check,) = [c for c in _user_deployment(helm_values())["initContainers"] if c["name"] == "check-inbox"]
    assert check["command"][:2] == ["sh", "-c"]
    return check["command"][2]


@pytest.mark.parametrize(("inbox", "mounts", "ok"), [
    ("s3://ctx-platform/inbox", [], True),
    ("gs://bucket/prefix", [], True),
    ("/data/inbox", ["/", "/etc/ctx", "/tmp"], False),       # the image's folder, not shared
    ("/data/inbox", ["/", "/data/inbox"], True),             # a volume mounted there
    ("/mnt/shared/inbox", ["/", "/mnt/shared"], True),       # inside a mounted volume
    ("/data/inbox-old", ["/", "/data/inbox"], False),        # a sibling, not inside it
    ("inbox", ["/"], False),                                 # relative
    ("", ["/"], False),
])
def test_check_inbox_fails_fast_unless_the_inbox_is_shared(tmp_path, inbox, mounts, ok):
    """The init container's script, run here with sh against a mountinfo file like the kernel's."""
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("".join(f"{20 + i} 1 0:{i} / {m} rw,relatime - overlay overlay rw\n" for i, m in enumerate(mounts)))
    result = subprocess.run(["sh", "-c", _check_inbox_script()], capture_output=True, text=True, timeout=30, check=False,
                            env={"CTX_INBOX": inbox, "MOUNTINFO": str(mountinfo), "PATH": "/usr/bin:/bin"})
    assert (result.returncode == 0) == ok, (result.stdout, result.stderr)
    if not ok:
        assert "CTX_INBOX" in result.stderr


def _container_resources(pod_spec: dict) -> list[tuple[str, dict | None]]:
    return [(c["name"], c.get("resources")) for c in pod_spec.get("initContainers", []) + pod_spec["containers"]]


def resources_and_security_problems(values: dict, manifests: dict[str, dict]) -> list[str]:
    """Resource requests and a non-root, read-only, capability-free securityContext for the webserver,
    daemon, code location (with its init container), run pods, search and the migrate Job."""
    problems = []

    def check(where: str, resources: dict | None, pod_security: dict | None, security: dict | None) -> None:
        requests = (resources or {}).get("requests", {})
        if not {"cpu", "memory"} <= set(requests):
            problems.append(f"{where}: no cpu and memory requests")
        if not (pod_security or {}).get("runAsNonRoot") and not (security or {}).get("runAsNonRoot"):
            problems.append(f"{where}: may run as root")
        security = security or {}
        if security.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: writable root filesystem")
        if security.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: privilege escalation allowed")
        if "ALL" not in security.get("capabilities", {}).get("drop", []):
            problems.append(f"{where}: capabilities not all dropped")

    for key in ("dagsterWebserver", "dagsterDaemon"):
        service = values[key]
        check(key, service.get("resources"), service.get("podSecurityContext"), service.get("securityContext"))
    deployment = _user_deployment(values)
    check("code location", deployment.get("resources"), deployment.get("podSecurityContext"), deployment.get("securityContext"))
    for init in deployment.get("initContainers", []):
        check(f"code location init {init['name']}", init.get("resources"), deployment.get("podSecurityContext"),
              init.get("securityContext"))
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    pod_spec = (launcher.get("runK8sConfig") or {}).get("podSpecConfig") or {}
    check("run pods", launcher.get("resources"), pod_spec.get("securityContext"), launcher.get("securityContext"))
    for where, manifest in manifests.items():
        spec = manifest["spec"]["template"]["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            check(f"{where} {container['name']}", container.get("resources"), spec.get("securityContext"),
                  container.get("securityContext"))
    return problems


def _manifests() -> dict[str, dict]:
    search = next(d for d in yaml.safe_load_all(SEARCH_SERVICE.read_text()) if d["kind"] == "Deployment")
    return {"search": search, "migrate job": yaml.safe_load(MIGRATE_JOB.read_text())}


@pytest.mark.parametrize("gpu", [False, True], ids=["values.yaml", "values.yaml+values-gpu-embedding.yaml"])
def test_every_service_requests_resources_and_runs_non_root_read_only(gpu):
    assert resources_and_security_problems(helm_values(gpu=gpu), _manifests()) == []


def test_resources_and_security_check_catches_mistakes():
    values, manifests = helm_values(), _manifests()
    del values["dagsterDaemon"]["resources"]
    values["dagsterWebserver"]["podSecurityContext"] = {}
    values["dagsterWebserver"]["securityContext"] = {**values["dagsterWebserver"]["securityContext"], "runAsNonRoot": False}
    _user_deployment(values)["securityContext"] = {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False}
    del values["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]
    values["runLauncher"]["config"]["k8sRunLauncher"]["securityContext"] = {}
    search = manifests["search"]["spec"]["template"]["spec"]
    search["securityContext"] = {}
    search["containers"][0]["securityContext"] = {"privileged": True}
    del search["containers"][0]["resources"]
    problems = resources_and_security_problems(values, manifests)
    for fragment in ("dagsterDaemon: no cpu", "dagsterWebserver: may run as root", "code location: capabilities",
                     "run pods: may run as root", "search search: writable root", "search search: no cpu",
                     "search search: may run as root"):
        assert any(fragment in p for p in problems), (fragment, problems)


def run_pod_container(values: dict) -> dict:
    """The run pod's container settings as dagster-k8s builds them: the K8sRunLauncher's context, then the
    code location's container context (what the chart passes with includeConfigInLaunchedRuns) over it."""
    from dagster_k8s.container_context import K8sContainerContext
    from dagster_k8s.job import UserDefinedDagsterK8sConfig

    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    deployment = _user_deployment(values)
    base = K8sContainerContext(resources=launcher.get("resources"), security_context=launcher.get("securityContext"),
                               run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(
                                   {"pod_spec_config": (launcher.get("runK8sConfig") or {}).get("podSpecConfig") or {}}))
    code = K8sContainerContext(resources=deployment.get("resources"), volumes=deployment.get("volumes"),
                               volume_mounts=deployment.get("volumeMounts"), run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(
                                   {"pod_spec_config": {"init_containers": deployment.get("initContainers", [])}}))
    merged = base.merge(code).run_k8s_config
    return {"container": merged.container_config, "pod": merged.pod_spec_config}


@pytest.mark.parametrize("gpu", [False, True], ids=["values.yaml", "values.yaml+values-gpu-embedding.yaml"])
def test_run_pods_keep_the_launchers_resources_and_get_the_writable_folders(gpu):
    values = helm_values(gpu=gpu)
    run = run_pod_container(values)
    assert run["container"]["resources"] == values["runLauncher"]["config"]["k8sRunLauncher"]["resources"]
    mounts = {m["mount_path"] if "mount_path" in m else m["mountPath"] for m in run["container"]["volume_mounts"]}
    assert {"/tmp", "/opt/dagster/dagster_home/storage", "/data/ctx", "/etc/ctx"} <= mounts
    security = run["container"]["security_context"]
    assert security.get("readOnlyRootFilesystem", security.get("read_only_root_filesystem")) is True
    assert [c["name"] for c in run["pod"]["init_containers"]] == ["check-inbox"]


def test_run_pod_merge_catches_code_location_resources_that_differ():
    values = helm_values(gpu=True)
    _user_deployment(values)["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    resources = run_pod_container(values)["container"]["resources"]
    assert resources != values["runLauncher"]["config"]["k8sRunLauncher"]["resources"]
    assert resources["requests"]["cpu"] == "500m" and resources["limits"]["nvidia.com/gpu"] == 1  # deep-merged


def search_budget_problems(documents: list[dict]) -> list[str]:
    deployment = next((d for d in documents if d["kind"] == "Deployment"), None)
    budgets = [d for d in documents if d["kind"] == "PodDisruptionBudget"]
    if not budgets:
        return ["no PodDisruptionBudget for search"]
    problems = []
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    for budget in budgets:
        selector = budget["spec"]["selector"]["matchLabels"]
        if not selector.items() <= labels.items():
            problems.append(f"the budget selects {selector}, not the search pods")
        if budget["spec"].get("minAvailable", 0) < 1 and "maxUnavailable" not in budget["spec"]:
            problems.append("the budget keeps no replica")
        if deployment["spec"]["replicas"] <= budget["spec"].get("minAvailable", 0):
            problems.append("minAvailable >= replicas: no node could ever be drained")
    return problems


def test_search_has_a_disruption_budget():
    documents = list(yaml.safe_load_all(SEARCH_SERVICE.read_text()))
    assert search_budget_problems(documents) == []
    assert all(k8s_errors(d) == [] for d in documents)


def test_search_budget_check_catches_mistakes():
    documents = list(yaml.safe_load_all(SEARCH_SERVICE.read_text()))
    assert search_budget_problems([d for d in documents if d["kind"] != "PodDisruptionBudget"]) == ["no PodDisruptionBudget for search"]
    budget = next(d for d in documents if d["kind"] == "PodDisruptionBudget")
    budget["spec"]["selector"]["matchLabels"] = {"app.kubernetes.io/name": "search"}
    budget["spec"]["minAvailable"] = 2
    problems = search_budget_problems(documents)
    assert any("not the search pods" in p for p in problems) and any("no node could" in p for p in problems)


def test_step_logs_go_to_s3_through_dagster_aws():
    """The chart renders computeLogManager as the instance's compute_logs block (keys in snake case);
    Dagster's own config type of dagster-aws's S3ComputeLogManager accepts it."""
    from dagster._config import process_config
    from dagster_aws.s3.compute_log_manager import S3ComputeLogManager

    manager = helm_values()["computeLogManager"]
    assert manager["type"] == "S3ComputeLogManager"
    config = {re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower(): v for k, v in manager["config"]["s3ComputeLogManager"].items()}
    assert process_config(S3ComputeLogManager.config_type(), config).success
    assert not process_config(S3ComputeLogManager.config_type(), {**config, "bucket_name": "x"}).success
    requirements = [Requirement(r) for r in pyproject()["project"]["optional-dependencies"]["s3"]]
    assert "dagster-aws" in {r.name for r in requirements}, "the image's s3 extra carries dagster-aws"


# ==================================================================================================
# observability


def _pod_labels_and_ports(documents: list[dict], kind: str) -> tuple[dict, dict[str, int]]:
    workload = next(d for d in documents if d["kind"] == kind)
    template = workload["spec"]["template"]
    ports = {p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
    return template["metadata"]["labels"], ports


def monitor_problems(monitors: list[dict]) -> list[str]:
    """Each target (search, vLLM) has a PodMonitor selecting its pods, on a named port they expose, at
    /metrics (the path the search service routes to its exposition, and vLLM's)."""
    from contextual_assets.serving.routes import ROUTES

    metrics_path = next(r.path for r in ROUTES if r.name == "metrics")
    targets = {"search": _pod_labels_and_ports(list(yaml.safe_load_all(SEARCH_SERVICE.read_text())), "Deployment"),
               "vllm": _pod_labels_and_ports(list(yaml.safe_load_all(VLLM_MANIFEST.read_text())), "StatefulSet")}
    problems = []
    for target, (labels, ports) in targets.items():
        found = [m for m in monitors if m.get("kind") == "PodMonitor"
                 and m["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        if not found:
            problems.append(f"no PodMonitor selects the {target} pods")
        for monitor in found:
            if monitor["apiVersion"] != "monitoring.coreos.com/v1":
                problems.append(f"{target}: apiVersion {monitor['apiVersion']}")
            for endpoint in monitor["spec"]["podMetricsEndpoints"]:
                if endpoint.get("port") not in ports:
                    problems.append(f"{target}: port {endpoint.get('port')!r} is not a port of its pods ({sorted(ports)})")
                if endpoint.get("path", "/metrics") != metrics_path:
                    problems.append(f"{target}: path {endpoint.get('path')!r}, not {metrics_path}")
    return problems


def test_monitors_scrape_search_and_vllm_metrics():
    assert monitor_problems(list(yaml.safe_load_all(MONITORS.read_text()))) == []


def test_monitor_check_catches_mistakes():
    monitors = list(yaml.safe_load_all(MONITORS.read_text()))
    search = next(m for m in monitors if m["metadata"]["name"] == "ctx-search")
    search["spec"]["podMetricsEndpoints"][0]["port"] = "metrics"
    search["spec"]["podMetricsEndpoints"][0]["path"] = "/prometheus"
    problems = monitor_problems(monitors)
    assert any("'metrics' is not a port" in p for p in problems) and any("/prometheus" in p for p in problems)
    fresh = list(yaml.safe_load_all(MONITORS.read_text()))
    assert monitor_problems([m for m in fresh if m["metadata"]["name"] != "vllm"]) == ["no PodMonitor selects the vllm pods"]


def code_metric_names() -> set[str]:
    """The Prometheus series the code names: the search service's registry (as exposed, counters with
    _total, histograms with _bucket/_sum/_count) and the vLLM metrics the fleet client reads."""
    from prometheus_client.parser import text_string_to_metric_families

    from contextual_assets.fleet.engine_metrics import VLLM
    from contextual_assets.serving.metrics import ServiceMetrics

    metrics = ServiceMetrics()
    metrics.observe("search", 500, 0.01)
    metrics.served("v1", "production")
    names = {sample.name for family in text_string_to_metric_families(metrics.exposition().decode())
             for sample in family.samples}
    names |= {VLLM.running, VLLM.waiting, *VLLM.kv_usage, f"{VLLM.prompt_tokens}_total",
              f"{VLLM.generation_tokens}_total", f"{VLLM.preemptions}_total"}
    return names


_SERIES = re.compile(r"\b((?:vllm:|ctx_)[A-Za-z0-9_:]+)")


def dashboard_problems(dashboard: dict) -> list[str]:
    """Every Prometheus series a panel queries exists in the code; the panels the brief names are there."""
    problems, known = [], code_metric_names()
    queried: set[str] = set()
    titles = {p["title"] for p in dashboard.get("panels", [])}
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            for name in _SERIES.findall(target.get("expr", "")):
                queried.add(name)
                if name not in known:
                    problems.append(f"{panel['title']}: {name} is no metric of the code")
    for needed in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:kv_cache_usage_perc",
                   "ctx_search_request_duration_seconds_bucket", "ctx_search_errors_total", "ctx_search_served_version"):
        if needed not in queried:
            problems.append(f"no panel queries {needed}")
    for title in ("Fleet throughput (tokens/s)", "KV cache use per replica", "Ingest: documents committed per minute",
                  "Ingest: failing inbox documents", "Search latency", "Search requests and errors", "Served version"):
        if title not in titles:
            problems.append(f"no panel {title!r}")
    return problems


def test_dashboard_parses_and_queries_metrics_the_code_defines():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard_problems(dashboard) == []
    # The ingest panels read the store through a Postgres data source: the tables they name exist.
    from contextual_assets.store.migrations import MIGRATIONS

    ddl = " ".join(s for _, statements in MIGRATIONS["postgres"] for s in statements)
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for table in re.findall(r"FROM (ctx_\w+)", target.get("rawSql", "")):
                assert f"CREATE TABLE IF NOT EXISTS {table} " in ddl, table
    assert "ctx-dashboard.json" in README.read_text()


def test_dashboard_check_catches_invented_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    broken = copy.deepcopy(dashboard)
    latency = next(p for p in broken["panels"] if p["title"] == "Search latency")
    latency["targets"][0]["expr"] = "histogram_quantile(0.5, rate(ctx_search_latency_seconds_bucket[5m]))"
    broken["panels"] = [p for p in broken["panels"] if p["title"] != "Served version"]
    broken["panels"].append({"title": "Gate", "targets": [{"expr": "ctx_gate_last_decision"}]})
    problems = dashboard_problems(broken)
    for fragment in ("ctx_search_latency_seconds_bucket is no metric", "ctx_gate_last_decision is no metric",
                     "no panel queries ctx_search_served_version", "no panel 'Served version'"):
        assert any(fragment in p for p in problems), (fragment, problems)


def log_format_problems(document: dict, values: dict, manifests: list[dict]) -> list[str]:
    problems = []
    for name, service in document["services"].items():
        if service.get("image", "").startswith(("ctx-platform", "registry.example.com/ctx-platform")) or name in PLATFORM_SERVICES:
            if name == "config-files":
                continue
            if service.get("environment", {}).get("CTX_LOG_FORMAT") != "json":
                problems.append(f"compose {name}: CTX_LOG_FORMAT is not json")
    instance = yaml.safe_load(COMPOSE_INSTANCE.read_text())
    if "CTX_LOG_FORMAT" not in instance["run_launcher"]["config"]["env_vars"]:
        problems.append("compose run containers do not receive CTX_LOG_FORMAT")
    for name in ("webserver", "daemon"):
        command = document["services"][name]["command"]
        if "--log-format" not in command or command[command.index("--log-format") + 1] != "json":
            problems.append(f"compose {name}: Dagster's --log-format is not json")
    for key in ("dagsterWebserver", "dagsterDaemon"):
        if values[key].get("env", {}).get("CTX_LOG_FORMAT") != "json" or values[key].get("logFormat") != "json":
            problems.append(f"helm {key}: logs are not json")
    if _user_deployment(values)["env"].get("CTX_LOG_FORMAT") != "json":
        problems.append("helm code location (and run pods): CTX_LOG_FORMAT is not json")
    for manifest in manifests:
        for container in manifest["spec"]["template"]["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            if env.get("CTX_LOG_FORMAT") != "json":
                problems.append(f"{manifest['metadata']['name']}: CTX_LOG_FORMAT is not json")
    return problems


def test_every_platform_process_logs_json():
    from contextual_assets.settings import PlatformSettings

    assert "json" in PlatformSettings.model_fields["log_format"].json_schema_extra["choices"]
    assert log_format_problems(compose(), helm_values(), list(_manifests().values())) == []


def test_log_format_check_catches_text_logs():
    document, values, manifests = compose(), helm_values(), list(_manifests().values())
    document["services"]["search"]["environment"].pop("CTX_LOG_FORMAT")
    document["services"]["daemon"]["command"] = document["services"]["daemon"]["command"][:-2]
    values["dagsterWebserver"]["logFormat"] = "colored"
    manifests[0]["spec"]["template"]["spec"]["containers"][0]["env"] = [
        e for e in manifests[0]["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] != "CTX_LOG_FORMAT"]
    problems = log_format_problems(document, values, manifests)
    for fragment in ("compose search", "compose daemon: Dagster", "helm dagsterWebserver", "ctx-search: CTX_LOG_FORMAT"):
        assert any(fragment in p for p in problems), (fragment, problems)


# ==================================================================================================
# reproducible images


def constraint_pins(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(requirement.name)] = spec.version
    return pins


def image_packages() -> dict[str, str]:
    """Every distribution `pip install -e ".[s3,k8s,docker]"` installs (the image's extras, read from the
    Dockerfile), as {name: installed version}: the package's requirements and extras from pyproject.toml,
    then each installed dependency's own, markers evaluated for Linux and this Python."""
    from importlib.metadata import PackageNotFoundError, distribution

    install = next(r for k, r in dockerfile_instructions(DOCKERFILE.read_text()) if k == "RUN" and "pip install" in r)
    extras = set(re.search(r'-e "\.\[([^\]]*)\]"', install).group(1).split(","))
    environment = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux"}
    project = pyproject()["project"]
    todo = [(Requirement(r), "") for r in project["dependencies"]]
    todo += [(Requirement(r), "") for extra in extras for r in project["optional-dependencies"][extra]]
    found: dict[str, str] = {}
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({**environment, "extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        wanted = set(requirement.extras)
        if name in found and not wanted:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            found[name] = "(not installed)"
            continue
        found[name] = dist.version
        for text in dist.requires or []:
            child = Requirement(text)
            if child.marker is None or child.marker.evaluate({**environment, "extra": ""}):
                todo.append((child, ""))
            else:
                todo += [(child, e) for e in wanted if child.marker.evaluate({**environment, "extra": e})]
    return found


def constraints_problems(constraints: str, dockerfile: str) -> list[str]:
    problems = []
    installs = [r for k, r in dockerfile_instructions(dockerfile) if k == "RUN" and "pip install" in r]
    copies = [r.split() for k, r in dockerfile_instructions(dockerfile) if k == "COPY"]
    target = next((parts[-1] for parts in copies if parts[0] == "deploy/constraints.txt"), None)
    if target is None:
        problems.append("the Dockerfile does not COPY deploy/constraints.txt")
    for install in installs:
        if not re.search(rf"(-c|--constraint)\s+{re.escape(target or 'deploy/constraints.txt')}(\s|$)", install):
            problems.append(f"pip install without -c the constraints: {install[:60]}")
    if not re.search(r"^# .*sh deploy/constraints\.sh", constraints, re.MULTILINE) or "pip freeze" not in constraints:
        problems.append("the header does not say how the file was generated and how to regenerate it")
    pins = constraint_pins(constraints)
    if "contextual-retrieval-platform" in pins:
        problems.append("the local package is pinned")
    for name, version in sorted(image_packages().items()):
        pinned = pins.get(name)
        if pinned is None:
            problems.append(f"{name} ({version}) is installed in the image but not pinned")
        elif pinned != version.split("+")[0]:
            problems.append(f"{name}: pinned {pinned}, tested {version}")
    return problems


def test_constraints_pin_every_package_the_image_installs_and_the_dockerfile_uses_them():
    assert constraints_problems(CONSTRAINTS.read_text(), DOCKERFILE.read_text()) == []
    pins = constraint_pins(CONSTRAINTS.read_text())
    assert "+" not in pins["torch"], "no local label: the CPU and CUDA builds of that version both satisfy it"
    assert {"dagster", "dagster-aws", "dagster-k8s", "dagster-docker", "dagster-postgres", "s3fs"} <= set(pins)


def test_constraints_check_catches_mistakes():
    constraints = CONSTRAINTS.read_text()
    dagster = next(line for line in constraints.splitlines() if line.startswith("dagster=="))
    broken = (constraints.replace(dagster + "\n", "").replace("dagster-k8s==", "dagster-k8s==0.0.1\n# ")
              .replace("sh deploy/constraints.sh", "by hand") + "contextual-retrieval-platform==0.1.0\n")
    dockerfile = DOCKERFILE.read_text().replace("pip install -c /opt/dagster/constraints.txt ", "pip install ")
    problems = constraints_problems(broken, dockerfile)
    for fragment in ("dagster (1.13", "dagster-k8s: pinned 0.0.1", "header does not say", "local package is pinned",
                     "pip install without -c"):
        assert any(fragment in p for p in problems), (fragment, problems)


def _image_refs() -> list[tuple[str, str]]:
    """(where, image) for every image the deploy files name."""
    refs = []
    for name, service in compose()["services"].items():
        refs.append((f"compose {name}", service["image"]))
    instructions = dockerfile_instructions(DOCKERFILE.read_text())
    args = dict(r.partition("=")[::2] for k, r in instructions if k == "ARG" and "=" in r)
    refs.append(("Dockerfile FROM", re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)],
                                          next(r for k, r in instructions if k == "FROM"))))
    for path in sorted(HELM.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            refs += [(f"{path.name} {w}", i) for w, i in _images_in(document)]
    return refs


def _images_in(node, where: str = "") -> list[tuple[str, str]]:
    out = []
    if isinstance(node, dict):
        image = node.get("image")
        if isinstance(image, str):
            out.append((where, image))
        elif isinstance(image, dict) and "repository" in image:
            out.append((where, f"{image['repository']}:{image.get('tag') or ''}"))
        for key, value in node.items():
            out += _images_in(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _images_in(value, f"{where}[{i}]")
    return out


_IMMUTABLE = re.compile(r"^[^@\s]+:(?!latest$)(?=[^:/@]*\d)[A-Za-z0-9_.-]+(@sha256:[0-9a-f]{64})?$|^[^@\s]+@sha256:[0-9a-f]{64}$")


def tag_problems(refs: list[tuple[str, str]]) -> list[str]:
    """No `latest`, no missing tag, no bare major tag (pg16, 2): a version with a dot, or a digest."""
    problems = []
    for where, image in refs:
        tag = image.rsplit(":", 1)[-1] if ":" in image.split("/")[-1] else ""
        if not _IMMUTABLE.match(image) or ("@" not in image and "." not in tag):
            problems.append(f"{where}: {image!r} is not a versioned tag or a digest")
    return problems


def test_every_image_is_a_versioned_tag_never_latest():
    refs = _image_refs()
    assert len(refs) > 10
    assert tag_problems(refs) == []


def test_tag_check_catches_moving_tags():
    refs = [("a", "registry.example.com/ctx-platform:latest"), ("b", "registry.example.com/ctx-platform"),
            ("c", "pgvector/pgvector:pg16"), ("d", "caddy:2"), ("e", "registry.example.com/ctx-platform:"),
            ("ok", "python:3.11.14-slim-bookworm"), ("ok2", "vllm/vllm-openai@sha256:" + "0" * 64)]
    assert [p.split(":")[0] for p in tag_problems(refs)] == ["a", "b", "c", "d", "e"]
