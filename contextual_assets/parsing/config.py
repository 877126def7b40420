"""The parsing limits and the chunk budget a deployment runs with (the Dagster resource adapts it)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel

from contextual_assets.settings import PlatformSettings

from .tokens import TokenCounter, token_counter

_default = PlatformSettings.default


class ParsingConfig(BaseModel):
    chunk_tokens: int = _default("chunk_tokens")
    max_file_mb: float = _default("max_file_mb")
    max_pdf_pages: int = _default("max_pdf_pages")
    tokenizer_dir: str = ""  # empty: the bundled embedder's tokenizer

    SETTINGS: ClassVar[dict[str, str]] = {"chunk_tokens": "chunk_tokens", "max_file_mb": "max_file_mb",
                                          "max_pdf_pages": "max_pdf_pages"}

    @property
    def max_bytes(self) -> int:
        return int(self.max_file_mb * 1_000_000)

    def counter(self) -> TokenCounter:
        return token_counter(self.tokenizer_dir or None)
