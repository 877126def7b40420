from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

from pydantic import BaseModel

from ..models import Chunk


class HeaderRequest(BaseModel):
    """A chunk and its surroundings in the same section (or document), nearest first on each side,
    already limited to the context budget; the fleet trims further to fit the model's context."""

    chunk: Chunk
    before: list[str] = []
    after: list[str] = []

    def context(self, n_before: int | None = None, n_after: int | None = None) -> str:
        before = self.before[: len(self.before) if n_before is None else n_before]
        after = self.after[: len(self.after) if n_after is None else n_after]
        return "\n\n".join([*reversed(before), self.chunk.text, *after])


class HeaderResult(BaseModel):
    header: str
    source: str  # "openai" | "structural" | "none"
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = 1
    endpoint: str = ""
    failovers: int = 0


class HeaderSource(ABC):
    name: str

    @property
    @abstractmethod
    def identity(self) -> dict[str, str]:
        """What goes into the index-version fingerprint (source, model, prompt version)."""

    @abstractmethod
    def generate(self, requests: list[HeaderRequest]) -> list[HeaderResult]:
        """One result per request, in order; raises HeaderGenerationError when a header cannot be made."""

    def stream(self, requests: list[HeaderRequest], on_result: Callable[[int, HeaderResult], None],
               cancel: threading.Event | None = None) -> list[HeaderResult]:
        """Like `generate`, but calls `on_result(index, result)` as each header is ready, so that
        embedding can start before the whole document has its headers. Stops early when `cancel` is set."""
        results = self.generate(requests)
        for index, result in enumerate(results):
            on_result(index, result)
        return results

    def close(self) -> None:  # pragma: no cover - trivial
        pass
