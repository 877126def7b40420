"""The fleet simulator's engine: a vLLM v1-like engine core per engine (its step costs, its paged
KV-cache block pool and queues; what each step runs is the scheduler's, ``bench/sim/scheduler.py``),
as plain classes with no network and no event loop (``bench/sim/fleet.py`` drives them; tests drive
them directly). Times are *simulated* seconds at speed 1; the HTTP side applies speed, slowdown and
time_scale. The cost model and its calibration are documented in fleet.py's module docstring; the
figures live here (``CALIBRATION``).

Two engines with one interface (``submit`` / ``schedule`` / ``commit`` / ``reset``):

* ``Engine`` (cost_model "vllm", the default): KV-bounded FCFS admission, a shared pool of blocks
  holding both running sequences and the prefix cache (LRU eviction of unreferenced cached blocks),
  preemption by recomputation, a per-step token budget with chunked prefill, a roofline step cost;
* ``LegacyEngine`` (cost_model "legacy"): the simulator's old model, kept only to compare against:
  admission bounded by max_num_seqs alone, whole prompts prefilled at admission, one decode step per
  iteration costing ``decode_base_s + decode_s_per_ctx_token * context``, a separate LRU prefix cache
  and a KV "usage" gauge that bounds nothing.
"""

from __future__ import annotations

import collections
import hashlib
import math
import statistics
from dataclasses import dataclass
from typing import Any

from bench.sim.kv_blocks import BlockPool, block_hashes
from bench.sim.scheduler import Scheduler

# --------------------------------------------------------------------------------------------
# Calibration: Llama-3.2-3B(-Instruct) in bf16 on one NVIDIA A100-SXM4-80GB, vLLM v1 defaults.
#
# Model (config.json of meta-llama/Llama-3.2-3B): 28 layers, hidden 3072, 24 attention heads, 8 KV
# heads, head_dim 128, 3.21e9 parameters (tied embeddings).
#   weights: 3.21e9 x 2 B = 6.43 GB
#   KV bytes per token: 28 layers x 8 kv heads x 128 x 2 (K and V) x 2 B = 114,688 B (112 KiB)
#   FLOPs per computed token: ~2 x 3.21e9 = 6.4e9 (attention adds ~5 % at 1K context; ignored)
# GPU (NVIDIA A100 datasheet, SXM4 80GB): 2,039 GB/s HBM2e, 312 TFLOPS dense bf16 tensor.
#   weights_read_s      = 6.43e9 / 2.039e12                 = 3.15e-3 s per engine step
#   kv_read_s_per_token = 114,688 / 2.039e12                = 5.6e-8 s per context token read
#   compute_s_per_token = 6.4e9 / (312e12 x 0.5 MFU)         = 4.1e-5 s per computed token
#   step_overhead_s     = 2.5e-3 s: scheduler, input preparation, sampler, detokenization and launches
#                         per step with CUDA graphs (an estimate: it puts single-stream decode at 1K
#                         context at 5.7 ms/token, ~175 tokens/s, ~55 % of peak HBM bandwidth end to end)
# Cross-check against the field report in the project's context (four data-parallel Granite 4.1 3B
# FP16 replicas on RTX 3090-class cards, ~16 requests in flight each, "the 3B fleet's 20K" tokens/s,
# i.e. ~5K tokens/s per card): the same 50 % MFU on a 3090 (71 TFLOPS dense fp16 with fp32
# accumulate) gives 6.4e9 / 35.5e12 = 1.8e-4 s per token, 5.5K tokens/s per card, compute-bound
# prefill: consistent. An A100 is ~4.4x that card in compute, hence ~24K prompt tokens/s here.
# KV capacity (vLLM's profile at gpu_memory_utilization 0.9): 0.9 x 79.15 GiB (what torch reports
# for an A100 80GB) = 71.2 GiB, minus 6.0 GiB weights, minus ~2.2 GiB peak activations at 2,048
# batched tokens + CUDA graphs / non-torch memory = ~63 GiB of KV = 63 GiB / 112 KiB = ~590K tokens:
# 36,864 blocks of 16 = 589,824 tokens ("GPU KV cache size: 589,824 tokens" in vLLM's log terms).
# Scheduler defaults (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, vLLM >= 0.9): on an
# A100 (excluded from the >= 70 GiB tier by name, PR #17885) the OpenAI API server uses
# max_num_batched_tokens 2048 and max_num_seqs 256 (H100/H200/MI300x: 8192 and 1024); V1 always
# chunks prefills and enables prefix caching.
# Embeddings: all-MiniLM-L6-v2 (sentence-transformers' model table: ~14,200 sentences/s on a V100);
# at ~20 word-pieces per benchmark sentence that is ~2.8e5 tokens/s, i.e. 3.5e-6 s per input token,
# plus ~1 ms per request (tokenization, launch, pooling).
CALIBRATION: dict[str, float] = {
    "step_overhead_s": 2.5e-3,
    "weights_read_s": 3.15e-3,
    "kv_read_s_per_token": 5.6e-8,
    "compute_s_per_token": 4.1e-5,
    "kv_cache_tokens": 589_824,
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 256,
    "embed_base_s": 1e-3,
    "embed_s_per_token": 3.5e-6,
}
COST_MODELS = ("vllm", "legacy")
OUTPUT_SIGMA = 0.5  # lognormal sigma of the natural output length (vllm cost model)
_NORMAL = statistics.NormalDist()


