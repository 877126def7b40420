"""Capacity search: how many requests a replica may hold, as pure functions over its `/metrics` reads.

No event loop and no network here: the pool's `/metrics` reader (`metrics_reader.py`) calls
`adapted_limit` after each read and stores what it returns; routing (`routing.py`) reads the limit
through `concurrency_limit`; tests call them directly on hand-built reads with explicit times.

Concurrency limit (capacity found, not configured): a replica's useful concurrency is what its engine
runs, plus the few prompts it admits by the next read, and no more than what still adds throughput.
The signals are the engine's own, read from `/metrics` every `CLIMB_READ_S` while climbing:
- Climb: while the limit binds (the replica holds about as many requests as it allows) and the engine
  runs what it holds, the limit doubles at each read up to `FAST_CLIMB_MAX` per engine. A batching engine's
  throughput does not fall as its batch grows until its own signals below say so, and reading a few
  percent of gain off a counter that moves one engine step at a time settled identical replicas at 32,
  64 or 128 at random. An engine with a queue (prefill-bound: it admits a few prompts a step) gets at
  most twice what it took in since the last read, and only while its queue is no longer than that:
  it never idles its prefill budget, and holds no more than that where no other replica can take it.
- Above `FAST_CLIMB_MAX`, or on a server without engine gauges (the pool's own answered tokens are then
  the work counter), each level must pay: its work rate over a settled window (at least `LEVEL_READS`
  reads and `LEVEL_WINDOW_S`, its first read skipped) at least `GAIN_MIN` over the level below, or the
  limit steps back there. A found knee is probed again (an eighth more) every `REPROBE_S`.
- Back-off, at once, on the engine's signs of overload: a queue it does not drain (more than
  `queue_allowance` waiting in two reads in a row while its batch does not grow: the limit goes to its
  running count plus that allowance, at most `QUEUE_SHARE` of it), a preemption (vLLM recomputes a
  sequence it had no KV blocks for), or KV-cache use over `KV_HIGH` on the fullest engine.
An operator's `max_in_flight` is a ceiling, never a target; without one the ceiling is `DEFAULT_CEILING`.
When a read opens room, each free slot goes to the waiter `next_waiter` gives it to (`Slots.offer_room`),
as a slot an answer frees does.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .replica import CapacityProbe, ReplicaReport, ReplicaState

# The limit a replica starts at (below any ceiling), and the ceiling when no max_in_flight is
# configured (vLLM's largest usual --max-num-seqs is 1,024).
INITIAL_LIMIT = 16
DEFAULT_CEILING = 1024
# The climb: a replica whose own gauges show it running what it holds doubles each read up to
# FAST_CLIMB_MAX per engine (vLLM's default --max-num-seqs below H100-class GPUs; a data-parallel
# replica has that many per engine), reading this often; a read says something about the limit only
# while this share of it is in use.
FAST_CLIMB_MAX = 256
CLIMB_READ_S = 0.1
BINDING_SHARE = 0.9
# Above FAST_CLIMB_MAX (or without engine gauges) a level must bring this much more throughput than
# the level below, measured over at least LEVEL_READS binding reads and LEVEL_WINDOW_S (after one read
# of transition); a replica found at its knee is probed upward again this often (request mixes change).
GAIN_MIN = 0.05
LEVEL_READS = 2
LEVEL_WINDOW_S = 1.0
REPROBE_S = 10.0
# Back-off: KV-cache use at which a replica starts preempting (vLLM recomputes or swaps sequences); a
# preemption takes the limit to this share of the running count.
KV_HIGH = 0.95
BACKOFF = 0.9
# Requests a replica may keep queued at the server beyond what it runs (`queue_allowance`): what it
# answers in QUEUE_HORIZON_S, at least QUEUE_MIN, at most QUEUE_SHARE of what it runs (all clients
# together never hold much more than a replica runs: the rest waits in the pools, where any replica
# can take it).
QUEUE_MIN = 2
QUEUE_HORIZON_S = 1.0
QUEUE_SHARE = 0.2


def queue_allowance(report: ReplicaReport, previous: ReplicaReport | None) -> int:
    """Requests a replica may keep queued at the server beyond what it runs: what it answers in
    `QUEUE_HORIZON_S` (so a prefill-bound engine always has its next steps' prompts at hand, while a
    slow replica never holds more than that much of the run's tail), at least `QUEUE_MIN`, at most
    `QUEUE_SHARE` of its batch."""
    if previous is None or report.at <= previous.at or report.completed <= previous.completed:
        # Nothing answered between the reads: a burst of arrivals being admitted (an engine admits
        # a few prompts per step), not a full batch; a replica that never answers is a stall.
        return DEFAULT_CEILING
    rate = (report.completed - previous.completed) / (report.at - previous.at)
    return max(QUEUE_MIN, min(math.ceil(rate * QUEUE_HORIZON_S), math.ceil(QUEUE_SHARE * report.running)))


def admitted_since(report: ReplicaReport, previous: ReplicaReport | None) -> int:
    """Requests the server took into its running batch between two reads, as far as they show: its batch's
    growth plus this pool's answers meanwhile (0 without a previous read)."""
    if previous is None:
        return 0
    return max(0, math.ceil(report.running - previous.running)) + max(0, report.completed - previous.completed)


def our_share(report: ReplicaReport) -> float:
    """This pool's share of what the replica holds (1 when it holds nothing, or alone): processes
    climbing on the same read each claim their share of the room it shows, not all of it."""
    ours = report.local_in_flight if report.local_counted is None else report.local_counted
    held = report.running + report.waiting
    return 1.0 if held <= 0 or ours <= 0 else min(1.0, ours / held)


def climbing(replica: ReplicaState, queued: int) -> bool:
    """The replica's knee is not known yet and its limit binds, or will as soon as the `queued`
    requests waiting in the pool take the room a read opened: the next read may raise it. (A limit
    that does not bind, as in a run's tail, learns nothing from reads: they go back to the configured
    interval.)"""
    limit = concurrency_limit(replica)
    report = replica.report
    held = max(replica.in_flight, math.ceil(report.running + report.waiting) if report is not None else 0)
    binds = queued > 0 or held >= BINDING_SHARE * limit
    return replica.capacity.knee_at is None and limit < ceiling(replica) and binds


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
    # A queue at the server in two reads in a row while it admits nothing more: the engine is at its
    # own cap (sequences or KV blocks). Keep only a few queued there (enough to fill its next steps'
    # token budget), the rest in the pool, where whichever replica frees first takes them. A queue
    # that shrinks while the running batch grows is a burst being admitted a few prompts a step.
    allowance = queue_allowance(report, previous)
    queueing = (previous is not None and report.waiting > allowance and previous.waiting > allowance
                and report.running >= 1 and report.running <= previous.running)
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
    fast_max = FAST_CLIMB_MAX * report.engines  # each data-parallel engine has its own sequence slots
    climbing_fast = not report.work_is_local and probe.knee_at is None and current < fast_max
    backlog = QUEUE_MIN if allowance >= DEFAULT_CEILING else allowance
    if climbing_fast:
        # While climbing, the server may keep what it admits by the next read (a prefill-bound engine
        # admits a few prompts a step): it never idles its prefill budget waiting for our next raise,
        # and holds no more than that where no other replica could take it.
        backlog = max(backlog, math.ceil(our_share(report) * min(2 * admitted_since(report, previous),
                                                                 math.ceil(QUEUE_SHARE * report.running))))
    if report.waiting > backlog:
        # Requests already wait at the server: more would only queue there, where no other replica
        # can take them.
        return current, probe
    probe = _measured(probe, current, report, rate)
    if climbing_fast:
        # The engine runs every request the limit lets it hold (its own gauges say so), and a batching
        # engine's throughput does not fall as its batch grows until its own signals above say so: up to
        # `FAST_CLIMB_MAX`, climb one doubling a read to where they do (reading a few percent of gain off
        # a counter that moves one engine step at a time settled identical replicas at 32, 64 or 128 at
        # random); above it, each level must pay over a settled window. A raise is at
        # most twice what the server took in since the last read: a prefill-bound engine admitting a few
        # prompts a step gets a few more, not a doubling it would keep queued for many steps.
        step = None if previous is None or report.waiting <= 0 else \
            max(QUEUE_MIN, math.ceil(our_share(report) * 2 * admitted_since(report, previous)))
        return _raised(current, min(top, fast_max), probe, now, step=step)
    if probe.reads < LEVEL_READS or now - probe.since < LEVEL_WINDOW_S:
        return current, probe  # the level's window has not settled yet
    trimmed = _trimmed(probe, current, now)
    if trimmed is not None:
        return trimmed
    if probe.knee_at is not None and now - probe.knee_at < REPROBE_S:
        return current, probe  # at the knee: hold until the next probe
    return _raised(current, top, probe, now)


def _measured(probe: CapacityProbe, level: int, report: ReplicaReport, rate: float) -> CapacityProbe:
    """The probe with this binding read counted in `level`'s window: the window starts at the second
    binding read at a level (the first one is a transition: the requests it added are still in
    prefill) and its rate is the work counter's move over the whole window, not one read's."""
    if probe.level != level:
        levels = dict(probe.rates)
        return replace(probe, level=level, reads=0, since=report.at, since_work=report.work_tokens or 0.0,
                       rates=levels)
    reads = probe.reads + 1
    span = report.at - probe.since
    window_rate = ((report.work_tokens or 0.0) - probe.since_work) / span if span > 0 else rate
    return replace(probe, reads=reads, rates={**probe.rates, level: window_rate})


def _raised(current: int, top: int, probe: CapacityProbe, now: float, step: int | None = None,
            ) -> tuple[int, CapacityProbe]:
    """One step up: a doubling while the knee is unknown (at most `step`), an eighth more when
    re-probing a knee."""
    most = current if probe.knee_at is None else max(1, current // 8)
    raised = min(top, current + min(most, step if step is not None else most))
    if raised == current:
        return current, replace(probe, knee_at=now)  # at the ceiling
    return raised, replace(probe, previous_level=current)


def _trimmed(probe: CapacityProbe, current: int, now: float) -> tuple[int, CapacityProbe] | None:
    """Back to the level below when `current`'s settled window worked no faster than it by `GAIN_MIN`
    (more requests only waited longer in the batch); None: the level paid, or nothing to compare."""
    below = probe.previous_level
    rate_here, rate_below = probe.rates.get(current), probe.rates.get(below) if below else None
    if below is None or rate_here is None or rate_below is None or below >= current:
        return None
    if rate_here >= rate_below * (1 + GAIN_MIN):
        return None
    limit, settled = _settle(below, now)
    return limit, replace(settled, rates={k: v for k, v in probe.rates.items() if k <= below})


def _settle(limit: int, now: float) -> tuple[int, CapacityProbe]:
    """Hold at `limit`: the knee (or the server's own sign of overload) was found at `now`."""
    return limit, CapacityProbe(knee_at=now)
