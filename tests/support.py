"""Helpers the tests share (paths, copies, free ports); fixtures live in conftest.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"


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


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ctx(env: dict[str, str], *args: str, check: bool = False) -> subprocess.CompletedProcess:
    """`ctx` as a user runs it: a subprocess with settings from `env` (see the `env` fixture)."""
    result = subprocess.run([sys.executable, "-m", "contextual_assets.app.cli", *args], env=env, cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=600)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result
