"""Dagster resources: the store, the header source, the embedder and the parsing limits."""


import logging
import os
import threading

import dagster as dg
from pydantic import PrivateAttr

from contextual_assets.embedding import Embedder, OpenAIEmbedder, SentenceTransformerEmbedder, sentence_transformer_name
from contextual_assets.errors import ConfigurationError
from contextual_assets.headers.base import HeaderSource
from contextual_assets.fleet.config import FleetConfig
from contextual_assets.fleet.pool import get_fleet
from contextual_assets.headers.openai_source import OpenAIHeaderSource
from contextual_assets.headers.prompt import DEFAULT_PROMPT, load_prompt
from contextual_assets.headers.structural import NoHeaderSource, StructuralHeaderSource
from contextual_assets.index_version import index_fingerprint, index_version_of
from contextual_assets.store import ChunkStore, open_store
from contextual_assets.parsing.tokens import TokenCounter, bundled_model_dir, token_counter

log = logging.getLogger(__name__)

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
    duckdb_path: str = ".ctx/index.duckdb"

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
    chunk_tokens: int = 200
    max_file_mb: float = 100.0
    max_pdf_pages: int = 2000
    tokenizer_dir: str = ""  # empty: the bundled embedder's tokenizer

    def counter(self) -> TokenCounter:
        return token_counter(self.tokenizer_dir or None)


# Fleet setting -> the field of HeaderSourceResource that sets it.
FLEET_FIELDS = {"model": "model", "revision": "revision", "allow_mixed_models": "allow_mixed_models",
                "context_limit": "context_limit", "api_key_env": "api_key_env", "max_in_flight": "max_in_flight",
                "request_timeout_s": "timeout_s", "max_attempts": "max_attempts", "batch_size": "batch_size",
                "max_output_tokens": "max_output_tokens"}


class HeaderSourceResource(dg.ConfigurableResource):
    """`auto` uses the OpenAI-compatible endpoints when configured, otherwise structural headers."""

    source: str = "auto"
    base_urls: str = ""
    fleet_file: str = ""  # YAML with per-replica caps, weights and key variables
    model: str = ""
    revision: str = ""
    allow_mixed_models: bool = False
    context_limit: int = 0  # 0: max_model_len from /v1/models
    api_key_env: str = "CTX_LLM_API_KEY"  # the *name* of the variable; the key itself is never in config
    prompt: str = DEFAULT_PROMPT
    batch_prompt: str = "header_batch_v1"
    batch_size: int = 1
    max_in_flight: int = 16
    max_output_tokens: int = 80
    max_header_tokens: int = 64
    context_tokens: int = 1000
    timeout_s: float = 60.0
    max_attempts: int = 4
    sample_metrics: bool = False  # sample replicas' Prometheus /metrics into a per-run timeline

    def resolved_source(self) -> tuple[str, str | None]:
        """(source, warning): the source that will run and why, when `auto` had to choose."""
        source = self.source.lower()
        if source not in {"auto", "openai", "structural", "none"}:
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
        for key, name in FLEET_FIELDS.items():
            value = getattr(self, name)
            if value == fields[name].default and (self.fleet_file or not value):
                continue  # left at its default: the fleet file (or FleetConfig's own default) wins
            overrides[key] = value
        return FleetConfig.load(base_urls=self.base_urls, fleet_file=self.fleet_file, **overrides)

    def build(self, counter: TokenCounter, store: ChunkStore | None = None) -> HeaderSource:
        """The configured source; for `openai`, a client of the process-wide fleet pool, with the
        header cache in `store` when given."""
        source, _ = self.resolved_source()
        if source == "structural":
            return StructuralHeaderSource()
        if source == "none":
            return NoHeaderSource()
        config = self.fleet_config()
        return OpenAIHeaderSource(
            get_fleet(config), load_prompt(self.prompt), counter, store=store, max_output_tokens=config.max_output_tokens,
            max_header_tokens=self.max_header_tokens, batch_size=config.batch_size,
            batch_prompt=load_prompt(self.batch_prompt) if config.batch_size > 1 else None, revision=config.revision,
        )


class EmbedderResource(dg.ConfigurableResource):
    """sentence-transformers from a local directory (default: the bundled all-MiniLM-L6-v2), or an
    OpenAI-compatible /v1/embeddings endpoint when `base_url` is set."""

    base_url: str = ""
    model: str = ""
    model_dir: str = ""
    api_key_env: str = "CTX_EMBED_API_KEY"
    batch_size: int = 32

    _embedder: Embedder | None = PrivateAttr(default=None)

    def identity(self) -> str:
        if self.base_url:
            return f"openai:{self.model}"
        return f"st:{sentence_transformer_name(self.model_dir or str(bundled_model_dir()))}"

    def get(self) -> Embedder:
        if self._embedder is None:
            if self.base_url:
                self._embedder = OpenAIEmbedder(self.base_url, self.model, os.environ.get(self.api_key_env),
                                                batch_size=self.batch_size)
            else:
                self._embedder = SentenceTransformerEmbedder(self.model_dir or None, batch_size=self.batch_size)
        return self._embedder


def current_index_version(headers: HeaderSourceResource, embedder: EmbedderResource, parsing: ParsingResource) -> str:
    source = headers.build(parsing.counter())  # resolves the served model (discovery is cached)
    return index_version_of(index_fingerprint(source.identity, embedder.identity(), parsing.chunk_tokens))
