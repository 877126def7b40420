"""The configured deployment, assembled once from the settings (`configured_deployment`): its configuration
objects and its store. The CLI, the search service, the demo and the Dagster resources
(`defs/resources.py`) all take their configurations from here."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from contextual_assets.configuration import configuration_values
from contextual_assets.embedder_config import EmbedderConfig
from contextual_assets.headers.configured import HeaderConfig
from contextual_assets.index_version import current_index_version
from contextual_assets.ingest.inbox.watcher import InboxOptions
from contextual_assets.parsing.config import ParsingConfig
from contextual_assets.rerank import RerankerConfig
from contextual_assets.settings import PlatformSettings
from contextual_assets.store import ChunkStore
from contextual_assets.store.shared import shared_store
from eval_assets.gate_config import GateConfig


@dataclass
class Deployment:
    settings: PlatformSettings
    headers: HeaderConfig
    parsing: ParsingConfig
    embedder: EmbedderConfig
    reranker: RerankerConfig
    gate: GateConfig
    inbox: InboxOptions

    @cached_property
    def store(self) -> ChunkStore:
        """The process's shared store (opened and migrated on first use)."""
        return shared_store(self.settings.database_url, self.settings.duckdb_path)

    def current_index_version(self) -> str:
        """The version the current settings build (asks the fleet's /v1/models; loads no model)."""
        return current_index_version(self.headers, self.embedder, self.parsing)


# Configuration group (`setting(sets="<group>.<field>")`) -> its configuration object.
CONFIGURATIONS = {"headers": HeaderConfig, "parsing": ParsingConfig, "embedder": EmbedderConfig,
                  "reranker": RerankerConfig, "gate": GateConfig, "inbox": InboxOptions}


def configured_deployment(settings: PlatformSettings) -> Deployment:
    """Every configuration object, from the settings that set its fields (the others keep their defaults)."""
    return Deployment(settings, **{group: configuration(**configuration_values(group, settings))
                                   for group, configuration in CONFIGURATIONS.items()})
