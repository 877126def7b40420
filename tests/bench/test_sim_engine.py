"""The fleet simulator's vLLM-like engine (bench/sim/engine.py, scheduler.py) without a network (scheduler, KV blocks,
preemption, chunked prefill, the throughput model), and the HTTP features built on it (/metrics per
engine, gauge lag, preemption counter, embedding cost). Assertions are on simulated quantities and
on states waited for, not on fixed sleeps."""

from __future__ import annotations

import asyncio
import math
import re
import time

import httpx
import pytest

from bench.sim import FleetSimulator, ReplicaSpec
from bench.sim.engine import Engine, Seq, make_engine, natural_length
from bench.sim.legacy_engine import LegacyEngine
from bench.sim.throughput_model import closed_loop_throughput


def toks(n: int, tag: str) -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def run_all(engine: Engine, limit: int = 100_000) -> list:
    plans = []
    while len(plans) < limit:
        plan = engine.step()
        if plan is None:
            return plans
        plans.append(plan)
    raise AssertionError("engine did not drain")


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_kv_bounded_admission_admits_fewer_than_max_num_seqs():
    # 64 blocks of 16; a 300-token prompt needs 19 blocks: 3 fit although 256 sequences are allowed.
    engine = Engine(ReplicaSpec(kv_cache_tokens=64 * 16, max_num_batched_tokens=8192))
    seqs = [engine.submit(Seq(toks(300, f"p{k}_"), 5)) for k in range(10)]
    engine.step()
    assert len(engine.running) == 3 and len(engine.waiting) == 7
    assert engine.kv_usage() == pytest.approx(57 / 64)
    run_all(engine)
    assert all(s.future.done() and s.generated == 5 for s in seqs)
    assert engine.counters["preemptions"] == 0
    # A request that could never fit, even alone, is refused up front (a 400 over HTTP).
    assert engine.fits_ever(1000, 24) and not engine.fits_ever(1000, 25)


def test_preemption_by_recomputation_when_kv_runs_out_mid_decode():
    engine = Engine(ReplicaSpec(kv_cache_tokens=8 * 16))
    a, b = engine.submit(Seq(toks(40, "a"), 60)), engine.submit(Seq(toks(40, "b"), 60))
    engine.step()
    assert engine.running == [a, b]  # 3 + 3 of 8 blocks
    plans = run_all(engine)
    assert engine.counters["preemptions"] >= 1
    assert a.generated == b.generated == 60
    # The victim (the most recently admitted, b) recomputed its prompt and what it had generated.
    assert a.finish_time < b.finish_time
    assert max(p.tokens for p in plans) > 40  # a recompute chunk: 40 prompt + generated tokens
    assert engine.kv_usage() == 0.0


def test_preemption_is_counted_in_metrics(client):
    spec = ReplicaSpec(kv_cache_tokens=8 * 16, output_tokens_mean=1000)
    with FleetSimulator([spec], time_scale=0.05) as fleet:
        url = fleet.base_urls[0]

        async def two():
            async with httpx.AsyncClient(timeout=60) as c:
                return await asyncio.gather(*(c.post(f"{url}/chat/completions", json={
                    "messages": [{"role": "user", "content": " ".join(toks(38, f"q{k}_"))}], "max_tokens": 60})
                    for k in range(2)))

        for r in asyncio.run(two()):
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 60
        text = client.get(url.removesuffix("/v1") + "/metrics").text
        m = re.search(r'^vllm:num_preemptions_total\{model_name="sim-model",engine="0"\} (\S+)$', text, re.M)
        assert m and float(m.group(1)) >= 1
        assert fleet.stats()[0]["preemptions"] == float(m.group(1))
        # A prompt that can never fit in 8 blocks is a 400 at arrival.
        r = client.post(f"{url}/chat/completions", json={
            "messages": [{"role": "user", "content": " ".join(toks(200, "x"))}], "max_tokens": 5})
        assert r.status_code == 400 and "KV cache" in r.json()["error"]["message"]


def test_prefix_cache_shares_the_pool_and_evicts_lru():
    engine = Engine(ReplicaSpec(kv_cache_tokens=16 * 16))
    a, b = toks(64, "a"), toks(64, "b")
    for prompt in (a, b):
        engine.submit(Seq(prompt, 1))
        run_all(engine)
    assert engine.kv_usage() == 0.0  # cached blocks of finished sequences are free, not "used"
    assert len(engine.pool.cached) == 8
    engine.submit(Seq(toks(192, "c"), 1))  # 12 blocks: the 8 never used, then a's (the LRU), not b's
    run_all(engine)
    hits = engine.counters["prefix_hit_tokens"]
    engine.submit(Seq(b, 1))
    run_all(engine)
    assert engine.counters["prefix_hit_tokens"] - hits == 48  # b's 3 leading blocks (its 4th is recomputed)
    hits = engine.counters["prefix_hit_tokens"]
    engine.submit(Seq(a, 1))
    run_all(engine)
    assert engine.counters["prefix_hit_tokens"] == hits  # a was evicted
    # A hit saves prefill: the same 64 tokens again compute 16 instead of 64.
    engine.submit(Seq(a, 1))
    assert engine.step().tokens == 16


