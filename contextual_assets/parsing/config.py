"""The parsing limits and the chunk budget a deployment runs with (the Dagster resource adapts it)."""

from __future__ import annotations

from contextual_assets.configuration import configured_by

from .tokens import TokenCounter, token_counter


class ParsingConfig(configured_by("parsing")):
    """The chunk budget and file limits come from their settings' declarations."""

    tokenizer_dir: str = ""  # empty: the bundled embedder's tokenizer

    @property
    def max_bytes(self) -> int:
        return int(self.max_file_mb * 1_000_000)

    def counter(self) -> TokenCounter:
        return token_counter(self.tokenizer_dir or None)
