"""The code location served by the real `dagster-webserver` (GraphQL) and a partition backfill
executed by the real `dagster-daemon`, each a subprocess of this repository's workspace.yaml."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.sim.deployment import (
    BACKFILL_DONE_OK,
    INGEST_ASSETS,
    DagsterDeployment,
    DeploymentError,
    deployment_env,
    seed_dagster_home,
)

ALL_ASSETS = [*INGEST_ASSETS, "retrieval_eval", "candidate_evaluation"]

DOCS = {
    "ops_handbook.md": """# Operations handbook

## Paging

The on-call engineer acknowledges a page within 15 minutes. Escalate to the secondary after
30 minutes without acknowledgement.

## Deploys

Deploys freeze on Fridays after 14:00 UTC. The freeze code word is `heron-4412`.
""",
    "release_notes.txt": """Release 3.8.1

The importer now retries failed uploads three times with exponential backoff.

Release 3.8.0

Added the `--dry-run` flag to the purge command and fixed the duplicate header bug (TKT-2291).
""",
}

BACKFILL_TIMEOUT_S = 300


@dataclass
class Deployment(DagsterDeployment):
    duckdb_path: Path = Path()
    keys: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    import dagster as dg

    from contextual_assets.ingest.inbox.document_keys import partition_key_for
    from contextual_assets.ingest.inbox.tick_plan import file_sha256
    from contextual_assets.models import SourceRecord
    from contextual_assets.store import open_store

    root = tmp_path_factory.mktemp("webserver")
    home = seed_dagster_home(root / "dagster_home")
    ctx_home = root / ".ctx"
    inbox = root / "inbox"
    inbox.mkdir()
    duckdb_path = ctx_home / "index.duckdb"

    env = deployment_env(home, CTX_HOME=str(ctx_home), CTX_INBOX=str(inbox), CTX_DUCKDB_PATH=str(duckdb_path),
                         CTX_HEADER_SOURCE="structural")

    # Documents live outside the inbox: they are registered explicitly, as `ctx ingest PATH` does.
    docs_dir = root / "docs"
    docs_dir.mkdir()
    sources = []
    for name, text in DOCS.items():
        path = docs_dir / name
        path.write_text(text, encoding="utf-8")
        sources.append((partition_key_for(name), path))
    store = open_store(None, duckdb_path)
    try:
        for key, path in sources:
            store.corpus.register_source(SourceRecord(doc_id=key, path=str(path), file_hash=file_sha256(path)))
    finally:
        store.close()
    keys = [key for key, _ in sources]
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        instance.add_dynamic_partitions("documents", keys)
        assert sorted(instance.get_dynamic_partitions("documents")) == sorted(keys)
    finally:
        instance.dispose()

    deployment = Deployment(root=root, env=env, duckdb_path=duckdb_path, keys=keys)
    try:
        try:
            deployment.start_webserver()
        except DeploymentError as exc:
            pytest.fail(str(exc))
        yield deployment
    finally:
        deployment.stop_all()


REPOSITORIES_QUERY = """
query {
  repositoriesOrError {
    __typename
    ... on RepositoryConnection {
      nodes {
        name
        location { name }
        jobs { name }
        sensors { name defaultStatus }
      }
    }
    ... on PythonError { message stack }
  }
  assetNodes { assetKey { path } }
}
"""


def test_code_location_served(deployment):
    data = deployment.graphql(REPOSITORIES_QUERY)
    repositories = data["repositoriesOrError"]
    assert repositories["__typename"] == "RepositoryConnection", repositories
    [repository] = repositories["nodes"]
    assert repository["location"]["name"] == "contextual_retrieval"
    assert "ingest_documents" in {job["name"] for job in repository["jobs"]}
    sensors = {sensor["name"]: sensor for sensor in repository["sensors"]}
    assert "new_documents" in sensors
    assert sensors["new_documents"]["defaultStatus"] == "STOPPED"

    assets = {"/".join(node["assetKey"]["path"]) for node in data["assetNodes"]}
    assert set(ALL_ASSETS) <= assets

    # The partitions registered through the instance are what the webserver sees.
    partitions = deployment.graphql(
        """
        query ($key: AssetKeyInput!) {
          assetNodeOrError(assetKey: $key) {
            ... on AssetNode { partitionKeys }
          }
        }
        """,
        {"key": {"path": ["chunk_embeddings"]}},
    )
    assert sorted(partitions["assetNodeOrError"]["partitionKeys"]) == sorted(deployment.keys)


def test_backfill_through_daemon(deployment):
    """The UI's backfill mutation, executed by a real dagster-daemon: one run over the partitions."""
    from contextual_assets.store import open_store

    backfill_id = deployment.launch_backfill(deployment.keys, title="test backfill")
    backfill = deployment.backfill(backfill_id)
    assert backfill["__typename"] == "PartitionBackfill", backfill
    assert sorted(backfill["partitionNames"]) == sorted(deployment.keys)

    deployment.start_daemon()
    try:
        backfill = deployment.wait_backfill(backfill_id, timeout_s=BACKFILL_TIMEOUT_S, poll_s=2)
    except DeploymentError as exc:
        pytest.fail(str(exc))
    assert backfill["status"] in BACKFILL_DONE_OK, f"{json.dumps(backfill, indent=2)}\n{deployment.logs()}"
    assert len(backfill["runs"]) == 1, "the documents are pipelined in one run"
    assert all(run["status"] == "SUCCESS" for run in backfill["runs"]), backfill

    store = open_store(None, deployment.duckdb_path)
    try:
        for key in deployment.keys:
            assert store.corpus.count_chunks(doc_id=key) >= 1, f"no chunks for {key}"
        assert sorted(d.doc_id for d in store.corpus.documents()) == sorted(deployment.keys)
    finally:
        store.close()


LOCATION_QUERY = """
query {
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError { __typename ... on PythonError { message causes { message } } }
      }
    }
  }
}
"""


def test_a_bad_setting_shows_as_the_code_location_error(tmp_path):
    """The webserver stays up and shows the bad setting as the code location's load error, in one line
    that names the variable (no code server or process exit to dig through)."""
    import time

    home = seed_dagster_home(tmp_path / "dagster_home")
    env = deployment_env(home, CTX_HOME=str(tmp_path / ".ctx"), CTX_INBOX=str(tmp_path / "inbox"),
                         CTX_LLM_MAX_IN_FLIGHT="-1")
    with DagsterDeployment(root=tmp_path, env=env) as deployment:
        try:
            webserver = deployment.start_webserver()
        except DeploymentError as exc:
            pytest.fail(str(exc))
        deadline = time.monotonic() + BACKFILL_TIMEOUT_S
        while True:  # the location loads after the server answers: wait until it has loaded (or failed to)
            [entry] = deployment.graphql(LOCATION_QUERY)["workspaceOrError"]["locationEntries"]
            if entry["loadStatus"] == "LOADED" or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert entry["name"] == "contextual_retrieval" and entry["loadStatus"] == "LOADED", entry
        error = entry["locationOrLoadError"]
        assert error["__typename"] == "PythonError", error
        # Dagster wraps it ("error occurred during the loading of Dagster definitions"); the UI shows the cause.
        messages = [error["message"], *(cause["message"] for cause in error["causes"])]
        lines = [line for message in messages for line in message.splitlines() if "CTX_LLM_MAX_IN_FLIGHT" in line]
        assert len(lines) == 1 and "CTX_LLM_MAX_IN_FLIGHT='-1' is not valid" in lines[0], messages
        assert webserver.poll() is None, deployment.logs()
