"""bench.ingest's legacy mode (`--modes legacy`): the platform's components in a document-by-document
loop in this process (headers, then embedding and commit, one document at a time)."""

from __future__ import annotations

import time
from pathlib import Path

from bench.ingest_fleet import (
    EmbedServer,
    fleet_figures,
    header_fleet,
    header_source,
    start_fleet,
)
from bench.ingest_harness import bench_store
from bench.ingest_options import SPEEDS


def run_legacy(workdir: Path, time_scale: float, docs, counter, settings, speeds: tuple[float, ...] = SPEEDS) -> dict:
    from contextual_assets.embedding import embed_chunks
    from contextual_assets.fleet.metrics_timeline import MetricsSampler
    from contextual_assets.headers.context import header_requests
    from contextual_assets.models import DocumentRecord, HeaderedChunk

    embed = EmbedServer(workdir, time_scale)
    embedder = embed.embedder()
    sim = start_fleet(workdir, time_scale, speeds)
    fleet = header_fleet(sim.base_urls)
    store = None
    try:
        store, version = bench_store(workdir / f"legacy-{time.monotonic_ns()}.duckdb", docs,
                                     header_source(fleet, counter).identity, embedder, settings)
        source = header_source(fleet, counter, store=store)
        sampler = MetricsSampler(sim.base_urls, interval_s=0.1).start()
        started = time.monotonic()
        for doc in docs:
            # The legacy loop: one document at a time, its headers, then its embedding and commit.
            results = source.generate(header_requests(doc, counter, settings.context_tokens))
            headered = [HeaderedChunk(**chunk.model_dump(), header=result.header, header_source=result.source,
                                      header_model=result.model) for chunk, result in zip(doc.chunks, results)]
            embedded = embed_chunks(headered, embedder)
            store.corpus.replace_document(DocumentRecord(
                doc_id=doc.doc_id, index_version=version, source_path=doc.source_path, kind=doc.kind, title=doc.title,
                file_hash=doc.file_hash, n_chunks=len(embedded), updated_at=""), embedded)
        wall = time.monotonic() - started
        timeline = sampler.stop()
        figures = fleet_figures(sim, timeline, speeds, time_scale)
        chunks = store.corpus.count_chunks(version)
    finally:
        fleet.close()
        sim.stop()
        embed.stop()
        if store is not None:
            store.close()
    return {"wall_s": round(wall, 2), "chunks": chunks, **figures}
