"""The model floor: the fleet simulator's own service time for a set of chat requests, divided over
the fleet's capacity, from the simulator's cost model (bench/sim/fleet.py's module docstring,
bench/sim/engine.py) and not from any measurement through the platform's request pool, so that an
inefficiency of the pool itself shows in wall / model floor. No client code (contextual_assets) is used.

For request i (the exact chat body the platform sends), with the simulator's own counts:

* P_i: prompt tokens, ``role + " " + content`` per message joined by newlines, split on whitespace;
* O_i: output tokens, the simulator's deterministic natural answer length from the prompt's hash
  (``natural_length``: lognormal around ``output_tokens_mean``; legacy +- 20 %; never below the canned
  header's word count) capped by ``max_tokens`` (or ``max_completion_tokens``; default the room left
  in the context), at least 1;
* h_i: the ideal prefix-cache hit, the leading full blocks of ``block_size`` tokens shared with
  any earlier request (one cache of unlimited size for the whole fleet); U_i = max(1, P_i - h_i).

cost_model "vllm" (the default): ideal packing at the best concurrency the engine allows, a full
batch of C sequences in every step, with

    C     = min(max_num_seqs, kv_cache_tokens / mean_i(U_i + O_i / 2))   (at least 1: the KV bound,
            with the mean footprint of a running sequence; shared prefix blocks counted once)
    N     = max(sum_i O_i / C, sum_i T_i / max_num_batched_tokens)        engine steps; each request
            is in >= O_i steps (the one finishing its prefill makes its first token), each step
            computes <= max_num_batched_tokens tokens
    T_i   = U_i + O_i - 1                                                   tokens computed
    X_i   = O_i * P_i + O_i * (O_i - 1) / 2                                 context tokens read
    work  = N * step_overhead_s + max(N * weights_read_s + kv_read_s_per_token * sum_i X_i,
                                      compute_s_per_token * sum_i T_i)

which is below any real run's sum over steps of ``step_overhead_s + max(memory, compute)`` (a sum
of maxima is at least the maximum of the sums). ``RequestCost.work_s`` is request i's share: its
O_i / sum O of the steps' overhead (and weight reads when memory binds) plus its X_i or T_i share of
the binding side; the shares add up to ``work``. ``request_work_s(P, O, h)`` is the per-request work
of a stream of identical such requests.

cost_model "legacy" (the old simulator): every replica always runs a full batch of
``max_num_seqs`` sequences, so a decode step's base cost is shared by max_num_seqs sequences:

    work_i = prefill_s_per_token * U_i + decode_base_s * O_i / max_num_seqs
             + decode_s_per_ctx_token * (O_i * P_i + O_i * (O_i - 1) / 2)

Either way

    model_floor_s = sum_i work_i / sum(speeds) * time_scale

in wall seconds: a replica of speed s does s simulated seconds of work per simulated second, and
the simulator sleeps ``time_scale`` wall seconds per simulated second. Nothing real can beat it:
batches are never full at the start and end of a run, and each replica has its own cache.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.sim.fleet import (
    _CHUNK_RE,
    _ID_RE,
    _TITLE_RE,
    ReplicaSpec,
    header_sentence,
)
from bench.sim.engine import CALIBRATION, natural_length
from bench.sim.text import prompt_text
from bench.sim.kv_blocks import PrefixCache

Body = Mapping[str, Any]  # an OpenAI chat-completions request body: messages, max_tokens, ...


@dataclass(frozen=True)
class CostModel:
    """The simulator's per-replica costs (simulated seconds) and batch and cache geometry."""

    prefill_s_per_token: float
    decode_base_s: float
    decode_s_per_ctx_token: float
    max_num_seqs: int
    block_size: int
    output_tokens_mean: int
    max_model_len: int
    cost_model: str = "vllm"
    step_overhead_s: float = CALIBRATION["step_overhead_s"]
    weights_read_s: float = CALIBRATION["weights_read_s"]
    kv_read_s_per_token: float = CALIBRATION["kv_read_s_per_token"]
    compute_s_per_token: float = CALIBRATION["compute_s_per_token"]
    max_num_batched_tokens: int = int(CALIBRATION["max_num_batched_tokens"])
    kv_cache_tokens: int = int(CALIBRATION["kv_cache_tokens"])

    @classmethod
    def of(cls, spec: ReplicaSpec) -> CostModel:
        """The costs of a replica (per engine: a replica of `engines` engines counts as that many
        replicas; pass its speed that many times)."""
        kv = spec.kv_cache_tokens or (spec.max_num_seqs * 2048 if spec.cost_model == "legacy"
                                      else int(CALIBRATION["kv_cache_tokens"]))
        return cls(prefill_s_per_token=spec.prefill_s_per_token, decode_base_s=spec.decode_base_s,
                   decode_s_per_ctx_token=spec.decode_s_per_ctx_token, max_num_seqs=spec.max_num_seqs,
                   block_size=spec.block_size, output_tokens_mean=spec.output_tokens_mean,
                   max_model_len=spec.max_model_len, cost_model=spec.cost_model,
                   step_overhead_s=spec.step_overhead_s, weights_read_s=spec.weights_read_s,
                   kv_read_s_per_token=spec.kv_read_s_per_token, compute_s_per_token=spec.compute_s_per_token,
                   max_num_batched_tokens=spec.max_num_batched_tokens, kv_cache_tokens=kv)


