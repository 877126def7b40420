"""Platform settings from the environment, so the CLI, Dagster and benchmarks in two shells with
the same environment see the same index."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


class PlatformSettings(BaseModel):
    home: str = ".ctx"
    inbox: str = "inbox"
    database_url: str = ""
    duckdb_path: str = ""
    header_source: str = "auto"  # auto | openai | structural | none
    llm_base_urls: str = ""
    llm_fleet_file: str = ""
    llm_model: str = ""
    llm_revision: str = ""
    llm_allow_mixed_models: bool = False
    llm_context_limit: int = 0
    llm_batch_size: int = 1
    llm_sample_metrics: bool = False
    llm_api_key_env: str = "CTX_LLM_API_KEY"
    llm_max_in_flight: int = 16
    embed_base_url: str = ""
    embed_model: str = ""
    embed_api_key_env: str = "CTX_EMBED_API_KEY"
    chunk_tokens: int = 200
    context_tokens: int = 1000
    max_file_mb: float = 100.0
    max_pdf_pages: int = 2000
    partitions_per_run: int = 200
    gold_path: str = ""
    gate_floors_json: str = "{}"
    gate_tolerance: float = 0.02
    gate_exceptions_path: str = ""

    @classmethod
    def from_env(cls) -> "PlatformSettings":
        home = _env("CTX_HOME", ".ctx")
        return cls(
            home=home,
            inbox=_env("CTX_INBOX", "inbox"),
            database_url=_env("DATABASE_URL"),
            duckdb_path=_env("CTX_DUCKDB_PATH") or str(Path(home) / "index.duckdb"),
            header_source=_env("CTX_HEADER_SOURCE", "auto").lower(),
            llm_base_urls=_env("CTX_LLM_BASE_URLS") or _env("CTX_LLM_BASE_URL"),
            llm_fleet_file=_env("CTX_LLM_FLEET_FILE"),
            llm_model=_env("CTX_LLM_MODEL"),
            llm_revision=_env("CTX_LLM_REVISION"),
            llm_allow_mixed_models=_env("CTX_LLM_ALLOW_MIXED_MODELS", "0").lower() in {"1", "true", "yes"},
            llm_context_limit=int(_env("CTX_LLM_CONTEXT_LIMIT", "0")),
            llm_batch_size=int(_env("CTX_LLM_BATCH_SIZE", "1")),
            llm_sample_metrics=_env("CTX_LLM_SAMPLE_METRICS", "0").lower() in {"1", "true", "yes"},
            llm_api_key_env=_env("CTX_LLM_API_KEY_ENV", "CTX_LLM_API_KEY"),
            llm_max_in_flight=int(_env("CTX_LLM_MAX_IN_FLIGHT", "16")),
            embed_base_url=_env("CTX_EMBED_BASE_URL"),
            embed_model=_env("CTX_EMBED_MODEL"),
            chunk_tokens=int(_env("CTX_CHUNK_TOKENS", "200")),
            context_tokens=int(_env("CTX_CONTEXT_TOKENS", "1000")),
            max_file_mb=float(_env("CTX_MAX_FILE_MB", "100")),
            max_pdf_pages=int(_env("CTX_MAX_PDF_PAGES", "2000")),
            partitions_per_run=int(_env("CTX_PARTITIONS_PER_RUN", "200")),
            gold_path=_env("CTX_GOLD_FILE"),
            gate_floors_json=_env("CTX_GATE_FLOORS", "{}"),
            gate_tolerance=float(_env("CTX_GATE_TOLERANCE", "0.02")),
            gate_exceptions_path=_env("CTX_GATE_EXCEPTIONS"),
        )
