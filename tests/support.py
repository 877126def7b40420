"""Helpers the tests share (paths, copies, free ports); fixtures live in conftest.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    result = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", *args], env=env, cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=600)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def wait_until_answering(server: subprocess.Popen, url: str, timeout_s: float = 300) -> None:
    """Until `url` answers 200 (a loaded machine: torch, MiniLM and the store load first); fails with the
    server's output if it exits first."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        assert server.poll() is None, server.stdout.read() if server.stdout else f"exited {server.returncode}"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer within {timeout_s} s"
        time.sleep(0.3)


def ctx_migrate(env: dict[str, str]) -> None:
    """`ctx migrate` on the store `env` configures, as an operator runs it before `ctx serve` (which never migrates)."""
    done = subprocess.run([sys.executable, "-m", "contextual_assets.cli.main", "migrate"], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


@contextmanager
def ctx_serve(env: dict[str, str], token: str, *args: str) -> Iterator[str]:
    """`ctx serve` as a subprocess on a free loopback port, once it is ready and has answered one search
    (the first loads the embedder: on a loaded machine that alone can outlast a client's timeout); yields
    its base URL."""
    import httpx

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "contextual_assets.cli.main", "serve", *args],
                              env={**env, "CTX_SERVE_PORT": str(port), "CTX_SEARCH_TOKEN": token}, cwd=REPO_ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(server, f"{base}/readyz")
        warm = httpx.post(f"{base}/v1/search", json={"query": "warm up", "k": 1},
                          headers={"Authorization": f"Bearer {token}"}, timeout=300)
        assert warm.status_code == 200, warm.text
        yield base
    finally:
        server.terminate()
        server.wait(timeout=20)


@contextmanager
def app_in_thread(app, what: str = "the server") -> Iterator[str]:
    """An ASGI `app` under a real uvicorn server on a free loopback port, in a thread; yields its base URL."""
    import threading

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), f"{what} did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
