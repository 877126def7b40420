"""Rerank stage: a cross-encoder rescores the fused candidates of a query.

Two sources: an OpenAI-compatible server's `POST /v1/rerank` (vLLM serving a cross-encoder, or any
Jina/Cohere-compatible endpoint), or a local sentence-transformers cross-encoder loaded offline from a
directory. The reranker reads what the embedder read: the chunk's header and its text.
"""

from __future__ import annotations

import math
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence

from pydantic import PrivateAttr

from contextual_assets.embedding import (
    embedding_text,
    offline_environment,
    torch_device,
)
from contextual_assets.configuration import configured_by
from contextual_assets.errors import (
    ConfigurationError,
    ContextualError,
    DependencyUnavailable,
)
from contextual_assets.models import SearchHit


class RerankError(ContextualError):
    """The reranker could not score a query's candidates."""


class RerankUnavailable(RerankError, DependencyUnavailable):
    """The reranker endpoint did not answer (an outage, not a setting to change)."""


class Reranker(ABC):
    identity: str

    @abstractmethod
    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score per text, higher is better."""

    def rerank(self, query: str, hits: Sequence[SearchHit], k: int) -> list[SearchHit]:
        """The hits reordered by relevance (their score becomes the reranker's), best k first."""
        if not hits:
            return []
        scores = self.scores(query, [embedding_text(h.header, h.text) for h in hits])
        order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))[:k]
        return [hits[i].model_copy(update={"score": float(scores[i])}) for i in order]


class HTTPReranker(Reranker):
    """`POST {base_url}/rerank` with `{model, query, documents}`; vLLM and Jina/Cohere answer
    `results: [{index, relevance_score}]`."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 30.0):
        if not model:
            raise ConfigurationError("CTX_RERANK_MODEL must name the reranker served at CTX_RERANK_BASE_URL")
        import httpx

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.identity = f"rerank:{model}"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        import httpx

        url = f"{self.base_url}/rerank"
        try:
            response = self._client.post(url, json={"model": self.model, "query": query, "documents": list(texts),
                                                    "top_n": len(texts)})
        except httpx.HTTPError as exc:
            raise RerankUnavailable(f"reranker at {url} unreachable: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise RerankError(f"reranker at {url} answered {response.status_code}: {response.text[:200]}")
        try:
            scores: dict[int, float] = {int(item["index"]): float(item["relevance_score"])
                                        for item in response.json()["results"]}
        except (ValueError, KeyError, TypeError) as exc:
            raise RerankError(f"reranker at {url} answered an unexpected body ({type(exc).__name__})") from None
        if sorted(scores) != list(range(len(texts))) or not all(math.isfinite(v) for v in scores.values()):
            raise RerankError(f"reranker at {url} scored {len(scores)} of {len(texts)} documents (or gave a "
                              "non-finite score)")
        return [scores[i] for i in range(len(texts))]


class CrossEncoderReranker(Reranker):
    """A sentence-transformers cross-encoder from a local directory (never downloaded)."""

    def __init__(self, model_dir: str, device: str = "auto", batch_size: int = 32):
        if not os.path.isdir(model_dir):
            raise ConfigurationError(f"CTX_RERANK_MODEL_DIR={model_dir} is not a directory")
        self.model_dir = model_dir
        self.identity = f"ce:{os.path.basename(model_dir.rstrip('/'))}"
        self.device, self.batch_size = device, batch_size
        self._model = None
        self._lock = threading.Lock()

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        with self._lock:  # one forward pass at a time: torch already uses every core
            if self._model is None:
                offline_environment()
                from sentence_transformers import CrossEncoder

                self._model = CrossEncoder(self.model_dir, device=torch_device(self.device))
            values = self._model.predict([(query, t) for t in texts], batch_size=self.batch_size,
                                         show_progress_bar=False)
        return [float(v) for v in values]


def configured_reranker(base_url: str, model: str, model_dir: str, api_key_env: str,
                        device: str = "auto") -> Reranker | None:
    """The reranker the settings name (an endpoint wins over a local directory), or None."""
    if base_url:
        return HTTPReranker(base_url, model, os.environ.get(api_key_env) if api_key_env else None)
    if model_dir:
        return CrossEncoderReranker(model_dir, device)
    return None


class RerankerConfig(configured_by("reranker")):
    """The optional rerank stage: an OpenAI-compatible `/v1/rerank` endpoint (vLLM serving a
    cross-encoder) or a local cross-encoder directory; neither set means no reranker."""

    _reranker: Reranker | None = PrivateAttr(default=None)

    def get(self) -> Reranker | None:
        if self._reranker is None:
            self._reranker = configured_reranker(self.base_url, self.model, self.model_dir, self.api_key_env,
                                                 self.device)
        return self._reranker
