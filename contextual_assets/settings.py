"""Platform settings: one pydantic-settings model, the single place where every default is written.

Read from the environment (`CTX_*`, and `DATABASE_URL`), so the CLI, the Dagster code location and
the benchmarks in two shells with the same environment see the same index. A bad value is a
`ConfigurationError` whose one-line message names the variable and what it accepts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import (
    AliasChoices,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

# The ground floor: settings import nothing of the platform but its errors and the pure fusion model
# (which validates CTX_FUSION_WEIGHTS); the modules that take a setting as a parameter default to it
# from here (`PlatformSettings.default`).
from contextual_assets.errors import ConfigurationError
from contextual_assets.fusion import FusionWeights

ENV_PREFIX = "CTX_"
HEADER_SOURCES = ("auto", "openai", "structural", "none")


class PlatformSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, populate_by_name=True, str_strip_whitespace=True,
                                      extra="ignore", validate_default=True)

    home: str = Field(".ctx", description="a directory for the embedded store and Dagster's home")
    inbox: str = Field("inbox", description="the folder or object-store URL (s3://bucket/prefix, any fsspec URL) "
                                            "the new_documents sensor watches")
    inbox_interval_s: int = Field(5, ge=5, description="seconds >= 5 between ticks of the new_documents sensor "
                                                       "(Dagster's sensor loop passes every 5 s)")
    inbox_settle_s: float = Field(5.0, ge=0, description="seconds >= 0 a new or changed inbox file must stay "
                                                         "unchanged before it is taken (0: at once)")
    inbox_retry_limit: int = Field(3, ge=0, description="an integer >= 0 (times the sensor re-requests a document "
                                                        "whose run failed before it gives up)")
    inbox_retry_base_s: float = Field(60.0, ge=0, description="seconds >= 0 before the first re-request of a failed "
                                                              "document (doubled for each further one)")
    inbox_max_remove: int = Field(20, ge=0, description="an integer >= 0 (a sensor tick that would remove more "
                                                        "documents than this removes none until `ctx inbox "
                                                        "confirm-removals`)")
    inbox_max_remove_share: float = Field(0.2, ge=0, le=1, description="a share from 0 to 1 of the inbox's "
                                          "documents one tick may remove (at least one; removing all of them is "
                                          "held too, unless 1); a tick over it removes none until confirmed")
    ingest_retries: int = Field(2, ge=0, description="an integer >= 0 (in-run retries of an ingest step that "
                                                     "failed for a retryable reason)")
    ingest_retry_delay_s: float = Field(10.0, ge=0, description="seconds >= 0 before the first in-run retry "
                                                                "(doubled for each further one)")
    database_url: str = Field("", validation_alias="DATABASE_URL",
                              description="a postgresql:// URL (empty: the embedded DuckDB file)")
    duckdb_path: str = Field("", description="a file path (empty: <CTX_HOME>/index.duckdb)")
    header_source: str = Field("auto", description="auto, openai, structural or none")
    llm_base_urls: str = Field("", validation_alias=AliasChoices("CTX_LLM_BASE_URLS", "CTX_LLM_BASE_URL"),
                               description="comma-separated http(s):// base URLs of OpenAI-compatible replicas")
    llm_fleet_file: str = Field("", description="a YAML fleet file (replicas with caps, weights and key variables)")
    llm_model: str = Field("", description="a served model name to pin (empty: discovered from /v1/models)")
    llm_revision: str = Field("", description="the pinned model's revision (part of the index version)")
    llm_allow_mixed_models: bool = Field(False, description="true or false")
    llm_context_limit: int = Field(0, ge=0, description="a token count >= 0 (0: max_model_len from /v1/models)")
    llm_batch_size: int = Field(1, ge=1, le=32, description="chunks per request, 1 to 32")
    llm_sample_metrics: bool = Field(False, description="true or false")
    llm_fallback_share: float = Field(0.05, ge=0, le=1, description="a share from 0 to 1 of a document's chunks that "
                                      "may get a structural header when the model gives no valid one (0: none)")
    llm_api_key_env: str = Field("CTX_LLM_API_KEY", description="the name of the variable that holds the API key")
    llm_max_in_flight: int = Field(0, ge=0, description="a ceiling on requests in flight per replica, an integer "
                                                        ">= 0 (0: none; each replica's useful concurrency is found "
                                                        "from its own signals)")
    llm_request_timeout_s: float = Field(60.0, gt=0, description="seconds > 0 to wait for a header answer "
                                                                  "before the request is retried elsewhere")
    embed_base_url: str = Field("", description="an OpenAI-compatible /v1 base URL (empty: the bundled MiniLM)")
    embed_model: str = Field("", description="the embedding model served at CTX_EMBED_BASE_URL")
    embed_api_key_env: str = Field("CTX_EMBED_API_KEY", description="the name of the variable that holds the key")
    embed_model_dir: str = Field("", description="a local sentence-transformers model directory (empty: the "
                                                 "bundled all-MiniLM-L6-v2)")
    embed_device: str = Field("auto", description="auto, cpu or cuda (auto: cuda when torch sees a GPU)")
    fusion_weights_json: str = Field(FusionWeights().model_dump_json(exclude={"candidates"}),
                                     validation_alias="CTX_FUSION_WEIGHTS",
                                     description='a JSON object of list weights, e.g. {"dense": 0.5, "lexical": 1.0}')
    rerank_base_url: str = Field("", description="an OpenAI-compatible base URL serving POST /v1/rerank (vLLM)")
    rerank_model: str = Field("", description="the reranker model name at CTX_RERANK_BASE_URL")
    rerank_model_dir: str = Field("", description="a local sentence-transformers cross-encoder directory")
    rerank_api_key_env: str = Field("CTX_RERANK_API_KEY", description="the name of the variable that holds the key")
    rerank_candidates: int = Field(50, ge=1, le=200, description="fused hits sent to the reranker, 1 to 200")
    search_url: str = Field("", description="a running `ctx serve` URL, e.g. http://127.0.0.1:8765 (empty: "
                                            "ctx search works in-process)")
    search_token_env: str = Field("CTX_SEARCH_TOKEN", description="the name of the variable that holds the search "
                                                                  "service's bearer token")
    serve_host: str = Field("127.0.0.1", description="the address `ctx serve` binds")
    serve_port: int = Field(8765, ge=1, le=65535, description="a TCP port, 1 to 65535")
    serve_max_k: int = Field(100, ge=1, le=1000, description="the largest k a search request may ask, 1 to 1000")
    serve_in_memory_max_chunks: int = Field(
        1_000_000, ge=0, description="index versions of up to this many chunks keep their BM25 postings (and, on "
        "DuckDB, their chunk rows) in `ctx serve`'s memory; larger ones are searched in the database; 0: never")
    serve_query_runtime: str = Field(
        "onnx", description="onnx or torch: what embeds `ctx serve`'s queries with a local model on the CPU (onnx: "
        "exported at its first query and used only where it gives torch's vectors)")
    serve_max_request_bytes: int = Field(16_384, ge=256, description="the largest request body in bytes, >= 256")
    chunk_tokens: int = Field(200, ge=1, description="an integer >= 1 (embedder tokens per chunk)")
    context_tokens: int = Field(1000, ge=0, description="an integer >= 0 (tokens of section context per request)")
    max_file_mb: float = Field(100.0, gt=0, description="a size in MB > 0")
    max_pdf_pages: int = Field(2000, ge=1, description="an integer >= 1")
    partitions_per_run: int = Field(200, ge=1, description="documents per ingest run, an integer >= 1")
    gold_path: str = Field("", validation_alias="CTX_GOLD_FILE", description="a gold file (JSONL or YAML)")
    source_root: str = Field("", description="a folder: files under it are keyed by their path relative to it "
                                             "(empty: the current directory)")
    gate_floors_json: str = Field('{"pass_at_10": 0.5, "mrr": 0.25}', validation_alias="CTX_GATE_FLOORS",
                                  description='a JSON object of metric floors, e.g. {"pass_at_10": 0.6}')
    gate_tolerance: float = Field(0.02, ge=0, le=1, description="a number from 0 to 1")
    gate_max_unhealthy_share: float = Field(0.2, ge=0, le=1, description="a number from 0 to 1 (largest stale+broken "
                                                                        "gold share a candidate may have)")
    gate_min_coverage: float = Field(1.0, ge=0, le=1, description="a number from 0 to 1 (share of live documents "
                                                                 "a candidate must hold at their current revision)")
    gate_rerank: bool = Field(False, description="true or false (retrieval_eval reranks the hybrid lists with the "
                                                 "configured reranker; part of the evaluator identity)")
    gate_exceptions_path: str = Field("", validation_alias="CTX_GATE_EXCEPTIONS",
                                      description="a YAML or JSONL file of reviewed exceptions")

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigurationError(describe_errors(exc, values)) from None

    @field_validator("header_source")
    @classmethod
    def _header_source(cls, value: str) -> str:
        if value.lower() not in HEADER_SOURCES:
            raise ValueError(f"unknown header source '{value}'")
        return value.lower()

    @field_validator("embed_device")
    @classmethod
    def _embed_device(cls, value: str) -> str:
        if value.lower() not in ("auto", "cpu", "cuda") and not value.lower().startswith("cuda:"):
            raise ValueError(f"unknown device '{value}'")
        return value.lower()

    @field_validator("serve_query_runtime")
    @classmethod
    def _serve_query_runtime(cls, value: str) -> str:
        if value.lower() not in ("onnx", "torch"):
            raise ValueError(f"unknown runtime '{value}'")
        return value.lower()

    @field_validator("fusion_weights_json")
    @classmethod
    def _fusion_weights(cls, value: str) -> str:
        try:
            FusionWeights.model_validate_json(value or "{}")
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ValueError(f"{'.'.join(map(str, first['loc'])) or 'value'}: {first['msg']}") from None
        return value or "{}"

    @field_validator("search_url")
    @classmethod
    def _search_url(cls, value: str) -> str:
        if value and not value.lower().startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL")
        return value

    @field_validator("gate_floors_json")
    @classmethod
    def _floors(cls, value: str) -> str:
        floors = json.loads(value or "{}")  # a JSONDecodeError is a ValueError: reported with the variable
        if not isinstance(floors, dict) or not all(isinstance(v, (int, float)) for v in floors.values()):
            raise ValueError("expected a JSON object of metric -> number")
        return value or "{}"

    @model_validator(mode="after")
    def _default_duckdb_path(self) -> "PlatformSettings":
        if not self.duckdb_path:
            self.duckdb_path = str(Path(self.home) / "index.duckdb")
        return self

    @classmethod
    def from_env(cls) -> "PlatformSettings":
        return cls()

    @classmethod
    def default(cls, name: str) -> Any:
        """A setting's default, for the resources and functions that take it as a parameter."""
        return cls.model_fields[name].default


