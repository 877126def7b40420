"""Ingest assets, one partition per document: parsed_chunks -> chunk_headers -> chunk_embeddings.

The three assets are materialized by one multi-asset step that pipelines every document of the run
(see `document_pipeline`): a backfill puts up to `CTX_PARTITIONS_PER_RUN` partitions in one run so
that the header fleet stays saturated across document boundaries, while each partition still gets
its own materializations, and a document that fails is reported failed alone (its partition shows
failed; the others of the run stay materialized; the run fails).
"""

import time

import dagster as dg

from contextual_assets.defs.resources import (
    ChunkStoreResource,
    EmbedderResource,
    EvalGateResource,
    HeaderSourceResource,
    ParsingResource,
)
from contextual_assets.errors import ContextualError
from contextual_assets.fleet.vllm_metrics import MetricsSampler, MetricsTimeline
from contextual_assets.headers.openai_source import HeaderRunStats, OpenAIHeaderSource
from contextual_assets.ingest.concurrent import ConcurrentPipelines
from contextual_assets.ingest.pipeline import (
    DocumentJob,
    DocumentPipeline,
    PipelineSettings,
    StageEvent,
    mean_header_words,
)
from contextual_assets.lifecycle.build_targets import (
    BuildTarget,
    current_target,
    production_target,
)
from contextual_assets.names import CHUNK_EMBEDDINGS, CHUNK_HEADERS, INGEST_GROUP, PARSED_CHUNKS
from contextual_assets.settings import PlatformSettings, active_settings

from .partitions import documents_partitions


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class IngestConfig(dg.Config):
    """Pipelining knobs (run config; the defaults suit a fleet of a few replicas)."""

    max_documents_in_flight: int = 64
    fleet_queue_factor: float = 2.0  # chunks in flight = factor x the fleet's total in-flight caps
    embed_batch_max: int = 64


INGEST_SPECS = [
    dg.AssetSpec(PARSED_CHUNKS, group_name=INGEST_GROUP, kinds={"python", "pdf"}, skippable=True,
                 description="A document parsed into section-aware chunks within the embedder's token budget."),
    dg.AssetSpec(CHUNK_HEADERS, deps=[PARSED_CHUNKS], group_name=INGEST_GROUP, kinds={"openai", "python"},
                 skippable=True,
                 description="A one- or two-sentence situating header for every chunk (LLM fleet, structural or none)."),
    dg.AssetSpec(CHUNK_EMBEDDINGS, deps=[CHUNK_HEADERS], group_name=INGEST_GROUP,
                 kinds={"pytorch", "duckdb", "postgres"}, skippable=True,
                 description="Header + chunk embedded and committed to the store: one atomic replace per document."),
]
ASSET_OF_STAGE = {"parsed": PARSED_CHUNKS, "headered": CHUNK_HEADERS, "committed": CHUNK_EMBEDDINGS}
# Metadata keys of the observation a failed document gets in its run.
FAILED_STAGE, RETRYABLE = "failed_stage", "retryable"


def ingest_retry_policy(retries: int, delay_s: float) -> dg.RetryPolicy | None:
    """In-run retries of the ingest step, with exponential backoff and jitter. Only failures raised with
    `allow_retries=True` are retried (fleet, embedder, object store or store outages); a document that
    cannot be parsed or went stale fails at once, since a retry would fail the same way."""
    if retries <= 0:
        return None
    return dg.RetryPolicy(max_retries=retries, delay=delay_s, backoff=dg.Backoff.EXPONENTIAL,
                          jitter=dg.Jitter.PLUS_MINUS if delay_s > 0 else None)


