"""Ingest assets, one partition per document: parsed_chunks -> chunk_headers -> chunk_embeddings.

The three assets are materialized by one multi-asset step that pipelines every document of the run
(`ingest/pipeline/run_plan.py`, `ingest/pipeline/document_pipeline.py`): a backfill puts up to `CTX_PARTITIONS_PER_RUN` partitions
in one run so that the header fleet stays saturated across document boundaries, while each partition gets
its own materializations, and a document that fails is reported failed alone (its partition shows
failed; the others of the run stay materialized; the run fails).
"""

import time
from collections.abc import Callable, Iterator

import dagster as dg

from contextual_assets.defs.resources import (
    ChunkStoreResource,
    EmbedderResource,
    EvalGateResource,
    HeaderSourceResource,
    ParsingResource,
)
from contextual_assets.errors import ContextualError
from contextual_assets.ingest.pipeline.concurrent import ConcurrentPipelines
from contextual_assets.ingest.pipeline.document_pipeline import PipelineSettings, StageEvent
from contextual_assets.ingest.pipeline.run_plan import CURRENT, RunPlan, plan_run, run_pipelines, uncommitted
from contextual_assets.names import CHUNK_EMBEDDINGS, CHUNK_HEADERS, INGEST_GROUP, PARSED_CHUNKS
from contextual_assets.configuration import active_settings
from contextual_assets.settings import PlatformSettings
from contextual_assets.store import ChunkStore

from .metadata import HeaderMetadata, held_metadata
from .partitions import documents_partitions


class IngestConfig(dg.Config):
    """Pipelining knobs (run config; the defaults suit a fleet of a few replicas)."""

    max_documents_in_flight: int = 256
    fleet_queue_factor: float = 2.0  # chunks in flight = factor x the concurrency the fleet's replicas take now
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
        # serve them all, and their header requests overlap (see docs/fleet.md).
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
        chunk_store = store.open()
        with chunk_store.backend.holding():  # one DuckDB open for the step, not several per document
            yield from ingest_step(context, config, chunk_store, parsing, headers, embedder, gate)

    return ingest_document_partitions


def ingest_step(context: dg.AssetExecutionContext, config: IngestConfig, chunk_store: ChunkStore,
                parsing: ParsingResource, headers: HeaderSourceResource, embedder: EmbedderResource,
                gate: EvalGateResource) -> Iterator:
    """The step's body: plan, run the pipelines, turn their events into Dagster events, report."""
    try:
        # While production differs from what the settings build, it gets every new or changed
        # document too, as long as its recorded recipe still builds it exactly.
        plan = plan_run(chunk_store, headers, embedder, parsing, gate.alias)
    except ContextualError as exc:
        raise dg.Failure(description=f"header source: {exc}", allow_retries=False) from None
    keys = documents_to_do(context, plan, chunk_store)
    describe = HeaderMetadata(plan, sample_metrics=headers.sample_metrics)
    runs = run_pipelines(plan, keys, chunk_store, parsing, pipeline_settings(config, describe.fleet_capacity),
                         header_metadata=describe)
    started = time.monotonic()
    outcome = RunOutcome()
    try:
        yield from dagster_events(runs, plan, outcome, context.log)
    finally:
        runs.cancel()
        describe.stop()
    report(context, plan, keys, outcome, time.monotonic() - started)


def documents_to_do(context: dg.AssetExecutionContext, plan: RunPlan, chunk_store) -> list[str]:
    """The run's documents (a retry skips those the failed attempt committed); logs the plan's warnings."""
    keys = list(context.partition_keys)
    if context.retry_number > 0:
        keys = uncommitted(chunk_store, keys, plan.targets)
        context.log.info(f"retry {context.retry_number}: {len(keys)} of {len(context.partition_keys)} documents "
                         "left; those the failed attempt committed keep their materializations")
    for message in filter(None, [plan.source_warning, *plan.current.warnings]):
        context.log.warning(message)
    if plan.lag_reason:
        context.log.warning(f"{plan.lag_reason}; this run's documents reach only {plan.current.index_version}, and "
                            f"`ctx status` lists what {plan.alias} misses")
    return keys


def pipeline_settings(config: IngestConfig, fleet_capacity: Callable[[], int] | None) -> PipelineSettings:
    """No fleet (structural or no headers): no high-water mark worth the name."""
    return PipelineSettings(
        max_documents_in_flight=config.max_documents_in_flight, chunks_in_flight=4096,
        fleet_capacity=fleet_capacity, fleet_queue_factor=config.fleet_queue_factor,
        embed_batch_max=config.embed_batch_max,
    )


