"""The Prometheus /metrics text of a simulated replica (bench/sim/fleet.py).

/metrics: per engine (label ``engine="0"``, ``engine="1"``, ... beside ``model_name``, as vLLM v1 and
its data-parallel deployments publish): gauges ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``, ``vllm:gpu_cache_usage_perc``; counters
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, ``vllm:prefix_cache_queries_total``
(tokens in full prompt blocks), ``vllm:prefix_cache_hits_total``, ``vllm:num_preemptions_total``,
``vllm:request_success_total`` (finished_reason stop / length). With ``metrics_lag_s`` > 0
(``--metrics-lag-s``) the gauges are answered as they were that many wall seconds ago (snapshots at
most every 10 ms, the last second beyond the lag kept; before the first old-enough snapshot: idle);
counters are current.
"""

from __future__ import annotations

import time

from bench.sim.specs import _COUNTER_FIELDS


class ReplicaMetrics:
    """Mixin of ``Replica``: its /metrics text and the gauges' snapshots behind metrics_lag_s."""

    def _snapshot(self, e: int) -> None:
        """Record engine e's gauges for the lagged /metrics (only when metrics_lag_s > 0): at most one
        entry per 10 ms (the latest state wins), entries older than the lag + 1 s dropped."""
        lag = self.spec.metrics_lag_s
        if lag <= 0:
            return
        engine = self.engines[e]
        now = time.monotonic()
        entry = (now, len(engine.running), len(engine.waiting), engine.kv_usage())
        hist = self.history[e]
        if hist and now - hist[-1][0] < 0.01 and len(hist) > 1:
            hist[-1] = (hist[-1][0],) + entry[1:]
        else:
            hist.append(entry)
        while len(hist) > 2 and hist[1][0] < now - lag - 1.0:
            hist.popleft()

    def gauges(self, e: int) -> tuple[int, int, float]:
        """(running, waiting, kv usage) of engine e as /metrics reports them: metrics_lag_s ago."""
        engine = self.engines[e]
        lag = self.spec.metrics_lag_s
        if lag <= 0:
            return len(engine.running), len(engine.waiting), engine.kv_usage()
        target = time.monotonic() - lag
        for t, running, waiting, usage in reversed(self.history[e]):
            if t <= target:
                return running, waiting, usage
        return 0, 0, 0.0  # before the first snapshot old enough: the idle engine it was at start

    def metrics_text(self) -> str:
        model = self.spec.model_name.replace("\\", "\\\\").replace('"', '\\"')
        legacy = self.spec.cost_model == "legacy"
        # vLLM v1 labels every series with its engine (data parallel: one per engine); legacy: one set.
        labels = [f'model_name="{model}"'] if legacy else \
            [f'model_name="{model}",engine="{e}"' for e in range(len(self.engines))]
        cur = [{k: engine.counters[k] - offset[k] for k in _COUNTER_FIELDS}
               for engine, offset in zip(self.engines, self.metrics_offset)]
        if legacy:
            cur = [{k: sum(c[k] for c in cur) for k in _COUNTER_FIELDS}]
        gauges = [self.gauges(e) for e in range(len(self.engines))]
        if legacy:
            gauges = [(sum(g[0] for g in gauges), sum(g[1] for g in gauges), max(g[2] for g in gauges))]
        lines: list[str] = []

        def counter(name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name}_total {help_text}")
            lines.append(f"# TYPE {name}_total counter")
            for labels, value in samples:
                lines.append(f"{name}_total{{{labels}}} {float(value)!r}")
            lines.append(f"# HELP {name}_created {help_text}")
            lines.append(f"# TYPE {name}_created gauge")
            for labels, _ in samples:
                lines.append(f"{name}_created{{{labels}}} {self.metrics_created!r}")

        def gauge(name: str, help_text: str, index: int) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} gauge")
            for lbl, g in zip(labels, gauges):
                lines.append(f"{name}{{{lbl}}} {float(g[index])!r}")

        def per_engine(key: str) -> list[tuple[str, float]]:
            return [(lbl, c[key]) for lbl, c in zip(labels, cur)]

        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", 0)
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 1)
        # vLLM v1's name, and the name older releases (and older dashboards) read; the same value.
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 2)
        gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", 2)
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.", per_engine("prompt_tokens"))
        counter("vllm:generation_tokens", "Number of generation tokens processed.", per_engine("generation_tokens"))
        counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                per_engine("prefix_query_tokens"))
        counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                per_engine("prefix_hit_tokens"))
        if not legacy:
            counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                    per_engine("preemptions"))
        counter("vllm:request_success", "Count of successfully processed requests.",
                [(f'{lbl},finished_reason="{reason}"', c[f"success_{reason}"])
                 for lbl, c in zip(labels, cur) for reason in ("stop", "length")])
        return "\n".join(lines) + "\n"

