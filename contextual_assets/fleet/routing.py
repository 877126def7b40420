"""Routing policy: which replica gets a request, which requests to hedge, and how many requests a
replica may hold, as pure functions over replica state.

No event loop and no network here: the pool (`slots.py`) owns the locking and calls these under its
condition; tests call them directly on hand-built `ReplicaState`s with an explicit `now`.

Routing, in order:
1. Candidates are replicas with room under their concurrency limit, counting the requests other
   processes have on them (what the replica reports in `/metrics` beyond our own), whose circuit
   breaker allows a request (closed, or half-open with no probe out), and that are not stalled (a
   request out far longer than its peers' answers take, nothing answered since).
2. A retry goes to a replica the request has not tried yet. If every candidate was tried but an
   untried replica with a closed breaker exists (it is merely busy), wait for it rather than send
   the request back to a replica it just failed on.
3. Shortest expected completion: a replica much slower than the fastest healthy one this request may
   still use is used only while the queue is long enough that waiting for a fast slot would take
   longer.
4. Cache-aware (the shape of SGLang router's policy): the candidate that was sent the longest part of
   this prompt (`prefix.py`), when that is at least `CACHE_MATCH_MIN` of the prompt and the fleet stays
   balanced (not imbalanced: that replica holding more than `BALANCE_ABS` requests beyond the least
   loaded candidate and over `BALANCE_REL` times its count): its prefix cache still holds the prefix,
   so the prefill is mostly a hit.
5. Otherwise least outstanding work: estimated outstanding tokens (ours, plus other processes'
   requests at the size of this one) / weight, then requests on it, then a random tiebreak.

When every replica is full, requests wait in a queue, and a freed slot goes first to a waiter whose
prompt that replica holds, then to one whose prompt no replica holds, then to the oldest
(`next_waiter`), so a section's chunks queued together stay on one replica; no waiter is passed over
more than `WAITER_MAX_PASSED` times.

Hedging: a request out longer than a high percentile of answer latency (per token of cost, the
replica's own answers, or its peers' until it has enough) gets a duplicate on another replica when
nothing is queued (the tail of a run), or at once when its replica is stalled. The first valid
answer wins; the pool cancels the other and bounds hedges by a budget.

Concurrency limit (capacity found, not configured): a replica's useful concurrency is where adding
requests stops adding throughput. Each `/metrics` read measures the replica's work rate (its
generation-token counter, all clients together; a server without metrics: the tokens answered to this
pool) at the current limit while the limit binds; the limit doubles while a raise still pays (at least
`GAIN_MIN` more throughput than the level below), steps back to the level below once it does not
(more requests would only wait longer in the batch), and re-probes upward every `REPROBE_S`. It
backs off at once on the server's own signs of overload: more than a few requests queued at the server in two reads
in a row (the limit goes to its running count plus those few: requests queued at a server cannot
go to a replica that frees sooner), a preemption (vLLM recomputes a
sequence it had no KV blocks for), or KV-cache use over `KV_HIGH` on the fullest engine. An
operator's `max_in_flight` is a ceiling, never a target; without one the ceiling is `DEFAULT_CEILING`.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from collections.abc import Callable, Collection, Sequence

from .replica import CapacityProbe, ReplicaReport, ReplicaState

# A replica this many times slower (per token) than the fastest healthy one is used only while the
# queue is long (see `worth_it`).
SLOW_FACTOR = 2.5
# A report older than this says nothing about the replica's queue now.
REPORT_STALE_S = 3.0
# KV-cache use at which a replica starts preempting (vLLM recomputes or swaps sequences).
KV_HIGH = 0.95
# Answers needed before a latency percentile means anything.
MIN_LATENCY_SAMPLES = 20
# A replica is stalled once a request has been out this many hedge thresholds with no answer since.
STALL_FACTOR = 3.0
# Capacity search. The limit a replica starts at (below any ceiling), the ceiling when no
# max_in_flight is configured (vLLM's largest usual --max-num-seqs is 1,024), the throughput gain
# a raise must bring to count, the binding reads measured per level (after one read of transition),
# the share of the limit in use for a read to say anything about it, and how often a replica
# found at its knee is probed upward again (request mixes change).
INITIAL_LIMIT = 16
DEFAULT_CEILING = 1024
GAIN_MIN = 0.05
LEVEL_READS = 2
BINDING_SHARE = 0.9
REPROBE_S = 10.0
BACKOFF = 0.9  # a preemption takes the limit to this share of the running count
CLIMB_READ_S = 0.2  # /metrics reads this often (at most) while a replica's knee is still unknown
QUEUE_MIN = 2  # requests a replica may keep queued at the server (see `queue_allowance`) ...
QUEUE_HORIZON_S = 1.0  # ... or what it answers in this long, whichever is more
# Cache-aware routing: the share of a prompt a replica must have been sent for affinity to decide
# (below it the prefill saved is small against balance), and the load gap that makes the fleet
# imbalanced (more than BALANCE_ABS requests, and BALANCE_REL times the least loaded): a replica
# holding long prompts runs slower steps, so affinity never piles a section's chunks on one replica.
CACHE_MATCH_MIN = 0.5
BALANCE_ABS = 16
BALANCE_REL = 1.5
# A freed slot looks this far down the queue for a request its cache suits; no request is passed over
# more often than this (no starvation).
WAITER_LOOKAHEAD = 128
WAITER_MAX_PASSED = 64


def queue_allowance(report: ReplicaReport, previous: ReplicaReport | None) -> int:
    """Requests a replica may keep queued at the server beyond what it runs: what it answers in
    `QUEUE_HORIZON_S` (so a prefill-bound engine always has its next steps' prompts at hand, while a
    slow replica never holds more than that much of the run's tail), at least `QUEUE_MIN`."""
    if previous is None or report.at <= previous.at or report.completed <= previous.completed:
        # Nothing answered between the reads: a burst of arrivals being admitted (an engine admits
        # a few prompts per step), not a full batch; a replica that never answers is a stall.
        return DEFAULT_CEILING
    rate = (report.completed - previous.completed) / (report.at - previous.at)
    return max(QUEUE_MIN, math.ceil(rate * QUEUE_HORIZON_S))


def climbing(replica: ReplicaState) -> bool:
    """The replica's knee is not known yet: its limit still doubles at every level that pays."""
    return replica.capacity.knee_at is None and concurrency_limit(replica) < ceiling(replica)


# ---- load ------------------------------------------------------------------------------------

def ceiling(replica: ReplicaState) -> int:
    """The most requests the replica may ever hold: the operator's max_in_flight, else DEFAULT_CEILING."""
    return replica.config.max_in_flight or DEFAULT_CEILING


def concurrency_limit(replica: ReplicaState) -> int:
    """How many requests (all processes together) the replica may hold: the found limit (at first
    `INITIAL_LIMIT`, under the ceiling), or half of it in slow start (processes starting together
    each take half until the replica's reports show both)."""
    limit = replica.limit if replica.limit is not None else min(ceiling(replica), INITIAL_LIMIT)
    return max(1, limit // 2) if replica.slow_start else limit


def ends_slow_start(report: ReplicaReport) -> bool:
    """The replica counts every request this process had out when it was read: from now on its
    reports show whoever else is using it."""
    return report.local_in_flight > 0 and report.running + report.waiting >= report.local_in_flight


def fresh(report: ReplicaReport | None, now: float) -> bool:
    return report is not None and now - report.at <= REPORT_STALE_S


def foreign_load(replica: ReplicaState, now: float) -> int:
    """Requests other clients have on the replica: its reported running + waiting beyond ours when the
    report was read (0 without a fresh report, e.g. a server without vLLM's metrics), ours counted as
    the reader counted them (`ReplicaReport.local_counted`)."""
    report = replica.report
    if report is None or not fresh(report, now):
        return 0
    ours = report.local_in_flight if report.local_counted is None else report.local_counted
    return max(0, math.ceil(report.running + report.waiting) - ours)


def has_room(replica: ReplicaState, now: float) -> bool:
    return replica.in_flight + foreign_load(replica, now) < concurrency_limit(replica)


def work_rate(report: ReplicaReport, previous: ReplicaReport | None) -> float | None:
    """Tokens per second the replica worked between two reads (None: no basis, or a restart)."""
    if (previous is None or report.work_tokens is None or previous.work_tokens is None
            or report.work_is_local != previous.work_is_local or report.at <= previous.at
            or report.work_tokens < previous.work_tokens):
        return None
    return (report.work_tokens - previous.work_tokens) / (report.at - previous.at)


def adapted_limit(replica: ReplicaState, report: ReplicaReport, previous: ReplicaReport | None,
                  ) -> tuple[int, CapacityProbe]:
    """The replica's concurrency limit after a new `/metrics` read, and what the capacity search
    knows then (see the module docstring). Pure: the caller stores both."""
    top = ceiling(replica)
    current = min(top, replica.limit if replica.limit is not None else min(top, INITIAL_LIMIT))
    probe = replica.capacity
    now = report.at
    # A queue at the server in two reads in a row: requests are waiting there that no other replica
    # can take any more. Keep only a few queued there (enough to fill its next steps' token budget;
    # requests arriving between two steps wait a moment), the rest in the pool, where whichever
    # replica frees first takes them.
    allowance = queue_allowance(report, previous)
    queueing = (previous is not None and report.waiting > allowance and previous.waiting > allowance
                and report.running >= 1)
    preempted = (previous is not None and report.preemptions is not None and previous.preemptions is not None
                 and report.preemptions > previous.preemptions)
    if queueing:
        return _settle(max(1, min(top, int(report.running) + allowance)), now)
    if preempted:
        return _settle(max(1, int(min(current, report.running) * BACKOFF)), now)
    if report.kv_usage is not None and report.kv_usage >= KV_HIGH:
        return _settle(max(1, current - max(1, current // 20)), now)
    rate = work_rate(report, previous)
    if rate is None or report.running + report.waiting < BINDING_SHARE * current:
        return current, probe  # nothing learnt: the limit is not what holds the replica back now
    # (Nothing answered yet: the burst allowance does not apply to raising, only the minimum does.)
    if report.waiting > (QUEUE_MIN if allowance >= DEFAULT_CEILING else allowance):
        # Requests already wait at the server (a burst still being admitted, or a prefill-bound
        # engine): more would only queue there, where no other replica can take them.
        return current, probe
    if probe.level != current:
        # The first binding read at a new level is a transition (the requests it added are still in
        # prefill); while climbing it already counts, so that a short run is not over before the climb.
        probe = replace(probe, level=current, reads=0, level_rate=0.0)
        if probe.knee_at is not None:
            return current, probe
    reads = probe.reads + 1
    probe = replace(probe, reads=reads, level_rate=probe.level_rate + (rate - probe.level_rate) / reads)
    if reads < LEVEL_READS:
        return current, probe
    paid = probe.previous_rate is None or probe.level_rate >= probe.previous_rate * (1 + GAIN_MIN)
    if not paid and probe.previous_level is not None:
        # More requests only waited longer in the batch: back to the level below, and hold there.
        return _settle(min(current, probe.previous_level), now)
    if probe.knee_at is not None and now - probe.knee_at < REPROBE_S:
        return current, probe  # at the knee: hold until the next probe
    step = current if probe.knee_at is None else max(1, current // 8)  # climb fast, re-probe gently
    raised = min(top, current + step)
    if raised == current:
        return current, replace(probe, knee_at=now)  # at the ceiling
    return raised, CapacityProbe(previous_level=current, previous_rate=probe.level_rate, knee_at=probe.knee_at)


def _settle(limit: int, now: float) -> tuple[int, CapacityProbe]:
    """Hold at `limit`: the knee (or the server's own sign of overload) was found at `now`."""
    return limit, CapacityProbe(knee_at=now)


# ---- stalls and hedges -----------------------------------------------------------------------

def latency_quantile(replica: ReplicaState, replicas: Sequence[ReplicaState], q: float) -> float | None:
    """The `q` quantile of answer latency per token of cost: the replica's own answers, or its peers'
    until it has enough; None before the fleet has answered enough to say."""
    samples = list(replica.latency_samples)
    if len(samples) < MIN_LATENCY_SAMPLES:
        samples = [x for s in replicas if s is not replica for x in s.latency_samples]
    if len(samples) < MIN_LATENCY_SAMPLES:
        return None
    samples.sort()
    return samples[min(len(samples) - 1, int(q * len(samples)))]


def hedge_threshold(per_token: float | None, cost: int, min_s: float) -> float | None:
    """Seconds after which a request of `cost` tokens is overdue (None: no basis yet)."""
    return None if per_token is None else max(min_s, per_token * cost)


def is_stalled(replica: ReplicaState, now: float, per_token: float | None, min_s: float) -> bool:
    """A request has been out `STALL_FACTOR` hedge thresholds and the replica answered nothing since."""
    since = replica.last_answer_at if replica.last_answer_at is not None else -math.inf
    for dispatched, cost in replica.open_requests.values():
        threshold = hedge_threshold(per_token, cost, min_s)
        if threshold is not None and dispatched > since and now - dispatched > STALL_FACTOR * threshold:
            return True
    return False


def hedge_due(elapsed: float, threshold: float | None, queued: int, stalled: bool) -> bool:
    """Whether a request out for `elapsed` seconds should get a duplicate now: past its threshold, and
    either its replica is stalled or nothing is queued (a duplicate would otherwise take a slot from
    work that has none)."""
    if threshold is None or elapsed <= threshold:
        return False
    return stalled or queued == 0


def hedge_budget(sent: int, ratio: float, minimum: int) -> int:
    return max(minimum, int(ratio * sent))


# ---- routing ---------------------------------------------------------------------------------

def pick_replica(
    replicas: Sequence[ReplicaState],
    tried: Collection[str],
    cost: int,
    waiting: int,
    rand: Callable[[], float] = random.random,
    now: float = 0.0,
    stalled: Collection[str] = (),
    prefix: Sequence[int] = (),
) -> ReplicaState | None:
    """The replica to send a request of `cost` estimated tokens to, or None to wait for a slot.

    `tried` holds the URLs this request already failed on; `waiting` is how many requests are
    queued for a slot; `stalled` the URLs of stalled replicas (see `is_stalled`), used only when no
    other replica has a closed breaker; `prefix` the prompt's block hashes (`prefix.prefix_blocks`).
    Calls `breaker.allow()` only on replicas with room, in order, as the pool always has (a
    half-open breaker's answer can depend on it)."""
    healthy_elsewhere = any(s.url not in stalled and s.breaker.state == "closed" for s in replicas)
    available = [s for s in replicas if has_room(s, now) and not (s.url in stalled and healthy_elsewhere)
                 and s.breaker.allow()]
    if not available:
        return None
    fresh = [s for s in available if s.url not in tried]
    if not fresh and any(s.url not in tried and s.breaker.state == "closed" for s in replicas):
        return None  # a healthy replica this request has not failed on is only busy: wait for it
    # Speeds are compared among the replicas this request may still go to: holding it back for a
    # fast replica it already failed on would wait for a slot it never takes (a livelock once the
    # fleet is idle, since a replica that gets nothing is never re-measured).
    eligible = [s for s in replicas if s.url not in tried] if fresh else replicas
    pool = [s for s in (fresh or available) if worth_it(s, eligible, cost, waiting)]
    if not pool:
        return None  # only much slower replicas are free: a fast slot comes sooner

    cached = cache_aware_choice(pool, prefix, now)
    if cached is not None:
        return cached

    def load(s: ReplicaState) -> tuple[float, int, float]:
        foreign = foreign_load(s, now)
        return ((s.outstanding_tokens + foreign * cost + 1) / s.config.weight, s.in_flight + foreign, rand())

    return min(pool, key=load)


def cache_aware_choice(pool: Sequence[ReplicaState], prefix: Sequence[int], now: float) -> ReplicaState | None:
    """The candidate that was sent the most of this prompt, if that is at least `CACHE_MATCH_MIN` of
    it and choosing it keeps the fleet balanced; None: route on load."""
    if not prefix or len(pool) < 2:
        return None
    matched = {id(s): s.prefixes.matched(prefix) for s in pool}
    best = max(pool, key=lambda s: matched[id(s)])
    if matched[id(best)] < CACHE_MATCH_MIN * len(prefix) or all(matched[id(s)] == matched[id(best)] for s in pool):
        return None  # too little of the prompt is anyone's, or everyone's equally: load decides
    requests = {id(s): s.in_flight + foreign_load(s, now) for s in pool}
    least = min(requests.values())
    mine = requests[id(best)]
    if mine - least > BALANCE_ABS and mine > BALANCE_REL * least:
        return None
    return best


def next_waiter(waiters: Sequence[tuple[Sequence[int], int]], freed: ReplicaState,
                replicas: Sequence[ReplicaState]) -> int | None:
    """Which queued request a slot freed on `freed` goes to: `waiters` are (prompt blocks, times passed
    over), oldest first. Among the first `WAITER_LOOKAHEAD`: one whose prompt `freed` was mostly sent
    already (at least `CACHE_MATCH_MIN`; the most matched, the oldest on a tie), else one whose prompt
    no replica holds (a new section: `freed` becomes its home), else the oldest; and always the oldest
    once it has been passed over `WAITER_MAX_PASSED` times. A slot never goes unused while anyone
    waits. None: nobody waits."""
    if not waiters:
        return None
    if waiters[0][1] >= WAITER_MAX_PASSED:
        return 0
    homeless: int | None = None
    best, best_share = None, 0.0
    for index, (prefix, _) in enumerate(waiters[:WAITER_LOOKAHEAD]):
        if not prefix:
            continue
        need = CACHE_MATCH_MIN * len(prefix)
        here = freed.prefixes.matched(prefix)
        if here >= need:
            if here / len(prefix) > best_share:
                best, best_share = index, here / len(prefix)
        elif best is None and homeless is None and all(
                s.prefixes.matched(prefix) < need for s in replicas if s is not freed):
            homeless = index
    if best is not None:
        return best
    return homeless if homeless is not None else 0


def worth_it(replica: ReplicaState, replicas: Sequence[ReplicaState], cost: int, waiting: int) -> bool:
    """Shortest expected completion: a replica much slower than the fastest healthy one gets a
    request only while the queue is long enough that waiting for a fast slot would take longer
    (so a slow replica adds capacity mid-run but never holds the last answers of a run).

    Replicas with no speed measured yet are always worth it (their speed is learned by using them)."""
    known = [s for s in replicas if s.seconds_per_token is not None and s.breaker.state == "closed"]
    if replica.seconds_per_token is None or not known:
        return True
    fastest = min(s.seconds_per_token for s in known)
    if replica.seconds_per_token <= SLOW_FACTOR * fastest:
        return True
    fast = [s for s in known if s.seconds_per_token <= SLOW_FACTOR * fastest]
    rate = sum(concurrency_limit(s) / (s.seconds_per_token * cost) for s in fast)  # answers per second
    return replica.seconds_per_token * cost <= waiting / rate + fastest * cost
