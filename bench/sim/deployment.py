"""A local Dagster deployment of this repository's workspace: `dagster-webserver` and
`dagster-daemon` as subprocesses on one DAGSTER_HOME seeded with the shipped dagster.yaml, driven
through the webserver's GraphQL API exactly as the UI drives it (benchmarks and tests). The two
executables are those of the running environment: next to the interpreter, else on PATH."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = REPO_ROOT / "workspace.yaml"
INGEST_ASSETS = ["parsed_chunks", "chunk_headers", "chunk_embeddings"]

LAUNCH_BACKFILL = """
mutation ($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on Error { message }
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

DAEMON_HEALTH = """
query { instance { daemonHealth { allDaemonStatuses { daemonType healthy } } } }
"""

BACKFILL_DONE_OK = {"COMPLETED", "COMPLETED_SUCCESS"}
BACKFILL_DONE_BAD = {"FAILED", "COMPLETED_FAILED", "CANCELED", "CANCELING", "FAILING"}


class DeploymentError(RuntimeError):
    pass


def find_executable(name: str, bin_dir: Path | None = None, path: str | None = None) -> Path:
    """`name` (dagster-webserver, dagster-daemon) of the environment running this code: next to the
    interpreter (`bin_dir`, default its folder; a venv's scripts live there even when it is not
    activated), else on PATH (`path`, default $PATH: an interpreter whose scripts are installed elsewhere)."""
    bin_dir = Path(sys.executable).parent if bin_dir is None else bin_dir
    beside = bin_dir / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    path = os.environ.get("PATH", "") if path is None else path
    found = shutil.which(name, path=path)
    if found:
        return Path(found)
    raise DeploymentError(f"{name} not found: not next to the interpreter in {bin_dir}, nor on PATH "
                          f"({path or 'empty'}); pip install dagster dagster-webserver into this environment")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def deployment_env(home: Path, **ctx_settings: str) -> dict[str, str]:
    """This process's environment without any CTX_/DAGSTER_ setting, plus DAGSTER_HOME and `ctx_settings`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CTX_", "DAGSTER_")) and k not in {"DATABASE_URL", "PYTEST_CURRENT_TEST"}}
    env.update({"DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PYTHONUNBUFFERED": "1", **ctx_settings})
    return env


def seed_dagster_home(home: Path, ingest_slots: int | None = None, postgres: bool = False) -> Path:
    """A DAGSTER_HOME with the shipped dagster.yaml (SQLite storage), or with `postgres`
    deploy/dagster.postgres.yaml (storage at $DAGSTER_PG_URL, what a deployment runs); `ingest_slots`
    overrides its `ctx_ingest` pool limit (how many ingest runs may execute at once)."""
    home.mkdir(parents=True, exist_ok=True)
    source = REPO_ROOT / "deploy" / "dagster.postgres.yaml" if postgres else REPO_ROOT / "dagster.yaml"
    shutil.copyfile(source, home / "dagster.yaml")
    if ingest_slots is not None:
        import yaml

        config = yaml.safe_load((home / "dagster.yaml").read_text())
        config["concurrency"]["pools"]["default_limit"] = ingest_slots
        (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return home


@dataclass
class DagsterDeployment:
    root: Path
    env: dict[str, str]
    url: str = ""
    processes: list[tuple[str, subprocess.Popen, Path]] = field(default_factory=list)

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log_path = self.root / f"{name}.log"
        with log_path.open("wb") as log:
            # Its own process group: the group holds the code servers and run workers it starts.
            proc = subprocess.Popen(args, cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.processes.append((name, proc, log_path))
        return proc

    def logs(self) -> str:
        parts = []
        for name, proc, log_path in self.processes:
            text = log_path.read_text(errors="replace") if log_path.exists() else ""
            parts.append(f"===== {name} (pid {proc.pid}, returncode {proc.poll()}) =====\n{text[-20000:]}")
        return "\n".join(parts)

    def start_webserver(self, timeout_s: float = 180) -> subprocess.Popen:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        proc = self.spawn("webserver", [str(find_executable("dagster-webserver")), "-w", str(WORKSPACE),
                                        "-h", "127.0.0.1", "-p", str(port)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise DeploymentError(f"dagster-webserver exited with {proc.returncode}\n{self.logs()}")
            try:
                if httpx.get(f"{self.url}/server_info", timeout=5).status_code == 200:
                    return proc
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise DeploymentError(f"dagster-webserver did not answer within {timeout_s} s\n{self.logs()}")

    def start_daemon(self) -> subprocess.Popen:
        return self.spawn("daemon", [str(find_executable("dagster-daemon")), "run", "-w", str(WORKSPACE)])

    def wait_daemons(self, daemons: tuple[str, ...] = ("BACKFILL", "QUEUED_RUN_COORDINATOR"),
                     timeout_s: float = 180) -> None:
        """Until the UI's daemon health page shows each of `daemons` healthy (a heartbeat written)."""
        deadline = time.monotonic() + timeout_s
        while True:
            statuses = self.graphql(DAEMON_HEALTH)["instance"]["daemonHealth"]["allDaemonStatuses"]
            if {s["daemonType"] for s in statuses if s["healthy"]} >= set(daemons):
                return
            if time.monotonic() > deadline:
                raise DeploymentError(f"daemons not healthy after {timeout_s} s: {statuses}\n{self.logs()}")
            time.sleep(0.5)

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        response = httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60)
        if response.status_code != 200:
            raise DeploymentError(f"GraphQL HTTP {response.status_code}: {response.text[:2000]}")
        body = response.json()
        if body.get("errors"):
            raise DeploymentError(json.dumps(body["errors"], indent=2))
        return body["data"]

    def launch_backfill(self, partition_names: list[str], assets: list[str] = INGEST_ASSETS, title: str = "") -> str:
        """The UI's "Materialize selected partitions" as a backfill; returns the backfill id."""
        launched = self.graphql(LAUNCH_BACKFILL, {"params": {
            "partitionNames": partition_names,
            "assetSelection": [{"path": [name]} for name in assets],
            "title": title or "backfill",
        }})["launchPartitionBackfill"]
        if launched["__typename"] != "LaunchBackfillSuccess":
            raise DeploymentError(f"backfill not launched: {launched}")
        return launched["backfillId"]

    def backfill(self, backfill_id: str) -> dict:
        return self.graphql(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]

    def wait_backfill(self, backfill_id: str, timeout_s: float, poll_s: float = 1.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            backfill = self.backfill(backfill_id)
            if backfill.get("status") in BACKFILL_DONE_OK | BACKFILL_DONE_BAD:
                return backfill
            for name, proc, _ in self.processes:
                if proc.poll() is not None:
                    raise DeploymentError(f"{name} exited with {proc.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise DeploymentError(f"backfill still {backfill.get('status')} after {timeout_s} s: {backfill}")
            time.sleep(poll_s)

    def stop_all(self) -> None:
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

    def __enter__(self) -> DagsterDeployment:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
