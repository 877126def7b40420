"""The simulator's old cost model (cost_model "legacy"): every replica always runs a full batch."""

from __future__ import annotations

import collections
from typing import Any

from bench.sim.engine import _COUNTERS, Plan, Seq, _Steps
from bench.sim.kv_blocks import PrefixCache


class LegacyEngine(_Steps):
    """The simulator's old cost model (cost_model "legacy"), kept to compare against."""

    def __init__(self, spec: Any):
        self.spec = spec
        self.block_size = spec.block_size
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self.clock = 0.0
        self.cache = PrefixCache(spec.block_size, spec.prefix_cache_blocks)
        self.reset()

    def reset(self) -> None:
        self.cache.clear()
        self.waiting: collections.deque[Seq] = collections.deque()
        self.running: list[Seq] = []

    def fits_ever(self, prompt_tokens: int, output_tokens: int) -> bool:
        return True

    def submit(self, seq: Seq) -> Seq:
        self.waiting.append(seq)
        return seq

    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def kv_usage(self) -> float:
        """The prompt plus generated tokens of the running sequences over the capacity, at most 1."""
        capacity = self.spec.kv_cache_tokens or self.spec.max_num_seqs * 2048
        used = sum(s.prompt_tokens + s.generated for s in self.running if not s.future.done())
        return min(1.0, used / capacity)

    def schedule(self) -> Plan | None:
        spec = self.spec
        running = self.running
        if any(s.future.done() for s in running):
            running[:] = [s for s in running if not s.future.done()]
        prefill_tokens = 0
        while self.waiting and len(running) < spec.max_num_seqs:
            seq = self.waiting.popleft()
            if seq.future.done():
                continue
            hits, queried = self.cache.admit(seq.tokens)
            c = self.counters
            c["prefix_hit_tokens"] += hits
            c["prefix_query_tokens"] += queried
            c["prompt_tokens"] += seq.prompt_tokens
            prefill_tokens += max(1, seq.prompt_tokens - hits)
            running.append(seq)
        if not running:
            return None
        ctx = 0
        for s in running:
            ctx += len(s.tokens) + s.generated
        prefill_cost = spec.prefill_s_per_token * prefill_tokens
        decode_cost = spec.decode_base_s + spec.decode_s_per_ctx_token * ctx
        return Plan(prefill_cost + decode_cost, prefill_cost, decode_cost, list(running),
                    prefill_tokens + len(running), ctx)

    def commit(self, plan: Plan) -> list[Seq]:
        self.clock += plan.cost_s
        finished, still = [], []
        for s in self.running:
            if s.future.done():
                continue
            s.generated += 1
            self.counters["generation_tokens"] += 1
            if s.generated >= s.target:
                finished.append(s)
                s.finish_time = self.clock
                s.future.set_result(s.generated)
            else:
                still.append(s)
        self.running[:] = still
        return finished