def test_a_prefill_publishes_its_blocks_when_scheduled_so_the_same_step_hits_them():
    """vLLM v1 caches a prefill's full blocks when it schedules them (before the forward pass): two
    requests with the same 96-token prefix submitted together, the second admitted in the same step,
    prefill the shared blocks once."""
    engine = Engine(ReplicaSpec(max_num_batched_tokens=1024))
    shared = toks(96, "s")
    engine.submit(Seq(shared + toks(40, "x"), 1))
    engine.submit(Seq(shared + toks(40, "y"), 1))
    plan = engine.step()
    assert [n for _, n, _ in plan.work] == [136, 136 - 96]  # both admitted; the second hit 6 blocks
    assert engine.counters["prefix_hit_tokens"] == 96
    # A chunk of a long prompt publishes only the blocks it computes: the first step's budget goes to
    # its first 160 tokens, and nothing is published beyond them.
    engine = Engine(ReplicaSpec(max_num_batched_tokens=160))
    long = toks(300, "l")
    engine.submit(Seq(long, 1))
    engine.submit(Seq(long[:200] + toks(50, "z"), 1))
    plan = engine.step()
    assert [n for _, n, _ in plan.work] == [160] and engine.counters["prefix_hit_tokens"] == 0
    # The rest of the first (140 tokens, publishing its blocks up to token 288), then the second,
    # which hits all 12 blocks it shares (192 tokens) and starts its own 58 with the 20 left.
    plan = engine.step()
    assert [n for _, n, _ in plan.work] == [140, 20] and engine.counters["prefix_hit_tokens"] == 192


def test_chunked_prefill_respects_the_token_budget_and_decodes_first():
    engine = Engine(ReplicaSpec(max_num_batched_tokens=256))
    first = engine.submit(Seq(toks(500, "f"), 20))
    plans = [engine.step(), engine.step()]
    assert [p.tokens for p in plans] == [256, 244] and first.generated == 1  # no token before its prompt is done
    engine.submit(Seq(toks(500, "g"), 20))
    plan = engine.step()
    assert plan.tokens == 256 and plan.work[0][0] is first and plan.work[0][1] == 1  # the decode goes first
    for plan in run_all(engine):
        assert plan.tokens <= 256


def test_output_length_distribution_and_cap(client):
    lengths = [natural_length(f"prompt {i}", 50) for i in range(4000)]
    assert 45 < sum(lengths) / len(lengths) < 55 and min(lengths) >= 1 and max(lengths) <= 400
    assert len(set(lengths)) > 50  # a distribution, not a constant
    assert natural_length("x", 50) == natural_length("x", 50)
    assert all(40 <= natural_length(f"p{i}", 50, "legacy") <= 60 for i in range(100))
    with FleetSimulator([ReplicaSpec(output_tokens_mean=1000)], time_scale=0.001) as fleet:
        for cap_key in ("max_tokens", "max_completion_tokens"):
            r = client.post(f"{fleet.base_urls[0]}/chat/completions",
                            json={"messages": [{"role": "user", "content": "a b c"}], cap_key: 7})
            assert r.json()["usage"]["completion_tokens"] == 7 and r.json()["choices"][0]["finish_reason"] == "length"


def test_two_engines_two_label_sets_in_metrics(client):
    with FleetSimulator([ReplicaSpec(engines=2)], time_scale=0.05) as fleet:
        url = fleet.base_urls[0]

        async def two():
            async with httpx.AsyncClient(timeout=60) as c:
                return await asyncio.gather(*(c.post(f"{url}/chat/completions", json={
                    "messages": [{"role": "user", "content": " ".join(toks(100, f"e{k}_"))}], "max_tokens": 20})
                    for k in range(2)))

        assert all(r.status_code == 200 for r in asyncio.run(two()))
        text = client.get(url.removesuffix("/v1") + "/metrics").text
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                     "vllm:gpu_cache_usage_perc"):
            for e in ("0", "1"):
                assert re.search(rf'^{re.escape(name)}\{{model_name="sim-model",engine="{e}"\}} 0\.0$', text, re.M)
        # Routed to the engine with fewer outstanding requests: one each.
        gen = dict(re.findall(r'^vllm:generation_tokens_total\{model_name="sim-model",engine="(\d)"\} (\S+)$',
                              text, re.M))
        assert gen == {"0": "20.0", "1": "20.0"}
        stats = fleet.stats()[0]
        assert stats["engines"] == 2 and stats["completed"] == 2


