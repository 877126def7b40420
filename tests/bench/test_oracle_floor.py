"""The oracle floor (bench/oracle_floor.py): the simulator's own engines in simulated time with an
oracle's split of the corpus, against the model floor, its policies, its scaling, arrivals, prefix
locality, data-parallel engines, and a real simulator's accounting."""

from __future__ import annotations

import httpx
import pytest

from bench.model_floor import CostModel, model_floor_s, token_counts
from bench.oracle_floor import POLICIES, oracle_floor
from bench.sim import FleetSimulator, ReplicaSpec
from bench.sim.engine import Seq, make_engine

SPEEDS = (1.0, 1.0, 0.775, 0.775)
SYSTEM = ("You write one short sentence that situates a passage within its document, so that a search engine "
          "can find the passage. Reply with the sentence only.")
ASK = "In one or two sentences, say what the passage is about. Reply with the sentence only."


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def header_body(doc: int, chunk: int, context_words: int, chunk_words: int, max_tokens: int | None = 80) -> dict:
    """A body shaped like the platform's header prompt: shared system prompt, the document's context
    (shared by its chunks), then the chunk's own text."""
    user = (f'<document title="doc {doc}">\n{words(context_words, f"d{doc}c")}\n</document>\n\n'
            f"<chunk>\n{words(chunk_words, f'd{doc}k{chunk}w')}\n</chunk>\n\n{ASK}")
    body = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def corpus(docs: int, chunks: list[int] | int, context_words: int = 300, chunk_words: int = 120,
           max_tokens: int | None = 80) -> tuple[list[dict], list[str]]:
    """(bodies, document ids): `chunks` per document (one number, or one per document)."""
    counts = chunks if isinstance(chunks, list) else [chunks] * docs
    bodies, ids = [], []
    for d, n in zip(range(docs), counts):
        for c in range(n):
            bodies.append(header_body(d, c, context_words, chunk_words, max_tokens))
            ids.append(f"doc-{d}")
    return bodies, ids


UNIFORM = corpus(12, 10)
SKEWED = corpus(9, [40, 2, 3, 25, 1, 8, 14, 5, 2], context_words=600)
LONG = corpus(6, 8, context_words=100, chunk_words=60, max_tokens=None)  # uncapped: the natural length


def model_floor(bodies: list[dict], speeds, spec: ReplicaSpec, time_scale: float = 1.0) -> float:
    # CostModel.of: a replica of `engines` engines counts as that many replicas.
    return model_floor_s(bodies, [s for s in speeds for _ in range(spec.engines)], time_scale, CostModel.of(spec))


@pytest.mark.parametrize(("name", "data", "spec"), [
    ("uniform", UNIFORM, ReplicaSpec()),
    ("skewed", SKEWED, ReplicaSpec()),
    ("long outputs", LONG, ReplicaSpec()),
    ("16 sequences", UNIFORM, ReplicaSpec(max_num_seqs=16)),
    ("small kv pool", SKEWED, ReplicaSpec(kv_cache_tokens=16_000)),
    ("legacy", SKEWED, ReplicaSpec(cost_model="legacy", max_num_seqs=16)),
])
def test_model_floor_is_below_the_oracle_floor(name, data, spec):
    bodies, docs = data
    result = oracle_floor(bodies, SPEEDS, 1.0, spec, documents=docs)
    floor = model_floor(bodies, SPEEDS, spec)
    assert floor <= result["oracle_floor_s"], name
    assert result["engine_work_over_model_work"] >= 1.0
    # The makespan is at least the engines' work spread over the fleet's speed.
    assert result["oracle_floor_s"] >= result["oracle_engine_work_s"] / sum(SPEEDS) * (1 - 1e-9)
    assert result["oracle_requests"] == len(bodies) and result["oracle_rejected"] == 0
    assert len(result["oracle_replica_makespans_s"]) == len(SPEEDS)
    assert max(result["oracle_replica_makespans_s"]) == result["oracle_floor_s"]
    outputs = sum(token_counts(b, CostModel.of(spec))[1] for b in bodies)
    assert result["oracle_generation_tokens"] == outputs  # every request ran to its end


def alone_s(body: dict, spec: ReplicaSpec) -> float:
    """Simulated seconds (speed 1) of one request alone in a cold engine."""
    engine = make_engine(spec)
    tokens, target = token_counts(body, CostModel.of(spec))
    engine.submit(Seq(tokens, target))
    while (plan := engine.schedule()) is not None:
        engine.commit(plan)
    return engine.clock


def test_the_longest_request_bounds_the_floor():
    # Few requests with long-tailed natural outputs (no max_tokens): far above the model floor, which
    # spreads the work evenly, and at least the longest request alone on the fastest replica.
    bodies, docs = LONG
    result = oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), documents=docs)
    longest = max(alone_s(b, ReplicaSpec()) for b in bodies) / max(SPEEDS)
    assert result["oracle_floor_s"] >= longest * (1 - 1e-9)
    assert result["oracle_floor_s"] > 3 * model_floor(bodies, SPEEDS, ReplicaSpec())


