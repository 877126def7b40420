"""Dagster resources: the store, the header source, the embedder and the parsing limits.

Defaults come from `PlatformSettings` (or, for fleet knobs it does not expose, `FleetConfig`): each is
written once. `build_resources` (below) passes, for the code location, values that came from the environment as
`dg.EnvVar`s, so the UI shows the variable's name rather than baking its value into run config.
"""

from __future__ import annotations

import os
import threading

import dagster as dg
from pydantic import PrivateAttr

from contextual_assets.embedding import Embedder, EmbedderCatalog
from contextual_assets.errors import ConfigurationError
from contextual_assets.fleet.config import FleetConfig
from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY
from contextual_assets.fleet.pool import get_fleet
from contextual_assets.headers.base import HeaderSource
from contextual_assets.headers.openai_source import (
    OpenAIHeaderSource,
    openai_identity,
    prompt_version_of,
)
from contextual_assets.headers.prompt import DEFAULT_PROMPT, PromptTemplate, load_prompt
from contextual_assets.headers.structural import NoHeaderSource, StructuralHeaderSource
from contextual_assets.index_version import index_fingerprint, index_version_of
from contextual_assets.parsing.tokens import (
    TokenCounter,
    token_counter,
)
from contextual_assets.rerank import Reranker, configured_reranker
from contextual_assets.settings import HEADER_SOURCES, PlatformSettings, env_source
from contextual_assets.store import ChunkStore, open_store
from eval_assets.resources import EvalGateResource

_default = PlatformSettings.default
_fleet_default = lambda name: FleetConfig.model_fields[name].default  # noqa: E731

# Explicit process-wide caches (one store connection pool / one loaded model per process).
_STORES: dict[tuple[str, str], ChunkStore] = {}
_STORES_LOCK = threading.Lock()


def clear_store_cache() -> None:
    with _STORES_LOCK:
        for store in _STORES.values():
            store.close()
        _STORES.clear()


class ChunkStoreResource(dg.ConfigurableResource):
    """Postgres + pgvector when `database_url` is set, else the embedded DuckDB file."""

    database_url: str = ""  # explicit URL (tests); production leaves it empty and sets the variable below
    database_url_env: str = "DATABASE_URL"  # read at open(): the URL and its password never enter config
    duckdb_path: str = str(_default("home")) + "/index.duckdb"

    def url(self) -> str:
        return self.database_url or os.environ.get(self.database_url_env, "").strip()

    def open(self) -> ChunkStore:
        url = self.url()
        key = (url, os.path.abspath(self.duckdb_path))
        with _STORES_LOCK:
            store = _STORES.get(key)
            if store is None:
                store = open_store(url or None, self.duckdb_path)
                _STORES[key] = store
            return store


class ParsingResource(dg.ConfigurableResource):
    chunk_tokens: int = _default("chunk_tokens")
    max_file_mb: float = _default("max_file_mb")
    max_pdf_pages: int = _default("max_pdf_pages")
    tokenizer_dir: str = ""  # empty: the bundled embedder's tokenizer

    def counter(self) -> TokenCounter:
        return token_counter(self.tokenizer_dir or None)


# Fields of HeaderSourceResource that set the FleetConfig field of the same name.
FLEET_FIELDS = ("model", "revision", "allow_mixed_models", "context_limit", "api_key_env", "max_in_flight",
                "request_timeout_s", "max_attempts", "batch_size", "max_output_tokens")


