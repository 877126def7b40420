"""Metadata of the ingest step's materializations: what wrote each document's headers, with the fleet's
counters and (when sampled) the replicas' /metrics while they were written."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from contextual_assets.fleet.metrics_timeline import MetricsSampler, MetricsTimeline
from contextual_assets.fleet.capacity import concurrency_limit
from contextual_assets.headers.openai_source import OpenAIHeaderSource
from contextual_assets.headers.run_stats import HeaderRunStats
from contextual_assets.ingest.pipeline.document_pipeline import DocumentJob, StageEvent, mean_header_words
from contextual_assets.ingest.pipeline.run_plan import RunPlan


class HeaderMetadata:
    """`chunk_headers` metadata per document (the pipeline calls it when a document's headers are done)."""

    def __init__(self, plan: RunPlan, sample_metrics: bool):
        self.plan = plan
        self.source = plan.current.header_source
        # The requests the fleet's replicas take now (their found limits), for the pipeline's high-water
        # mark; None without a fleet.
        self.fleet_capacity: Callable[[], int] | None = None
        self.sampler: MetricsSampler | None = None
        if isinstance(self.source, OpenAIHeaderSource):
            replicas = self.source.fleet.replicas
            self.fleet_capacity = lambda: sum(concurrency_limit(r) for r in replicas)
            if sample_metrics:
                self.sampler = MetricsSampler([r.url for r in self.source.fleet.replicas], interval_s=0.1).start()

    def __call__(self, job: DocumentJob, stats: HeaderRunStats | None) -> dict:
        source = self.source
        metadata = {
            "header_source": self.plan.resolved_source,
            "header_model": source.identity["header_model"],
            "prompt_version": source.identity["prompt_version"],
            "source_warning": self.plan.source_warning or "none",
            "chunks": len(job.doc.chunks),
            "mean_header_words": mean_header_words(job),
            "index_version": self.plan.current.index_version,
            "headers_s": round(job.headers_finished - job.headers_started, 3),
        }
        if isinstance(source, OpenAIHeaderSource) and stats is not None:
            metadata.update(fleet_metadata(source, stats))
        if self.sampler is not None:
            # The replicas' /metrics while this document's headers were generated, one row per second,
            # to a pass taken now: the counters its last answers moved are in, whatever the sampler's lag.
            sampled = self.sampler.sample()
            metadata["fleet_timeline"] = dg.MetadataValue.json(
                timeline_window(self.sampler.timeline, job.headers_started, max(job.headers_finished, sampled)))
        first = next((r.header for r in job.headers if r is not None and r.header), "")
        if first:
            metadata["example_header"] = first
        return metadata

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()


def timeline_window(timeline: MetricsTimeline, start: float, end: float) -> list[dict]:
    first, last = int(start - timeline.started), int(end - timeline.started)
    return [row for row in timeline.per_second() if first <= row["t"] <= last]


def fleet_metadata(source: OpenAIHeaderSource, stats: HeaderRunStats) -> dict:
    summary = stats.summary()
    return {"served_model": source.model, "model_revision": source.revision or "unpinned", **summary,
            "replica_share": dg.MetadataValue.json(summary["replica_share"]),
            # Load-aware routing needs the engine's own gauges (vLLM, llama.cpp, SGLang, TGI names).
            "routed_on": dg.MetadataValue.json(source.fleet.routing_signals()),
            "context_limit": source.fleet.context_limit or 0}


def held_metadata(event: StageEvent) -> dict:
    """A document held from production (`StageEvent` "held"): why, each header signal's share over its
    checked headers, and the offending headers."""
    signals = dict(event.metadata)
    examples = signals.pop("examples", [])
    return {"held": (event.error or "")[:500], **signals,
            "held_examples": dg.MetadataValue.md("\n".join(f"- {e}" for e in examples) or "none")}
