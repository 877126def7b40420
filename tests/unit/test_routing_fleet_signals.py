"""The routing policy's fleet-wide signals and hedging rules (`contextual_assets.fleet.routing`):
pure functions over hand-built replica states with an explicit `now`, no server or event loop."""

from __future__ import annotations

import math

from contextual_assets.fleet import capacity, routing
from contextual_assets.fleet.breaker import CircuitBreaker
from contextual_assets.fleet.capacity import adapted_limit, concurrency_limit
from contextual_assets.fleet.config import ReplicaConfig
from contextual_assets.fleet.replica import ReplicaReport, ReplicaState
from contextual_assets.fleet.routing import (
    foreign_load,
    has_room,
    hedge_budget,
    hedge_due,
    hedge_threshold,
    is_stalled,
    latency_quantile,
    pick_replica,
)

NOW = 1000.0


def replica(name: str, *, cap: int = 16, in_flight: int = 0, outstanding: int = 0,
            report: ReplicaReport | None = None, samples: list[float] = ()) -> ReplicaState:
    state = ReplicaState(config=ReplicaConfig(base_url=f"http://{name}:8000", max_in_flight=cap), model="m",
                         breaker=CircuitBreaker(failure_threshold=1, cooldown_s=5.0, clock=lambda: NOW),
                         in_flight=in_flight, outstanding_tokens=outstanding, report=report)
    state.latency_samples.extend(samples)
    return state


def name(state: ReplicaState | None) -> str | None:
    return state.url.split("//")[1].split(":")[0] if state else None


# ---- other processes' load -----------------------------------------------------------------------

def test_foreign_load_is_what_the_replica_reports_beyond_our_own_requests():
    # The replica runs 12 and queues 2; 5 of them were ours when it said so: 9 belong to others.
    assert foreign_load(replica("a", in_flight=5, report=report(12, 2, local=5)), NOW) == 9
    # Our requests not yet seen by the replica do not make foreign load negative.
    assert foreign_load(replica("a", in_flight=8, report=report(3, 0, local=8)), NOW) == 0
    # No report (a server without vLLM's metrics) or a stale one: local counts alone.
    assert foreign_load(replica("a", report=None), NOW) == 0
    stale = report(16, 4, at=NOW - routing.REPORT_STALE_S - 0.1)
    assert foreign_load(replica("a", report=stale), NOW) == 0


def test_room_counts_other_processes_against_the_cap():
    assert has_room(replica("a", cap=16, in_flight=6, report=report(15, 0, local=6)), NOW)  # 6 + 9 < 16
    assert not has_room(replica("a", cap=16, in_flight=6, report=report(16, 0, local=6)), NOW)  # 6 + 10
    assert not has_room(replica("a", cap=16, in_flight=0, report=report(16, 3, local=0)), NOW)
    # The same replica without a report would look empty.
    assert has_room(replica("a", cap=16, in_flight=6), NOW)


def test_a_replica_busy_with_another_process_gets_nothing_while_an_idle_one_has_room():
    busy = replica("busy", in_flight=4, outstanding=400, report=report(16, 0, local=4))  # full: 12 foreign
    half = replica("half", in_flight=4, outstanding=400, report=report(12, 0, local=4))  # 8 foreign
    idle = replica("idle", in_flight=4, outstanding=400, report=report(4, 0, local=4))
    assert name(pick_replica([busy, half, idle], set(), 100, 0, rand=lambda: 0.5, now=NOW)) == "idle"
    assert name(pick_replica([busy, half], set(), 100, 0, rand=lambda: 0.5, now=NOW)) == "half"
    assert pick_replica([busy], set(), 100, 0, rand=lambda: 0.5, now=NOW) is None


# ---- adaptive concurrency: capacity found, not configured ------------------------------------------

def report(running: float, waiting: float = 0.0, local: int = 0, at: float = NOW, kv: float | None = None,
           work: float | None = None, preemptions: float | None = None, local_work: bool = False):
    return ReplicaReport(at=at, running=running, waiting=waiting, kv_usage=kv, local_in_flight=local,
                         preemptions=preemptions, work_tokens=work, work_is_local=local_work)