def _unit(text: str) -> float:
    """A deterministic number in [0, 1) from a string."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()[:8],
                          "big") / 2**64


def natural_length(key: str, mean: int, cost_model: str = "vllm") -> int:
    """A request's natural output length, deterministic from `key` (its prompt's text): lognormal
    with mean `mean` and sigma 0.5 (median 0.88 x mean, 90 % between 0.39x and 2x; capped at 8x),
    at least 1. Legacy: mean +- 20 % uniform."""
    u = _unit(key)
    if cost_model == "legacy":
        return max(1, round(mean * (0.8 + 0.4 * u)))
    z = _NORMAL.inv_cdf(min(max(u, 1e-9), 1 - 1e-9))
    value = mean * math.exp(OUTPUT_SIGMA * z - OUTPUT_SIGMA * OUTPUT_SIGMA / 2)
    return max(1, min(round(value), 8 * mean))


class Outcome:
    """A future-like result holder for sequences submitted without an asyncio future (unit tests)."""

    __slots__ = ("_done", "_result")

    def __init__(self) -> None:
        self._done, self._result = False, None

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        self._done, self._result = True, value

    def set_exception(self, exc: BaseException) -> None:
        self._done, self._result = True, exc

    def cancel(self) -> None:
        self._done = True

    def result(self) -> Any:
        return self._result


class Seq:
    """One request in an engine. `computed`: tokens whose KV is computed; `prefill_to`: the tokens to
    prefill at (re)admission (the prompt, plus the generated tokens after a preemption)."""

    __slots__ = ("tokens", "hashes", "target", "future", "generated", "computed", "prefill_to", "blocks",
                 "registered", "admitted_once", "finish_time")

    def __init__(self, tokens: list[str], target: int, future: Any = None, hashes: list[int] | None = None):
        self.tokens = tokens
        self.hashes = hashes
        self.target = max(1, target)
        self.future = future if future is not None else Outcome()
        self.generated = 0
        self.computed = 0
        self.prefill_to = 0
        self.blocks: list[int] = []
        self.registered = 0  # prompt blocks whose hash is published to the prefix cache
        self.admitted_once = False
        self.finish_time = 0.0

    @property
    def prompt_tokens(self) -> int:
        return len(self.tokens)


@dataclass
class Plan:
    """One engine step: what it computes and what it costs (simulated seconds at speed 1)."""

    cost_s: float
    prefill_s: float
    decode_s: float
    work: list  # (seq, tokens, is_prefill) for Engine; (running, prefilled) for LegacyEngine
    tokens: int = 0
    ctx_read: int = 0


_COUNTERS = ("prompt_tokens", "generation_tokens", "prefix_hit_tokens", "prefix_query_tokens", "preemptions",
             "success_stop", "success_length")


class _Steps:
    """`step`: schedule + commit at once (unit tests and the throughput model), for both engines."""

    def step(self) -> Plan | None:
        plan = self.schedule()  # type: ignore[attr-defined]
        if plan is not None:
            self.commit(plan)  # type: ignore[attr-defined]
        return plan


class Engine(_Steps, Scheduler):
    """One vLLM v1-like engine core (see fleet.py's docstring); `schedule` and admission are the
    ``Scheduler`` mixin's (bench/sim/scheduler.py). `spec` needs the ReplicaSpec fields
    max_num_seqs, block_size, kv_cache_tokens (0: the default), max_num_batched_tokens and the four
    step-cost coefficients."""

    def __init__(self, spec: Any):
        self.spec = spec
        self.block_size = spec.block_size
        kv = spec.kv_cache_tokens or CALIBRATION["kv_cache_tokens"]
        self.num_blocks = max(1, kv // spec.block_size)
        self.budget = spec.max_num_batched_tokens
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self.clock = 0.0  # simulated seconds at speed 1 of every step so far (the cost, not wall)
        self.reset()

    def reset(self) -> None:
        """A cold engine (a killed process): empty queues and KV pool. Counters and clock are kept."""
        self.pool = BlockPool(self.num_blocks)
        self.waiting: collections.deque[Seq] = collections.deque()
        self.running: list[Seq] = []

    # ---- admission control (the rest: bench/sim/scheduler.py)

    def fits_ever(self, prompt_tokens: int, output_tokens: int) -> bool:
        """Whether a request could ever run to its end, alone in the engine (else a 400 at arrival)."""
        return -(-(prompt_tokens + output_tokens) // self.block_size) <= self.num_blocks

    def submit(self, seq: Seq) -> Seq:
        if seq.hashes is None:
            seq.hashes = block_hashes(seq.tokens, self.block_size)
        self.waiting.append(seq)
        return seq

    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def kv_usage(self) -> float:
        """vllm:kv_cache_usage_perc: blocks referenced by running sequences over all blocks."""
        return self.pool.used / self.num_blocks

    def _free(self, seq: Seq) -> None:
        self.pool.release(seq.blocks)
        seq.blocks = []

    # ---- one step: its cost and, once its time has passed, its effect (what it runs: the scheduler)

    def _cost(self, work: list) -> Plan:
        spec = self.spec
        tokens = ctx = pre = 0
        for s, n, is_prefill in work:
            tokens += n
            ctx += s.computed + n
            if is_prefill:
                pre += n
        memory = spec.weights_read_s + spec.kv_read_s_per_token * ctx
        compute = spec.compute_s_per_token * tokens
        cost = spec.step_overhead_s + (memory if memory > compute else compute)
        prefill_s = cost * pre / tokens
        return Plan(cost, prefill_s, cost - prefill_s, work, tokens, ctx)

    def commit(self, plan: Plan) -> list[Seq]:
        """Apply a scheduled step once its time has passed: KV computed, tokens generated, finished
        sequences' results set and their blocks freed (their prompt blocks stay cached)."""
        self.clock += plan.cost_s
        finished = []
        generated = 0
        for s, n, is_prefill in plan.work:
            if s.future.done() or not s.blocks:  # aborted meanwhile, or preempted (not computed)
                continue
            s.computed += n
            if is_prefill and s.computed < s.prefill_to:
                continue  # a partial prefill generates nothing (its blocks were published when scheduled)
            s.generated += 1
            generated += 1
            if s.generated >= s.target:
                finished.append(s)
        self.counters["generation_tokens"] += generated
        if finished:
            for s in finished:
                self._free(s)
                s.finish_time = self.clock
                s.future.set_result(s.generated)
            self.running[:] = [s for s in self.running if s.blocks]
        return finished



def make_engine(spec: Any) -> Any:
    """The engine of `spec.cost_model`: `Engine`, or `LegacyEngine` (bench/sim/legacy_engine.py)."""
    if spec.cost_model == "legacy":
        from bench.sim.legacy_engine import LegacyEngine

        return LegacyEngine(spec)
    return Engine(spec)