class HeaderSourceResource(dg.ConfigurableResource):
    """`auto` uses the OpenAI-compatible endpoints when configured, otherwise structural headers."""

    source: str = _default("header_source")
    base_urls: str = ""
    fleet_file: str = ""  # YAML with per-replica caps, weights and key variables
    model: str = ""
    revision: str = ""
    allow_mixed_models: bool = _default("llm_allow_mixed_models")
    context_limit: int = _default("llm_context_limit")  # 0: max_model_len from /v1/models
    api_key_env: str = _default("llm_api_key_env")  # the *name* of the variable; the key is never in config
    prompt: str = DEFAULT_PROMPT
    batch_prompt: str = "header_batch_v1"
    batch_size: int = _default("llm_batch_size")
    max_in_flight: int = _default("llm_max_in_flight")
    max_output_tokens: int = _fleet_default("max_output_tokens")
    max_header_tokens: int = 64
    context_tokens: int = _default("context_tokens")
    request_timeout_s: float = _fleet_default("request_timeout_s")
    max_attempts: int = _fleet_default("max_attempts")
    sample_metrics: bool = _default("llm_sample_metrics")  # sample replicas' /metrics into a per-run timeline

    def resolved_source(self) -> tuple[str, str | None]:
        """(source, warning): the source that will run and why, when `auto` had to choose."""
        source = self.source.lower()
        if source not in HEADER_SOURCES:
            raise ConfigurationError(f"unknown header source '{self.source}' (auto, openai, structural, none)")
        if source == "auto":
            if self.endpoints():
                return "openai", None
            return "structural", (
                "no LLM endpoint configured (CTX_LLM_BASE_URLS): using deterministic structural headers; "
                "set CTX_LLM_BASE_URLS to generate contextual headers with a model"
            )
        return source, None

    def endpoints(self) -> list[str]:
        if self.fleet_file:
            return [r.base_url for r in self.fleet_config().replicas]
        return [u.strip() for u in self.base_urls.split(",") if u.strip()]

    def fleet_config(self) -> FleetConfig:
        fields = type(self).model_fields
        overrides = {}
        for name in FLEET_FIELDS:
            value = getattr(self, name)
            if value == fields[name].default and (self.fleet_file or not value):
                continue  # left at its default: the fleet file (or FleetConfig's own default) wins
            overrides[name] = value
        return FleetConfig.load(base_urls=self.base_urls, fleet_file=self.fleet_file, **overrides)

    def identity(self) -> dict[str, str]:
        """The header part of the index-version fingerprint, without starting a request pool: for
        `openai`, the weights behind the served model, from `/v1/models` (cached per endpoint; a pin is
        checked there too)."""
        source, _ = self.resolved_source()
        if source == "structural":
            return StructuralHeaderSource().identity
        if source == "none":
            return NoHeaderSource().identity
        config = self.fleet_config()
        resolved = DEFAULT_DISCOVERY.resolve_fleet(config)
        prompt_version = prompt_version_of(*self._prompts(config), config.batch_size)
        return openai_identity(resolved.weights, config.revision, prompt_version)

    def build(self, counter: TokenCounter, store: ChunkStore | None = None) -> HeaderSource:
        """The configured source; for `openai`, a client of the process-wide fleet pool, with the
        header cache in `store` when given."""
        source, _ = self.resolved_source()
        if source == "structural":
            return StructuralHeaderSource()
        if source == "none":
            return NoHeaderSource()
        return openai_header_source(self.fleet_config(), self.prompt, self.batch_prompt, self.max_header_tokens,
                                    counter, store)

    def recipe(self, source: HeaderSource) -> dict:
        """How to build `source` again (recorded with each index version it builds): the fleet with its
        served name, the prompts and budgets. API keys stay in their variables."""
        recipe: dict = {"source": source.identity["header_source"], "prompt": self.prompt,
                        "batch_prompt": self.batch_prompt, "max_header_tokens": self.max_header_tokens,
                        "context_tokens": self.context_tokens}
        if isinstance(source, OpenAIHeaderSource):
            recipe["fleet"] = source.fleet.config.model_dump(mode="json", exclude={"model"})
            recipe["served_model"] = source.fleet.model
        return recipe

    def _prompts(self, config: FleetConfig) -> tuple[PromptTemplate, PromptTemplate | None]:
        """The single-chunk prompt, and the batch prompt when requests carry several chunks."""
        return load_prompt(self.prompt), load_prompt(self.batch_prompt) if config.batch_size > 1 else None


def openai_header_source(config: FleetConfig, prompt: str, batch_prompt: str, max_header_tokens: int,
                         counter: TokenCounter, store: ChunkStore | None = None) -> OpenAIHeaderSource:
    """Headers from the fleet `config` describes (its process-wide pool), with the named prompts."""
    batch = load_prompt(batch_prompt) if config.batch_size > 1 else None
    return OpenAIHeaderSource(
        get_fleet(config), load_prompt(prompt), counter, store=store, max_output_tokens=config.max_output_tokens,
        max_header_tokens=max_header_tokens, batch_size=config.batch_size, batch_prompt=batch,
        revision=config.revision,
    )


class EmbedderResource(dg.ConfigurableResource):
    """sentence-transformers from a local directory (default: the bundled all-MiniLM-L6-v2), or an
    OpenAI-compatible /v1/embeddings endpoint when `base_url` is set."""

    base_url: str = ""
    model: str = ""
    model_dir: str = ""
    api_key_env: str = _default("embed_api_key_env")
    device: str = _default("embed_device")
    batch_size: int = 32

    _catalog: EmbedderCatalog | None = PrivateAttr(default=None)

    def catalog(self) -> EmbedderCatalog:
        """This embedder and, by identity, those of older index versions (see `EmbedderCatalog`)."""
        if self._catalog is None:
            self._catalog = EmbedderCatalog(self.base_url, self.model, self.model_dir, self.api_key_env,
                                            self.batch_size, self.device)
        return self._catalog

    def identity(self) -> str:
        return self.catalog().identity()

    def get(self) -> Embedder:
        return self.catalog().get()

    def recipe(self) -> dict[str, str]:
        """How to load this embedder again (recorded with each index version it builds)."""
        return self.catalog().recipe()

    def for_identity(self, identity: str, recipe: dict[str, str] | None = None) -> Embedder:
        """The embedder an index version was built with (a `ConfigurationError` when it cannot be loaded)."""
        return self.catalog().for_identity(identity, recipe)