def replica_with_cap(cap: int | None, limit: int | None = None) -> ReplicaState:
    state = ReplicaState(config=ReplicaConfig(base_url="http://a:8000", max_in_flight=cap), model="m",
                         breaker=CircuitBreaker(failure_threshold=1, cooldown_s=5.0, clock=lambda: NOW))
    state.limit = limit
    return state


def drive(state: ReplicaState, throughput, reads: int, *, start: float = NOW, interval: float = 0.5,
          work: float = 0.0, occupancy: float = 1.0, local_work: bool = False) -> list[int]:
    """Feed `reads` /metrics reads of a replica whose work rate at concurrency c is `throughput(c)` and
    that runs `occupancy` x the limit; the limits after each read. `local_work`: a server without
    engine gauges (its work is what this pool had answered)."""
    previous, limits = None, []
    for i in range(reads):
        limit = capacity.concurrency_limit(state)
        if previous is not None:
            work += throughput(limit) * interval
        now = start + i * interval
        read = report(occupancy * limit, 0, at=now, work=work, local_work=local_work)
        state.limit, state.capacity = adapted_limit(state, read, previous)
        previous = read
        limits.append(state.limit)
    return limits


def knee_curve(c: float) -> float:
    """A batching server: step time 5 ms + 0.1 ms per sequence; tokens/s = c / step time (knee ~50)."""
    return c / (0.005 + 0.0001 * c)


def test_without_a_ceiling_the_limit_climbs_past_the_old_default_while_throughput_grows():
    state = replica_with_cap(None)
    assert capacity.concurrency_limit(state) == capacity.INITIAL_LIMIT  # where it starts
    limits = drive(state, knee_curve, 40)
    # 16 -> 32 -> 64 -> 128 pays at least 5 % each time; 128 -> 256 adds 19 %: still worth it ...
    assert max(limits) > 64
    # ... and the limit ends at a level where doubling stopped paying, not at the ceiling.
    assert limits[-1] < capacity.DEFAULT_CEILING
    assert knee_curve(2 * limits[-1]) < knee_curve(limits[-1]) * (1 + capacity.GAIN_MIN) or limits[-1] * 2 > max(limits)


def test_a_plateau_steps_back_to_the_level_below():
    # A server without engine gauges: whether a level pays is all there is to go on.
    state = replica_with_cap(None)
    flat = lambda c: min(c, 40) * 100.0  # throughput stops growing at 40 in flight
    limits = drive(state, flat, 20, local_work=True)  # 10 s: less than REPROBE_S after the knee
    assert 128 in limits  # 32 -> 64 paid (3,200 -> 4,000 tokens/s); it tried 128 ...
    assert limits[-1] == 64  # ... which added nothing, so it went back to 64 and holds there
    # The next probe (an eighth more) does not pay either: back to 64.
    later = drive(state, flat, 20, start=NOW + 10, work=1e9, local_work=True)
    assert 72 in later and later[-1] == 64


def test_a_replica_running_all_it_holds_climbs_a_doubling_a_read_then_each_level_must_pay():
    """vLLM's own gauges say it runs every request it holds: below FAST_CLIMB_MAX the climb does not
    wait for a level's throughput to settle (one doubling per read, 16 -> 256 in five reads); above
    it, a level must pay over a settled window, or the limit steps back."""
    state = replica_with_cap(None)
    flat = lambda c: min(c, 40) * 100.0
    limits = drive(state, flat, 30)
    assert limits[:5] == [16, 32, 64, 128, 256]  # the first read has no rate to go on
    assert 2 * capacity.FAST_CLIMB_MAX in limits  # it tried above the fast climb ...
    assert limits[-1] == capacity.FAST_CLIMB_MAX  # ... where nothing paid: back, and it holds there
    # Under an operator's ceiling the climb stops at the ceiling.
    capped = replica_with_cap(100)
    assert drive(capped, flat, 6)[-1] == 100


