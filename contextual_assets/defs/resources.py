"""Dagster resources: thin adapters over the library's configurations (the store, the header source,
the embedder, the reranker, the parsing limits, the gate). Each resource *is* its configuration model,
so the UI shows the fields and every method lives in library code.

Settings that differ per deployment are passed as `dg.EnvVar` when the environment set them, so the UI
shows the variable's name rather than baking its value into run config.
"""

from __future__ import annotations

import os

import dagster as dg

from contextual_assets.configuration import active_settings, deployment_settings, env_source, targets
from contextual_assets.deployment import configured_deployment
from contextual_assets.embedder_config import EmbedderConfig
from contextual_assets.headers.configured import HeaderConfig
from contextual_assets.parsing.config import ParsingConfig
from contextual_assets.rerank import RerankerConfig
from contextual_assets.settings import PlatformSettings
from contextual_assets.store import ChunkStore
from contextual_assets.store.shared import shared_store
from eval_assets.gate_config import GateConfig


class ChunkStoreResource(dg.ConfigurableResource):
    """Postgres + pgvector when `database_url` is set, else the embedded DuckDB file."""

    database_url: str = ""  # explicit URL (tests); production leaves it empty and sets the variable below
    database_url_env: str = "DATABASE_URL"  # read at open(): the URL and its password never enter config
    duckdb_path: str = str(PlatformSettings.default("home")) + "/index.duckdb"

    def open(self) -> ChunkStore:
        url = self.database_url or os.environ.get(self.database_url_env, "").strip()
        return shared_store(url, self.duckdb_path)


class ParsingResource(ParsingConfig, dg.ConfigurableResource):
    """Parsing limits and the chunk budget (`ParsingConfig`)."""


class HeaderSourceResource(HeaderConfig, dg.ConfigurableResource):
    """The header source and its fleet (`HeaderConfig`)."""


class EmbedderResource(EmbedderConfig, dg.ConfigurableResource):
    """The embedder, and those of older index versions by identity (`EmbedderConfig`)."""


class RerankerResource(RerankerConfig, dg.ConfigurableResource):
    """The optional rerank stage (`RerankerConfig`)."""


class EvalGateResource(GateConfig, dg.ConfigurableResource):
    """The gate's policy, gold set and exceptions (`GateConfig`)."""


# Configuration group -> the resource that adapts its configuration object.
RESOURCES = {"parsing": ParsingResource, "headers": HeaderSourceResource, "embedder": EmbedderResource,
             "gate": EvalGateResource, "reranker": RerankerResource}


def build_resources(settings: PlatformSettings, env_vars: bool = False) -> dict[str, dg.ConfigurableResource]:
    """The resources of the configured deployment (`configured_deployment`). With `env_vars` (the code
    location), settings declared `deployment=True` that came from the environment are passed as
    `dg.EnvVar`; direct callers get plain values."""
    deployment = configured_deployment(settings)
    per_deployment = deployment_settings() if env_vars else ()
    resources: dict[str, dg.ConfigurableResource] = {
        # A URL that came from DATABASE_URL stays there (read at use), out of run config and the UI.
        "store": ChunkStoreResource(
            database_url="" if env_source("database_url", settings.database_url) else settings.database_url,
            duckdb_path=_env_var_or_value(settings, "duckdb_path", per_deployment),
        ),
    }
    for group, resource in RESOURCES.items():
        values = getattr(deployment, group).model_dump()
        for field, name in targets(group).items():
            values[field] = _env_var_or_value(settings, name, per_deployment)
        resources[group] = resource(**values)
    return resources


def _env_var_or_value(settings: PlatformSettings, name: str, per_deployment: tuple[str, ...]):
    variable = env_source(name, getattr(settings, name)) if name in per_deployment else None
    return dg.EnvVar(variable) if variable else getattr(settings, name)


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources=build_resources(active_settings(), env_vars=True))
