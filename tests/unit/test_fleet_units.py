"""Fleet parts with no network: configuration, discovery (injected fetch and clock), the circuit
breaker (injected clock), request budgets, cache keys and metrics parsing."""

from __future__ import annotations

import pytest

from contextual_assets.errors import ConfigurationError
from contextual_assets.fleet.breaker import CircuitBreaker
from contextual_assets.fleet.config import FleetConfig
from contextual_assets.fleet.discovery import ModelDiscovery, ServedModel
from contextual_assets.headers.base import HeaderRequest
from contextual_assets.headers.budget import ChunkTooLargeError, fit_prompt
from contextual_assets.headers.cache_key import header_cache_key
from contextual_assets.headers.prompt import load_prompt
from contextual_assets.models import Chunk, content_hash
from contextual_assets.parsing.tokens import token_counter


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_config_from_urls_and_yaml(tmp_path):
    config = FleetConfig.load(base_urls="http://a:8000, http://b:8000/v1/", max_in_flight=8)
    assert [r.base_url for r in config.replicas] == ["http://a:8000/v1", "http://b:8000/v1"]
    assert [r.max_in_flight for r in config.replicas] == [8, 8]
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(
        "model: pinned\nreplicas:\n  - base_url: http://a:8000\n    max_in_flight: 32\n    weight: 2\n"
        "    api_key_env: A_KEY\n  - base_url: http://b:8000\n"
    )
    config = FleetConfig.load(fleet_file=str(fleet_file), max_in_flight=4)
    assert config.model == "pinned"
    assert [(r.max_in_flight, r.weight) for r in config.replicas] == [(32, 2.0), (4, 1.0)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_urls": ""}, "at least one replica"),
        ({"base_urls": "gpu-1:8000"}, "must start with http"),
        ({"base_urls": "http://a,http://a"}, "duplicate replica URLs"),
        ({"fleet_file": "/nonexistent.yaml"}, "not found"),
    ],
)
def test_config_errors_are_clear(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        FleetConfig.load(**kwargs)


def test_api_key_comes_from_the_named_variable(monkeypatch):
    config = FleetConfig.load(base_urls="http://a")
    monkeypatch.setenv("CTX_LLM_API_KEY", "sk-test-123")
    assert config.api_key_for(config.replicas[0]) == "sk-test-123"
    assert "sk-test-123" not in config.model_dump_json()


def fake_fetch(answers):
    calls = []

    def fetch(url, key):
        calls.append(url)
        answer = answers[url]
        if isinstance(answer, Exception):
            raise answer
        return [ServedModel(*entry) for entry in answer]  # (id, max_model_len[, root[, parent]])

    return fetch, calls


def test_discovery_skips_embedding_models_and_reads_context_length():
    fetch, _ = fake_fetch({"http://a/v1": [("bge-small-embed", None), ("qwen-7b", 4096)],
                           "http://b/v1": [("qwen-7b", 8192)]})
    resolved = ModelDiscovery(fetch=fetch).resolve({"http://a/v1": None, "http://b/v1": None})
    assert resolved.name == "qwen-7b" and resolved.context_limit == 4096 and resolved.discovered


def test_discovery_cache_respects_ttl():
    clock = Clock()
    fetch, calls = fake_fetch({"http://a/v1": [("m", None)]})
    discovery = ModelDiscovery(ttl_s=300, fetch=fetch, clock=clock)
    discovery.resolve({"http://a/v1": None})
    clock.now += 299
    discovery.resolve({"http://a/v1": None})
    assert len(calls) == 1
    clock.now += 2
    discovery.resolve({"http://a/v1": None})
    assert len(calls) == 2


def test_weights_are_root_parent_or_the_name():
    assert ServedModel(id="llama-cpp-alias").weights == "llama-cpp-alias"  # no root reported: the name
    assert ServedModel(id="qwen", root="Qwen/Qwen2.5-3B-Instruct").weights == "Qwen/Qwen2.5-3B-Instruct"
    adapter = ServedModel(id="legal", root="/adapters/legal-v2", parent="Qwen/Qwen2.5-3B-Instruct")
    assert adapter.weights == "Qwen/Qwen2.5-3B-Instruct+/adapters/legal-v2"


def test_discovery_keeps_the_served_name_and_reads_the_weights():
    fetch, _ = fake_fetch({"http://a/v1": [("qwen", 4096, "Qwen/Qwen2.5-3B-Instruct")],
                           "http://b/v1": [("qwen", 8192, "Qwen/Qwen2.5-3B-Instruct")]})
    resolved = ModelDiscovery(fetch=fetch).resolve({"http://a/v1": None, "http://b/v1": None})
    assert (resolved.name, resolved.weights, resolved.context_limit) == ("qwen", "Qwen/Qwen2.5-3B-Instruct", 4096)
    assert resolved.per_endpoint["http://b/v1"].root == "Qwen/Qwen2.5-3B-Instruct"


def test_one_name_over_different_weights_is_mixed():
    fetch, _ = fake_fetch({"http://a/v1": [("qwen", None, "Qwen/Qwen2.5-3B-Instruct")],
                           "http://b/v1": [("qwen", None, "Qwen/Qwen2.5-7B-Instruct")]})
    endpoints = {"http://a/v1": None, "http://b/v1": None}
    with pytest.raises(ConfigurationError, match="replicas serve different models") as info:
        ModelDiscovery(fetch=fetch).resolve(endpoints)
    assert "http://b/v1: models ['qwen (weights Qwen/Qwen2.5-7B-Instruct)']" in str(info.value)
    resolved = ModelDiscovery(fetch=fetch).resolve(endpoints, allow_mixed=True)
    assert (resolved.name, resolved.weights) == ("qwen", "Qwen/Qwen2.5-3B-Instruct+Qwen/Qwen2.5-7B-Instruct")


def test_a_served_pin_is_checked_and_reads_the_context_length():
    fetch, calls = fake_fetch({"http://a/v1": [("other", 1024), ("my-model", 4096, "org/weights-v2")],
                               "http://b/v1": [("my-model", 2048, "org/weights-v2")]})
    endpoints = {"http://a/v1": None, "http://b/v1": None}
    resolved = ModelDiscovery(fetch=fetch).resolve(endpoints, pin="my-model")
    assert (resolved.name, resolved.weights, resolved.context_limit, resolved.discovered) == (
        "my-model", "org/weights-v2", 2048, False)
    assert {u: m.id for u, m in resolved.per_endpoint.items()} == {"http://a/v1": "my-model", "http://b/v1": "my-model"}
    assert sorted(calls) == ["http://a/v1", "http://b/v1"]
    # A configured context limit wins over max_model_len.
    assert ModelDiscovery(fetch=fetch).resolve(endpoints, pin="my-model", context_limit=1500).context_limit == 1500


def test_a_pin_not_served_everywhere_is_a_clear_error():
    fetch, _ = fake_fetch({"http://a/v1": [("x", None)], "http://b/v1": [("a", None), ("b", None)]})
    with pytest.raises(ConfigurationError) as info:
        ModelDiscovery(fetch=fetch).resolve({"http://a/v1": None, "http://b/v1": None}, pin="x")
    assert str(info.value) == ("CTX_LLM_MODEL='x' is not served by http://b/v1 (it serves ['a', 'b']); "
                               "set CTX_LLM_MODEL to a served name or unset it to discover")
    assert "\n" not in str(info.value)


def test_a_pin_on_an_unreachable_endpoint_lists_every_answer():
    fetch, _ = fake_fetch({"http://a/v1": [("x", None)], "http://b/v1": ConnectionError("refused")})
    with pytest.raises(ConfigurationError) as info:
        ModelDiscovery(fetch=fetch).resolve({"http://a/v1": None, "http://b/v1": None}, pin="x")
    message = str(info.value)
    assert "CTX_LLM_MODEL='x'" in message and "http://a/v1: models ['x']" in message
    assert "http://b/v1: unreachable or invalid answer (ConnectionError: refused)" in message


def test_a_pin_over_different_weights_is_an_error_unless_mixed_is_allowed():
    fetch, _ = fake_fetch({"http://a/v1": [("x", None, "org/w1")], "http://b/v1": [("x", None, "org/w2")]})
    endpoints = {"http://a/v1": None, "http://b/v1": None}
    with pytest.raises(ConfigurationError, match="CTX_LLM_MODEL='x' names different weights"):
        ModelDiscovery(fetch=fetch).resolve(endpoints, pin="x")
    assert ModelDiscovery(fetch=fetch).resolve(endpoints, pin="x", allow_mixed=True).weights == "org/w1+org/w2"


def test_mismatched_models_are_an_error_unless_allowed():
    fetch, _ = fake_fetch({"http://a/v1": [("m1", None)], "http://b/v1": [("m2", None)]})
    endpoints = {"http://a/v1": None, "http://b/v1": None}
    with pytest.raises(ConfigurationError, match="replicas serve different models"):
        ModelDiscovery(fetch=fetch).resolve(endpoints)
    resolved = ModelDiscovery(fetch=fetch).resolve(endpoints, allow_mixed=True)
    assert {m.id for m in resolved.per_endpoint.values()} == {"m1", "m2"}


def test_nothing_usable_or_unreachable_lists_every_answer():
    fetch, _ = fake_fetch({"http://a/v1": [("text-embedding-3", None)], "http://b/v1": ConnectionError("refused"),
                           "http://c/v1": []})
    with pytest.raises(ConfigurationError) as info:
        ModelDiscovery(fetch=fetch).resolve({"http://a/v1": None, "http://b/v1": None, "http://c/v1": None})
    message = str(info.value)
    assert "http://a/v1: models ['text-embedding-3']" in message
    assert "http://b/v1: unreachable or invalid answer (ConnectionError: refused)" in message
    assert "http://c/v1: no models" in message


def test_circuit_breaker_opens_probes_and_closes():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, cooldown_s=5, clock=clock)
    for _ in range(2):
        breaker.record_failure()
    assert breaker.state == "closed" and breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.allow()
    clock.now += 5
    assert breaker.state == "half-open" and breaker.allow()
    breaker.on_dispatch()
    assert not breaker.allow(), "one probe at a time"
    breaker.record_failure()
    assert breaker.state == "open" and breaker.trips == 2
    clock.now += 5
    breaker.on_dispatch()
    breaker.record_success()
    assert breaker.state == "closed" and breaker.allow()


