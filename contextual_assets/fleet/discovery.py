"""Served-model discovery from `/v1/models`, cached per endpoint with a TTL.

A served *name* is what requests use; the *weights* behind it (vLLM's `root`, and `parent` for a
LoRA adapter) are what the index version and the header cache are keyed on, so a compatibility alias
that starts serving other weights yields a new index version and no stale cached headers.

A pin in configuration (CTX_LLM_MODEL, or the fleet file's `model`) chooses the name, and is checked
against `/v1/models` of every endpoint: a pin that some endpoint does not serve is an error naming
what each endpoint serves. Discovery that finds nothing usable, or an endpoint that does not answer,
is an error listing what every endpoint answered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from ..errors import ConfigurationError, FleetUnavailable
from .config import FleetConfig

EMBEDDING_HINTS = ("embed", "bge-", "e5-", "gte-", "minilm", "rerank")


@dataclass(frozen=True)
class ServedModel:
    id: str  # the served name (what requests send as `model`)
    max_model_len: int | None = None
    root: str | None = None  # the weights (HF id or path), as vLLM reports them
    parent: str | None = None  # for a LoRA adapter: its base model

    @property
    def weights(self) -> str:
        """The weights' identity: `parent+root` for an adapter, else `root`; servers that report no
        root (llama.cpp) fall back to the served name."""
        root = self.root or self.id
        return f"{self.parent}+{root}" if self.parent else root

    def describe(self) -> str:
        """The name, with its weights when they differ from it (for error messages)."""
        return self.id if self.weights == self.id else f"{self.id} (weights {self.weights})"


@dataclass(frozen=True)
class ResolvedModel:
    name: str  # the served name requests use ("+"-joined when mixed models are allowed)
    context_limit: int | None  # the configured limit, else the smallest max_model_len reported, if any
    per_endpoint: dict[str, ServedModel]
    discovered: bool  # False: the name was pinned (and checked against every endpoint)
    weights: str  # the weights' identity ("+"-joined, sorted, when mixed): keys the index version and cache


def is_embedding_model(model_id: str) -> bool:
    lowered = model_id.lower()
    return any(hint in lowered for hint in EMBEDDING_HINTS)


def fetch_models(base_url: str, api_key: str | None, timeout_s: float = 10.0) -> list[ServedModel]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = httpx.get(f"{base_url}/models", headers=headers, timeout=timeout_s)
    response.raise_for_status()
    return served_models(response.json())


def served_models(answer: dict) -> list[ServedModel]:
    """The models in a `/v1/models` answer, with each one's context length where the server says it."""
    models = []
    for item in answer.get("data", []):
        # vLLM: max_model_len. llama.cpp's llama-server: meta.n_ctx, the context of one slot (-c over -np),
        # the most one request can hold (not n_ctx_train, what the weights were trained on).
        meta = item.get("meta") if isinstance(item.get("meta"), dict) else {}
        length = item.get("max_model_len") or meta.get("n_ctx")
        root, parent = item.get("root"), item.get("parent")
        models.append(ServedModel(id=str(item.get("id", "")), max_model_len=int(length) if length else None,
                                  root=str(root) if root else None, parent=str(parent) if parent else None))
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

    def _answers(self, endpoints: dict[str, str | None], ttl_s: float | None
                 ) -> tuple[dict[str, list[ServedModel]], dict[str, str]]:
        """(models per reachable endpoint, a one-line answer per endpoint) from `/v1/models`."""
        served: dict[str, list[ServedModel]] = {}
        answers: dict[str, str] = {}
        for url, key in endpoints.items():
            try:
                models = self.served(url, key, ttl_s)
            except Exception as exc:  # noqa: BLE001 - unreachable, HTTP error, bad JSON: reported alike
                answers[url] = f"unreachable or invalid answer ({type(exc).__name__}: {str(exc)[:120]})"
                continue
            served[url] = models
            answers[url] = f"models {[m.describe() for m in models]}" if models else "no models"
        return served, answers

    def resolve(self, endpoints: dict[str, str | None], pin: str | None = None, allow_mixed: bool = False,
                context_limit: int | None = None, ttl_s: float | None = None) -> ResolvedModel:
        """`endpoints` maps base URL -> API key. A pin is checked against every endpoint's models."""
        served, answers = self._answers(endpoints, ttl_s)
        detail = "; ".join(f"{u}: {a}" for u, a in answers.items())
        if pin:
            return self._resolve_pin(pin, endpoints, served, detail, allow_mixed, context_limit)
        chosen: dict[str, ServedModel] = {}
        for url, models in served.items():
            usable = [m for m in models if m.id and not is_embedding_model(m.id)]
            if usable:
                chosen[url] = usable[0]
        if len(chosen) != len(endpoints):
            # A replica that does not answer is down (exit 3), one that answers without a usable model is misconfigured.
            raise (FleetUnavailable if len(served) != len(endpoints) else ConfigurationError)(
                f"could not discover a header model on every endpoint ({detail}); pin one with CTX_LLM_MODEL"
            )
        names = sorted({m.id for m in chosen.values()})
        weights = sorted({m.weights for m in chosen.values()})
        if (len(names) > 1 or len(weights) > 1) and not allow_mixed:
            raise ConfigurationError(
                f"replicas serve different models ({detail}); pin one with CTX_LLM_MODEL or allow mixed models "
                "(allow_mixed_models: true in the fleet file)"
            )
        return ResolvedModel(name="+".join(names), context_limit=self._limit(chosen, context_limit),
                             per_endpoint=chosen, discovered=True, weights="+".join(weights))

    def _resolve_pin(self, pin: str, endpoints: dict[str, str | None], served: dict[str, list[ServedModel]],
                     detail: str, allow_mixed: bool, context_limit: int | None) -> ResolvedModel:
        if len(served) != len(endpoints):
            raise FleetUnavailable(
                f"could not check CTX_LLM_MODEL={pin!r} against every endpoint ({detail}); make every endpoint "
                "answer /v1/models"
            )
        chosen = {url: next((m for m in models if m.id == pin), None) for url, models in served.items()}
        missing = [f"{url} (it serves {[m.id for m in served[url]]})" for url, m in chosen.items() if m is None]
        if missing:
            raise ConfigurationError(
                f"CTX_LLM_MODEL={pin!r} is not served by {', '.join(missing)}; set CTX_LLM_MODEL to a served name "
                "or unset it to discover"
            )
        found = {url: m for url, m in chosen.items() if m is not None}
        weights = sorted({m.weights for m in found.values()})
        if len(weights) > 1 and not allow_mixed:
            raise ConfigurationError(
                f"CTX_LLM_MODEL={pin!r} names different weights on different replicas ({detail}); serve the same "
                "weights under that name everywhere or allow mixed models (allow_mixed_models: true in the fleet file)"
            )
        return ResolvedModel(name=pin, context_limit=self._limit(found, context_limit), per_endpoint=found,
                             discovered=False, weights="+".join(weights))

    @staticmethod
    def _limit(chosen: dict[str, ServedModel], configured: int | None) -> int | None:
        lengths = [m.max_model_len for m in chosen.values() if m.max_model_len]
        return configured or (min(lengths) if lengths else None)

    def resolve_fleet(self, config: FleetConfig) -> ResolvedModel:
        """The model a fleet configuration serves: its pin (checked), else what every replica reports."""
        return self.resolve({r.base_url: config.api_key_for(r) for r in config.replicas}, pin=config.model,
                            allow_mixed=config.allow_mixed_models, context_limit=config.context_limit,
                            ttl_s=config.discovery_ttl_s)


# Process-wide discovery cache (explicit; tests create their own or call `clear()`).
DEFAULT_DISCOVERY = ModelDiscovery()