def test_the_oracle_is_no_worse_than_each_of_its_policies():
    bodies, docs = SKEWED
    best = oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), documents=docs)
    assert set(best["oracle_policies"]) == set(POLICIES)
    singles = {p: oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), documents=docs, policies=[p]) for p in POLICIES}
    for policy, single in singles.items():
        assert single["oracle_policy"] == policy
        assert best["oracle_floor_s"] <= single["oracle_floor_s"]
        assert best["oracle_policies"][policy] == single["oracle_floor_s"]
    assert best["oracle_floor_s"] == min(s["oracle_floor_s"] for s in singles.values())
    assert best["oracle_floor_s"] == singles[best["oracle_policy"]]["oracle_floor_s"]
    # The policies differ: spreading the skewed documents' chunks is not free.
    assert len({round(s["oracle_floor_s"], 9) for s in singles.values()}) > 1
    # Later rounds (rates measured by the previous run) never hurt, and here they help: the slower
    # replicas batch worse than their speed alone says.
    first = oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), documents=docs, rounds=1)
    assert best["oracle_floor_s"] < first["oracle_floor_s"] and best["oracle_round"] > 0 == first["oracle_round"]


def test_doubling_time_scale_doubles_the_floor():
    bodies, docs = UNIFORM
    one = oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), documents=docs)
    two = oracle_floor(bodies, SPEEDS, 2.0, ReplicaSpec(), documents=docs)
    assert two["oracle_floor_s"] == pytest.approx(2 * one["oracle_floor_s"], rel=1e-12)
    assert two["oracle_replica_makespans_s"] == pytest.approx([2 * m for m in one["oracle_replica_makespans_s"]])
    assert two["engine_work_over_model_work"] == pytest.approx(one["engine_work_over_model_work"])


def test_a_faster_fleet_has_a_smaller_floor():
    bodies, docs = UNIFORM
    base = oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), documents=docs)["oracle_floor_s"]
    doubled = oracle_floor(bodies, [2 * s for s in SPEEDS], 1.0, ReplicaSpec(), documents=docs)["oracle_floor_s"]
    assert doubled == pytest.approx(base / 2, rel=1e-9)  # the same schedule, every step twice as fast
    larger = oracle_floor(bodies, [*SPEEDS, 1.0], 1.0, ReplicaSpec(), documents=docs)["oracle_floor_s"]
    assert larger < base
    assert oracle_floor(bodies, SPEEDS[:1], 1.0, ReplicaSpec(), documents=docs)["oracle_floor_s"] > base


def test_a_late_arrival_pushes_the_floor_past_it():
    bodies, docs = UNIFORM
    time_scale = 0.5
    settled = oracle_floor(bodies, SPEEDS, time_scale, ReplicaSpec(), documents=docs)["oracle_floor_s"]
    late = {"messages": [{"role": "system", "content": words(40, "late-sys")},
                         {"role": "user", "content": words(900, "late")}], "max_tokens": 120}
    arrival = 2 * settled  # wall seconds, well after the rest has drained
    result = oracle_floor([*bodies, late], SPEEDS, time_scale, ReplicaSpec(), documents=[*docs, "late"],
                          arrivals=[0.0] * len(bodies) + [arrival])
    # Alone on the fastest engine, with a cold cache (its prompt shares nothing): its service time.
    service = alone_s(late, ReplicaSpec()) / max(SPEEDS) * time_scale
    assert result["oracle_floor_s"] >= arrival + service * (1 - 1e-9)
    assert result["oracle_floor_s"] == pytest.approx(arrival + service, rel=1e-9)
    # Arrivals are wall seconds: at time_scale 1 the same arrival is half as far in simulated time.
    other = oracle_floor([*bodies, late], SPEEDS, 1.0, ReplicaSpec(), documents=[*docs, "late"],
                         arrivals=[0.0] * len(bodies) + [arrival])
    assert other["oracle_floor_s"] == pytest.approx(arrival + service / time_scale, rel=1e-9)


def test_keeping_a_document_on_one_engine_hits_the_prefix_cache_more():
    bodies, docs = corpus(8, 12, context_words=800, chunk_words=60)
    kept = oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), documents=docs, policies=["documents"])
    spread = oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), documents=docs, policies=["round_robin"])
    # Spread, each document's ~800-token context is prefilled once per engine, not once.
    assert kept["oracle_prefix_hit_tokens"] - spread["oracle_prefix_hit_tokens"] >= 8 * 2 * 800 // 16 * 16
    assert kept["oracle_prefix_query_tokens"] == spread["oracle_prefix_query_tokens"]