def make_request(n_before=6, n_after=6, words=40) -> HeaderRequest:
    text = " ".join(f"chunkword{i}" for i in range(words))
    chunk = Chunk(doc_id="d", source_doc="d", title="T", ordinal=3, section_path=["S"], text=text,
                  token_count=words, content_hash=content_hash(text))
    before = [" ".join(f"before{j}w{i}" for i in range(words)) for j in range(n_before)]
    after = [" ".join(f"after{j}w{i}" for i in range(words)) for j in range(n_after)]
    return HeaderRequest(chunk=chunk, before=before, after=after)


def test_budget_trims_farthest_context_first():
    counter, prompt = token_counter(), load_prompt()
    request = make_request()
    roomy = fit_prompt(request, prompt, counter, context_limit=None, max_output_tokens=80)
    assert roomy.trimmed_parts == 0
    tight = fit_prompt(request, prompt, counter, context_limit=roomy.est_prompt_tokens // 2 + 80, max_output_tokens=80)
    assert 0 < tight.trimmed_parts < 12
    assert tight.est_prompt_tokens + 80 <= roomy.est_prompt_tokens // 2 + 80
    assert "before0w0" in tight.context and "after0w0" in tight.context, "nearest parts are kept"
    assert "before5w0" not in tight.context and "after5w0" not in tight.context, "farthest parts go first"


def test_chunk_over_the_context_alone_is_shown_from_its_start_and_one_that_cannot_be_is_a_clear_error():
    # A pre-chunked import can hold a chunk of thousands of tokens: a small model (2,048 tokens) still gets
    # its start, as passage and as context, cut to fit.
    counter, prompt = token_counter(), load_prompt()
    huge = make_request(words=3000)
    fitted = fit_prompt(huge, prompt, counter, context_limit=1000, max_output_tokens=80)
    assert fitted.chunk_cut and fitted.trimmed_parts == 12 and fitted.est_prompt_tokens + 80 <= 1000
    assert fitted.context.startswith("chunkword0 chunkword1") and "chunkword2999" not in fitted.context
    assert "<chunk>\nchunkword0 chunkword1" in fitted.messages[1]["content"]
    assert not fit_prompt(make_request(), prompt, counter, context_limit=None, max_output_tokens=80).chunk_cut
    with pytest.raises(ChunkTooLargeError, match="chunk 3 of d needs ~.* over the model's context length of 100"):
        fit_prompt(make_request(words=200), prompt, counter, context_limit=100, max_output_tokens=80)


def test_cache_key_changes_with_every_part():
    messages = load_prompt().render(title="Supply Agreement", section_path="12 Termination", context="context",
                                    chunk="chunk")
    base = ("m", "rev1", "header-v2", messages, "hash")
    keys = {header_cache_key(*base)}
    for index in (0, 1, 2, 4):
        changed = list(base)
        changed[index] = changed[index] + "x"
        keys.add(header_cache_key(*changed))
    # Every value the prompt is built from: title, section path, context and chunk (issue 39: a shared
    # paragraph under another document's title is another key).
    for part in ("title", "section_path", "context", "chunk"):
        values = {"title": "Supply Agreement", "section_path": "12 Termination", "context": "context", "chunk": "chunk"}
        values[part] += " (other)"
        keys.add(header_cache_key(*base[:3], load_prompt().render(**values), base[4]))
    assert len(keys) == 9
    # The first part is the weights' identity: the same served name over other weights is another key.
    assert header_cache_key("org/weights-v1", *base[1:]) != header_cache_key("org/weights-v2", *base[1:])


def test_no_ceiling_by_default_and_zero_means_none():
    assert FleetConfig.load(base_urls="http://a:8000").replicas[0].max_in_flight is None
    assert FleetConfig.load(base_urls="http://a:8000", max_in_flight=0).replicas[0].max_in_flight is None
    assert FleetConfig.load(base_urls="http://a:8000", max_in_flight=48).replicas[0].max_in_flight == 48


def test_engine_metrics_of_a_data_parallel_replica_are_read_per_engine():
    from contextual_assets.fleet.engine_metrics import read_engine_metrics, read_metric_values

    # Two engines behind one port, each at 50 % KV (as vLLM labels them with --data-parallel-size 2).
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 40.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 38.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="m"} 2.0\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5\n'
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 3.0\n'
        'vllm:num_preemptions_total{engine="1",model_name="m"} 1.0\n'
        "# TYPE vllm:generation_tokens_total counter\n"
        'vllm:generation_tokens_total{engine="0",model_name="m"} 500.0\n'
        'vllm:generation_tokens_total{engine="1",model_name="m"} 700.0\n'
    )
    metrics = read_engine_metrics(text)
    assert metrics is not None
    assert (metrics.running, metrics.waiting, metrics.engines) == (78.0, 2.0, 2)
    assert metrics.kv_usage == 0.5  # not 1.0: two half-full engines are not a full replica
    assert (metrics.preemptions, metrics.generation_tokens) == (4.0, 1200.0)
    assert read_metric_values(text)["kv_usage"] == 0.5
    # The KV cut is not tripped by it.
    from contextual_assets.fleet import capacity
    from contextual_assets.fleet.breaker import CircuitBreaker
    from contextual_assets.fleet.config import ReplicaConfig
    from contextual_assets.fleet.replica import ReplicaReport, ReplicaState

    state = ReplicaState(config=ReplicaConfig(base_url="http://a:8000"), model="m",
                         breaker=CircuitBreaker(failure_threshold=1, cooldown_s=5.0))
    state.limit = 80
    read = ReplicaReport(at=1.0, running=metrics.running, waiting=metrics.waiting, kv_usage=metrics.kv_usage,
                         local_in_flight=0)
    assert capacity.adapted_limit(state, read, None)[0] == 80
    # A server that publishes no known engine's gauges has no engine metrics.
    assert read_engine_metrics("# TYPE other gauge\nother 1.0\n") is None


