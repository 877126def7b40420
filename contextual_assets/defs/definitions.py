"""The one `Definitions` object of the code location."""

from __future__ import annotations

import os

import dagster as dg

from eval_assets.assets import eval_assets_list, eval_checks
from eval_assets.resources import EvalGateResource

from contextual_assets.defs.ingest_assets import build_ingest_assets
from contextual_assets.defs.resources import ChunkStoreResource, EmbedderResource, HeaderSourceResource, ParsingResource
from contextual_assets.defs.inbox_sensor import build_new_documents_sensor
from contextual_assets.settings import PlatformSettings


def build_resources(settings: PlatformSettings) -> dict[str, dg.ConfigurableResource]:
    return {
        # A URL that came from DATABASE_URL stays there (read at use), out of run config and the UI.
        "store": ChunkStoreResource(
            database_url="" if settings.database_url == os.environ.get("DATABASE_URL", "").strip() else settings.database_url,
            duckdb_path=settings.duckdb_path,
        ),
        "parsing": ParsingResource(chunk_tokens=settings.chunk_tokens, max_file_mb=settings.max_file_mb,
                                   max_pdf_pages=settings.max_pdf_pages),
        "headers": HeaderSourceResource(source=settings.header_source, base_urls=settings.llm_base_urls,
                                        fleet_file=settings.llm_fleet_file, model=settings.llm_model,
                                        revision=settings.llm_revision,
                                        allow_mixed_models=settings.llm_allow_mixed_models,
                                        context_limit=settings.llm_context_limit, batch_size=settings.llm_batch_size,
                                        sample_metrics=settings.llm_sample_metrics,
                                        api_key_env=settings.llm_api_key_env,
                                        max_in_flight=settings.llm_max_in_flight,
                                        context_tokens=settings.context_tokens),
        "embedder": EmbedderResource(base_url=settings.embed_base_url, model=settings.embed_model,
                                     api_key_env=settings.embed_api_key_env),
        "gate": EvalGateResource(gold_path=settings.gold_path, floors_json=settings.gate_floors_json,
                                 tolerance=settings.gate_tolerance, exceptions_path=settings.gate_exceptions_path),
    }


def build_definitions(settings: PlatformSettings | None = None) -> dg.Definitions:
    settings = settings or PlatformSettings.from_env()
    # Job objects are built per Definitions: Dagster caches resolution state on them.
    ingest_job = dg.define_asset_job(
        "ingest_documents",
        selection=dg.AssetSelection.groups("ingest"),
        tags={"ctx/kind": "ingest"},
        description="Parse, header, embed and commit document partitions (several per run, pipelined).",
    )
    evaluate_and_promote_job = dg.define_asset_job(
        "evaluate_and_promote",
        selection=dg.AssetSelection.assets("retrieval_eval", "promoted_index"),
        description="Evaluate the candidate index version against production; promote it only if eval_gate passes.",
    )
    return dg.Definitions(
        assets=[build_ingest_assets(settings.partitions_per_run), *eval_assets_list],
        asset_checks=eval_checks,
        jobs=[ingest_job, evaluate_and_promote_job],
        sensors=[build_new_documents_sensor(ingest_job, settings.inbox, partitions_per_run=settings.partitions_per_run)],
        resources=build_resources(settings),
        # One process per run, not per step: a step process costs ~3 s of imports per document.
        executor=dg.in_process_executor,
    )


defs = build_definitions()
