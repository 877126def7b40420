"""The fleet simulator in its own process (off the client's GIL): `python -m bench.sim` started
with a port file, its replicas reached over loopback, its accounting read from the admin endpoints."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
# The throughput benchmark's fleet (bench.ingest): 4 replicas, two of them 29 % slower; vLLM's default
# 256 sequence slots each (an A100's OpenAI-server default; KV space bounds admission too).
DEFAULT_SPEEDS = (1.0, 1.0, 0.775, 0.775)
DEFAULT_MAX_NUM_SEQS = 256


@dataclass
class SimFleet:
    proc: subprocess.Popen
    base_urls: list[str]
    admin_urls: list[str]

    @classmethod
    def start(cls, workdir: Path, time_scale: float, speeds: tuple[float, ...] | list[float] = DEFAULT_SPEEDS,
              max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, root: str | None = None, serve_embeddings: bool = False,
              embedding_dim: int = 384, engines: int = 1, metrics_lag_s: float = 0.0,
              cost_model: str = "vllm", kv_cache_tokens: int = 0) -> SimFleet:
        """A cold simulator process; its port file is written under `workdir`. `root`: the weights its
        /v1/models reports for the served name (default: the name). The rest as the `python -m bench.sim`
        flags of the same names (ReplicaSpec's fields; `kv_cache_tokens` 0: the default KV pool)."""
        port_file = workdir / f"sim-{time.monotonic_ns()}.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.sim", "--speeds", ",".join(map(str, speeds)),
             "--max-num-seqs", str(max_num_seqs), "--time-scale", str(time_scale), "--port-file", str(port_file),
             "--engines", str(engines), "--metrics-lag-s", str(metrics_lag_s), "--cost-model", cost_model,
             "--kv-cache-tokens", str(kv_cache_tokens),
             "--embedding-dim", str(embedding_dim), *(["--embeddings"] if serve_embeddings else []),
             *(["--root", root] if root else [])],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the fleet simulator did not start")
            time.sleep(0.1)
        info = json.loads(port_file.read_text())
        return cls(proc=proc, base_urls=info["base_urls"], admin_urls=info["admin_urls"])

    def stats(self) -> list[dict]:
        return [httpx.get(f"{url}/stats", timeout=10).json() for url in self.admin_urls]

    def set_model(self, index: int, root: str | None, parent: str | None = None) -> dict:
        """Swap the weights behind replica `index`'s served name (POST /admin/model); its new
        /v1/models entry."""
        response = httpx.post(f"{self.admin_urls[index]}/model", json={"root": root, "parent": parent}, timeout=10)
        response.raise_for_status()
        return response.json()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