def test_a_lagging_gauge_counts_only_the_fewest_of_our_requests_over_the_lag():
    from contextual_assets.fleet.breaker import CircuitBreaker
    from contextual_assets.fleet.config import ReplicaConfig
    from contextual_assets.fleet.replica import ReplicaReport, ReplicaState
    from contextual_assets.fleet.routing import foreign_load

    state = ReplicaState(config=ReplicaConfig(base_url="http://a:8000"), model="m",
                         breaker=CircuitBreaker(failure_threshold=1, cooldown_s=5.0))
    for t, n in [(0.0, 10), (1.0, 20), (1.4, 30)]:  # ours went 10 -> 20 -> 30
        state.in_flight = n
        state.record_in_flight(t)
    # A read at t=1.5 whose gauge may be 1 s old can be counting as few as 10 of ours (at t=0.5).
    assert state.least_in_flight_since(0.5) == 10
    assert state.least_in_flight_since(1.2) == 20
    # The gauge says 40 (30 of ours + 10 of another process's, but lagging: it saw ours at 20 and the
    # other's at 20). Counting ours at their fewest (20) keeps the other's 20 in view.
    state.report = ReplicaReport(at=1.5, running=40, waiting=0, kv_usage=None, local_in_flight=30,
                                 local_counted=state.least_in_flight_since(1.0))
    assert foreign_load(state, 1.5) == 20
    # Without a lag, a read counts ours at the most we had out while it was in flight: a request that
    # started during the read is not another process's.
    assert state.most_in_flight_since(1.2) == 30 and state.most_in_flight_since(0.5) == 30
    state.report = ReplicaReport(at=1.5, running=30, waiting=0, kv_usage=None, local_in_flight=20,
                                 local_counted=state.most_in_flight_since(1.2))
    assert foreign_load(state, 1.5) == 0
