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

Concurrency limits come from the capacity search (`capacity.py`): `concurrency_limit` is what a
replica may hold, all processes together.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Sequence

from .capacity import concurrency_limit
from .replica import ReplicaReport, ReplicaState

# A replica this many times slower (per token) than the fastest healthy one is used only while the
# queue is long (see `worth_it`).
SLOW_FACTOR = 2.5
# A report older than this says nothing about the replica's queue now.
REPORT_STALE_S = 3.0
# Answers needed before a latency percentile means anything.
MIN_LATENCY_SAMPLES = 20
# A replica is stalled once a request has been out this many hedge thresholds with no answer since.
STALL_FACTOR = 3.0
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


# ---- load ------------------------------------------------------------------------------------

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
    wait_for_home: bool = False,
) -> ReplicaState | None:
    """The replica to send a request of `cost` estimated tokens to, or None to wait for a slot.

    `tried` holds the URLs this request already failed on; `waiting` is how many requests are
    queued for a slot; `stalled` the URLs of stalled replicas (see `is_stalled`), used only when no
    other replica has a closed breaker; `prefix` the prompt's block hashes (`prefix.prefix_blocks`);
    `wait_for_home`: a request not queued yet, which waits for the replica its prompt was sent to
    while others queue (`home_is_full`); a queued request takes the slot it was woken for.
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
    if wait_for_home and waiting and home_is_full(replicas, pool, prefix, tried, now):
        return None  # the queued requests take the free slots; this one waits for its prefix's replica

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


def home_is_full(replicas: Sequence[ReplicaState], pool: Sequence[ReplicaState], prefix: Sequence[int],
                 tried: Collection[str], now: float) -> bool:
    """Whether the replica that was sent most of this prompt (at least `CACHE_MATCH_MIN`) is merely
    full: healthy, not tried by this request, and not imbalanced. Its prefix cache holds the prompt:
    while other requests queue for the free slots elsewhere, a new request waits for a slot there
    (`next_waiter` gives it the first one) rather than prefilling the prompt again on another replica."""
    if not prefix or len(replicas) < 2:
        return False
    home = max(replicas, key=lambda s: s.prefixes.matched(prefix))
    if (home in pool or home.url in tried or home.breaker.state != "closed"
            or home.prefixes.matched(prefix) < CACHE_MATCH_MIN * len(prefix)):
        return False
    requests = [s.in_flight + foreign_load(s, now) for s in replicas]
    mine, least = home.in_flight + foreign_load(home, now), min(requests)
    return not (mine - least > BALANCE_ABS and mine > BALANCE_REL * least)


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