def test_two_engines_per_replica():
    bodies, docs = SKEWED
    one = oracle_floor(bodies, [1.0, 0.5], 1.0, ReplicaSpec(), documents=docs)
    two = oracle_floor(bodies, [1.0, 0.5], 1.0, ReplicaSpec(engines=2), documents=docs)
    assert len(two["oracle_replica_makespans_s"]) == 2
    assert two["oracle_floor_s"] < one["oracle_floor_s"]
    assert model_floor(bodies, [1.0, 0.5], ReplicaSpec(engines=2)) <= two["oracle_floor_s"]
    assert two["oracle_generation_tokens"] == one["oracle_generation_tokens"]


def test_a_small_kv_pool_preempts():
    bodies, docs = corpus(4, 6, context_words=200, chunk_words=100, max_tokens=None)
    roomy = oracle_floor(bodies, [1.0], 1.0, ReplicaSpec(), documents=docs)
    tight = oracle_floor(bodies, [1.0], 1.0, ReplicaSpec(kv_cache_tokens=2_000), documents=docs)
    assert roomy["oracle_preemptions"] == 0 < tight["oracle_preemptions"]
    assert tight["oracle_floor_s"] > roomy["oracle_floor_s"]


def test_requests_the_simulator_rejects_are_left_out():
    bodies, docs = UNIFORM
    too_long = {"messages": [{"role": "user", "content": words(100, "x")}], "max_tokens": 32_768}
    result = oracle_floor([*bodies, too_long], SPEEDS, 1.0, ReplicaSpec(), documents=[*docs, "x"])
    assert (result["oracle_requests"], result["oracle_rejected"]) == (len(bodies), 1)


def test_bad_arguments():
    bodies, docs = UNIFORM
    with pytest.raises(ValueError):
        oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), documents=docs[:-1])
    with pytest.raises(ValueError):
        oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), arrivals=[0.0])
    with pytest.raises(ValueError):
        oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), policies=["documents"])  # no documents
    with pytest.raises(ValueError):
        oracle_floor(bodies, [1.0, 0.0], 1.0, ReplicaSpec())
    with pytest.raises(ValueError):
        oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), rounds=0)
    with pytest.raises(ValueError):
        oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec(), arrivals=[-1.0] * len(bodies))
    without = oracle_floor(bodies, SPEEDS, 1.0, ReplicaSpec())
    assert set(without["oracle_policies"]) == {"round_robin", "least_finish"}


def test_engine_work_matches_a_real_simulator_one_request_at_a_time():
    # Requests one after another on one replica: the simulator's engine clock (busy simulated seconds
    # at speed 1) and prefix hits are exactly the oracle's with arrivals far apart.
    spec = ReplicaSpec(speed=0.5, max_num_seqs=16)
    bodies, docs = corpus(3, 3, context_words=100, chunk_words=40)
    bodies.append({"messages": [{"role": "user", "content": '<chunk id="a">x y</chunk><chunk id="b">z</chunk>'}],
                   "max_tokens": 400, "response_format": {"type": "json_object"}})  # batch mode
    docs.append("batch")
    with FleetSimulator([spec], time_scale=0.001) as sim, httpx.Client(timeout=30) as client:
        for b in bodies:
            assert client.post(f"{sim.base_urls[0]}/chat/completions", json=b).status_code == 200
        stats = sim.stats()[0]
    result = oracle_floor(bodies, [spec.speed], 1.0, spec, documents=docs,
                          arrivals=[1000.0 * i for i in range(len(bodies))])
    assert result["oracle_engine_work_s"] == pytest.approx(stats["sim_clock_s"][0], rel=1e-12)
    assert result["oracle_engine_work_s"] == pytest.approx(stats["busy_s"] * spec.speed, rel=1e-9)
    assert (result["oracle_prefix_hit_tokens"], result["oracle_generation_tokens"]) \
        == (stats["prefix_hit_tokens"], stats["generation_tokens"])
    assert result["oracle_prefix_hit_tokens"] > 0


def test_a_replica_of_two_engines_spreads_its_requests_as_the_replica_does():
    """A client picks the replica, never the engine behind it: the oracle hands a replica's requests to
    its engines as the simulator does (fewest outstanding: handed over together, they alternate), so a
    section's chunks meet two prefix caches, for the oracle as for any client."""
    from bench.oracle_floor import Request, engine_parts

    part = [Request(i, [], [], 1, arrival, 1.0, "d") for i, arrival in enumerate([0.0, 0.0, 0.0, 1.0, 0.5])]
    assert [[r.index for r in e] for e in engine_parts(part, 2)] == [[0, 2, 3], [1, 4]]
    assert [[r.index for r in e] for e in engine_parts(part, 1)] == [[0, 1, 2, 4, 3]]
    bodies, docs = SKEWED
    one = oracle_floor(bodies, [1.0], 1.0, ReplicaSpec(), documents=docs, policies=["documents"])
    two = oracle_floor(bodies, [1.0], 1.0, ReplicaSpec(engines=2), documents=docs, policies=["documents"])
    assert two["oracle_prefix_hit_tokens"] < one["oracle_prefix_hit_tokens"]