def test_a_replica_of_two_engines_climbs_fast_to_twice_as_many():
    """A data-parallel replica (two `engine` label sets) has FAST_CLIMB_MAX sequence slots per engine."""
    state, previous, limits = replica_with_cap(None), None, []
    for i in range(7):
        limit = concurrency_limit(state)
        read = report(limit, 0, at=NOW + 0.1 * i, work=1000.0 * i)
        read.engines = 2
        state.limit, state.capacity = adapted_limit(state, read, previous)
        previous = read
        limits.append(state.limit)
    assert limits == [16, 32, 64, 128, 256, 512, 512]


def test_a_climb_raises_by_at_most_twice_what_the_server_admitted_since_the_last_read():
    """A prefill-bound engine admits a few prompts a step: a doubling would sit in its queue for many
    steps, where no other replica can take it. The server may keep what it admits by the next read."""
    state = replica_with_cap(None, limit=64)
    before = report(50, 14, at=NOW - 0.1, work=0.0)
    now = report(53, 5, work=10.0)  # three more running since the last read, 5 still queued
    assert adapted_limit(state, now, before)[0] == 64 + 6
    # More queued than it admitted since the last read: hold.
    assert adapted_limit(state, report(53, 20, work=10.0), before)[0] == 64
    # Another process holding half of what the replica holds: each claims its share of the room.
    # Five more running: alone, the limit may grow by ten; another process holding half of what the
    # replica holds, each claims its share of the room (both climb on the same reads).
    assert adapted_limit(state, report(55, 3, local=58, work=10.0), before)[0] == 64 + 10
    shared = report(55, 3, local=29, work=10.0)
    shared.local_counted = 29
    assert adapted_limit(state, shared, before)[0] == 64 + 5
    shared.waiting = 6  # and only its share of the queue: 29/61 x 10 is 5
    assert adapted_limit(state, shared, before)[0] == 64
    # A queue that stays while the batch does not grow is the engine at its own cap: the limit goes to
    # what it runs plus a short queue.
    at_cap = report(53, 40, work=10.0)
    at_cap.completed = 2  # 4 answers a second: it may keep 4 queued
    assert adapted_limit(state, at_cap, report(53, 40, at=NOW - 0.5))[0] == 53 + 4


def test_identical_replicas_find_the_same_limit_through_noisy_lagging_gauges():
    """Two engines per replica (gauges summed over them), read 0.5 s late, with a noisy work counter:
    identical replicas end within a factor of 2 of each other whatever the noise."""
    import random

    def engine_pair(seed: int) -> list[int]:
        rng = random.Random(seed)
        state = replica_with_cap(None)
        history: list[int] = []  # the limit at each read, for the lagging gauge
        previous, work, limits = None, 0.0, []
        for i in range(60):
            limit = capacity.concurrency_limit(state)
            history.append(limit)
            seen = history[max(0, i - 1)]  # a gauge 0.5 s (one read) old
            running = min(seen, 2 * 128)  # two engines of 128 sequences each
            waiting = max(0, seen - running)
            work += knee_curve(min(limit, 256)) * 0.5 * rng.uniform(0.8, 1.2)
            read = report(running, waiting, at=NOW + 0.5 * i, work=work)
            read.completed = 20 * i
            state.limit, state.capacity = adapted_limit(state, read, previous)
            previous = read
            limits.append(state.limit)
        return limits

    finals = [engine_pair(seed)[-1] for seed in range(8)]
    assert max(finals) <= 2 * min(finals), finals
    assert all(f <= 1.5 * 256 for f in finals), finals  # never far past what it runs


def test_the_operator_ceiling_is_a_ceiling_never_a_target():
    state = replica_with_cap(24)
    assert capacity.concurrency_limit(state) == 16  # starts below the ceiling, not at it
    limits = drive(state, knee_curve, 20)
    assert max(limits) == 24
    # A server without engine gauges whose throughput never grows keeps a low limit although the ceiling is 24.
    flat = replica_with_cap(24)
    assert drive(flat, lambda c: 1000.0, 20, local_work=True)[-1] == 16