def build_ingest_assets(partitions_per_run: int, retries: int = PlatformSettings.default("ingest_retries"),
                        retry_delay_s: float = PlatformSettings.default("ingest_retry_delay_s")) -> dg.AssetsDefinition:
    @dg.multi_asset(
        name="ingest_document_partitions",
        specs=INGEST_SPECS,
        partitions_def=documents_partitions,
        can_subset=False,
        # Several documents per run: one process start-up, one fleet pool and one loaded embedder
        # serve them all, and their header requests overlap (see README, "Throughput").
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=max(1, partitions_per_run)),
        description="Parse, header, embed and commit every document partition of the run, pipelined.",
        pool="ctx_ingest",
        retry_policy=ingest_retry_policy(retries, retry_delay_s),
    )
    def ingest_document_partitions(
        context: dg.AssetExecutionContext,
        config: IngestConfig,
        store: ChunkStoreResource,
        parsing: ParsingResource,
        headers: HeaderSourceResource,
        embedder: EmbedderResource,
        gate: EvalGateResource,
    ):
        keys = list(context.partition_keys)
        chunk_store = store.open()
        try:
            resolved, warning = headers.resolved_source()
            current = current_target(headers, embedder, parsing, chunk_store)
            # While production differs from what the settings build, it gets every new or changed
            # document too, as long as its recorded recipe still builds it exactly.
            fresh_target, lag_reason = production_target(current, gate.alias, chunk_store, headers, embedder, parsing)
        except ContextualError as exc:
            raise dg.Failure(description=f"header source: {exc}", allow_retries=False) from None
        if context.retry_number > 0:
            keys = uncommitted(chunk_store, keys, [t for t in (current, fresh_target) if t is not None])
            context.log.info(f"retry {context.retry_number}: {len(keys)} of {len(context.partition_keys)} documents "
                             "left; those the failed attempt committed keep their materializations")
        for message in filter(None, [warning, *current.warnings]):
            context.log.warning(message)
        if lag_reason:
            context.log.warning(f"{lag_reason}; this run's documents reach only {current.index_version}, and "
                                f"`ctx status` lists what {gate.alias} misses")
        source, version = current.header_source, current.index_version
        fleet_capacity = 0
        sampler = None
        if isinstance(source, OpenAIHeaderSource):
            fleet_capacity = sum(r.config.max_in_flight for r in source.fleet.replicas)
            if headers.sample_metrics:
                sampler = MetricsSampler([r.url for r in source.fleet.replicas], interval_s=0.1).start()

        def header_metadata(job: DocumentJob, stats: HeaderRunStats | None) -> dict:
            metadata = {
                "header_source": resolved,
                "header_model": source.identity["header_model"],
                "prompt_version": source.identity["prompt_version"],
                "source_warning": warning or "none",
                "chunks": len(job.doc.chunks),
                "mean_header_words": mean_header_words(job),
                "index_version": version,
                "headers_s": round(job.headers_finished - job.headers_started, 3),
            }
            if isinstance(source, OpenAIHeaderSource) and stats is not None:
                metadata.update(fleet_metadata(source, stats))
            if sampler is not None:
                # vLLM /metrics while this document's headers were generated, one row per second.
                metadata["fleet_timeline"] = dg.MetadataValue.json(
                    timeline_window(sampler.timeline, job.headers_started, job.headers_finished))
            first = next((r.header for r in job.headers if r is not None and r.header), "")
            if first:
                metadata["example_header"] = first
            return metadata

        settings = PipelineSettings(
            max_documents_in_flight=config.max_documents_in_flight,
            chunks_in_flight=max(16, int(config.fleet_queue_factor * fleet_capacity)) if fleet_capacity else 4096,
            embed_batch_max=config.embed_batch_max,
        )

        def pipeline_for(target: BuildTarget, on_headers=None) -> DocumentPipeline:
            return DocumentPipeline(
                store=chunk_store, counter=parsing.counter(), chunk_tokens=target.chunk_tokens,
                max_bytes=int(parsing.max_file_mb * 1_000_000), max_pdf_pages=parsing.max_pdf_pages,
                header_source=target.header_source, context_tokens=target.context_tokens, embedder=target.embedder,
                index_version=target.index_version, fingerprint=target.fingerprint, recipe=target.recipe,
                header_metadata=on_headers, settings=settings,
            )

        runs = ConcurrentPipelines()
        runs.add("current", pipeline_for(current, header_metadata), keys)
        if fresh_target is not None:
            # Same headers: production's pass comes after, from the header cache, at no LLM cost; other
            # headers: both fleets work at once.
            same_headers = fresh_target.header_source.identity == source.identity
            runs.add(gate.alias, pipeline_for(fresh_target), keys, after="current" if same_headers else None)
        production_update = (f"scheduled in this run ({fresh_target.index_version}; see its observation)"
                             if fresh_target is not None
                             else f"not built: {lag_reason}" if lag_reason else "none (production is this version)")
        started = time.monotonic()
        failures: dict[str, StageEvent] = {}
        fresh_failures: dict[str, str] = {}
        committed = fresh_committed = 0
        try:
            for role, event in runs.events():
                if role != "current":
                    if event.kind == "committed":
                        fresh_committed += 1
                        yield dg.AssetObservation(asset_key=CHUNK_EMBEDDINGS, partition=event.key, metadata={
                            "index_version": event.metadata["index_version"], "role": role,
                            "chunks": event.metadata["chunks"], "note": f"kept {role} fresh"})
                    elif event.kind == "failed":
                        fresh_failures[event.key] = str(event.error)
                        yield dg.AssetObservation(asset_key=CHUNK_EMBEDDINGS, partition=event.key, metadata={
                            "index_version": fresh_target.index_version, "role": role,
                            "note": f"{role} not updated: {event.error}"})
                    continue
                if event.kind == "warning":
                    context.log.warning(event.error or "")
                elif event.kind == "failed":
                    failures[event.key] = event
                    context.log.error(f"{event.key}: {event.stage or 'ingest'} failed: {event.error}")
                    # Per document, queryable by run (the inbox sensor retries only what may pass).
                    yield dg.AssetObservation(asset_key=ASSET_OF_STAGE["committed"], partition=event.key, metadata={
                        FAILED_STAGE: event.stage or "ingest", RETRYABLE: event.retryable,
                        "error": (event.error or "")[:500]})
                else:
                    committed += event.kind == "committed"
                    metadata = event.metadata
                    if event.kind == "committed":
                        metadata = {**metadata, f"{gate.alias}_update": production_update}
                    yield dg.AssetMaterialization(asset_key=ASSET_OF_STAGE[event.kind], partition=event.key,
                                                  metadata=metadata)
        finally:
            runs.cancel()
            if sampler is not None:
                sampler.stop()
        context.log.info(f"{committed} of {len(keys)} documents committed to {version} in "
                         f"{time.monotonic() - started:.1f} s")
        if fresh_target is not None:
            lost = {k: e for k, e in fresh_failures.items() if k not in failures}
            context.log.info(f"{fresh_committed} of {len(keys)} documents also committed to {gate.alias} "
                             f"({fresh_target.index_version})")
            for key, error in sorted(lost.items()):
                context.log.warning(f"{key}: {gate.alias} ({fresh_target.index_version}) was not updated: {error}")
        if failures:
            first = next(iter(failures.values()))
            raise dg.Failure(
                description=(f"{len(failures)} of {len(keys)} documents failed; first: {first.key}: {first.error}"
                             if len(keys) > 1 else str(first.error)),
                metadata={"failed_documents": dg.MetadataValue.json(
                    {key: {"stage": e.stage, "error": e.error} for key, e in sorted(failures.items())})},
                # Parse errors and stale sources need the user; fleet or store outages may pass.
                allow_retries=any(e.retryable for e in failures.values()),
            )

    return ingest_document_partitions


