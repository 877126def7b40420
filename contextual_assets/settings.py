"""Platform settings, each declared once (`setting`): its variable, type, default, bounds, choices, meaning,
which configuration fields it sets and whether its value differs per deployment. Everything else derives
from the declarations (`contextual_assets/configuration.py`): the configuration objects' and Dagster
resources' fields, the code location's `dg.EnvVar` bindings, the README's and docs/configuration.md's
tables (`python -m contextual_assets.settings_docs`) and the one-line error naming a bad value's variable.
Read from the environment (`CTX_*`, `DATABASE_URL`): the CLI, the code location and the benchmarks agree.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The ground floor: settings import nothing of the platform but its errors and the pure fusion model
# (which validates CTX_FUSION_WEIGHTS).
from contextual_assets.errors import ConfigurationError
from contextual_assets.fusion import FusionWeights

ENV_PREFIX = "CTX_"
HEADER_SOURCES = ("auto", "openai", "structural", "none")
LOG_FORMATS = ("text", "json")
# The configuration objects a setting may set (`sets="<group>.<field>"`).
GROUPS = ("headers", "parsing", "embedder", "reranker", "gate", "inbox")


def setting(default: Any, *, area: str, meaning: str, accepts: str | None = None, sets: str | tuple[str, ...] = (),
            deployment: bool = False, env: str | AliasChoices | None = None, shown: str | None = None,
            choices: tuple[str, ...] = (), **bounds: Any) -> Any:
    """One setting's declaration. `area` groups it in the README; `accepts` is said in the error for a bad
    value (default: from its type and bounds); `sets` names the configuration fields it sets
    ("headers.max_in_flight"); `deployment`: its value differs per deployment, so the code location
    passes the variable (`dg.EnvVar`), not the value; `env`: its variable when not CTX_<NAME>; `shown`:
    the default as the docs show it, when not the value itself; `choices`: the values a string may take
    (any case; stored lower-case)."""
    targets = [sets] if isinstance(sets, str) else list(sets)
    unknown = [t for t in targets if t.partition(".")[0] not in GROUPS]
    if unknown:
        raise ValueError(f"setting sets {unknown}: the group must be one of {GROUPS}")
    return Field(default, description=meaning, validation_alias=env, json_schema_extra={
        "area": area, "accepts": accepts, "sets": targets, "deployment": deployment, "shown": shown,
        "choices": list(choices)}, **bounds)


class PlatformSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, populate_by_name=True, str_strip_whitespace=True,
                                      extra="ignore", validate_default=True)

    # paths
    home: str = setting(
        ".ctx", area="paths",
        meaning="working directory of the embedded store and `DAGSTER_HOME`")
    duckdb_path: str = setting(
        "", area="paths", deployment=True, shown="`$CTX_HOME/index.duckdb`",
        meaning="DuckDB store file")
    source_root: str = setting(
        "", area="paths", shown="(the current directory)",
        meaning="`ctx ingest` keys a file by its path relative to the inbox, else to this folder, else by its "
                "absolute path")

    # logging
    log_format: str = setting(
        "text", area="logging", choices=LOG_FORMATS,
        meaning="`json`: every process logs one JSON object a line to stderr (time, level, logger, message and the "
                "request id where there is one), for log shippers; `text`: plain lines")

    # store
    database_url: str = setting(
        "", area="store", env="DATABASE_URL", shown="(unset: DuckDB)",
        meaning="Postgres + pgvector store, e.g. `postgresql://user:pw@host/db`")

    # inbox, retries
    inbox: str = setting(
        "inbox", area="inbox, retries", sets="inbox.inbox",
        meaning="folder or object-store URL (`s3://bucket/prefix`, any fsspec URL) watched by the `new_documents` "
                "sensor (see [inbox.md](inbox.md))")
    inbox_interval_s: int = setting(
        5, area="inbox, retries", sets="inbox.interval_s", ge=5,
        meaning="seconds between ticks of the `new_documents` sensor (at least 5: Dagster's sensor loop passes "
                "every 5 s, and the sensor ticks at its first pass after the interval, its minimum interval being "
                "one second less); with the settle time it bounds how soon a dropped file starts ingesting")
    inbox_settle_s: float = setting(
        5.0, area="inbox, retries", sets="inbox.settle_s", ge=0,
        meaning="seconds a new or changed inbox file must stay unchanged before it is taken (0: at once)")
    inbox_retry_limit: int = setting(
        3, area="inbox, retries", sets="inbox.retry_limit", ge=0,
        meaning="times the sensor requests a document whose run failed again before it gives up")
    inbox_retry_base_s: float = setting(
        60.0, area="inbox, retries", sets="inbox.retry_base_s", ge=0,
        meaning="seconds before the first such retry, doubled for each further one")
    inbox_max_remove: int = setting(
        20, area="inbox, retries", sets="inbox.max_remove", ge=0,
        meaning="a tick that would remove more documents than this removes none: it warns, holds them, and removes "
                "them at the tick after `ctx inbox confirm-removals` (0: every removal needs a confirmation); see "
                "[inbox.md](inbox.md#guarded-deletions)")
    inbox_max_remove_share: float = setting(
        0.2, area="inbox, retries", sets="inbox.max_remove_share", ge=0, le=1,
        meaning="the same, as a share of the inbox's documents: a tick may remove at most this share (but always "
                "one document), and never all of them (1: no share limit)")
    ingest_retries: int = setting(
        2, area="inbox, retries", ge=0,
        meaning="in-run retries of an ingest step that failed for a retryable reason (0: none)")
    ingest_retry_delay_s: float = setting(
        10.0, area="inbox, retries", ge=0,
        meaning="seconds before the first in-run retry, doubled for each further one (with jitter)")

    # ingest
    chunk_tokens: int = setting(
        200, area="ingest", sets="parsing.chunk_tokens", ge=1,
        meaning="chunk budget in embedder tokens (MiniLM reads 256; room is left for the header)")
    context_tokens: int = setting(
        1000, area="ingest", sets="headers.context_tokens", ge=0,
        meaning="section context sent with each chunk, trimmed around it")
    max_file_mb: float = setting(
        100.0, area="ingest", sets=("parsing.max_file_mb", "inbox.max_file_mb"), gt=0,
        meaning="files larger than this many MB are refused with the reason")
    max_pdf_pages: int = setting(
        2000, area="ingest", sets="parsing.max_pdf_pages", ge=1,
        meaning="PDFs with more pages than this are refused with the reason")
    partitions_per_run: int = setting(
        200, area="ingest", sets="inbox.partitions_per_run", ge=1,
        meaning="document partitions per run, for backfills (the asset's backfill policy), sensor ticks and `ctx "
                "ingest`")

    # headers
    header_source: str = setting(
        "auto", area="headers", sets="headers.source", choices=HEADER_SOURCES,
        meaning="`openai`, `structural`, `none`; `auto` = `openai` when endpoints are set, else `structural` with a"
                " warning")
    llm_base_urls: str = setting(
        "", area="headers", sets="headers.base_urls", deployment=True, env=AliasChoices("CTX_LLM_BASE_URLS", "CTX_LLM_BASE_URL"),
        meaning="comma-separated OpenAI-compatible base URLs (vLLM replicas, a router, a cloud API)")
    llm_fleet_file: str = setting(
        "", area="headers", sets="headers.fleet_file", deployment=True,
        meaning="YAML fleet file instead of `CTX_LLM_BASE_URLS` (per-replica caps, weights, key variables)")
    llm_model: str = setting(
        "", area="headers", sets="headers.model", deployment=True, shown="(discovered)",
        meaning="pin the served model name; otherwise read from `/v1/models` (embedding models skipped)")
    llm_revision: str = setting(
        "", area="headers", sets="headers.revision", deployment=True,
        meaning="revision of the pinned model; part of the header-cache key and the index version")
    llm_api_key_env: str = setting(
        "CTX_LLM_API_KEY", area="headers", sets="headers.api_key_env",
        meaning="*name* of the variable that holds the API key (the key is never in config or logs)")
    llm_max_in_flight: int = setting(
        0, area="headers", sets="headers.max_in_flight", ge=0, shown="0: none, found",
        meaning="a ceiling on requests in flight per endpoint (0: none; the pool finds each replica's useful "
                "concurrency)")
    llm_request_timeout_s: float = setting(
        60.0, area="headers", sets="headers.request_timeout_s", gt=0,
        meaning="seconds to wait for one header answer before it is retried on another replica (raise it for slow "
                "CPU servers or long batched answers)")
    llm_allow_mixed_models: bool = setting(
        False, area="headers", sets="headers.allow_mixed_models",
        meaning="allow replicas that serve different models")
    llm_context_limit: int = setting(
        0, area="headers", sets="headers.context_limit", ge=0, shown="0: `max_model_len`",
        meaning="context length to budget against (0: `max_model_len` from `/v1/models`)")
    llm_batch_size: int = setting(
        1, area="headers", sets="headers.batch_size", ge=1, le=32,
        meaning="chunks per request (1 to 32), answered as JSON")
    llm_fallback_share: float = setting(
        0.05, area="headers", sets="headers.fallback_share", ge=0, le=1,
        meaning="share of a document's chunks that may get their structural header when the model gives no valid "
                "one in every attempt (counted as `fallbacks` in `chunk_headers`, never cached); past it the "
                "document fails naming the first reason; 0: any such chunk fails its document")
    llm_sample_metrics: bool = setting(
        False, area="headers", sets="headers.sample_metrics",
        meaning="sample each replica's `/metrics` into the run's metadata")

    # embedding
    embed_model_dir: str = setting(
        "", area="embedding", sets="embedder.model_dir", deployment=True, shown="(the bundled all-MiniLM-L6-v2)",
        meaning="a local sentence-transformers model directory; its name is the embedder identity in the index "
                "version")
    embed_device: str = setting(
        "auto", area="embedding", sets=("embedder.device", "reranker.device"),
        meaning="`auto`, `cpu`, `cuda`: where the local embedder and cross-encoder run (`auto`: the GPU when torch "
                "sees one)",
        accepts="auto, cpu or cuda (auto: cuda when torch sees a GPU)")
    embed_base_url: str = setting(
        "", area="embedding", sets="embedder.base_url", deployment=True,
        meaning="an OpenAI-compatible `/v1/embeddings` endpoint, used instead of the local model")
    embed_model: str = setting(
        "", area="embedding", sets="embedder.model", deployment=True,
        meaning="the embedding model served at `CTX_EMBED_BASE_URL`")
    embed_api_key_env: str = setting(
        "CTX_EMBED_API_KEY", area="embedding", sets="embedder.api_key_env",
        meaning="*name* of the variable that holds the embedding endpoint's key")

    # search
    fusion_weights_json: str = setting(
        FusionWeights().model_dump_json(exclude={"candidates"}), area="search", sets="gate.fusion_weights_json", env="CTX_FUSION_WEIGHTS",
        meaning="weights of the dense and lexical lists in hybrid reciprocal-rank fusion, and its constant (chosen "
                "on the dev half with `bench.fusion`, see [search.md](search.md#fusion)); part of the evaluator "
                "identity",
        accepts='a JSON object of list weights, e.g. {"dense": 0.5, "lexical": 1.0}')
    rerank_base_url: str = setting(
        "", area="search", sets="reranker.base_url", deployment=True,
        meaning="an OpenAI-compatible server's `/v1/rerank` (vLLM serving a cross-encoder)")
    rerank_model: str = setting(
        "", area="search", sets="reranker.model", deployment=True,
        meaning="the reranker model served at `CTX_RERANK_BASE_URL`")
    rerank_model_dir: str = setting(
        "", area="search", sets="reranker.model_dir", deployment=True,
        meaning="a local sentence-transformers cross-encoder directory (loaded offline), instead of an endpoint")
    rerank_api_key_env: str = setting(
        "CTX_RERANK_API_KEY", area="search", sets="reranker.api_key_env",
        meaning="*name* of the variable that holds the rerank endpoint's key")
    rerank_candidates: int = setting(
        50, area="search", sets="reranker.candidates", ge=1, le=200,
        meaning="fused hits the reranker rescores (1 to 200)")

    # search service
    search_url: str = setting(
        "", area="search service",
        meaning="a running `ctx serve`; `ctx search` then asks it (no torch, no Dagster in the client)",
        accepts="a running `ctx serve` URL, e.g. http://127.0.0.1:8765 (empty: ctx search works in-process)")
    search_token_env: str = setting(
        "CTX_SEARCH_TOKEN", area="search service",
        meaning="*name* of the variable that holds the service's bearer token (server and client)")
    search_keys_file: str = setting(
        "", area="search service", deployment=True,
        meaning="a YAML mapping of named API keys (`name: token`), read again when it changes (no restart); "
                "beside the token of `CTX_SEARCH_TOKEN_ENV`, whose name is `default`; a key's name is its client "
                "in the access log and the rate limit")
    serve_rate_limit_per_s: float = setting(
        0.0, area="search service", ge=0,
        meaning="requests per second each client (its key's name, else its address) may make, in bursts of "
                "`CTX_SERVE_RATE_BURST`; over it: 429 with `Retry-After` (0: no limit)")
    serve_rate_burst: int = setting(
        20, area="search service", ge=1,
        meaning="requests a client may make at once before `CTX_SERVE_RATE_LIMIT_PER_S` paces it")
    serve_host: str = setting(
        "127.0.0.1", area="search service",
        meaning="the address `ctx serve` binds")
    serve_port: int = setting(
        8765, area="search service", ge=1, le=65535,
        meaning="the port `ctx serve` listens on")
    serve_max_k: int = setting(
        100, area="search service", ge=1, le=1000,
        meaning="the largest k a search request may ask (over it: 422)")
    serve_max_request_bytes: int = setting(
        16384, area="search service", ge=256,
        meaning="the largest request body the search service takes, in bytes (over it: 413)")
    serve_in_memory_max_chunks: int = setting(
        1000000, area="search service", ge=0,
        meaning="index versions of up to this many chunks keep their BM25 postings (~0.35 KB a chunk) and, on "
                "DuckDB, their rows (~1.2 KB a chunk) in `ctx serve`'s memory (see docs/search.md); 0: never")
    serve_query_runtime: str = setting(
        "onnx", area="search service", choices=("onnx", "torch"),
        meaning="what embeds `ctx serve`'s queries with a local model on the CPU: `onnx` (exported at the first "
                "query, used only where it gives torch's vectors; see docs/search.md) or `torch`")

    # evaluation
    gold_path: str = setting(
        "", area="evaluation", sets="gate.gold_path", deployment=True, env="CTX_GOLD_FILE",
        meaning="gold set for `retrieval_eval`")
    gate_floors_json: str = setting(
        '{"pass_at_10": 0.5, "mrr": 0.25}', area="evaluation", sets="gate.floors_json", env="CTX_GATE_FLOORS",
        meaning="floors every candidate must meet, first promotion included (see [evaluation.md](evaluation.md))",
        accepts='a JSON object of metric floors, e.g. {"pass_at_10": 0.6}')
    gate_tolerance: float = setting(
        0.02, area="evaluation", sets="gate.tolerance", ge=0, le=1,
        meaning="allowed drop per metric against production (at least one task's worth; a significant drop blocks "
                "too)")
    gate_max_unhealthy_share: float = setting(
        0.2, area="evaluation", sets="gate.max_unhealthy_share", ge=0, le=1,
        meaning="largest stale+broken gold share a candidate may have")
    gate_hygiene_warn_share: float = setting(
        0.1, area="evaluation", sets="gate.hygiene_warn_share", ge=0, le=1,
        meaning="stale+broken gold share above which the `gold_hygiene` check warns (it never blocks)")
    gate_min_coverage: float = setting(
        1.0, area="evaluation", sets="gate.min_coverage", ge=0, le=1,
        meaning="share of live documents a candidate must hold at their current revision")
    gate_rerank: bool = setting(
        False, area="evaluation", sets="gate.rerank",
        meaning="`retrieval_eval` reranks the hybrid lists with the configured reranker (part of the evaluator "
                "identity)")
    gate_exceptions_path: str = setting(
        "", area="evaluation", sets="gate.exceptions_path", deployment=True, env="CTX_GATE_EXCEPTIONS",
        meaning="reviewed exceptions file (scoped to a version or header model, an evaluator, an expiry date)")

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigurationError(describe_errors(exc, values)) from None

    @field_validator("*")
    @classmethod
    def _one_of_its_choices(cls, value: Any, info: ValidationInfo) -> Any:
        choices = declaration(info.field_name).get("choices") if info.field_name else None
        if choices and isinstance(value, str):
            if value.lower() not in choices:
                raise ValueError(f"unknown {info.field_name.replace('_', ' ')} '{value}'")
            return value.lower()
        return value

    @field_validator("embed_device")
    @classmethod
    def _embed_device(cls, value: str) -> str:
        if value.lower() not in ("auto", "cpu", "cuda") and not value.lower().startswith("cuda:"):
            raise ValueError(f"unknown device '{value}'")
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
        """A setting's default, for the functions that take it as a parameter."""
        return cls.model_fields[name].default


