"""Sampling replicas' Prometheus metrics (vLLM's `/metrics`) during a run into a per-second timeline."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

COUNTERS = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions")
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
# KV-cache use (a fraction): vLLM v1's name, then the older one.
KV_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


@dataclass(frozen=True)
class EngineMetrics:
    """One replica's `/metrics`, engine by engine: a data-parallel vLLM server (`--data-parallel-size`)
    publishes one series per engine (label `engine`), each with its own KV cache."""

    running: float  # requests in execution batches, all engines
    waiting: float  # requests queued, all engines
    kv_usage: float | None  # the fullest engine's KV-cache use (a fraction); None when not published
    engines: int  # label sets seen for the running gauge (1 for a single-engine server)
    preemptions: float | None  # counter, all engines (None: not published)
    generation_tokens: float | None  # counter, all engines (None: not published)


def _series(text: str) -> dict[str, dict[tuple, float]]:
    """Wanted metric -> {engine label set: value}; counters under their family name."""
    wanted = set(COUNTERS) | set(GAUGES) | set(KV_GAUGES)
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in wanted:
            continue
        per = out.setdefault(family.name, {})
        for sample in family.samples:
            if sample.name in (family.name, family.name + "_total"):
                # Label sets other than the engine (model_name, finished_reason) are summed per engine.
                key = (sample.labels.get("engine", ""),)
                per[key] = per.get(key, 0.0) + sample.value
    return out


def read_engine_metrics(text: str) -> EngineMetrics | None:
    """The replica's own view of its load, or None when it does not publish vLLM's running gauge.

    Counts (running, waiting, counters) add up across engines; KV-cache use does not: two engines at
    50 % are a replica at 50 %, not full, so the fullest engine is what preempts first."""
    series = _series(text)
    running = series.get("vllm:num_requests_running")
    if not running:
        return None
    kv = next((series[name] for name in KV_GAUGES if series.get(name)), None)

    def total(name: str) -> float | None:
        values = series.get(name)
        return sum(values.values()) if values else None

    return EngineMetrics(running=sum(running.values()), waiting=total("vllm:num_requests_waiting") or 0.0,
                         kv_usage=max(kv.values()) if kv else None, engines=len(running),
                         preemptions=total("vllm:num_preemptions"),
                         generation_tokens=total("vllm:generation_tokens"))


def parse_vllm_metrics(text: str) -> dict[str, float]:
    """Each wanted metric over its label sets: counts summed, KV-cache use the fullest engine's."""
    return {name: (max(values.values()) if name in KV_GAUGES else sum(values.values()))
            for name, values in _series(text).items() if values}


def metrics_url(base_url: str) -> str:
    root = base_url.rstrip("/")
    return (root[: -len("/v1")] if root.endswith("/v1") else root) + "/metrics"


@dataclass
class MetricsTimeline:
    """Samples per replica: (monotonic time, metric values)."""

    started: float
    samples: dict[str, list[tuple[float, dict[str, float]]]] = field(default_factory=dict)

    def per_second(self) -> list[dict]:
        """One row per second since start: prompt/generation token deltas summed over replicas, and
        running/waiting requests at the end of the second."""
        rows: dict[int, dict] = {}
        for replica, samples in list(self.samples.items()):  # copies: the sampler may be appending
            previous: dict[str, float] | None = None
            for t, values in list(samples):
                second = int(t - self.started)
                row = rows.setdefault(second, {"t": second, "prompt_tokens": 0.0, "generation_tokens": 0.0,
                                               "running": {}, "waiting": {}})
                if previous is not None:
                    row["prompt_tokens"] += values.get("vllm:prompt_tokens", 0) - previous.get("vllm:prompt_tokens", 0)
                    row["generation_tokens"] += (values.get("vllm:generation_tokens", 0)
                                                 - previous.get("vllm:generation_tokens", 0))
                row["running"][replica] = values.get("vllm:num_requests_running", 0)
                row["waiting"][replica] = values.get("vllm:num_requests_waiting", 0)
                previous = values
        out = []
        for second in sorted(rows):
            row = rows[second]
            out.append({"t": row["t"], "prompt_tokens": row["prompt_tokens"],
                        "generation_tokens": row["generation_tokens"],
                        "running": sum(row["running"].values()), "waiting": sum(row["waiting"].values())})
        return out


class MetricsSampler:
    """Polls every replica's /metrics every `interval_s` in a background thread."""

    def __init__(self, base_urls: list[str], interval_s: float = 0.1, timeout_s: float = 1.0):
        self.urls = {u: metrics_url(u) for u in base_urls}
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.timeline = MetricsTimeline(started=time.monotonic())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)

    def start(self) -> "MetricsSampler":
        self.timeline = MetricsTimeline(started=time.monotonic())
        self._thread.start()
        return self

    def __enter__(self) -> "MetricsSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> MetricsTimeline:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        return self.timeline

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout_s) as client:
            while not self._stop.is_set():
                tick = time.monotonic()
                for base, url in self.urls.items():
                    try:
                        values = parse_vllm_metrics(client.get(url).text)
                    except Exception:  # a dead replica has no metrics; its timeline just has a gap
                        continue
                    self.timeline.samples.setdefault(base, []).append((time.monotonic(), values))
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - tick)))
