"""bench.ingest's workloads (`--workload`), each built by its own module and generated reproducibly into a
folder: long PDFs with an outline (seed, bench/ingest_workload_seed.py), the codebase set
(ingest_workload_codebase.py), short notes (small, ingest_workload_small.py), a skewed set
(ingest_workload_skewed.py), the stream's mixed notes (ingest_workload_stream.py), the shared fleet's
long notes (ingest_workload_shared_fleet.py) and kv-stress's long sections (ingest_workload_kv_stress.py);
their prose is ingest_workload_text.py's. Here: the registry (`WORKLOADS`), each workload's fleet
(`WORKLOAD_SPEEDS`) and the settings and KV pool a workload runs with (`WORKLOAD_OPTIONS`)."""

from __future__ import annotations

from bench.ingest_options import SPEEDS

# Every workload's names, also re-exported from here (bench.ingest and tests/bench import them).
from bench.ingest_workload_codebase import CODEBASE, REPO_ROOT, build_codebase  # noqa: F401
from bench.ingest_workload_kv_stress import (
    KV_STRESS_CONTEXT_TOKENS,
    KV_STRESS_KV_CACHE_TOKENS,
    build_kv_stress,
)
from bench.ingest_workload_seed import build_seed
from bench.ingest_workload_shared_fleet import (
    SHARED_FLEET_DOCUMENTS_PER_PROCESS,  # noqa: F401
    build_long_notes,  # noqa: F401
    build_shared_fleet,
    build_shared_parts,  # noqa: F401
)
from bench.ingest_workload_skewed import build_skewed
from bench.ingest_workload_small import build_small
from bench.ingest_workload_stream import build_mixed, build_stream  # noqa: F401

WORKLOADS = {"seed": build_seed, "codebase": build_codebase, "small": build_small, "skewed": build_skewed,
             "stream": build_stream, "shared-fleet": build_shared_fleet, "kv-stress": build_kv_stress}
# Fleets other than SPEEDS: two processes sharing unequal replicas.
WORKLOAD_SPEEDS = {"shared-fleet": (1.0, 1.0, 0.6, 0.4)}
# bench.ingest's BenchOptions fields a workload sets (its replicas' KV pool and its header context).
WORKLOAD_OPTIONS: dict[str, dict[str, int]] = {
    "kv-stress": {"context_tokens": KV_STRESS_CONTEXT_TOKENS, "kv_cache_tokens": KV_STRESS_KV_CACHE_TOKENS}}


def workload_speeds(workload: str) -> tuple[float, ...]:
    return WORKLOAD_SPEEDS.get(workload, SPEEDS)