def test_metrics_lag_answers_an_old_snapshot(client):
    spec = ReplicaSpec(metrics_lag_s=1.0, output_tokens_mean=2000)
    with FleetSimulator([spec], time_scale=1.0) as fleet, httpx.Client(timeout=30) as c:
        url = fleet.base_urls[0]
        metrics_url = url.removesuffix("/v1") + "/metrics"

        def running_gauge() -> float:
            return float(re.search(r'^vllm:num_requests_running\{[^}]*\} (\S+)$', c.get(metrics_url).text,
                                   re.M).group(1))

        async def long_request():
            async with httpx.AsyncClient(timeout=60) as ac:
                return await ac.post(f"{url}/chat/completions", json={
                    "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 600})  # ~2.8 s

        async def scenario():
            task = asyncio.ensure_future(long_request())
            await asyncio.to_thread(wait_for, lambda: fleet.stats()[0]["running"] == 1, 10, "the request running")
            started = time.monotonic()
            assert await asyncio.to_thread(running_gauge) == 0.0  # a second ago it was idle
            await asyncio.to_thread(wait_for, lambda: running_gauge() == 1.0, 10, "the lagged gauge")
            seen_after = time.monotonic() - started
            assert fleet.stats()[0]["running"] == 1  # still running: the gauge was behind, not wrong
            r = await task
            return seen_after, r

        seen_after, r = asyncio.run(scenario())
        assert r.status_code == 200
        assert seen_after >= 0.8, seen_after
        # Counters are current.
        assert f" {float(r.json()['usage']['completion_tokens'])!r}" in c.get(metrics_url).text


def test_throughput_knee_well_above_16_sequences():
    spec = ReplicaSpec()
    # Decode-heavy requests (100 prompt + 200 output tokens): decode steps are bound by the weight
    # reads, so fuller batches are nearly free until compute binds.
    at = {c: closed_loop_throughput(spec, c, prompt_tokens=100, output_tokens=200)["requests_per_s"]
          for c in (16, 64, 256)}
    assert at[64] > 2 * at[16] and at[256] > 1.3 * at[64], at
    # 1,000 + 50 with a 900-token shared prefix (one document, many chunks): the same knee.
    shared = {c: closed_loop_throughput(spec, c, shared_prefix=900)["requests_per_s"] for c in (16, 256)}
    assert shared[256] > 2.5 * shared[16], shared
    # Uncached 1,000 + 50: prefill is compute-bound on an A100 (41 us/token), ~23 requests/s at best.
    plain = {c: closed_loop_throughput(spec, c)["requests_per_s"] for c in (1, 16, 256)}
    assert plain[16] > 4 * plain[1] and plain[256] < 1 / (1050 * spec.compute_s_per_token) * 1.01, plain


def test_long_prompts_are_kv_bound_before_the_sequence_cap():
    # A large step budget so that admission is not paced by prefill compute: the KV pool (589,824
    # tokens) holds 147 prompts of 4,000 tokens (250 blocks each), not 256.
    engine = Engine(ReplicaSpec(max_num_batched_tokens=1 << 20))
    for k in range(256):
        engine.submit(Seq(toks(4000, f"L{k}_"), 50))
    peak = 0
    for _ in range(2000):
        if engine.step() is None:
            break
        peak = max(peak, len(engine.running))
    assert peak == 36864 // 250


def test_legacy_cost_model_is_the_old_one():
    legacy = make_engine(ReplicaSpec(cost_model="legacy", max_num_seqs=4))
    assert isinstance(legacy, LegacyEngine)
    legacy.submit(Seq(toks(99, "a"), 3))
    plan = legacy.step()
    assert plan.cost_s == pytest.approx(2e-5 * 99 + 0.006 + 6e-7 * 99)
    with pytest.raises(ValueError, match="cost_model"):
        ReplicaSpec(cost_model="v0")


def test_embeddings_cost_time_in_their_lane(client):
    specs = [ReplicaSpec(serve_embeddings=True, embedding_dim=384),
             ReplicaSpec(serve_embeddings=True, cost_model="legacy")]
    with FleetSimulator(specs, time_scale=1.0) as fleet:
        inputs = [" ".join(toks(100, f"d{k}_")) for k in range(10)]
        t0 = time.monotonic()
        r = client.post(f"{fleet.base_urls[0]}/embeddings", json={"model": "sim-embed", "input": inputs})
        wall = time.monotonic() - t0
        assert r.status_code == 200
        vectors = [d["embedding"] for d in r.json()["data"]]
        assert len(vectors) == 10 and all(len(v) == 384 for v in vectors)
        assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-9) for v in vectors)
        s = fleet.stats()
        expected = spec_cost = specs[0].embed_base_s + specs[0].embed_s_per_token * 1000
        assert s[0]["embedding_s"] == pytest.approx(expected) and wall >= spec_cost
        assert s[0]["embedding_requests"] == 1 and s[0]["embeddings"] == 10
        assert client.post(f"{fleet.base_urls[1]}/embeddings", json={"input": inputs}).status_code == 200
        assert fleet.stats()[1]["embedding_s"] == 0.0  # legacy: instant


@pytest.fixture
def client():
    with httpx.Client(timeout=30) as c:
        yield c
