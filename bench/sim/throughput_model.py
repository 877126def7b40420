"""The simulated engine's closed-loop throughput at a given concurrency: fleet.py's docstring table,
the capacity search's reference, and tests."""

from __future__ import annotations

from typing import Any

from bench.sim.engine import Seq, make_engine


def closed_loop_throughput(spec: Any, concurrency: int, prompt_tokens: int = 1000, output_tokens: int = 50,
                           requests: int | None = None, shared_prefix: int = 0) -> dict:
    """Simulated steady throughput of one engine with `concurrency` clients each sending a new request
    as soon as its previous one finished (distinct prompts of `prompt_tokens`, of which the first
    `shared_prefix` are common to all; exactly `output_tokens` generated). Measured in simulated time
    over the completions between the end of the first round (the warm-up, where every client's first
    prefill lands at once) and the last request's submission (before the drain)."""
    engine = make_engine(spec)
    requests = requests or max(10 * concurrency, 160)
    prefix = [f"shared{i}" for i in range(shared_prefix)]
    sent = 0
    done: list[float] = []
    last_sent_at = None

    def send() -> None:
        nonlocal sent
        tokens = prefix + [f"r{sent}_{i}" for i in range(prompt_tokens - shared_prefix)]
        engine.submit(Seq(tokens, output_tokens))
        sent += 1

    for _ in range(min(concurrency, requests)):
        send()
    while len(done) < requests:
        plan = engine.schedule()
        if plan is None:
            raise RuntimeError("engine idle with requests outstanding")
        for _ in engine.commit(plan):
            done.append(engine.clock)
            if sent < requests:
                send()
                if sent == requests:
                    last_sent_at = len(done)
    # Whole rounds of `concurrency` completions (clients finishing in lockstep would bias a window
    # cut mid-round), from the end of the first round to the last one before the drain.
    first = min(concurrency, len(done) - 1) - 1
    rounds = max(1, ((last_sent_at or len(done)) - 1 - first) // concurrency)
    last = min(first + rounds * concurrency, len(done) - 1)
    rps = (last - first) / (done[last] - done[first])
    return {"concurrency": concurrency, "requests_per_s": rps, "output_tokens_per_s": rps * output_tokens,
            "prompt_tokens_per_s": rps * prompt_tokens, "sim_s": engine.clock,
            "preemptions": engine.counters["preemptions"]}
