"""Dagster resources: the store, the header source, the embedder and the parsing limits."""


import logging
import os
import threading

import dagster as dg
from pydantic import PrivateAttr

from .embedding import Embedder, OpenAIEmbedder, SentenceTransformerEmbedder, sentence_transformer_name
from .errors import ConfigurationError
from .headers.base import HeaderSource
from .headers.openai_source import OpenAIHeaderSource
from .headers.prompt import DEFAULT_PROMPT, load_prompt
from .headers.structural import NoHeaderSource, StructuralHeaderSource
from .store import ChunkStore, open_store
from .tokens import TokenCounter, bundled_model_dir, token_counter

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

    database_url: str = ""
    duckdb_path: str = ".ctx/index.duckdb"

    def open(self) -> ChunkStore:
        key = (self.database_url, os.path.abspath(self.duckdb_path))
        with _STORES_LOCK:
            store = _STORES.get(key)
            if store is None:
                store = open_store(self.database_url or None, self.duckdb_path)
                _STORES[key] = store
            return store


class ParsingResource(dg.ConfigurableResource):
    chunk_tokens: int = 200
    max_file_mb: float = 100.0
    max_pdf_pages: int = 2000
    tokenizer_dir: str = ""  # empty: the bundled embedder's tokenizer

    def counter(self) -> TokenCounter:
        return token_counter(self.tokenizer_dir or None)


class HeaderSourceResource(dg.ConfigurableResource):
    """`auto` uses the OpenAI-compatible endpoints when configured, otherwise structural headers."""

    source: str = "auto"
    base_urls: str = ""
    model: str = ""
    api_key_env: str = "CTX_LLM_API_KEY"  # the *name* of the variable; the key itself is never in config
    prompt: str = DEFAULT_PROMPT
    max_in_flight: int = 16
    max_output_tokens: int = 80
    max_header_tokens: int = 64
    context_tokens: int = 1000
    timeout_s: float = 60.0

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
        return [u.strip() for u in self.base_urls.split(",") if u.strip()]

    def build(self, counter: TokenCounter) -> HeaderSource:
        source, _ = self.resolved_source()
        if source == "structural":
            return StructuralHeaderSource()
        if source == "none":
            return NoHeaderSource()
        return OpenAIHeaderSource(
            self.endpoints(), load_prompt(self.prompt), counter, model=self.model or None,
            api_key=os.environ.get(self.api_key_env) or None, max_output_tokens=self.max_output_tokens,
            max_header_tokens=self.max_header_tokens, max_in_flight=self.max_in_flight, timeout_s=self.timeout_s,
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
