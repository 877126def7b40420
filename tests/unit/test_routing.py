"""The fleet's routing policy alone (`contextual_assets.fleet.routing`): pure functions over
hand-built replica states, with an injected breaker clock and tiebreak, so no server or event loop."""

from __future__ import annotations

import ast
from pathlib import Path

from contextual_assets.fleet import routing
from contextual_assets.fleet.breaker import CircuitBreaker
from contextual_assets.fleet.config import ReplicaConfig
from contextual_assets.fleet.replica import ReplicaState
from contextual_assets.fleet.routing import SLOW_FACTOR, pick_replica, worth_it


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def replica(name: str, *, cap: int = 4, weight: float = 1.0, in_flight: int = 0, outstanding: int = 0,
            spt: float | None = None, clock: Clock | None = None) -> ReplicaState:
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=5.0, clock=clock or Clock())
    return ReplicaState(
        config=ReplicaConfig(base_url=f"http://{name}:8000", max_in_flight=cap, weight=weight),
        model="m", breaker=breaker, in_flight=in_flight, outstanding_tokens=outstanding, seconds_per_token=spt,
    )


def names(*states: ReplicaState | None) -> list[str | None]:
    return [s.url.split("//")[1].split(":")[0] if s else None for s in states]


def pick(replicas, tried=(), cost=100, waiting=0, rand=lambda: 0.5):
    return pick_replica(replicas, set(tried), cost, waiting, rand=rand)


def test_least_outstanding_work_per_weight_wins():
    a, b, c = replica("a", outstanding=300), replica("b", outstanding=100), replica("c", outstanding=200)
    assert names(pick([a, b, c])) == ["b"]
    # b has more tokens outstanding but twice the weight: (501 / 2) < 301.
    a, b = replica("a", outstanding=300), replica("b", outstanding=500, weight=2.0)
    assert names(pick([a, b])) == ["b"]
    a, b = replica("a", outstanding=300), replica("b", outstanding=700, weight=2.0)
    assert names(pick([a, b])) == ["a"]


def test_equal_work_prefers_fewer_in_flight_then_the_injected_tiebreak():
    a, b = replica("a", outstanding=100, in_flight=2), replica("b", outstanding=100, in_flight=1)
    assert names(pick([a, b])) == ["b"]
    a, b = replica("a", outstanding=100, in_flight=1), replica("b", outstanding=100, in_flight=1)
    draws = iter([0.9, 0.1])  # one draw per candidate, in replica order
    assert names(pick([a, b], rand=lambda: next(draws))) == ["b"]
    draws = iter([0.1, 0.9])
    assert names(pick([a, b], rand=lambda: next(draws))) == ["a"]


def test_in_flight_cap_is_respected():
    a, b = replica("a", cap=2, in_flight=2), replica("b", cap=2, in_flight=1, outstanding=5000)
    assert names(pick([a, b])) == ["b"]  # a has less work but no free slot
    b.in_flight = 2
    assert pick([a, b]) is None


def test_open_breaker_is_excluded_and_half_open_gets_one_probe():
    clock = Clock()
    a, b = replica("a", clock=clock), replica("b", outstanding=5000, clock=clock)
    a.breaker.record_failure()  # threshold 1: open
    assert a.breaker.state == "open"
    assert names(pick([a, b])) == ["b"]
    clock.now += 5.0  # cooldown over: half-open, one probe allowed
    assert names(pick([a, b])) == ["a"]
    a.breaker.on_dispatch()  # the probe is out: no second request until its verdict
    assert names(pick([a, b])) == ["b"]


def test_breaker_is_asked_only_for_replicas_under_their_cap():
    asked: list[str] = []

    class Recording(CircuitBreaker):
        def __init__(self, name: str) -> None:
            super().__init__(clock=Clock())
            self.name = name

        def allow(self) -> bool:
            asked.append(self.name)
            return super().allow()

    a, b, c = replica("a", cap=1, in_flight=1), replica("b"), replica("c")
    for state, name in ((a, "a"), (b, "b"), (c, "c")):
        state.breaker = Recording(name)
    assert names(pick([a, b, c])) == ["b"]
    assert asked == ["b", "c"]


def test_request_waits_for_a_busy_untried_healthy_replica_instead_of_repicking():
    a, b = replica("a", cap=2), replica("b", cap=2, in_flight=2)
    assert pick([a, b], tried={a.url}) is None  # b is only busy: wait for it, not a again
    b.in_flight = 1
    assert names(pick([a, b], tried={a.url})) == ["b"]