def fields_from(settings: PlatformSettings, mapping: Mapping[str, str]) -> dict[str, Any]:
    """A configuration's fields from `settings`: `mapping` is field name -> setting name."""
    return {field: getattr(settings, name) for field, name in mapping.items()}


@contextmanager
def settings_scope(settings: PlatformSettings) -> Iterator[None]:
    """Within the block, `active_settings()` is `settings` (definitions built for given settings)."""
    token = _ACTIVE.set(settings)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_settings() -> PlatformSettings:
    """The settings of the `settings_scope` around the caller, else the environment's."""
    return _ACTIVE.get() or PlatformSettings.from_env()


def env_names(name: str) -> list[str]:
    """The environment variables that set field `name`, in the order they are looked up."""
    alias = PlatformSettings.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return [alias] if isinstance(alias, str) else [f"{ENV_PREFIX}{name.upper()}"]


def env_source(name: str, value: Any) -> str | None:
    """The variable that gave field `name` its `value`, when the environment did."""
    for variable in env_names(name):
        if variable in os.environ:
            return variable if os.environ[variable].strip() == str(value) else None
    return None


def describe_errors(exc: ValidationError, given: dict[str, Any]) -> str:
    """One line: each bad value with the variable that set it and what the setting accepts."""
    fields = PlatformSettings.model_fields
    problems = []
    for error in exc.errors():
        key = str(error["loc"][0]) if error["loc"] else ""
        name = key if key in fields else next((n for n in fields if key in env_names(n)), key)
        if name in given or name not in fields:
            variable = name  # passed in code, not through the environment
        else:
            variable = next((v for v in env_names(name) if v in os.environ), env_names(name)[0])
        accepts = f"; expected {fields[name].description}" if name in fields and fields[name].description else ""
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{variable}={error.get('input')!r} is not valid ({message}){accepts}")
    return "; ".join(problems)


_ACTIVE: ContextVar[PlatformSettings | None] = ContextVar("ctx_active_settings", default=None)