def uncommitted(chunk_store, keys: list[str], targets: list[BuildTarget]) -> list[str]:
    """`keys` less the documents stored at every target version from their registered revision: what a
    retry of the step still has to do (an attempt commits document by document)."""
    registered = {s.doc_id: s.file_hash for s in chunk_store.corpus.list_sources()}
    held = [{d.doc_id: d.file_hash for d in chunk_store.corpus.documents(t.index_version)} for t in targets]
    return [k for k in keys if not all(k in h and h[k] == registered.get(k) for h in held)]


def timeline_window(timeline: MetricsTimeline, start: float, end: float) -> list[dict]:
    first, last = int(start - timeline.started), int(end - timeline.started)
    return [row for row in timeline.per_second() if first <= row["t"] <= last]


def fleet_metadata(source: OpenAIHeaderSource, stats: HeaderRunStats) -> dict:
    sent = sum(stats.per_replica.values())
    return {
        "served_model": source.model,
        "model_revision": source.revision or "unpinned",
        "requests": stats.requests,
        "batch_requests": stats.batch_requests,
        "batch_fallbacks": stats.batch_fallbacks,
        "cache_hits": stats.cache_hits,
        "retries": stats.retries,
        "failovers": stats.failovers,
        "hedges": stats.hedges,
        "hedge_wins": stats.hedge_wins,
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "trimmed_contexts": stats.trimmed_contexts,
        "latency_p50_s": round(_percentile(stats.latencies, 0.5), 4),
        "latency_p95_s": round(_percentile(stats.latencies, 0.95), 4),
        "replica_share": dg.MetadataValue.json(
            {url: round(n / sent, 4) for url, n in sorted(stats.per_replica.items())} if sent else {}
        ),
        "context_limit": source.fleet.context_limit or 0,
    }


@dg.definitions
def ingest_assets() -> dg.Definitions:
    settings = active_settings()
    return dg.Definitions(assets=[build_ingest_assets(settings.partitions_per_run, settings.ingest_retries,
                                                      settings.ingest_retry_delay_s)])
