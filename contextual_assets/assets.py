"""Ingest assets, one partition per document: parsed_chunks -> chunk_headers -> chunk_embeddings."""



import statistics
import time
from pathlib import Path

import dagster as dg

from .errors import ContextualError, DocumentError, StaleDocumentError
from .fleet.metrics import MetricsSampler
from .headers.openai_source import OpenAIHeaderSource
from .index_version import index_fingerprint, index_version_of
from .models import DocumentRecord, HeaderedDocument, ParsedDocument
from .pipeline import attach_headers, embed_chunks, parse_document
from .resources import ChunkStoreResource, EmbedderResource, HeaderSourceResource, ParsingResource

documents_partitions = dg.DynamicPartitionsDefinition(name="documents")

INGEST_GROUP = "ingest"


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


@dg.asset(
    partitions_def=documents_partitions,
    group_name=INGEST_GROUP,
    kinds={"python", "pdf"},
    description="A document parsed into section-aware chunks within the embedder's token budget.",
)
def parsed_chunks(
    context: dg.AssetExecutionContext, store: ChunkStoreResource, parsing: ParsingResource
) -> dg.Output[ParsedDocument]:
    doc_id = context.partition_key
    source = store.open().get_source(doc_id)
    if source is None:
        raise dg.Failure(
            description=f"document '{doc_id}' has no registered file; add it to the inbox or run `ctx ingest PATH`",
            allow_retries=False,
        )
    started = time.monotonic()
    try:
        document = parse_document(
            doc_id, Path(source.path), parsing.counter(), chunk_tokens=parsing.chunk_tokens,
            max_bytes=int(parsing.max_file_mb * 1_000_000), max_pdf_pages=parsing.max_pdf_pages,
        )
    except DocumentError as exc:
        raise dg.Failure(
            description=f"cannot ingest {exc.path}: {exc.reason}",
            metadata={"file": exc.path, "reason": exc.reason},
            allow_retries=False,
        ) from None
    for warning in document.warnings:
        context.log.warning(f"{source.path}: {warning}")
    tokens = [c.token_count for c in document.chunks]
    sections = {tuple(c.section_path) for c in document.chunks}
    return dg.Output(
        document,
        metadata={
            "file": source.path,
            "kind": document.kind,
            "title": document.title,
            "chunks": len(document.chunks),
            "sections": len(sections),
            "pages": document.pages or 0,
            "tokens_total": sum(tokens),
            "tokens_max": max(tokens),
            "chunk_token_budget": parsing.chunk_tokens,
            "tokenizer": parsing.counter().name,
            "file_sha256": document.file_hash,
            "warnings": "; ".join(document.warnings) or "none",
            "parse_s": round(time.monotonic() - started, 3),
        },
    )


@dg.asset(
    partitions_def=documents_partitions,
    group_name=INGEST_GROUP,
    kinds={"openai", "python"},
    description="A one- or two-sentence situating header for every chunk (LLM fleet, structural or none).",
)
def chunk_headers(
    context: dg.AssetExecutionContext,
    parsed_chunks: ParsedDocument,
    headers: HeaderSourceResource,
    parsing: ParsingResource,
    embedder: EmbedderResource,
    store: ChunkStoreResource,
) -> dg.Output[HeaderedDocument]:
    started = time.monotonic()
    try:
        resolved, warning = headers.resolved_source()
        if warning:
            context.log.warning(warning)
        source = headers.build(parsing.counter(), store=store.open())
        sampler = None
        if headers.sample_metrics and isinstance(source, OpenAIHeaderSource):
            sampler = MetricsSampler([r.url for r in source.fleet.replicas], interval_s=0.1).start()
        try:
            headered, results = attach_headers(parsed_chunks, source, parsing.counter(), headers.context_tokens)
        finally:
            timeline = sampler.stop() if sampler else None
    except ContextualError as exc:
        raise dg.Failure(description=f"headers for {parsed_chunks.source_path}: {exc}") from None
    fingerprint = index_fingerprint(source.identity, embedder.identity(), parsing.chunk_tokens)
    version = index_version_of(fingerprint)
    header_lengths = [len(h.header.split()) for h in headered if h.header]
    metadata: dict = {
        "header_source": resolved,
        "header_model": source.identity["header_model"],
        "prompt_version": source.identity["prompt_version"],
        "source_warning": warning or "none",
        "chunks": len(headered),
        "mean_header_words": round(statistics.mean(header_lengths), 1) if header_lengths else 0.0,
        "index_version": version,
        "headers_s": round(time.monotonic() - started, 3),
    }
    if isinstance(source, OpenAIHeaderSource):
        metadata.update(fleet_metadata(source))
    if timeline is not None:
        # vLLM /metrics sampled during this partition's header generation, one row per second.
        metadata["fleet_timeline"] = dg.MetadataValue.json(timeline.per_second())
    if headered and headered[0].header:
        metadata["example_header"] = headered[0].header
    return dg.Output(
        HeaderedDocument(
            doc_id=parsed_chunks.doc_id, source_path=parsed_chunks.source_path, kind=parsed_chunks.kind,
            title=parsed_chunks.title, file_hash=parsed_chunks.file_hash, index_version=version,
            fingerprint=fingerprint, chunks=headered,
        ),
        metadata=metadata,
    )


def fleet_metadata(source: OpenAIHeaderSource) -> dict:
    stats = source.last_stats
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


@dg.asset(
    partitions_def=documents_partitions,
    group_name=INGEST_GROUP,
    kinds={"pytorch", "duckdb", "postgres"},
    description="Header + chunk embedded and committed to the store: one atomic replace per document.",
)
def chunk_embeddings(
    context: dg.AssetExecutionContext,
    chunk_headers: HeaderedDocument,
    embedder: EmbedderResource,
    store: ChunkStoreResource,
) -> dg.MaterializeResult:
    document = chunk_headers
    started = time.monotonic()
    model = embedder.get()
    embedded = embed_chunks(document.chunks, model)
    embed_s = time.monotonic() - started
    chunk_store = store.open()
    commit_started = time.monotonic()
    chunk_store.register_index_version(document.index_version, document.fingerprint)
    record = DocumentRecord(
        doc_id=document.doc_id, index_version=document.index_version, source_path=document.source_path,
        kind=document.kind, title=document.title, file_hash=document.file_hash, n_chunks=len(embedded), updated_at="",
    )
    try:
        chunk_store.replace_document(record, embedded, require_current_source=True)
    except StaleDocumentError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    commit_s = time.monotonic() - commit_started
    return dg.MaterializeResult(
        metadata={
            "chunks": len(embedded),
            "embedder": model.identity,
            "dimension": len(embedded[0].embedding) if embedded else 0,
            "embed_s": round(embed_s, 3),
            "chunks_per_s": round(len(embedded) / embed_s, 1) if embed_s > 0 else 0.0,
            "commit_s": round(commit_s, 3),
            "index_version": document.index_version,
            "store": chunk_store.location,
            "store_chunks_in_version": chunk_store.count_chunks(document.index_version),
        }
    )


ingest_assets = [parsed_chunks, chunk_headers, chunk_embeddings]