@dataclass(frozen=True)
class RequestCost:
    prompt_tokens: int
    output_tokens: int
    hit_tokens: int
    work_s: float  # simulated seconds at speed 1 under ideal packing


# ---- what the simulator counts (the same steps as fleet.py's `Replica._chat` and `_answer`) --------

def _jitter(key: str, mean: int, cost_model: str = "vllm") -> int:
    # The simulator's own draw (fleet.py's `Replica._answer` calls the same function).
    return natural_length(key, mean, cost_model)


def is_batch(body: Body, last_user: str) -> bool:
    rf = body.get("response_format")
    return (isinstance(rf, Mapping) and rf.get("type") in ("json_object", "json_schema")) \
        or "Answer as JSON" in last_user


def natural_output_tokens(body: Body, prompt: str, last_user: str, mean: int, cost_model: str = "vllm") -> int:
    """The simulator's natural answer length without faults (re-implements fleet.py's `_answer`)."""
    chunks = list(_CHUNK_RE.finditer(last_user)) or list(_CHUNK_RE.finditer(prompt))
    title_match = _TITLE_RE.search(last_user) or _TITLE_RE.search(prompt)
    title = title_match.group(1) if title_match else None
    if is_batch(body, last_user):
        entries, natural = [], 0
        for i, m in enumerate(chunks):
            ident_match = _ID_RE.search(m.group("attrs"))
            ident = ident_match.group(1) if ident_match else str(i)
            key = f"{prompt}\x00{ident}"
            entries.append({"id": ident, "header": header_sentence(m.group("body"), title, key)})
            natural += _jitter(key, mean, cost_model)
        text = json.dumps({"headers": entries}, ensure_ascii=False)
        return max(natural, len(text.split(" ")), 1)
    subject = chunks[-1].group("body") if chunks else last_user
    text = header_sentence(subject, title, prompt)
    return max(_jitter(prompt, mean, cost_model), len(text.split(" ")))


def token_counts(body: Body, model: CostModel) -> tuple[list[str], int]:
    """(prompt tokens, output tokens) of one request as the simulator counts them."""
    prompt, last_user = prompt_text(body["messages"])
    tokens = prompt.split()
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    if cap is None:
        cap = model.max_model_len - len(tokens)
    natural = natural_output_tokens(body, prompt, last_user, model.output_tokens_mean, model.cost_model)
    return tokens, max(1, min(natural, cap))


# ---- the floor ------------------------------------------------------------------------------------

def ideal_prefix_hits(prompts: Iterable[list[str]], block_size: int) -> list[int]:
    """Per prompt, in order: tokens of its leading full blocks already seen in an earlier prompt
    (the simulator's own block hashing, with a cache that never evicts)."""
    cache = PrefixCache(block_size, capacity_blocks=2**62)
    return [cache.admit(tokens)[0] for tokens in prompts]