def declaration(name: str) -> dict[str, Any]:
    """What `setting` recorded for field `name` (area, accepts, sets, deployment, shown)."""
    return dict(PlatformSettings.model_fields[name].json_schema_extra or {})


def accepts(name: str) -> str:
    """What setting `name` accepts, in words: declared, else from its type and bounds."""
    field = PlatformSettings.model_fields[name]
    said = declaration(name).get("accepts")
    if said:
        return said
    choices = declaration(name).get("choices")
    if choices:
        return f"{', '.join(choices[:-1])} or {choices[-1]}"
    if field.annotation is bool:
        return "true or false"
    if field.annotation not in (int, float):
        return field.description or "a string"
    noun = "seconds" if name.endswith("_s") else "an integer" if field.annotation is int else "a number"
    bounds = {k: getattr(m, k) for m in field.metadata for k in ("ge", "gt", "le", "lt") if hasattr(m, k)}
    if "ge" in bounds and "le" in bounds:
        return f"{noun} from {bounds['ge']:g} to {bounds['le']:g}"
    return " ".join([noun, *(f"{op} {bounds[k]:g}" for k, op in (("ge", ">="), ("gt", ">")) if k in bounds)])


def env_names(name: str) -> list[str]:
    """The environment variables that set field `name`, in the order they are looked up."""
    alias = PlatformSettings.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    return [alias] if isinstance(alias, str) else [f"{ENV_PREFIX}{name.upper()}"]


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
        expected = f"; expected {accepts(name)}" if name in fields else ""
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{variable}={error.get('input')!r} is not valid ({message}){expected}")
    return "; ".join(problems)