class RunOutcome:
    """What the run's events said, per document."""

    def __init__(self) -> None:
        self.failures: dict[str, StageEvent] = {}
        self.fresh_failures: dict[str, str] = {}
        self.fresh_held: dict[str, str] = {}  # documents whose headers failed the checks: not in production
        self.committed = 0
        self.fresh_committed = 0


def dagster_events(runs: ConcurrentPipelines, plan: RunPlan, outcome: RunOutcome, log) -> Iterator:
    """The pipelines' events as Dagster materializations (the current version) and observations
    (production kept fresh, held from it, and failed documents, queryable by run)."""
    production_update = plan.production_update()
    for role, event in runs.events():
        if role != CURRENT:
            if event.kind == "held":
                log.warning(f"{event.key}: held from {role} ({plan.fresh.index_version}): {event.error}; "
                            f"{role} keeps what it had of it until a candidate holding it passes the gate")
            yield from fresh_events(role, event, plan, outcome)
        elif event.kind == "warning":
            log.warning(event.error or "")
        elif event.kind in ("failed", "held"):  # held: production is this version, its headers failed the checks
            outcome.failures[event.key] = event
            log.error(f"{event.key}: {event.stage or 'ingest'} failed: {event.error}")
            # Per document, queryable by run (the inbox sensor retries only what may pass).
            yield dg.AssetObservation(asset_key=ASSET_OF_STAGE["committed"], partition=event.key, metadata={
                FAILED_STAGE: event.stage or "ingest", RETRYABLE: event.retryable,
                "error": (event.error or "")[:500], **(held_metadata(event) if event.kind == "held" else {})})
        else:
            outcome.committed += event.kind == "committed"
            metadata = event.metadata
            if event.kind == "committed":
                metadata = {**metadata, f"{plan.alias}_update": production_update}
            yield dg.AssetMaterialization(asset_key=ASSET_OF_STAGE[event.kind], partition=event.key,
                                          metadata=metadata)


def fresh_events(role: str, event: StageEvent, plan: RunPlan, outcome: RunOutcome) -> Iterator:
    if event.kind == "committed":
        outcome.fresh_committed += 1
        yield dg.AssetObservation(asset_key=CHUNK_EMBEDDINGS, partition=event.key, metadata={
            "index_version": event.metadata["index_version"], "role": role,
            "chunks": event.metadata["chunks"], "note": f"kept {role} fresh"})
    elif event.kind == "failed":
        outcome.fresh_failures[event.key] = str(event.error)
        yield dg.AssetObservation(asset_key=CHUNK_EMBEDDINGS, partition=event.key, metadata={
            "index_version": plan.fresh.index_version, "role": role,
            "note": f"{role} not updated: {event.error}"})
    elif event.kind == "held":
        outcome.fresh_held[event.key] = str(event.error)
        yield dg.AssetObservation(asset_key=CHUNK_EMBEDDINGS, partition=event.key, metadata={
            "index_version": plan.fresh.index_version, "role": role,
            "note": f"{role} not updated: held, its headers failed the header checks",
            **held_metadata(event)})


def report(context: dg.AssetExecutionContext, plan: RunPlan, keys: list[str], outcome: RunOutcome,
           elapsed_s: float) -> None:
    """The run's summary in its log; a failure naming every failed document when any failed."""
    context.log.info(f"{outcome.committed} of {len(keys)} documents committed to {plan.current.index_version} in "
                     f"{elapsed_s:.1f} s")
    if plan.fresh is not None:
        lost = {k: e for k, e in outcome.fresh_failures.items() if k not in outcome.failures}
        held = (f"; {len(outcome.fresh_held)} held, their headers failing the header checks: "
                f"{', '.join(sorted(outcome.fresh_held))}" if outcome.fresh_held else "")
        context.log.info(f"{outcome.fresh_committed} of {len(keys)} documents also committed to {plan.alias} "
                         f"({plan.fresh.index_version}){held}")
        for key, error in sorted(lost.items()):
            context.log.warning(f"{key}: {plan.alias} ({plan.fresh.index_version}) was not updated: {error}")
    if outcome.failures:
        failures = outcome.failures
        first = next(iter(failures.values()))
        raise dg.Failure(
            description=(f"{len(failures)} of {len(keys)} documents failed; first: {first.key}: {first.error}"
                         if len(keys) > 1 else str(first.error)),
            metadata={"failed_documents": dg.MetadataValue.json(
                {key: {"stage": e.stage, "error": e.error} for key, e in sorted(failures.items())})},
            # Parse errors and stale sources need the user; fleet or store outages may pass.
            allow_retries=any(e.retryable for e in failures.values()),
        )


@dg.definitions
def ingest_assets() -> dg.Definitions:
    settings = active_settings()
    return dg.Definitions(assets=[build_ingest_assets(settings.partitions_per_run, settings.ingest_retries,
                                                      settings.ingest_retry_delay_s)])
