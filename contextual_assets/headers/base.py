from __future__ import annotations

from abc import ABC, abstractmethod

from pydantic import BaseModel

from ..models import Chunk


class HeaderRequest(BaseModel):
    chunk: Chunk
    context: str  # the chunk's section (or the document), already trimmed to the prompt budget


class HeaderResult(BaseModel):
    header: str
    source: str  # "openai" | "structural" | "none"
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = 1
    endpoint: str = ""


class HeaderSource(ABC):
    name: str

    @property
    @abstractmethod
    def identity(self) -> dict[str, str]:
        """What goes into the index-version fingerprint (source, model, prompt version)."""

    @abstractmethod
    def generate(self, requests: list[HeaderRequest]) -> list[HeaderResult]:
        """One result per request, in order; raises HeaderGenerationError when a header cannot be made."""

    def close(self) -> None:  # pragma: no cover - trivial
        pass
