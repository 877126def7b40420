"""Each serving engine's `/metrics`, read under its own names (`fleet/engine_metrics.py`).

The llama.cpp text was captured from a real `llama-server --metrics` under load; the vLLM, SGLang and TGI
texts are written from those engines' sources (see each file's first line), as their servers print them."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextual_assets.fleet import capacity
from contextual_assets.fleet.breaker import CircuitBreaker
from contextual_assets.fleet.config import ReplicaConfig
from contextual_assets.fleet.engine_metrics import (
    read_engine_metrics,
    read_metric_values,
)
from contextual_assets.fleet.replica import ReplicaReport, ReplicaState

TEXTS = Path(__file__).parent / "metrics_texts"


def text(name: str) -> str:
    return (TEXTS / f"{name}.txt").read_text()


@pytest.mark.parametrize("name, expected", [
    # engine, running, waiting, kv_usage, engines, preemptions, generation, prompt
    ("vllm", ("vllm", 21.0, 3.0, 0.4375, 2, 3.0, 100000.0, 254321.0)),
    ("llama_cpp", ("llama.cpp", 4.0, 2.0, None, 1, None, 1200.0, 206.0)),
    # Ranks summed; the retraction counter, not the legacy per-interval gauge; KV the fullest rank.
    ("sglang", ("sglang", 44.0, 5.0, 0.61, 2, 5.0, 99000.0, 155321.0)),
    # KV as reserved over total tokens; token totals from the histograms' _sum.
    ("tgi", ("tgi", 12.0, 3.0, 24576 / 131072, 1, None, 98765.0, 154321.0)),
])
def test_each_engine_is_read_under_its_own_names(name, expected):
    metrics = read_engine_metrics(text(name))
    assert metrics is not None
    assert (metrics.engine, metrics.running, metrics.waiting, metrics.kv_usage, metrics.engines, metrics.preemptions,
            metrics.generation_tokens, metrics.prompt_tokens) == pytest.approx(expected)


def test_timeline_figures_are_engine_neutral():
    assert read_metric_values(text("llama_cpp")) == {"running": 4.0, "waiting": 2.0, "generation_tokens": 1200.0,
                                                     "prompt_tokens": 206.0}
    assert set(read_metric_values(text("vllm"))) == {"running", "waiting", "kv_usage", "preemptions",
                                                    "generation_tokens", "prompt_tokens"}


def test_an_idle_llama_server_is_still_recognised_and_an_older_build_reports_kv():
    idle = ("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n"
            "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 0\n"
            # Values are C++ doubles with 6 significant digits: large counters print with an exponent.
            "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 1.23457e+06\n"
            # Builds before its removal (2025) publish the KV gauge.
            "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.25\n")
    metrics = read_engine_metrics(idle)
    assert metrics is not None and metrics.engine == "llama.cpp"
    assert (metrics.running, metrics.waiting, metrics.kv_usage, metrics.generation_tokens) == (0, 0, 0.25, 1234570)


def test_a_server_without_a_known_engine_has_no_engine_metrics():
    assert read_engine_metrics("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3.0\n") is None
    assert read_engine_metrics("") is None
    assert read_metric_values("") == {}


def test_a_llama_server_with_deferred_requests_backs_off_like_a_queueing_vllm():
    """Routing is engine-blind: llama.cpp's deferred tasks are a queue, as vLLM's waiting requests are."""
    def state() -> ReplicaState:
        replica = ReplicaState(config=ReplicaConfig(base_url="http://a:8080/v1"), model="m",
                               breaker=CircuitBreaker(failure_threshold=1, cooldown_s=5.0))
        replica.limit, replica.in_flight = 8, 6
        return replica

    limits = {}
    # The captured texts with a deeper queue: 6 waiting, more than a replica may keep queued.
    deeper = {"llama_cpp": text("llama_cpp").replace("llamacpp:requests_deferred 2", "llamacpp:requests_deferred 6"),
              "vllm": text("vllm").replace('engine="0",model_name="Qwen/Qwen2.5-3B-Instruct"} 3.0',
                                          'engine="0",model_name="Qwen/Qwen2.5-3B-Instruct"} 6.0')}
    for name, captured in deeper.items():
        metrics = read_engine_metrics(captured)
        assert metrics is not None and metrics.waiting == 6
        reads = [ReplicaReport(at=at, running=metrics.running, waiting=metrics.waiting, kv_usage=metrics.kv_usage,
                               local_in_flight=6, local_counted=6, engine=metrics.engine, completed=completed,
                               work_tokens=metrics.generation_tokens) for at, completed in ((1.0, 0), (1.5, 1))]
        # Two reads in a row with requests waiting at the server: the limit is what it runs, plus a short queue.
        limits[name] = capacity.adapted_limit(state(), reads[1], reads[0])[0]
    assert limits == {"llama_cpp": 4 + capacity.QUEUE_MIN, "vllm": 21 + capacity.QUEUE_MIN}


def test_a_llama_server_context_length_is_its_slot_context():
    """llama-server's /v1/models (captured: -c 8192 -np 4) says one slot holds 2048 tokens: the request budget."""
    from contextual_assets.fleet.discovery import served_models

    answer = {"object": "list", "data": [{
        "id": "smollm2-135m-instruct", "aliases": ["smollm2-135m-instruct"], "object": "model", "owned_by": "llamacpp",
        "meta": {"vocab_type": 2, "n_vocab": 49152, "n_ctx": 2048, "n_ctx_train": 8192, "n_embd": 576,
                 "n_params": 134515008, "size": 96576768, "ftype": "Q4_1"}}]}
    (model,) = served_models(answer)
    assert (model.id, model.max_model_len, model.weights) == ("smollm2-135m-instruct", 2048, "smollm2-135m-instruct")
    vllm = {"data": [{"id": "qwen", "max_model_len": 32768, "root": "Qwen/Qwen2.5-3B-Instruct"}]}
    assert served_models(vllm)[0].max_model_len == 32768