def test_the_limit_does_not_grow_while_it_does_not_bind():
    state = replica_with_cap(None)
    assert set(drive(state, knee_curve, 20, occupancy=0.5)) == {16}  # half used: nothing to learn


def test_limit_drops_to_the_running_count_when_the_replica_keeps_queueing():
    state = replica_with_cap(None, limit=64)
    first = report(40, 5, at=NOW - 0.5)
    assert adapted_limit(state, first, None)[0] == 64  # one read with a queue is not yet a full batch
    # Two in a row, nothing answered in between: a burst being admitted a few prompts a step.
    assert adapted_limit(state, report(40, 3), first)[0] == 64
    # Two in a row while it answers (1 in 0.5 s): the batch is full at 40; a few may stay queued there.
    later = report(40, 3)
    later.completed = 1
    assert adapted_limit(state, later, first)[0] == 40 + capacity.QUEUE_MIN
    # A replica answering 20 requests a second may keep a second's worth queued (it is prefill-bound
    # and needs its next prompts at hand), but never more than QUEUE_SHARE of what it runs: what all
    # clients hold stays within 1.2x of what it runs.
    before, now = report(100, 30, at=NOW - 0.5), report(100, 30)
    before.completed, now.completed = 100, 110
    assert capacity.queue_allowance(now, before) == 20
    assert adapted_limit(state, now, before)[0] == 100 + 20
    before.running, small = 44, report(44, 30)
    small.completed = 110
    assert capacity.queue_allowance(small, before) == math.ceil(capacity.QUEUE_SHARE * 44)
    assert adapted_limit(state, small, before)[0] == 44 + math.ceil(capacity.QUEUE_SHARE * 44)
    # A queue that shrinks while the batch grows is a burst being admitted: no cut.
    assert adapted_limit(state, report(48, 26), before)[0] == 64
    # A queue within the allowance (requests arriving between two engine steps) is no cut.
    within = report(40, 2)
    within.completed = 1
    assert adapted_limit(state, within, report(40, 2, at=NOW - 0.5))[0] == 64


def test_a_preemption_backs_off_below_the_running_count():
    state = replica_with_cap(None, limit=200)
    limit, probe = adapted_limit(state, report(180, 0, preemptions=3), report(170, 0, preemptions=2))
    assert limit == int(180 * capacity.BACKOFF)
    assert probe.knee_at == NOW  # and holds there until the next probe
    # A counter that did not move is no preemption.
    assert adapted_limit(state, report(180, 0, preemptions=3), report(170, 0, preemptions=3))[0] == 200


def test_kv_cache_pressure_takes_the_limit_down():
    state = replica_with_cap(None, limit=100)
    assert adapted_limit(state, report(100, 0, kv=0.97), None)[0] == 95
    assert adapted_limit(replica_with_cap(None, limit=1), report(1, 0, kv=0.99), None)[0] == 1  # never below one
    assert adapted_limit(replica_with_cap(None, limit=100), report(100, 0, kv=0.5), None)[0] == 100


def test_a_found_knee_is_probed_again_later():
    state = replica_with_cap(None)
    flat = lambda c: min(c, 40) * 100.0
    drive(state, flat, 20, local_work=True)
    assert state.limit == 64
    more = lambda c: c * 100.0  # the mix changed: more requests pay again
    later = drive(state, more, 60, start=NOW + 15 + 20 * 0.5, work=1e9, local_work=True)
    assert max(later) > 64


# ---- hedging and stalls ----------------------------------------------------------------------------

def test_latency_quantile_uses_the_replica_own_answers_or_its_peers():
    own = replica("a", samples=[0.01] * 19 + [0.05])  # 20 samples: its own
    assert latency_quantile(own, [own], 0.95) == 0.05
    new = replica("b", samples=[0.5] * 3)  # too few: the peers' answers decide
    peers = [new, replica("c", samples=[0.02] * 40)]
    assert latency_quantile(new, peers, 0.95) == 0.02
    assert latency_quantile(replica("d"), [replica("d")], 0.95) is None  # no basis yet: no hedging


