"""Sampling replicas' `/metrics` during a run into a per-second timeline (engine-neutral figures:
`engine_metrics.read_metric_values`)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx

from .engine_metrics import metrics_url, read_metric_values


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
                    row["prompt_tokens"] += values.get("prompt_tokens", 0) - previous.get("prompt_tokens", 0)
                    row["generation_tokens"] += (values.get("generation_tokens", 0)
                                                 - previous.get("generation_tokens", 0))
                row["running"][replica] = values.get("running", 0)
                row["waiting"][replica] = values.get("waiting", 0)
                previous = values
        out = []
        for second in sorted(rows):
            row = rows[second]
            out.append({"t": row["t"], "prompt_tokens": row["prompt_tokens"],
                        "generation_tokens": row["generation_tokens"],
                        "running": sum(row["running"].values()), "waiting": sum(row["waiting"].values())})
        return out


class MetricsSampler:
    """Polls every replica's /metrics every `interval_s` in a background thread; `sample()` takes a pass
    now (one pass at a time, so each replica's samples stay in time order)."""

    def __init__(self, base_urls: list[str], interval_s: float = 0.1, timeout_s: float = 1.0):
        self.urls = {u: metrics_url(u) for u in base_urls}
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.timeline = MetricsTimeline(started=time.monotonic())
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=timeout_s)
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self.thread_cpu_s = 0.0  # CPU the background thread has used (`_run`)

    def start(self) -> "MetricsSampler":
        self.timeline = MetricsTimeline(started=time.monotonic())
        self.sample()  # the baseline: counters that move after start are all counted
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
        self._client.close()
        return self.timeline

    def sample(self) -> float:
        """One pass over the replicas; returns when it ended. Called when a piece of work is done, it
        puts every counter that work moved into the timeline, however late the background thread runs
        on a loaded machine."""
        with self._lock:
            for base, url in self.urls.items():
                try:
                    values = read_metric_values(self._client.get(url).text)
                except Exception:  # a dead replica has no metrics; its timeline just has a gap
                    continue
                self.timeline.samples.setdefault(base, []).append((time.monotonic(), values))
            return time.monotonic()

    def _run(self) -> None:
        started = time.thread_time()
        while not self._stop.is_set():
            tick = time.monotonic()
            self.sample()
            # Its own CPU, so that a caller timing its process can leave the sampling out.
            self.thread_cpu_s = time.thread_time() - started
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - tick)))