class RerankerResource(dg.ConfigurableResource):
    """The optional rerank stage: an OpenAI-compatible `/v1/rerank` endpoint (vLLM serving a
    cross-encoder) or a local cross-encoder directory; neither set means no reranker."""

    base_url: str = ""
    model: str = ""
    model_dir: str = ""
    api_key_env: str = _default("rerank_api_key_env")
    candidates: int = _default("rerank_candidates")
    device: str = _default("embed_device")

    _reranker: Reranker | None = PrivateAttr(default=None)

    def get(self) -> Reranker | None:
        if self._reranker is None:
            self._reranker = configured_reranker(self.base_url, self.model, self.model_dir, self.api_key_env,
                                                 self.device)
        return self._reranker


# Settings that differ per deployment: when the environment sets them, the code location's resources
# carry the variable (dg.EnvVar), resolved at run time, so the UI never bakes their values into config.
DEPLOYMENT_SETTINGS = ("duckdb_path", "llm_base_urls", "llm_fleet_file", "llm_model", "llm_revision",
                       "embed_base_url", "embed_model", "embed_model_dir", "gold_path", "gate_exceptions_path",
                       "rerank_base_url", "rerank_model", "rerank_model_dir")


def build_resources(settings: PlatformSettings, env_vars: bool = False) -> dict[str, dg.ConfigurableResource]:
    """The resources for `settings`. With `env_vars` (the code location), deployment settings that came
    from the environment are passed as `dg.EnvVar`; direct callers (the CLI) get plain values."""

    def value(name: str):
        variable = env_source(name, getattr(settings, name)) if env_vars and name in DEPLOYMENT_SETTINGS else None
        return dg.EnvVar(variable) if variable else getattr(settings, name)

    return {
        # A URL that came from DATABASE_URL stays there (read at use), out of run config and the UI.
        "store": ChunkStoreResource(
            database_url="" if env_source("database_url", settings.database_url) else settings.database_url,
            duckdb_path=value("duckdb_path"),
        ),
        "parsing": ParsingResource(chunk_tokens=settings.chunk_tokens, max_file_mb=settings.max_file_mb,
                                   max_pdf_pages=settings.max_pdf_pages),
        "headers": HeaderSourceResource(source=settings.header_source, base_urls=value("llm_base_urls"),
                                        fleet_file=value("llm_fleet_file"), model=value("llm_model"),
                                        revision=value("llm_revision"),
                                        allow_mixed_models=settings.llm_allow_mixed_models,
                                        context_limit=settings.llm_context_limit, batch_size=settings.llm_batch_size,
                                        sample_metrics=settings.llm_sample_metrics,
                                        api_key_env=settings.llm_api_key_env,
                                        max_in_flight=settings.llm_max_in_flight,
                                        context_tokens=settings.context_tokens),
        "embedder": EmbedderResource(base_url=value("embed_base_url"), model=value("embed_model"),
                                     model_dir=value("embed_model_dir"), api_key_env=settings.embed_api_key_env,
                                     device=settings.embed_device),
        "gate": EvalGateResource(gold_path=value("gold_path"), floors_json=settings.gate_floors_json,
                                 tolerance=settings.gate_tolerance,
                                 max_unhealthy_share=settings.gate_max_unhealthy_share,
                                 min_coverage=settings.gate_min_coverage, exceptions_path=value("gate_exceptions_path"),
                                 fusion_weights_json=settings.fusion_weights_json, rerank=settings.gate_rerank),
        "reranker": RerankerResource(base_url=value("rerank_base_url"), model=value("rerank_model"),
                                     model_dir=value("rerank_model_dir"), api_key_env=settings.rerank_api_key_env,
                                     candidates=settings.rerank_candidates, device=settings.embed_device),
    }


def current_index_version(headers: HeaderSourceResource, embedder: EmbedderResource, parsing: ParsingResource) -> str:
    """The index version the current configuration builds (no request pool, no model loaded)."""
    return index_version_of(index_fingerprint(headers.identity(), embedder.identity(), parsing.chunk_tokens))
