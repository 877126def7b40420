"""Which embedder a deployment uses, and those older index versions were built with, by identity
(`EmbedderCatalog`); its configuration (`EmbedderConfig`, from the `CTX_EMBED_*` settings' declarations)."""

from __future__ import annotations

import os
import threading

from pydantic import PrivateAttr

from contextual_assets.configuration import configured_by
from contextual_assets.embedding import (
    Embedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    sentence_transformer_name,
)
from contextual_assets.embedding_onnx import OnnxSentenceEmbedder
from contextual_assets.errors import ConfigurationError
from contextual_assets.parsing.tokens import bundled_model_dir


class EmbedderCatalog:
    """The deployment's embedder, and the embedders of older index versions by identity: the bundled
    model, a recorded model directory, or another model of the same embedding endpoint. A version is
    never searched or scored with another embedder: a `ConfigurationError` says which one is missing."""

    def __init__(self, base_url: str = "", model: str = "", model_dir: str = "", api_key_env: str = "",
                 batch_size: int = 32, device: str = "auto", threads: int = 0, runtime: str = "torch"):
        self.base_url, self.model, self.model_dir = base_url, model, model_dir
        self.api_key_env, self.batch_size, self.device, self.threads = api_key_env, batch_size, device, threads
        self.runtime = runtime  # what runs a local model: torch, or onnx (`ctx serve`'s queries, embedding_onnx.py)
        self._loaded: dict[str, Embedder] = {}
        self._lock = threading.Lock()

    def identity(self) -> str:
        if self.base_url:
            return f"openai:{self.model}"
        return f"st:{sentence_transformer_name(self.model_dir or str(bundled_model_dir()))}"

    def recipe(self) -> dict[str, str]:
        """How to load this embedder again (recorded with each index version it builds)."""
        return {"identity": self.identity(), "base_url": self.base_url, "model": self.model,
                "model_dir": self.model_dir or ("" if self.base_url else str(bundled_model_dir()))}

    def get(self) -> Embedder:
        return self.for_identity(self.identity())

    def for_identity(self, identity: str, recipe: dict[str, str] | None = None) -> Embedder:
        with self._lock:
            if identity not in self._loaded:
                self._loaded[identity] = self._load(identity, recipe or {})
            return self._loaded[identity]

    def _load(self, identity: str, recipe: dict[str, str]) -> Embedder:
        if identity == self.identity():
            if self.base_url:
                return OpenAIEmbedder(self.base_url, self.model, self.key_for(self.base_url),
                                      batch_size=self.batch_size)
            return self._local(self.model_dir or None)
        if identity.startswith("openai:"):
            base_url = recipe.get("base_url") or self.base_url
            if base_url:
                return OpenAIEmbedder(base_url, identity.removeprefix("openai:"), self.key_for(base_url),
                                      batch_size=self.batch_size)
        else:
            for model_dir in (recipe.get("model_dir"), str(bundled_model_dir())):
                if model_dir and os.path.isdir(model_dir) and f"st:{sentence_transformer_name(model_dir)}" == identity:
                    return self._local(model_dir)
        raise ConfigurationError(
            f"the index version was built with embedder {identity}, which this deployment cannot load (it has "
            f"{self.identity()}); scoring it with another embedder would be meaningless: make {identity} available "
            "(CTX_EMBED_BASE_URL / CTX_EMBED_MODEL) or evaluate another version")

    def key_for(self, base_url: str) -> str | None:
        """The configured key (CTX_EMBED_API_KEY), for the configured endpoint only. An older version's
        recorded endpoint that differs gets none: the key was issued for CTX_EMBED_BASE_URL, and a recipe in
        the store must not be able to send it elsewhere (a keyed old endpoint answers 401, by name)."""
        if not self.api_key_env or not self.base_url or base_url.rstrip("/") != self.base_url.rstrip("/"):
            return None
        return (os.environ.get(self.api_key_env) or "").strip() or None

    def _local(self, model_dir: str | None) -> Embedder:
        embedder = SentenceTransformerEmbedder(model_dir, batch_size=self.batch_size, device=self.device,
                                               threads=self.threads)
        if self.runtime != "onnx":
            return embedder
        return OnnxSentenceEmbedder(embedder, threads=self.threads)



class EmbedderConfig(configured_by("embedder")):
    """sentence-transformers from a local directory (default: the bundled all-MiniLM-L6-v2), or an
    OpenAI-compatible /v1/embeddings endpoint when `base_url` is set (fields from the `CTX_EMBED_*`
    settings' declarations)."""

    batch_size: int = 32
    _catalog: EmbedderCatalog | None = PrivateAttr(default=None)

    def catalog_for(self, threads: int = 0, runtime: str = "torch") -> EmbedderCatalog:
        """A catalog of its own for these embedders, run with `threads` on `runtime` (the search service's)."""
        return EmbedderCatalog(self.base_url, self.model, self.model_dir, self.api_key_env, self.batch_size,
                               self.device, threads=threads, runtime=runtime)

    def catalog(self) -> EmbedderCatalog:
        """This embedder and, by identity, those of older index versions (see `EmbedderCatalog`)."""
        if self._catalog is None:
            self._catalog = self.catalog_for()
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
