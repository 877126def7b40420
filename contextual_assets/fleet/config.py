"""Fleet configuration: endpoints from `CTX_LLM_BASE_URLS` or a YAML file with per-replica caps,
weights and API-key variables. Keys are read from the environment at use and never stored here."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from ..errors import ConfigurationError
from ..settings import PlatformSettings

_default = PlatformSettings.default  # the defaults a setting also sets are written once, in settings


def normalise_base_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


class ReplicaConfig(BaseModel):
    base_url: str
    # A ceiling, never a target (None: none; the pool finds the replica's useful concurrency itself).
    max_in_flight: int | None = Field(default=_default("llm_max_in_flight") or None, ge=1)
    weight: float = Field(default=1.0, gt=0)
    api_key_env: str | None = None  # the variable's name; falls back to the fleet's

    @field_validator("base_url")
    @classmethod
    def _normalise(cls, value: str) -> str:
        if not value.strip().startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https:// (got {value!r})")
        return normalise_base_url(value)


class FleetConfig(BaseModel):
    replicas: list[ReplicaConfig]
    model: str | None = None  # a pin always wins over discovery
    revision: str = ""  # pinned model revision, part of the header-cache key and index version
    allow_mixed_models: bool = _default("llm_allow_mixed_models")
    discovery_ttl_s: float = 300.0
    context_limit: int | None = None  # overrides max_model_len from /v1/models
    max_output_tokens: int = 80
    request_timeout_s: float = Field(default=_default("llm_request_timeout_s"), gt=0)
    connect_timeout_s: float = 5.0
    max_attempts: int = 4
    retry_budget_ratio: float = 0.2  # retries allowed per request sent, across the fleet
    retry_budget_min: int = 20
    breaker_failures: int = 5
    breaker_cooldown_s: float = 5.0
    unavailable_timeout_s: float = 60.0  # how long a request waits when every replica is open
    batch_size: int = Field(default=_default("llm_batch_size"), ge=1, le=32)
    # Fleet-wide signals: each replica's /metrics read this often (vLLM's running/waiting/KV use), so
    # processes sharing the fleet count each other's requests against the caps. 0 turns it off.
    metrics_interval_s: float = Field(default=0.5, ge=0)
    # How old a replica's gauges may be when read. vLLM updates them every engine step (0); behind a
    # proxy or exporter that caches them, set its lag: our requests are then counted at their fewest
    # over it, so a stale read never hides another process's load (at the price of a slot or two).
    metrics_lag_s: float = Field(default=0.0, ge=0)
    # Hedged requests: a duplicate on another replica for a request out longer than this quantile of
    # answer latency (per token of cost) when nothing is queued, or at once on a stalled replica.
    hedge: bool = True
    hedge_quantile: float = Field(default=0.95, gt=0, lt=1)
    hedge_min_s: float = Field(default=1.0, ge=0)  # never hedge a request younger than this
    hedge_budget_ratio: float = Field(default=0.1, ge=0)  # hedges allowed per request sent
    hedge_budget_min: int = Field(default=16, ge=0)
    api_key_env: str = _default("llm_api_key_env")

    @field_validator("replicas")
    @classmethod
    def _non_empty(cls, value: list[ReplicaConfig]) -> list[ReplicaConfig]:
        if not value:
            raise ValueError("at least one replica is needed")
        urls = [r.base_url for r in value]
        if len(set(urls)) != len(urls):
            raise ValueError(f"duplicate replica URLs in {urls}")
        return value

    @classmethod
    def override_names(cls) -> frozenset[str]:
        """What `load` takes as overrides: the fields, and `max_in_flight` (the replicas' default ceiling)."""
        return frozenset(cls.model_fields) | {"max_in_flight"}

    def api_key_for(self, replica: ReplicaConfig) -> str | None:
        return os.environ.get(replica.api_key_env or self.api_key_env) or None

    @classmethod
    def load(cls, *, base_urls: str = "", fleet_file: str = "", **overrides) -> "FleetConfig":
        """From a YAML file (`CTX_LLM_FLEET_FILE`) or a comma-separated URL list; overrides win."""
        data: dict = {}
        if fleet_file:
            path = Path(fleet_file)
            if not path.exists():
                raise ConfigurationError(f"fleet file {path} not found (CTX_LLM_FLEET_FILE)")
            try:
                data = yaml.safe_load(path.read_text()) or {}
            except yaml.YAMLError as exc:
                raise ConfigurationError(f"fleet file {path} is not valid YAML: {exc}") from None
            if not isinstance(data, dict):
                raise ConfigurationError(f"fleet file {path} must hold a mapping with a 'replicas' list")
        elif base_urls:
            data = {"replicas": [{"base_url": u} for u in base_urls.split(",") if u.strip()]}
        if not data.get("replicas"):
            raise ConfigurationError(
                "the header fleet needs at least one replica: set CTX_LLM_BASE_URLS or CTX_LLM_FLEET_FILE"
            )
        for key, value in overrides.items():
            if value not in (None, ""):
                data[key] = value
        if "max_in_flight" in data:  # a fleet-wide ceiling for replicas that do not set their own (0: none)
            default_cap = data.pop("max_in_flight") or None
            for replica in data.get("replicas", []):
                replica.setdefault("max_in_flight", default_cap)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ConfigurationError(f"invalid fleet configuration: {problems}") from None
