"""The configured header source: which source runs (`auto` chooses), its fleet, its identity in the
index version and the recipe to build it again. Library code: the Dagster resource, the CLI, the
search service and the evaluation all read the version from here, never from the definitions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contextual_assets.configuration import configured_by
from contextual_assets.errors import ConfigurationError
from contextual_assets.fleet.config import FleetConfig
from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY
from contextual_assets.fleet.pool import get_fleet
from contextual_assets.parsing.tokens import TokenCounter
from contextual_assets.settings import HEADER_SOURCES, PlatformSettings

from .base import HeaderSource
from .openai_source import OpenAIHeaderSource, openai_identity, prompt_version_of
from .prompt import DEFAULT_PROMPT, PromptTemplate, load_prompt
from .structural import NoHeaderSource, StructuralHeaderSource

if TYPE_CHECKING:
    from contextual_assets.store import ChunkStore

_fleet_default = lambda name: FleetConfig.model_fields[name].default  # noqa: E731


class HeaderConfig(configured_by("headers")):
    """`auto` uses the OpenAI-compatible endpoints when configured, otherwise structural headers. The fields
    the `CTX_LLM_*` settings set come from their declarations; these are the rest."""

    prompt: str = DEFAULT_PROMPT
    batch_prompt: str = "header_batch_v1"
    max_output_tokens: int = _fleet_default("max_output_tokens")
    max_header_tokens: int = 64
    max_attempts: int = _fleet_default("max_attempts")

    def resolved_source(self) -> tuple[str, str | None]:
        """(source, warning): the source that will run and why, when `auto` had to choose."""
        source = self.source.lower()
        if source not in HEADER_SOURCES:
            raise ConfigurationError(f"unknown header source '{self.source}' (auto, openai, structural, none)")
        if source == "auto":
            if self.endpoints():
                return "openai", None
            return "structural", (
                "no LLM endpoint configured (CTX_LLM_BASE_URLS): using deterministic structural headers; "
                "set CTX_LLM_BASE_URLS to generate contextual headers with a model"
            )
        return source, None

    def endpoints(self) -> list[str]:
        if self.fleet_file:
            return [r.base_url for r in self.fleet_config().replicas]
        return [u.strip() for u in self.base_urls.split(",") if u.strip()]

    def fleet_config(self) -> FleetConfig:
        fields = HeaderConfig.model_fields
        overrides = {}
        for name in sorted(fields.keys() & FleetConfig.override_names()):  # fields the fleet shares by name
            value = getattr(self, name)
            if value == fields[name].default and (self.fleet_file or not value):
                continue  # left at its default: the fleet file (or FleetConfig's own default) wins
            overrides[name] = value
        return FleetConfig.load(base_urls=self.base_urls, fleet_file=self.fleet_file, **overrides)

    def identity(self) -> dict[str, str]:
        """The header part of the index-version fingerprint, without starting a request pool: for
        `openai`, the weights behind the served model, from `/v1/models` (cached per endpoint; a pin is
        checked there too)."""
        source, _ = self.resolved_source()
        if source == "structural":
            return StructuralHeaderSource().identity
        if source == "none":
            return NoHeaderSource().identity
        config = self.fleet_config()
        resolved = DEFAULT_DISCOVERY.resolve_fleet(config)
        prompt_version = prompt_version_of(*self._prompts(config), config.batch_size)
        return openai_identity(resolved.weights, config.revision, prompt_version)

    def build(self, counter: TokenCounter, store: ChunkStore | None = None) -> HeaderSource:
        """The configured source; for `openai`, a client of the process-wide fleet pool, with the
        header cache in `store` when given."""
        source, _ = self.resolved_source()
        if source == "structural":
            return StructuralHeaderSource()
        if source == "none":
            return NoHeaderSource()
        return openai_header_source(self.fleet_config(), self.prompt, self.batch_prompt, self.max_header_tokens,
                                    counter, store, fallback_share=self.fallback_share)

    def recipe(self, source: HeaderSource) -> dict:
        """How to build `source` again (recorded with each index version it builds): the fleet with its
        served name, the prompts and budgets. API keys stay in their variables."""
        recipe: dict = {"source": source.identity["header_source"], "prompt": self.prompt,
                        "batch_prompt": self.batch_prompt, "max_header_tokens": self.max_header_tokens,
                        "context_tokens": self.context_tokens, "fallback_share": self.fallback_share}
        if isinstance(source, OpenAIHeaderSource):
            recipe["fleet"] = source.fleet.config.model_dump(mode="json", exclude={"model"})
            recipe["served_model"] = source.fleet.model
        return recipe

    def _prompts(self, config: FleetConfig) -> tuple[PromptTemplate, PromptTemplate | None]:
        """The single-chunk prompt, and the batch prompt when requests carry several chunks."""
        return load_prompt(self.prompt), load_prompt(self.batch_prompt) if config.batch_size > 1 else None


def openai_header_source(config: FleetConfig, prompt: str, batch_prompt: str, max_header_tokens: int,
                         counter: TokenCounter, store: ChunkStore | None = None,
                         fallback_share: float = PlatformSettings.default("llm_fallback_share")) -> OpenAIHeaderSource:
    """Headers from the fleet `config` describes (its process-wide pool), with the named prompts."""
    batch = load_prompt(batch_prompt) if config.batch_size > 1 else None
    return OpenAIHeaderSource(
        get_fleet(config), load_prompt(prompt), counter, header_cache=store.header_cache if store is not None else None,
        max_output_tokens=config.max_output_tokens, max_header_tokens=max_header_tokens, batch_size=config.batch_size,
        batch_prompt=batch, revision=config.revision, fallback_share=fallback_share,
    )
