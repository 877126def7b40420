"""Index versions an ingest run builds: the one the current settings describe and, while production
differs, production too, whenever its recorded recipe still builds exactly its fingerprint (same
chunker, an available embedder, the same weights behind its header model). Otherwise production
keeps serving and its lag is reported (see `contextual_assets.lifecycle.coverage`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contextual_assets.embedder_config import EmbedderConfig
from contextual_assets.embedding import Embedder
from contextual_assets.errors import ContextualError
from contextual_assets.fleet.config import FleetConfig
from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY
from contextual_assets.headers.base import HeaderSource
from contextual_assets.headers.configured import HeaderConfig, openai_header_source
from contextual_assets.headers.structural import NoHeaderSource, StructuralHeaderSource
from contextual_assets.index_version import index_fingerprint, index_version_of
from contextual_assets.parsing.config import ParsingConfig
from contextual_assets.store import ChunkStore


class NotBuildable(ContextualError):
    """A recorded index version that this deployment can no longer build exactly."""


@dataclass
class BuildTarget:
    role: str  # "current" or the alias it keeps fresh ("production")
    index_version: str
    fingerprint: dict[str, Any]
    recipe: dict[str, Any]
    header_source: HeaderSource
    embedder: Embedder
    chunk_tokens: int
    context_tokens: int
    warnings: list[str] = field(default_factory=list)


def current_target(headers: HeaderConfig, embedder: EmbedderConfig, parsing: ParsingConfig,
                   store: ChunkStore) -> BuildTarget:
    """The version the current settings build (starts the fleet pool; loads no model yet)."""
    source = headers.build(parsing.counter(), store=store)
    fingerprint = index_fingerprint(source.identity, embedder.identity(), parsing.chunk_tokens)
    recipe = {"headers": headers.recipe(source), "embedder": embedder.recipe(), "chunk_tokens": parsing.chunk_tokens}
    target = BuildTarget("current", index_version_of(fingerprint), fingerprint, recipe, source, embedder.get(),
                         parsing.chunk_tokens, headers.context_tokens)
    target.warnings = renamed_weights(store, target)
    return target


def renamed_weights(store: ChunkStore, target: BuildTarget) -> list[str]:
    """A served name that now serves other weights than a recorded version's: say so (the new weights
    build a new index version; the old one's headers are never mixed in)."""
    served = target.recipe["headers"].get("served_model")
    return weights_changes(store, served, target.fingerprint["header_model"], target.index_version) if served else []


def weights_changes(store: ChunkStore, served: str, header_model: str, index_version: str) -> list[str]:
    warnings = []
    for version in store.corpus.index_versions():
        recipe = version.get("recipe") or {}
        before = version["fingerprint"].get("header_model")
        if (version["index_version"] != index_version and recipe.get("headers", {}).get("served_model") == served
                and before != header_model):
            warnings.append(f"model name '{served}' now serves {header_model} (it served {before} for "
                            f"{version['index_version']}): building a new index version {index_version}; "
                            "evaluate it before it replaces production")
    return warnings


def recorded_target(index_version: str, role: str, store: ChunkStore, headers: HeaderConfig,
                    embedder: EmbedderConfig, parsing: ParsingConfig) -> BuildTarget:
    """A recorded version, built again from its recipe (a version recorded before recipes existed is
    tried with this deployment's settings). Raises `NotBuildable` with the reason."""
    record = store.corpus.index_version(index_version)
    if record is None:
        raise NotBuildable(f"{index_version} is not a registered index version")
    fingerprint, recipe = record["fingerprint"], record["recipe"] or {}
    header_recipe = recipe.get("headers") or {}
    chunk_tokens = int(recipe.get("chunk_tokens") or str(fingerprint["chunker"]).rsplit("/", 1)[-1])
    source = _header_source(fingerprint, header_recipe, headers, parsing, store)
    try:
        model = embedder.for_identity(fingerprint["embedder"], recipe.get("embedder"))
    except ContextualError as exc:
        raise NotBuildable(str(exc)) from None
    rebuilt = index_fingerprint(source.identity, model.identity, chunk_tokens)
    if rebuilt != fingerprint:
        changed = "; ".join(f"{key} {fingerprint.get(key)} -> {rebuilt.get(key)}"
                            for key in sorted(set(fingerprint) | set(rebuilt)) if fingerprint.get(key) != rebuilt.get(key))
        raise NotBuildable(f"this deployment would build it differently ({changed})")
    return BuildTarget(role, index_version, fingerprint, recipe, source, model, chunk_tokens,
                       int(header_recipe.get("context_tokens", headers.context_tokens)))


def _header_source(fingerprint: dict[str, Any], recipe: dict[str, Any], headers: HeaderConfig,
                   parsing: ParsingConfig, store: ChunkStore) -> HeaderSource:
    kind = fingerprint["header_source"]
    if kind == "structural":
        return StructuralHeaderSource()
    if kind == "none":
        return NoHeaderSource()
    try:
        config = headers.fleet_config() if headers.resolved_source()[0] == "openai" else None
        served = recipe.get("served_model")
        if recipe.get("fleet") and (config is None or config.model_dump(mode="json", exclude={"model"}) != recipe["fleet"]):
            # Another fleet than today's: its recorded served name, validated against /v1/models.
            config = FleetConfig.model_validate({**recipe["fleet"], "model": served})
        elif served and config is not None and (config.model or DEFAULT_DISCOVERY.resolve_fleet(config).name) != served:
            # Today's fleet under another name (e.g. CTX_LLM_MODEL moved on): production's own name.
            config = config.model_copy(update={"model": served})
        # The same fleet as today's shares its pool (one set of per-replica caps); either way the
        # fingerprint check in `recorded_target` proves the weights behind the name are unchanged.
        if config is None:
            raise NotBuildable("no header fleet is configured and none was recorded")
        return openai_header_source(config, recipe.get("prompt", headers.prompt),
                                    recipe.get("batch_prompt", headers.batch_prompt),
                                    int(recipe.get("max_header_tokens", headers.max_header_tokens)),
                                    parsing.counter(), store)
    except (ContextualError, ValueError) as exc:
        raise NotBuildable(f"its header model {fingerprint['header_model']} is not served as recorded ({exc})") from None


def production_target(current: BuildTarget, alias: str, store: ChunkStore, headers: HeaderConfig,
                      embedder: EmbedderConfig, parsing: ParsingConfig) -> tuple[BuildTarget | None, str | None]:
    """(production's target, None) while production differs from `current` and can be built;
    (None, why not) when it cannot; (None, None) when there is nothing to keep fresh."""
    production = store.aliases.get(alias)
    if production is None or production == current.index_version:
        return None, None
    try:
        return recorded_target(production, alias, store, headers, embedder, parsing), None
    except NotBuildable as exc:
        return None, f"{alias} ({production}) cannot be built by this deployment: {exc}"
