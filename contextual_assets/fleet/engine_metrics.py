"""Reading a serving engine's own load from its Prometheus `/metrics`: vLLM, llama.cpp's server,
SGLang and Text Generation Inference, each under its own names.

The engine is recognised by the running-requests gauge its text holds; everything else is read under
that engine's names. What each engine publishes (names from their sources, checked 2026-12):

- vLLM v1 (`vllm/v1/metrics/loggers.py`, `PrometheusStatLogger`): gauges `vllm:num_requests_running`,
  `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` (`vllm:gpu_cache_usage_perc` before its removal,
  PR #29330); counters `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
  `vllm:num_preemptions_total`; labels `model_name` and `engine` (one series per data-parallel engine).
- llama.cpp's `llama-server --metrics` (`tools/server/server-task.cpp`, `server_task_result_metrics::to_metrics`):
  gauges `llamacpp:requests_processing` (busy slots), `llamacpp:requests_deferred` (tasks waiting for a
  slot); counters `llamacpp:prompt_tokens_total`, `llamacpp:tokens_predicted_total`. No labels. Its KV
  gauge `llamacpp:kv_cache_usage_ratio` was removed in 2025 (PR #13660): read where an older build has it.
- SGLang (`sglang/srt/observability/metrics_collector.py`, formerly `srt/metrics/collector.py`:
  `SchedulerMetricsCollector`, `TokenizerMetricsCollector`): gauges `sglang:num_running_reqs`,
  `sglang:num_queue_reqs`, `sglang:token_usage` (KV pool use, a fraction); counters
  `sglang:prompt_tokens_total`, `sglang:generation_tokens_total`, `sglang:num_retracted_requests_total`
  (its preemption); labels `model_name`, `engine_type`, `tp_rank`... and `dp_rank` when data-parallel.
- Text Generation Inference (`router/src/server.rs`, `backends/v3/src/backend.rs`, `queue.rs`): gauges
  `tgi_batch_current_size` (requests in the running batch), `tgi_queue_size`, `tgi_batch_current_max_tokens`
  over `tgi_batch_max_total_tokens` (KV tokens reserved, v3); histograms `tgi_request_input_length` and
  `tgi_request_generated_tokens` (their `_sum`: token totals of finished requests; no counters).

Counts (running, waiting, counters) add up across engines; KV-cache use is the fullest engine's: two
data-parallel engines at 50 % are a replica at 50 %, not a full one.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class EngineDialect:
    """One engine's metric names (family names: a counter without its `_total`)."""

    engine: str
    running: str
    waiting: str
    kv_usage: tuple[str, ...] = ()  # fraction gauges, the first published wins
    kv_tokens: tuple[str, str] | None = None  # else (tokens used, tokens in all) gauges: their ratio
    prompt_tokens: str | None = None
    generation_tokens: str | None = None
    preemptions: str | None = None
    engine_labels: tuple[str, ...] = ()  # labels that tell one engine (data-parallel rank) from another

    def names(self) -> set[str]:
        return {n for n in (self.running, self.waiting, *self.kv_usage, *(self.kv_tokens or ()), self.prompt_tokens,
                            self.generation_tokens, self.preemptions) if n}


VLLM = EngineDialect("vllm", "vllm:num_requests_running", "vllm:num_requests_waiting",
                     kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
                     prompt_tokens="vllm:prompt_tokens", generation_tokens="vllm:generation_tokens",
                     preemptions="vllm:num_preemptions", engine_labels=("engine",))
LLAMA_CPP = EngineDialect("llama.cpp", "llamacpp:requests_processing", "llamacpp:requests_deferred",
                          kv_usage=("llamacpp:kv_cache_usage_ratio",), prompt_tokens="llamacpp:prompt_tokens",
                          generation_tokens="llamacpp:tokens_predicted")
SGLANG = EngineDialect("sglang", "sglang:num_running_reqs", "sglang:num_queue_reqs", kv_usage=("sglang:token_usage",),
                       prompt_tokens="sglang:prompt_tokens", generation_tokens="sglang:generation_tokens",
                       preemptions="sglang:num_retracted_requests", engine_labels=("dp_rank",))
