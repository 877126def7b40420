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