def legacy_work_s(prompt_tokens: int, output_tokens: int, hit_tokens: int, model: CostModel) -> float:
    """Simulated seconds (speed 1) of one request under the legacy model when every batch is full."""
    p, o = prompt_tokens, output_tokens
    return (model.prefill_s_per_token * max(1, p - hit_tokens)
            + model.decode_base_s * o / model.max_num_seqs
            + model.decode_s_per_ctx_token * (o * p + o * (o - 1) / 2))


def mix_work_s(shapes: Sequence[tuple[int, int, int]], model: CostModel) -> list[float]:
    """Per request (P, O, h) of a mix: its share of the mix's ideal-packing work (the module
    docstring); the shares add up to the mix's work."""
    if model.cost_model == "legacy":
        return [legacy_work_s(p, o, h, model) for p, o, h in shapes]
    if not shapes:
        return []
    uncached = [max(1, p - h) for p, _, h in shapes]
    outputs = [o for _, o, _ in shapes]
    computed = [u + o - 1 for u, o in zip(uncached, outputs)]
    read = [o * p + o * (o - 1) / 2 for p, o, _ in shapes]
    footprint = sum(u + o / 2 for u, o in zip(uncached, outputs)) / len(shapes)
    concurrency = max(1.0, min(model.max_num_seqs, model.kv_cache_tokens / footprint))
    total_out = sum(outputs)
    steps = max(total_out / concurrency, sum(computed) / model.max_num_batched_tokens)
    memory = steps * model.weights_read_s + model.kv_read_s_per_token * sum(read)
    compute = model.compute_s_per_token * sum(computed)
    out = []
    for o, t, x in zip(outputs, computed, read):
        share_steps = steps * o / total_out
        if memory >= compute:
            bound = share_steps * model.weights_read_s + model.kv_read_s_per_token * x
        else:
            bound = model.compute_s_per_token * t
        out.append(share_steps * model.step_overhead_s + bound)
    return out


def request_work_s(prompt_tokens: int, output_tokens: int, hit_tokens: int, model: CostModel) -> float:
    """Simulated seconds (speed 1) of one request under ideal packing (see the module docstring; for
    "vllm", in a stream of identical requests)."""
    return mix_work_s([(prompt_tokens, output_tokens, hit_tokens)], model)[0]


def request_costs(bodies: Sequence[Body], model: CostModel) -> list[RequestCost]:
    counted = [token_counts(body, model) for body in bodies]
    hits = ideal_prefix_hits((tokens for tokens, _ in counted), model.block_size)
    shapes = [(len(tokens), out, hit) for (tokens, out), hit in zip(counted, hits)]
    return [RequestCost(p, o, h, w) for (p, o, h), w in zip(shapes, mix_work_s(shapes, model))]


def model_floor_s(bodies: Sequence[Body], speeds: Sequence[float], time_scale: float,
                  model: CostModel | None = None) -> float:
    """Wall seconds the fleet (replicas of `speeds`, simulator at `time_scale`) needs at the least."""
    model = model or CostModel.of(ReplicaSpec())
    return floor_of(request_costs(bodies, model), speeds, time_scale)


def engine_speeds(speeds: Sequence[float], engines: int) -> list[float]:
    """One speed per engine: `CostModel.of` gives one engine's costs, so a replica of `engines`
    data-parallel engines is that many engines of its speed (its capacity is engines x speed)."""
    return [s for s in speeds for _ in range(engines)]


def floor_of(costs: Sequence[RequestCost], speeds: Sequence[float], time_scale: float) -> float:
    return sum(c.work_s for c in costs) / sum(speeds) * time_scale


def floor_figures(bodies: Sequence[Body], speeds: Sequence[float], time_scale: float,
                  model: CostModel) -> dict:
    """The model floor with the totals it comes from (for the bench's JSON)."""
    costs = request_costs(bodies, model)
    return {"model_floor_s": round(floor_of(costs, speeds, time_scale), 3),
            "model_requests": len(costs),
            "model_prompt_tokens": sum(c.prompt_tokens for c in costs),
            "model_output_tokens": sum(c.output_tokens for c in costs),
            "model_prefix_hit_tokens": sum(c.hit_tokens for c in costs),
            "model_work_s": round(sum(c.work_s for c in costs), 3)}