def test_hedge_threshold_scales_with_cost_and_has_a_floor():
    assert hedge_threshold(0.01, 500, min_s=1.0) == 5.0
    assert hedge_threshold(0.001, 500, min_s=1.0) == 1.0
    assert hedge_threshold(None, 500, min_s=1.0) is None


def test_hedge_only_past_the_threshold_and_only_when_nothing_is_queued_unless_stalled():
    assert not hedge_due(elapsed=4.0, threshold=5.0, queued=0, stalled=False)
    assert hedge_due(elapsed=6.0, threshold=5.0, queued=0, stalled=False)
    # With requests queued a duplicate would take a slot from work that has none.
    assert not hedge_due(elapsed=6.0, threshold=5.0, queued=3, stalled=False)
    # A stalled replica will not answer: its requests are re-sent whatever is queued.
    assert hedge_due(elapsed=6.0, threshold=5.0, queued=3, stalled=True)
    assert not hedge_due(elapsed=60.0, threshold=None, queued=0, stalled=True)


def test_hedge_budget_is_a_share_of_requests_sent_with_a_minimum():
    assert hedge_budget(sent=50, ratio=0.1, minimum=16) == 16
    assert hedge_budget(sent=1000, ratio=0.1, minimum=16) == 100
    assert hedge_budget(sent=1000, ratio=0.0, minimum=0) == 0


def test_a_replica_is_stalled_when_a_request_is_long_overdue_and_nothing_answered_since():
    state = replica("a")
    per_token = 0.01  # threshold for cost 100: max(1.0, 1.0) = 1 s; stalled past 3 s
    state.open_requests = {1: (NOW - 2.0, 100)}
    assert not is_stalled(state, NOW, per_token, min_s=1.0)
    state.open_requests = {1: (NOW - 3.5, 100)}
    assert is_stalled(state, NOW, per_token, min_s=1.0)
    state.last_answer_at = NOW - 1.0  # it answered something after that request left: slow, not stalled
    assert not is_stalled(state, NOW, per_token, min_s=1.0)
    assert not is_stalled(replica("b"), NOW, per_token, min_s=1.0)  # nothing out
    assert not is_stalled(state, NOW, None, min_s=1.0)


def test_routing_avoids_a_stalled_replica_unless_it_is_the_only_healthy_one():
    stalled, ok = replica("stalled"), replica("ok", in_flight=10, outstanding=1000)
    assert name(pick_replica([stalled, ok], set(), 100, 0, now=NOW, stalled={stalled.url})) == "ok"
    assert name(pick_replica([stalled, ok], set(), 100, 0, now=NOW)) == "stalled"  # emptier, not stalled
    ok.breaker.record_failure()  # the other one is open: a stalled replica is better than none
    assert name(pick_replica([stalled, ok], set(), 100, 0, now=NOW, stalled={stalled.url})) == "stalled"


def test_slow_start_takes_half_the_cap_until_the_replica_has_counted_our_requests():
    from contextual_assets.fleet.capacity import ends_slow_start

    state = replica("a", cap=16)
    state.slow_start = True
    assert concurrency_limit(state) == 8
    assert has_room(replica("a", cap=16, in_flight=8), NOW)  # without slow start: room up to 16
    state.in_flight = 8
    assert not has_room(state, NOW)
    # A read before our requests left, or before they arrived, says nothing about other starters.
    assert not ends_slow_start(report(0, 0, local=0))
    assert not ends_slow_start(report(5, 0, local=8))
    assert ends_slow_start(report(8, 0, local=8))
    assert ends_slow_start(report(16, 2, local=8))  # ours and another process's
    state.slow_start = False
    assert concurrency_limit(state) == 16
    one = replica("b", cap=1)
    one.slow_start = True
    assert concurrency_limit(one) == 1  # never below one
