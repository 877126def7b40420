"""The code location served by the real `dagster-webserver` (GraphQL) and a partition backfill
executed by the real `dagster-daemon`, each a subprocess of this repository's workspace.yaml."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
BIN = REPO_ROOT / ".venv" / "bin"
WORKSPACE = REPO_ROOT / "workspace.yaml"

INGEST_ASSETS = ["parsed_chunks", "chunk_headers", "chunk_embeddings"]
ALL_ASSETS = [*INGEST_ASSETS, "retrieval_eval"]

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

SERVER_START_TIMEOUT_S = 180
BACKFILL_TIMEOUT_S = 300


@dataclass
class Deployment:
    root: Path
    env: dict[str, str]
    duckdb_path: Path
    keys: list[str]
    url: str = ""
    processes: list[tuple[str, subprocess.Popen, Path]] = field(default_factory=list)

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log_path = self.root / f"{name}.log"
        log = log_path.open("wb")
        try:
            proc = subprocess.Popen(
                args, cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()
        self.processes.append((name, proc, log_path))
        return proc

    def logs(self) -> str:
        parts = []
        for name, proc, log_path in self.processes:
            text = log_path.read_text(errors="replace") if log_path.exists() else ""
            parts.append(f"===== {name} (pid {proc.pid}, returncode {proc.poll()}) =====\n{text[-20000:]}")
        return "\n".join(parts)

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        response = httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables or {}},
                              timeout=60)
        assert response.status_code == 200, response.text
        body = response.json()
        assert not body.get("errors"), json.dumps(body["errors"], indent=2)
        return body["data"]

    def stop_all(self) -> None:
        # Each subprocess leads its own process group, which holds its code servers and run workers.
        for _, proc, _ in reversed(self.processes):
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for _, proc, _ in reversed(self.processes):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)
            proc.wait(timeout=10)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_server(deployment: Deployment, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dagster-webserver exited with {proc.returncode}\n{deployment.logs()}")
        try:
            if httpx.get(f"{deployment.url}/server_info", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"dagster-webserver did not answer /server_info within {SERVER_START_TIMEOUT_S} s\n"
                f"{deployment.logs()}")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    import dagster as dg

    from contextual_assets.models import SourceRecord
    from contextual_assets.inbox import file_sha256
    from contextual_assets.partition_keys import partition_key_for
    from contextual_assets.store import open_store

    root = tmp_path_factory.mktemp("webserver")
    home = root / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    ctx_home = root / ".ctx"
    inbox = root / "inbox"
    inbox.mkdir()
    duckdb_path = ctx_home / "index.duckdb"

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CTX_", "DAGSTER_")) and k not in {"DATABASE_URL", "PYTEST_CURRENT_TEST"}}
    env.update({
        "DAGSTER_HOME": str(home),
        "CTX_HOME": str(ctx_home),
        "CTX_INBOX": str(inbox),
        "CTX_DUCKDB_PATH": str(duckdb_path),
        "CTX_HEADER_SOURCE": "structural",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "PYTHONUNBUFFERED": "1",
    })

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
            store.register_source(SourceRecord(doc_id=key, path=str(path), file_hash=file_sha256(path)))
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
        port = _free_port()
        deployment.url = f"http://127.0.0.1:{port}"
        webserver = deployment.spawn(
            "webserver", [str(BIN / "dagster-webserver"), "-w", str(WORKSPACE), "-h", "127.0.0.1", "-p", str(port)]
        )
        _wait_for_server(deployment, webserver)
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


LAUNCH_BACKFILL = """
mutation ($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on Error { message }
    ... on PythonError { stack }
  }
}
"""

BACKFILL_STATUS = """
query ($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill {
      status
      numPartitions
      partitionNames
      error { message stack }
      runs { runId status }
    }
    ... on Error { message }
  }
}
"""

DONE_OK = {"COMPLETED", "COMPLETED_SUCCESS"}
DONE_BAD = {"FAILED", "COMPLETED_FAILED", "CANCELED", "CANCELING", "FAILING"}


def test_backfill_through_daemon(deployment):
    from contextual_assets.store import open_store

    launched = deployment.graphql(
        LAUNCH_BACKFILL,
        {"params": {
            "partitionNames": deployment.keys,
            "assetSelection": [{"path": [name]} for name in INGEST_ASSETS],
            "title": "test backfill",
        }},
    )["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    backfill_id = launched["backfillId"]
    assert backfill_id

    backfill = deployment.graphql(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]
    assert backfill["__typename"] == "PartitionBackfill", backfill
    assert sorted(backfill["partitionNames"]) == sorted(deployment.keys)

    daemon = deployment.spawn("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(WORKSPACE)])
    deadline = time.monotonic() + BACKFILL_TIMEOUT_S
    while True:
        backfill = deployment.graphql(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]
        status = backfill["status"]
        if status in DONE_OK or status in DONE_BAD:
            break
        if daemon.poll() is not None:
            pytest.fail(f"dagster-daemon exited with {daemon.returncode}\n{deployment.logs()}")
        if time.monotonic() > deadline:
            pytest.fail(f"backfill still {status} after {BACKFILL_TIMEOUT_S} s: {backfill}\n{deployment.logs()}")
        time.sleep(2)
    assert status in DONE_OK, f"{json.dumps(backfill, indent=2)}\n{deployment.logs()}"
    assert backfill["runs"] and all(run["status"] == "SUCCESS" for run in backfill["runs"]), backfill

    store = open_store(None, deployment.duckdb_path)
    try:
        for key in deployment.keys:
            assert store.count_chunks(doc_id=key) >= 1, f"no chunks for {key}"
        assert sorted(d.doc_id for d in store.documents()) == sorted(deployment.keys)
    finally:
        store.close()
