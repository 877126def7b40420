"""Routing policy: which replica gets a request, as pure functions over replica state.

No event loop and no network here: the pool (`pool.py`) owns the locking and calls `pick_replica`
under its condition; tests call it directly on hand-built `ReplicaState`s.

Policy, in order:
1. Candidates are replicas under their in-flight cap whose circuit breaker allows a request
   (closed, or half-open with no probe out).
2. A retry goes to a replica the request has not tried yet. If every candidate was tried but an
   untried replica with a closed breaker exists (it is merely busy), wait for it rather than send
   the request back to a replica it just failed on.
3. Shortest expected completion: a replica much slower than the fastest healthy one this request may
   still use is used only while the queue is long enough that waiting for a fast slot would take
   longer.
4. Least outstanding work: estimated outstanding tokens / weight, then in-flight count, then a
   random tiebreak so equal replicas share the load.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence

from .replica import ReplicaState

# A replica this many times slower (per token) than the fastest healthy one is used only while the
# queue is long (see `worth_it`).
SLOW_FACTOR = 2.5


def pick_replica(
    replicas: Sequence[ReplicaState],
    tried: Collection[str],
    cost: int,
    waiting: int,
    rand: Callable[[], float] = random.random,
) -> ReplicaState | None:
    """The replica to send a request of `cost` estimated tokens to, or None to wait for a slot.

    `tried` holds the URLs this request already failed on; `waiting` is how many requests are
    queued for a slot. Calls `breaker.allow()` only on replicas under their cap, in order, as the
    pool always has (a half-open breaker's answer can depend on it)."""
    available = [s for s in replicas if s.in_flight < s.config.max_in_flight and s.breaker.allow()]
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
    return min(pool, key=lambda s: ((s.outstanding_tokens + 1) / s.config.weight, s.in_flight, rand()))


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
    rate = sum(s.config.max_in_flight / (s.seconds_per_token * cost) for s in fast)  # answers per second
    return replica.seconds_per_token * cost <= waiting / rate + fastest * cost
