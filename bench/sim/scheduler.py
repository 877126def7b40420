"""The fleet simulator's scheduler: what one engine step runs (``Scheduler.schedule`` and its helpers),
in vLLM v1's order: running decodes first, then running prefills, then new admissions FCFS, head of
line; KV-bounded admission and preemption by recomputation. A mixin of ``Engine``
(bench/sim/engine.py), which holds the costs, the KV block pool and the queues it reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.sim.engine import Plan, Seq


class Scheduler:
    """Mixin of ``Engine``: admission control and the per-step schedule. Reads the engine's `spec`,
    `block_size`, `budget`, `pool`, `counters`, `waiting`, `running`, `_free` and `_cost`."""

    # ---- admission control

    def _admit(self, seq: Seq) -> bool:
        bs = self.block_size
        n = seq.prompt_tokens + seq.generated
        # A full hit still recomputes the last token (vLLM: at least one token is computed).
        hit_blocks = self.pool.hits(seq.hashes, (n - 1) // bs)
        blocks = self.pool.take(hit_blocks, -(-n // bs) - len(hit_blocks))
        if blocks is None:
            return False
        seq.blocks = blocks
        seq.prefill_to = n
        seq.computed = len(hit_blocks) * bs
        seq.registered = len(hit_blocks)
        c = self.counters
        c["prefix_hit_tokens"] += seq.computed
        c["prefix_query_tokens"] += len(seq.hashes) * bs
        if not seq.admitted_once:
            seq.admitted_once = True
            c["prompt_tokens"] += seq.prompt_tokens
        return True

    def _preempt_last(self) -> Seq:
        victim = self.running.pop()
        self._free(victim)
        victim.computed = 0
        self.waiting.appendleft(victim)
        self.counters["preemptions"] += 1
        return victim

    # ---- one step

    def schedule(self) -> Plan | None:
        """Decide the next step (vLLM v1 order: running decodes first, then running prefills, then new
        admissions FCFS, head of line); None when there is nothing to do."""
        self._drop_aborted()
        if not self.running and not self.waiting:
            return None
        work: list = []
        budget, prefilling, preempted = self._schedule_decodes(work)
        budget = self._schedule_prefills(prefilling, work, budget)
        # As vLLM v1: no admission in a step that preempted (the victims would come straight back).
        if not preempted:
            self._schedule_admissions(work, budget)
        if not work:
            return None
        return self._cost(work)

    def _drop_aborted(self) -> None:
        """Sequences aborted by their clients leave the running batch (their blocks freed) and the
        head of the waiting queue."""
        running = self.running
        if any(s.future.done() for s in running):  # aborted by their clients
            for s in running:
                if s.future.done():
                    self._free(s)
            running[:] = [s for s in running if not s.future.done()]
        waiting = self.waiting
        while waiting and waiting[0].future.done():
            waiting.popleft()

    def _schedule_decodes(self, work: list) -> tuple[int, list, bool]:
        """One decode token for every running sequence done prefilling, in order, while the budget
        lasts; a sequence whose next token needs a block nobody has preempts from the tail. Returns
        (budget left, the running sequences still prefilling, whether any was preempted)."""
        running = self.running
        bs = self.block_size
        budget = self.budget
        pool = self.pool
        i = 0
        prefilling = []
        preempted = False
        while i < len(running) and budget > 0:
            s = running[i]
            if s.computed < s.prefill_to:
                prefilling.append(s)
                i += 1
                continue
            if s.computed + 1 > len(s.blocks) * bs:  # its next token needs a new block
                self_preempted = False
                while not pool.free:  # preempt the most recently admitted (the tail), maybe s itself
                    preempted = True
                    if self._preempt_last() is s:
                        self_preempted = True
                        break
                if self_preempted:
                    continue  # s was the tail: the loop ends
                s.blocks.append(pool.allocate())
            work.append((s, 1, False))
            budget -= 1
            i += 1
        return budget, prefilling, preempted

    def _schedule_prefills(self, prefilling: list, work: list, budget: int) -> int:
        """The next prefill chunk of each running sequence still prefilling; the budget left."""
        for s in prefilling:  # (never preempted above: victims come from behind index i)
            if budget <= 0:
                break
            chunk = min(s.prefill_to - s.computed, budget)
            work.append((s, chunk, True))
            self._publish(s, chunk)
            budget -= chunk
        return budget

    def _schedule_admissions(self, work: list, budget: int) -> None:
        """New admissions from the waiting queue, FCFS and head of line, while the budget, the batch
        and the KV pool allow, each with its first prefill chunk."""
        running, waiting = self.running, self.waiting
        while waiting and budget > 0 and len(running) < self.spec.max_num_seqs:
            s = waiting[0]
            if s.future.done():
                waiting.popleft()
                continue
            if not self._admit(s):
                break  # head of line: FCFS, nothing behind it jumps the queue
            waiting.popleft()
            running.append(s)
            if s.computed < s.prefill_to:
                chunk = min(s.prefill_to - s.computed, budget)
                work.append((s, chunk, True))
                self._publish(s, chunk)
                budget -= chunk

    def _publish(self, s: Seq, chunk: int) -> None:
        """The full prompt blocks this step computes for `s` join the prefix cache now, as vLLM v1
        does when it schedules them (KVCacheManager.allocate_slots -> cache_blocks, before the forward
        pass: block hashes depend on token ids only): a request admitted later in this step, or in any
        later one, hits them."""
        full = min((s.computed + chunk) // self.block_size, len(s.hashes))
        for j in range(s.registered, full):
            self.pool.register(s.blocks[j], s.hashes[j])
        if full > s.registered:
            s.registered = full