TGI = EngineDialect("tgi", "tgi_batch_current_size", "tgi_queue_size",
                    kv_tokens=("tgi_batch_current_max_tokens", "tgi_batch_max_total_tokens"),
                    prompt_tokens="tgi_request_input_length", generation_tokens="tgi_request_generated_tokens")
DIALECTS = (VLLM, LLAMA_CPP, SGLANG, TGI)


@dataclass(frozen=True)
class EngineMetrics:
    """One read of a replica's `/metrics`, in the engine's own terms."""

    engine: str  # which engine's names the text used ("vllm", "llama.cpp", "sglang", "tgi")
    running: float  # requests in execution batches, all engines
    waiting: float  # requests queued, all engines
    kv_usage: float | None  # the fullest engine's KV-cache use (a fraction); None when not published
    engines: int  # label sets seen for the running gauge (1 for a single-engine server)
    preemptions: float | None  # counter, all engines (None: not published)
    generation_tokens: float | None  # counter, all engines (None: not published)
    prompt_tokens: float | None = None  # counter, all engines (None: not published)

    def values(self) -> dict[str, float]:
        """The figures a timeline keeps, under engine-neutral names; unpublished ones left out."""
        figures = {"running": self.running, "waiting": self.waiting, "kv_usage": self.kv_usage,
                   "preemptions": self.preemptions, "generation_tokens": self.generation_tokens,
                   "prompt_tokens": self.prompt_tokens}
        return {name: value for name, value in figures.items() if value is not None}


def _series(text: str) -> dict[str, dict[tuple, float]]:
    """Every known metric the text holds -> {engine label set: value}."""
    wanted = set().union(*(d.names() for d in DIALECTS))
    labels = tuple(sorted({label for d in DIALECTS for label in d.engine_labels}))
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in wanted:
            continue
        # A counter's value is its `_total` sample (or the bare name, untyped); a histogram's is its `_sum`.
        accepted = (family.name + "_sum",) if family.type == "histogram" else (family.name, family.name + "_total")
        per = out.setdefault(family.name, {})
        for sample in family.samples:
            if sample.name in accepted:
                # Label sets other than the engine (model_name, finished_reason) are summed per engine.
                key = tuple(sample.labels.get(label, "") for label in labels)
                per[key] = per.get(key, 0.0) + sample.value
    return out


def read_engine_metrics(text: str) -> EngineMetrics | None:
    """The replica's own view of its load, or None when the text holds no known engine's running gauge."""
    series = _series(text)
    dialect = next((d for d in DIALECTS if series.get(d.running)), None)
    if dialect is None:
        return None

    def total(name: str | None) -> float | None:
        values = series.get(name) if name else None
        return sum(values.values()) if values else None

    running = series[dialect.running]
    kv = next((series[name] for name in dialect.kv_usage if series.get(name)), None)
    kv_usage = max(kv.values()) if kv else None
    if kv_usage is None and dialect.kv_tokens:
        used, capacity = (total(name) for name in dialect.kv_tokens)
        kv_usage = used / capacity if used is not None and capacity else None
    return EngineMetrics(engine=dialect.engine, running=sum(running.values()), waiting=total(dialect.waiting) or 0.0,
                         kv_usage=kv_usage, engines=len(running),
                         preemptions=total(dialect.preemptions), generation_tokens=total(dialect.generation_tokens),
                         prompt_tokens=total(dialect.prompt_tokens))


def read_metric_values(text: str) -> dict[str, float]:
    """`read_engine_metrics` as engine-neutral figures ({} when no engine is recognised)."""
    metrics = read_engine_metrics(text)
    return metrics.values() if metrics else {}


def metrics_url(base_url: str) -> str:
    root = base_url.rstrip("/")
    return (root[: -len("/v1")] if root.endswith("/v1") else root) + "/metrics"
