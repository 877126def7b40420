"""`ctx serve` as a process, configured by its settings only: readiness on a never-promoted index, named
keys from CTX_SEARCH_KEYS_FILE rotated without a restart, the per-client rate limit and request ids in
the access log."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx

from tests.support import REPO_ROOT, ctx_migrate, free_port, wait_until_answering
from tests.unit.test_search_units import problem_detail


def test_ctx_serve_reads_its_keys_file_and_rate_limit_from_the_settings(env, tmp_path):
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text("alice: key-alice-1\nbob: key-bob\n")
    port = free_port()
    server_env = {**env, "CTX_SERVE_PORT": str(port), "CTX_HEADER_SOURCE": "structural",
                  "CTX_SEARCH_KEYS_FILE": str(keys_file), "CTX_SERVE_RATE_LIMIT_PER_S": "0.2",
                  "CTX_SERVE_RATE_BURST": "3"}
    ctx_migrate(server_env)
    server = subprocess.Popen([sys.executable, "-m", "contextual_assets.cli.main", "serve"], env=server_env,
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    invalid = {"query": ""}  # refused after the key check and the limit, before the store: 422 means admitted

    def search(token: str | None, request_id: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if request_id:
            headers["X-Request-ID"] = request_id
        return httpx.post(f"{base}/v1/search", json=invalid, headers=headers, timeout=30)

    try:
        wait_until_answering(server, f"{base}/healthz")
        # Never promoted, and the version the settings build holds no chunks: alive, not ready.
        detail = problem_detail(httpx.get(f"{base}/readyz", timeout=30), 503, "not-ready")
        assert "never promoted" in detail and "holds no chunks" in detail

        traced = search("key-alice-1", "trace-0001")
        assert traced.status_code == 422 and traced.headers["x-request-id"] == "trace-0001"
        keys_file.write_text("alice: key-alice-2-rotated\nbob: key-bob\n")
        time.sleep(1.2)  # the file is looked at once a second at most
        assert search("key-alice-2-rotated").status_code == 422, "the rotated key works without a restart"
        assert "Bearer <token>" in problem_detail(search("key-alice-1"), 401, "unauthorized"), "the old one not"

        assert [search("key-bob").status_code for _ in range(3)] == [422, 422, 422]
        limited = search("key-bob")
        assert "CTX_SERVE_RATE_LIMIT_PER_S" in problem_detail(limited, 429, "rate-limited")
        assert int(limited.headers["retry-after"]) >= 1
        assert search("key-alice-2-rotated").status_code == 422, "alice has her own bucket"
        assert all(httpx.get(f"{base}/healthz", timeout=30).status_code == 200 for _ in range(5))
        metrics = httpx.get(f"{base}/metrics", timeout=30).text
        assert 'ctx_search_requests_total{route="search",status="429"} 1.0' in metrics
    finally:
        server.terminate()
        output = server.communicate(timeout=20)[0]
    assert re.search(r'"POST /v1/search" 422 [0-9.]+ ms request_id=trace-0001', output), output
    assert "key-alice" not in output and "key-bob" not in output, "no token is ever logged"
    assert "keys alice, bob" in output and "rate limit 0.2/s, bursts of 3" in output, output
