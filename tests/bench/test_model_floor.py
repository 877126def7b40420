"""The model floor (bench/model_floor.py): the formula on hand-made requests without a network, and
its token counts and work against a real simulator's answers and accounting."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from bench.model_floor import (
    CostModel,
    floor_figures,
    ideal_prefix_hits,
    model_floor_s,
    request_costs,
    request_work_s,
    token_counts,
)
from bench.sim import FleetSimulator, ReplicaSpec
from bench.sim.engine import Seq, make_engine

# The legacy cost model's formula is checked by hand; the vllm one (the default) below.
MODEL = CostModel.of(ReplicaSpec(max_num_seqs=16, cost_model="legacy"))
VLLM = CostModel.of(ReplicaSpec(max_num_seqs=16))


def body(content: str, max_tokens: int | None = 80, **extra) -> dict:
    out = {"messages": [{"role": "user", "content": content}], **extra}
    if max_tokens is not None:
        out["max_tokens"] = max_tokens
    return out


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_single_request_by_hand():
    # "user a b c": 4 prompt tokens; max_tokens 5 caps the natural length (>= the canned header's ~8 words).
    tokens, out = token_counts(body("a b c", max_tokens=5), MODEL)
    assert (len(tokens), out) == (4, 5)
    expected = 2e-5 * 4 + 0.006 * 5 / 16 + 6e-7 * (5 * 4 + 5 * 4 / 2)
    assert request_work_s(4, 5, 0, MODEL) == pytest.approx(expected)
    assert model_floor_s([body("a b c", max_tokens=5)], speeds=[1.0], time_scale=1.0, model=MODEL) \
        == pytest.approx(expected)


def test_prompt_tokens_join_role_and_content_per_message():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x y\nz"}]
    tokens, _ = token_counts({"messages": messages, "max_tokens": 1}, MODEL)
    assert tokens == ["system", "be", "brief", "user", "x", "y", "z"]


def test_prefix_sharing_counts_leading_full_blocks_once():
    shared = words(40, "s")  # "user" + 40 words: two full blocks of 16 shared, 9 tokens of a third
    a, b = body(f"{shared} {words(30, 'a')}"), body(f"{shared} {words(30, 'b')}")
    other = body(f"{words(16, 'o')} {shared}")  # same words later on: no leading block in common
    prompts = [token_counts(x, MODEL)[0] for x in (a, b, other, a)]
    assert ideal_prefix_hits(prompts, 16) == [0, 32, 0, 64]  # a again: all its 4 full blocks
    first, second = request_costs([a, b], MODEL)
    assert (first.prompt_tokens, first.hit_tokens, second.hit_tokens) == (71, 0, 32)
    # The hit saves exactly its prefill: 32 tokens.
    assert request_work_s(71, second.output_tokens, 0, MODEL) - second.work_s == pytest.approx(2e-5 * 32)


def test_floor_divides_by_capacity_and_scales_with_time_scale():
    bodies = [body(words(300, f"r{i}-")) for i in range(20)]
    one = model_floor_s(bodies, speeds=[1.0], time_scale=1.0, model=MODEL)
    assert model_floor_s(bodies, speeds=[1.0, 1.0, 0.5, 0.5], time_scale=1.0, model=MODEL) == pytest.approx(one / 3)
    assert model_floor_s(bodies, speeds=[1.0], time_scale=0.25, model=MODEL) == pytest.approx(one / 4)
    figures = floor_figures(bodies, [1.0, 1.0], 2.0, MODEL)
    assert figures["model_floor_s"] == pytest.approx(one, abs=1e-3)
    assert figures["model_requests"] == 20 and figures["model_prompt_tokens"] == 20 * 301


def test_fuller_batches_share_the_decode_step():
    lone = CostModel.of(ReplicaSpec(max_num_seqs=1, cost_model="legacy"))
    assert request_work_s(1000, 50, 0, lone) - request_work_s(1000, 50, 0, MODEL) \
        == pytest.approx(0.006 * 50 * (1 - 1 / 16))


def sim_bodies() -> list[dict]:
    from contextual_assets.headers.prompt import load_prompt

    rendered = load_prompt().render(title="Valve manual", section_path="Intro > Pumps",
                                    context="The pumps are checked weekly. " * 20,
                                    chunk="Pump 3 failed its pressure test on Monday.")
    return [
        body("a b c"),
        body(words(300, "p")),
        body(words(300, "p") + " tail"),  # shares the previous prompt's leading blocks
        body(words(50, "q"), max_tokens=3),  # capped: finish_reason "length"
        body(words(20, "n"), max_tokens=None),  # no cap: the room left in the context
        {"messages": rendered, "max_tokens": 80},  # the platform's header prompt
        {"messages": rendered, "max_tokens": 80, "temperature": 0.7},
        {"messages": [{"role": "user", "content": '<chunk id="a">x y</chunk><chunk id="b">z</chunk>'}],
         "max_tokens": 400, "response_format": {"type": "json_object"}},  # batch mode
    ]


def test_counts_match_a_real_simulator_answer():
    bodies = sim_bodies()
    with FleetSimulator([ReplicaSpec()], time_scale=0.001) as sim, httpx.Client(timeout=30) as client:
        for b in bodies:
            answer = client.post(f"{sim.base_urls[0]}/chat/completions", json={"model": "sim-model", **b})
            assert answer.status_code == 200, answer.text
            tokens, out = token_counts(b, VLLM)
            usage = answer.json()["usage"]
            assert (usage["prompt_tokens"], usage["completion_tokens"]) == (len(tokens), out), b


def test_work_matches_the_simulators_busy_time_one_request_at_a_time():
    # One slot and requests one after another: every decode step serves one sequence, so the
    # formula with max_num_seqs 1 is exactly the engine's accounting (prefix hits included).
    spec = ReplicaSpec(max_num_seqs=1, speed=0.5, cost_model="legacy")
    bodies = sim_bodies()
    with FleetSimulator([spec], time_scale=0.001) as sim, httpx.Client(timeout=30) as client:
        for b in bodies:
            assert client.post(f"{sim.base_urls[0]}/chat/completions", json=b).status_code == 200
        stats = sim.stats()[0]
    costs = request_costs(bodies, CostModel.of(spec))
    assert stats["prefix_hit_tokens"] == sum(c.hit_tokens for c in costs) > 0
    assert stats["busy_s"] * spec.speed == pytest.approx(sum(c.work_s for c in costs), rel=1e-9)


def test_vllm_floor_formula_by_hand():
    # Two identical uncached requests, 1,000 + 50 tokens, at 16 slots: compute-bound (41 us a token).
    p, o = 1000, 50
    steps = max(2 * o / 16, 2 * (p + o - 1) / 2048)
    memory = steps * VLLM.weights_read_s + VLLM.kv_read_s_per_token * 2 * (o * p + o * (o - 1) / 2)
    compute = VLLM.compute_s_per_token * 2 * (p + o - 1)
    assert compute > memory
    expected = steps * VLLM.step_overhead_s + compute
    assert 2 * request_work_s(p, o, 0, VLLM) == pytest.approx(expected)
    # Decode-heavy requests are memory-bound, and fuller batches share the weight reads.
    full = CostModel.of(ReplicaSpec())
    assert request_work_s(100, 200, 0, full) < 0.3 * request_work_s(100, 200, 0, VLLM)
    # The KV bound: 4,000-token prompts fit ~145 at a time in 589,824 tokens, not 256.
    assert request_work_s(4000, 500, 0, full) > request_work_s(4000, 500, 0, CostModel.of(ReplicaSpec(
        kv_cache_tokens=10**9)))


def test_vllm_floor_is_below_the_simulators_busy_time():
    # Whatever the packing the client achieves, the simulated engine time is at least the floor. The
    # requests reach the engine when the machine gets them there: how well they pack depends on the
    # machine, so only the bound that holds for any packing is checked here (the next test checks the
    # floor's tightness in simulated time alone).
    spec = ReplicaSpec(max_num_seqs=16, speed=0.5)
    bodies = [body(words(300, f"r{i}-"), max_tokens=60) for i in range(32)] + sim_bodies()
    with FleetSimulator([spec], time_scale=0.001) as sim:
        async def send_all():
            async with httpx.AsyncClient(timeout=60) as c:
                return await asyncio.gather(*(c.post(f"{sim.base_urls[0]}/chat/completions", json=b)
                                              for b in bodies))

        assert all(r.status_code == 200 for r in asyncio.run(send_all()))
        stats = sim.stats()[0]
    costs = request_costs(bodies, CostModel.of(spec))
    assert stats["generation_tokens"] == sum(c.output_tokens for c in costs)
    assert sum(c.work_s for c in costs) <= stats["busy_s"] * spec.speed


def test_vllm_floor_is_within_a_factor_of_the_engines_simulated_time():
    # The same requests submitted to one engine at simulated time 0 (no network, no wall clock): the
    # floor is below the engine's simulated time and not far below it (it assumes full batches and one
    # prefix cache, which 32 + a few requests on one engine of 16 sequences nearly reach).
    spec = ReplicaSpec(max_num_seqs=16)
    bodies = [body(words(300, f"r{i}-"), max_tokens=60) for i in range(32)] + sim_bodies()
    model = CostModel.of(spec)
    engine = make_engine(spec)
    for b in bodies:
        tokens, output_tokens = token_counts(b, model)
        engine.submit(Seq(tokens, output_tokens))
    while (plan := engine.schedule()) is not None:
        engine.commit(plan)
    assert engine.outstanding() == 0
    work = sum(c.work_s for c in request_costs(bodies, model))
    assert 0.3 * engine.clock < work <= engine.clock