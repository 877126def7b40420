"""The configured deployment as library objects, from the settings: what the CLI, the search service
and the demo use (the Dagster resources adapt the same configurations)."""

from __future__ import annotations

from functools import cached_property

from contextual_assets.embedding import EmbedderConfig
from contextual_assets.headers.configured import HeaderConfig
from contextual_assets.index_version import current_index_version
from contextual_assets.parsing.config import ParsingConfig
from contextual_assets.rerank import RerankerConfig
from contextual_assets.settings import PlatformSettings, fields_from
from contextual_assets.store import ChunkStore
from contextual_assets.store.shared import shared_store


class Platform:
    def __init__(self, settings: PlatformSettings):
        self.settings = settings
        self.headers = HeaderConfig(**fields_from(settings, HeaderConfig.SETTINGS))
        self.parsing = ParsingConfig(**fields_from(settings, ParsingConfig.SETTINGS))
        self.embedder = EmbedderConfig(**fields_from(settings, EmbedderConfig.SETTINGS))
        self.reranker = RerankerConfig(**fields_from(settings, RerankerConfig.SETTINGS))

    @cached_property
    def store(self) -> ChunkStore:
        """The process's shared store (opened and migrated on first use)."""
        return shared_store(self.settings.database_url, self.settings.duckdb_path)

    def current_index_version(self) -> str:
        """The version the current settings build (asks the fleet's /v1/models; loads no model)."""
        return current_index_version(self.headers, self.embedder, self.parsing)
