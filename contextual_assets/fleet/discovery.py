"""Served-model discovery from `/v1/models`, cached per endpoint with a TTL.

A pin in configuration always wins and bypasses discovery. Discovery that finds nothing usable, or
an endpoint that does not answer, is an error listing what every endpoint answered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from ..errors import ConfigurationError
from .config import FleetConfig

EMBEDDING_HINTS = ("embed", "bge-", "e5-", "gte-", "minilm", "rerank")


@dataclass(frozen=True)
class ServedModel:
    id: str
    max_model_len: int | None = None


@dataclass(frozen=True)
class ResolvedModel:
    name: str
    context_limit: int | None  # the smallest max_model_len reported for this model, if any
    per_endpoint: dict[str, ServedModel]
    discovered: bool


def is_embedding_model(model_id: str) -> bool:
    lowered = model_id.lower()
    return any(hint in lowered for hint in EMBEDDING_HINTS)


def fetch_models(base_url: str, api_key: str | None, timeout_s: float = 10.0) -> list[ServedModel]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = httpx.get(f"{base_url}/models", headers=headers, timeout=timeout_s)
    response.raise_for_status()
    models = []
    for item in response.json().get("data", []):
        length = item.get("max_model_len")
        models.append(ServedModel(id=str(item.get("id", "")), max_model_len=int(length) if length else None))
    return models


class ModelDiscovery:
    """TTL cache of `/v1/models` answers per endpoint. `fetch` and `clock` are injectable for tests."""

    def __init__(self, ttl_s: float = 300.0, fetch: Callable[..., list[ServedModel]] = fetch_models,
                 clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self.fetch = fetch
        self.clock = clock
        self._cache: dict[str, tuple[float, list[ServedModel]]] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    def served(self, base_url: str, api_key: str | None, ttl_s: float | None = None) -> list[ServedModel]:
        ttl = self.ttl_s if ttl_s is None else ttl_s
        with self._lock:
            cached = self._cache.get(base_url)
            if cached is not None and self.clock() - cached[0] < ttl:
                return cached[1]
        models = self.fetch(base_url, api_key)
        with self._lock:
            self._cache[base_url] = (self.clock(), models)
        return models

    def resolve(self, endpoints: dict[str, str | None], pin: str | None = None, allow_mixed: bool = False,
                context_limit: int | None = None, ttl_s: float | None = None) -> ResolvedModel:
        """`endpoints` maps base URL -> API key. With a pin nothing is fetched."""
        if pin:
            return ResolvedModel(name=pin, context_limit=context_limit, per_endpoint={}, discovered=False)
        answers: dict[str, str] = {}
        chosen: dict[str, ServedModel] = {}
        for url, key in endpoints.items():
            try:
                models = self.served(url, key, ttl_s)
            except Exception as exc:  # unreachable, HTTP error, bad JSON: all reported the same way
                answers[url] = f"unreachable or invalid answer ({type(exc).__name__}: {str(exc)[:120]})"
                continue
            usable = [m for m in models if m.id and not is_embedding_model(m.id)]
            answers[url] = f"models {[m.id for m in models]}" if models else "no models"
            if usable:
                chosen[url] = usable[0]
        detail = "; ".join(f"{u}: {a}" for u, a in answers.items())
        if len(chosen) != len(endpoints):
            raise ConfigurationError(
                f"could not discover a header model on every endpoint ({detail}); pin one with CTX_LLM_MODEL"
            )
        names = sorted({m.id for m in chosen.values()})
        if len(names) > 1 and not allow_mixed:
            raise ConfigurationError(
                f"replicas serve different models ({detail}); pin one with CTX_LLM_MODEL or allow mixed models "
                "(allow_mixed_models: true in the fleet file)"
            )
        lengths = [m.max_model_len for m in chosen.values() if m.max_model_len]
        limit = context_limit or (min(lengths) if lengths else None)
        return ResolvedModel(name=names[0] if len(names) == 1 else "+".join(names), context_limit=limit,
                             per_endpoint=chosen, discovered=True)

    def resolve_fleet(self, config: FleetConfig) -> ResolvedModel:
        """The model a fleet configuration serves: its pin, else what every replica reports."""
        return self.resolve({r.base_url: config.api_key_for(r) for r in config.replicas}, pin=config.model,
                            allow_mixed=config.allow_mixed_models, context_limit=config.context_limit,
                            ttl_s=config.discovery_ttl_s)


# Process-wide discovery cache (explicit; tests create their own or call `clear()`).
DEFAULT_DISCOVERY = ModelDiscovery()
