"""Embedding of header + chunk: sentence-transformers (default, the bundled all-MiniLM-L6-v2) or an
OpenAI-compatible /v1/embeddings endpoint. torch is imported only when a local model is used."""

from __future__ import annotations

import os
import threading
import time
from abc import ABC, abstractmethod
from functools import lru_cache


from contextual_assets.errors import ConfigurationError, DependencyUnavailable
from contextual_assets.models import EmbeddedChunk, HeaderedChunk
from contextual_assets.parsing.tokens import bundled_model_dir

TEXT_LAYOUT_VERSION = "layout-v1"


class EmbedderUnavailable(DependencyUnavailable):
    """The embedding endpoint cannot be reached or keeps failing."""


def embedding_text(header: str, text: str) -> str:
    """layout-v1: the header, a blank line, then the chunk; the chunk alone when there is no header."""
    return f"{header}\n\n{text}" if header else text


def sentence_transformer_name(model_dir: str) -> str:
    """A readable model name: the bundled package's model, or the directory's name."""
    path = model_dir.rstrip("/")
    if os.path.basename(path) == "model" and "minilm" in path.lower():
        return "all-MiniLM-L6-v2"
    return os.path.basename(path)


class Embedder(ABC):
    identity: str
    dimension: int

    @abstractmethod
    def embed(self, texts: list[str]) -> list[list[float]]: ...

    def warm(self) -> None:
        """Load what the first `embed` would (a local model), ahead of the first batch."""


def offline_environment() -> None:
    """Local models load from a directory, never from a hub, and print no progress bars."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def torch_device(setting: str = "auto") -> str:
    """`CTX_EMBED_DEVICE`: auto picks cuda when torch sees a GPU, else cpu; cuda without one is an error."""
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigurationError(f"CTX_EMBED_DEVICE={setting} but torch sees no GPU here; use auto or cpu")
    return setting


@lru_cache(maxsize=4)
def _load_sentence_transformer(model_dir: str, device: str = "auto"):
    offline_environment()
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model_dir, device=torch_device(device))


class SentenceTransformerEmbedder(Embedder):
    def __init__(self, model_dir: str | None = None, batch_size: int = 32, device: str = "auto", threads: int = 0):
        self.model_dir = model_dir or str(bundled_model_dir())
        self.batch_size = batch_size
        self.device = device
        self.threads = threads
        self.identity = f"st:{sentence_transformer_name(self.model_dir)}"
        self._lock = threading.Lock()
        self._dimension: int | None = None

    @property
    def model(self):
        return _load_sentence_transformer(self.model_dir, self.device)

    @property
    def dimension(self) -> int:  # type: ignore[override]
        if self._dimension is None:
            getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
            self._dimension = int(getter())
        return self._dimension

    def warm(self) -> None:
        _ = self.model

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        with self._lock:  # one forward pass at a time: torch already uses every core
            if self.threads:
                # A process that embeds one short query at a time (search) gains nothing from intra-op
                # threads, and loses much when another process holds a core: measured 17 ms with 1 thread
                # against 465 ms with 2 on the 2-core dev machine with one busy core. Set in the thread
                # that embeds: OpenMP's count is per thread (a new thread starts with one per core).
                import torch

                torch.set_num_threads(self.threads)
            vectors = self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                        show_progress_bar=False, convert_to_numpy=True)
        return vectors.tolist()


class OpenAIEmbedder(Embedder):
    """An OpenAI-compatible /v1/embeddings endpoint (vLLM, TEI, llama.cpp, a hosted API) over one pooled
    httpx client. Not the OpenAI SDK: importing it costs every run process ~0.6 s, and it parses each
    response into a model per vector. Retries as the SDK does (connection errors, 408, 409, 429, 5xx;
    three times, backing off from 0.5 s)."""

    RETRIES = 3

    def __init__(self, base_url: str, model: str, api_key: str | None = None, batch_size: int = 64):
        if not model:
            raise ConfigurationError("CTX_EMBED_MODEL must name the model served at CTX_EMBED_BASE_URL")
        import httpx

        self.base_url = base_url.rstrip("/")
        self.client = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(600.0, connect=10.0),
                                   headers={"Authorization": f"Bearer {api_key or 'not-needed'}"})
        self.model = model
        self.batch_size = batch_size
        self.identity = f"openai:{model}"
        self.dimension = 0

    def _post(self, inputs: list[str]) -> dict:
        import httpx

        last = ""
        for attempt in range(self.RETRIES + 1):
            if attempt:
                time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
            try:
                response = self.client.post("/embeddings", json={"model": self.model, "input": inputs})
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code < 400:
                return response.json()
            code = response.status_code
            last = f"HTTP {code}: {response.text[:200]}"
            if code not in (408, 409, 429) and code < 500:
                fix = ("set the key named by CTX_EMBED_API_KEY_ENV" if code in (401, 403)
                       else "check CTX_EMBED_BASE_URL and CTX_EMBED_MODEL")
                raise ConfigurationError(f"{self.base_url}/embeddings rejected the request for model "
                                         f"{self.model!r} ({last}); {fix}")
        raise EmbedderUnavailable(f"{self.base_url}/embeddings failed {self.RETRIES + 1} times (last: {last})")

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            data = self._post(texts[start : start + self.batch_size]).get("data") or []
            batch = [item["embedding"] for item in sorted(data, key=lambda d: d["index"])]
            if batch and batch[0] and isinstance(batch[0][0], list):
                raise ConfigurationError(
                    f"{self.base_url} returned one vector per token, not per input; enable pooling on "
                    "the embedding server (e.g. llama.cpp --pooling mean)"
                )
            vectors.extend(batch)
        if vectors:
            self.dimension = len(vectors[0])
        return vectors


def embed_chunks(chunks: list[HeaderedChunk], embedder: Embedder) -> list[EmbeddedChunk]:
    """Header + chunk of each chunk embedded in one call (the pipeline batches across documents itself)."""
    vectors = embedder.embed([embedding_text(c.header, c.text) for c in chunks])
    return [EmbeddedChunk(**c.model_dump(), embedding=v) for c, v in zip(chunks, vectors)]
