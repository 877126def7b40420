"""The header fleet's health as `ctx status` shows it: each replica probed once, briefly."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import httpx

from .config import FleetConfig, ReplicaConfig
from .discovery import fetch_models
from .engine_metrics import metrics_url, read_engine_metrics

if TYPE_CHECKING:  # the header configuration builds on the fleet, not the other way round
    from contextual_assets.headers.configured import HeaderConfig


def fleet_health(headers: HeaderConfig | FleetConfig, timeout_s: float = 2.0) -> list[dict]:
    """Each replica: reachable or not (`/v1/models`), what it serves, and from its own `/metrics` (vLLM,
    llama.cpp, SGLang or TGI names) which engine it is and its running and waiting requests. A short
    timeout and no exception: a down replica is a row that says so. `headers` is the header configuration (its fleet) or a fleet."""
    config = headers if isinstance(headers, FleetConfig) else headers.fleet_config()
    with ThreadPoolExecutor(max_workers=min(8, len(config.replicas))) as pool:
        return list(pool.map(lambda replica: probe_replica(config, replica, timeout_s), config.replicas))


def probe_replica(config: FleetConfig, replica: ReplicaConfig, timeout_s: float) -> dict:
    """One replica's row of `fleet_health`."""
    row = {"base_url": replica.base_url, "reachable": False, "models": [], "engine": None, "running": None,
           "waiting": None, "kv_usage": None, "error": None}
    try:
        row["models"] = [m.describe() for m in fetch_models(replica.base_url, config.api_key_for(replica),
                                                             timeout_s=timeout_s)]
        row["reachable"] = True
    except Exception as exc:  # noqa: BLE001 - refused, timeout, HTTP error, bad JSON: all "down" here
        row["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
        return row
    try:
        key = config.api_key_for(replica)
        response = httpx.get(metrics_url(replica.base_url), timeout=timeout_s,
                             headers={"Authorization": f"Bearer {key}"} if key else {})
        metrics = read_engine_metrics(response.text) if response.status_code == 200 else None
        if metrics is not None:
            row.update(engine=metrics.engine, running=metrics.running, waiting=metrics.waiting,
                       kv_usage=metrics.kv_usage)
    except Exception:  # noqa: BLE001, S110 - no /metrics (a proxy, a server started without them): unknown
        pass
    return row