def test_request_goes_back_to_a_tried_replica_when_no_untried_one_is_healthy():
    clock = Clock()
    a, b = replica("a", clock=clock), replica("b", clock=clock)
    b.breaker.record_failure()  # open: not healthy, so no reason to wait for it
    assert names(pick([a, b], tried={a.url})) == ["a"]
    assert names(pick([a, b], tried={a.url, b.url})) == ["a"]


def test_retry_goes_to_an_untried_replica():
    a = replica("a", outstanding=0)
    b, c = replica("b", outstanding=400), replica("c", outstanding=200)
    assert names(pick([a, b, c])) == ["a"]
    assert names(pick([a, b, c], tried={a.url})) == ["c"]
    assert names(pick([a, b, c], tried={a.url, c.url})) == ["b"]


def slow_fleet() -> tuple[ReplicaState, ReplicaState]:
    """A busy fast replica (2 slots, 1 ms/token) and a free one 10x slower: at cost 100, the fast
    pair answers 20 requests/s, so the slow replica (1 s per answer) pays off from 18 waiting."""
    fast = replica("fast", cap=2, in_flight=2, spt=0.001)
    slow = replica("slow", cap=4, spt=0.010)
    assert slow.seconds_per_token > SLOW_FACTOR * fast.seconds_per_token
    return fast, slow


def test_slow_replica_excluded_while_the_queue_is_short():
    fast, slow = slow_fleet()
    assert pick([fast, slow], waiting=0) is None
    assert pick([fast, slow], waiting=17) is None
    assert not worth_it(slow, [fast, slow], 100, 17)
    fast.in_flight = 1  # a fast slot is free: it wins on work anyway, the slow one is not a candidate
    slow.outstanding_tokens = -1000
    assert names(pick([fast, slow], waiting=0)) == ["fast"]


def test_slow_replica_admitted_while_the_queue_is_long():
    fast, slow = slow_fleet()
    assert worth_it(slow, [fast, slow], 100, 18)
    assert names(pick([fast, slow], waiting=18)) == ["slow"]
    assert names(pick([fast, slow], waiting=500)) == ["slow"]


def test_a_retry_never_waits_for_a_fast_replica_it_has_already_failed_on():
    """The livelock behind a hung run: requests that failed on the fast replica may only go to the
    untried slow one; holding them back for a fast slot they will never take waited forever with the
    whole fleet idle (its speed is never re-measured while it gets nothing)."""
    fast, slow = slow_fleet()
    fast.in_flight = 0
    assert names(pick([fast, slow], tried={fast.url}, waiting=14)) == ["slow"]
    assert names(pick([fast, slow], tried={fast.url}, waiting=0)) == ["slow"]
    # While the request may still use the fast replica, the slow one waits as before.
    fast.in_flight = fast.config.max_in_flight
    assert pick([fast, slow], waiting=0) is None


def test_a_replica_within_the_slow_factor_is_always_admitted():
    fast = replica("fast", cap=2, in_flight=2, spt=0.001)
    near = replica("near", spt=0.001 * SLOW_FACTOR)
    assert worth_it(near, [fast, near], 100, 0)
    assert names(pick([fast, near], waiting=0)) == ["near"]


def test_unknown_speeds_are_always_admitted():
    fast = replica("fast", cap=2, in_flight=2, spt=0.001)
    new = replica("new")  # never answered yet: its speed is learned by using it
    assert worth_it(new, [fast, new], 100, 0)
    assert names(pick([fast, new], waiting=0)) == ["new"]
    a, b = replica("a"), replica("b", outstanding=10)
    assert worth_it(a, [a, b], 100, 0) and worth_it(b, [a, b], 100, 0)


def test_speeds_of_unhealthy_replicas_do_not_count():
    clock = Clock()
    fast = replica("fast", spt=0.001, clock=clock)
    slow = replica("slow", spt=0.010, clock=clock)
    assert not worth_it(slow, [fast, slow], 100, 0)
    fast.breaker.record_failure()  # the fast one is open: the slow one is now the fastest healthy
    assert worth_it(slow, [fast, slow], 100, 0)
    assert names(pick([fast, slow], waiting=0)) == ["slow"]


def test_routing_module_needs_no_event_loop_or_network():
    tree = ast.parse(Path(routing.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"asyncio", "httpx", "openai", "tenacity"}
