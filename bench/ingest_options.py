"""bench.ingest's run-wide settings: `BenchOptions` and the module globals `main` sets (`OPTIONS`,
`CPU_MS_PER_EVENT`, `BALANCERS_RUN`). Readers look them up here at call time (`ingest_options.OPTIONS`),
never as a copy imported by name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.sim import ReplicaSpec

SPEEDS = (1.0, 1.0, 0.775, 0.775)


@dataclass
class BenchOptions:
    """What a run of the bench varies (set once by `main`): the simulator's engine, the client's
    ceiling, the embedder's placement and the Dagster instance's ingest slots."""

    cap: int | None = None  # --cap: max_in_flight per replica (None: none configured, found by the pool)
    max_num_seqs: int = 256  # --max-num-seqs: the simulator's batch size (vLLM's default)
    cost_model: str = "vllm"  # --cost-model legacy: the old simulator, to compare
    engines: int = 1  # --engines: data-parallel engines per replica
    metrics_lag_s: float = 0.0  # --metrics-lag-s: how old the simulator's gauges are
    embedder: str = "remote"  # --embedder: remote (a GPU-like /v1/embeddings server) or local (MiniLM on the CPU)
    ingest_slots: int | None = None  # --ingest-slots: the ctx_ingest pool limit of the bench's Dagster instance
    processes: int = 2  # --processes: shared-fleet's ingest processes on one fleet
    dagster_storage: str = "sqlite"  # --dagster-storage: the instance's storage, sqlite (shipped) or postgres (deploy/)
    peer_workers: int = 64  # the peers' thread pools (a user's choice; the platform has no such knob)
    daemon_first: bool = False  # --daemon-first: the UI backfill meets a daemon already running (0-30 s pick-up)
    kv_cache_tokens: int = 0  # the simulator's KV pool per engine (0: its default; kv-stress: a smaller card's)
    context_tokens: int | None = None  # the header context budget (None: the platform's default; kv-stress: 4,000)

    def sim_spec(self) -> ReplicaSpec:
        """What `SimFleet.start` serves: the model floor's and the oracle floor's engines."""
        return ReplicaSpec(max_num_seqs=self.max_num_seqs, cost_model=self.cost_model, engines=self.engines,
                           kv_cache_tokens=self.kv_cache_tokens)


OPTIONS = BenchOptions()
CPU_MS_PER_EVENT: dict[str, float] = {}  # measured once per invocation (`main`), per Dagster storage
EMBED_MODEL = "sim-embed"
EMBED_DIM = 384  # MiniLM's: the index is the same shape whichever embedder serves it
REPO_ROOT = Path(__file__).resolve().parent.parent


BALANCERS_RUN: tuple[str, ...] = ("random", "least_busy")  # --balancers
