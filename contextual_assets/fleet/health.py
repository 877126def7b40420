"""The header fleet's health as `ctx status` shows it: each replica probed once, briefly."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import httpx

from .config import FleetConfig, ReplicaConfig
from .discovery import fetch_models
from .vllm_metrics import metrics_url, parse_vllm_metrics

if TYPE_CHECKING:  # the header configuration builds on the fleet, not the other way round
    from contextual_assets.headers.configured import HeaderConfig


def fleet_health(headers: HeaderConfig | FleetConfig, timeout_s: float = 2.0) -> list[dict]:
    """Each replica: reachable or not (`/v1/models`), what it serves, and from vLLM's `/metrics` its
    running and waiting requests when it exposes them. A short timeout and no exception: a down
    replica is a row that says so. `headers` is the header configuration (its fleet) or a fleet."""
    config = headers if isinstance(headers, FleetConfig) else headers.fleet_config()
    with ThreadPoolExecutor(max_workers=min(8, len(config.replicas))) as pool:
        return list(pool.map(lambda replica: probe_replica(config, replica, timeout_s), config.replicas))


def probe_replica(config: FleetConfig, replica: ReplicaConfig, timeout_s: float) -> dict:
    """One replica's row of `fleet_health`."""
    row = {"base_url": replica.base_url, "reachable": False, "models": [], "running": None, "waiting": None,
           "error": None}
    try:
        row["models"] = [m.describe() for m in fetch_models(replica.base_url, config.api_key_for(replica),
                                                             timeout_s=timeout_s)]
        row["reachable"] = True
    except Exception as exc:  # noqa: BLE001 - refused, timeout, HTTP error, bad JSON: all "down" here
        row["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
        return row
    try:
        response = httpx.get(metrics_url(replica.base_url), timeout=timeout_s)
        if response.status_code == 200:
            values = parse_vllm_metrics(response.text)
            row["running"] = values.get("vllm:num_requests_running")
            row["waiting"] = values.get("vllm:num_requests_waiting")
    except Exception:  # noqa: BLE001, S110 - no /metrics (llama.cpp, a proxy): the counts stay unknown
        pass
    return row
