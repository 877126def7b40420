"""Cache-aware routing (`fleet/prefix.py`, `routing.cache_aware_choice`, `routing.next_waiter`) and the
queue that hands freed slots over (`fleet/slots.py`): pure functions over hand-built replica states,
and the slots on an event loop of their own, with no server."""

from __future__ import annotations

import asyncio
import threading

from contextual_assets.fleet import routing
from contextual_assets.fleet.breaker import CircuitBreaker
from contextual_assets.fleet.config import FleetConfig, ReplicaConfig
from contextual_assets.fleet.prefix import BLOCK_CHARS, PrefixMemory, prefix_blocks
from contextual_assets.fleet.replica import ReplicaState
from contextual_assets.fleet.routing import next_waiter, pick_replica
from contextual_assets.fleet.slots import Slots
from contextual_assets.fleet.types import FleetRequest

SECTION_A = "alpha " * 400  # ~2,400 characters of shared section context
SECTION_B = "bravo " * 400


def prompt(section: str, chunk: str) -> list[dict[str, str]]:
    """A header-shaped prompt: the section's text, then the chunk (~300 characters of its own)."""
    return [{"role": "system", "content": "Situate the passage."},
            {"role": "user", "content": f"<document>{section}</document><chunk>{(chunk + ' ') * 40}</chunk>"}]


def replica(name: str, *, cap: int = 64, in_flight: int = 0, outstanding: int = 0) -> ReplicaState:
    """A replica whose found limit is `cap`."""
    return ReplicaState(config=ReplicaConfig(base_url=f"http://{name}:8000", max_in_flight=cap),
                        model="m", breaker=CircuitBreaker(failure_threshold=1, cooldown_s=5.0),
                        in_flight=in_flight, outstanding_tokens=outstanding, limit=cap)


def name(state: ReplicaState | None) -> str | None:
    return state.url.split("//")[1].split(":")[0] if state else None


def pick(replicas, blocks, cost=100):
    return pick_replica(replicas, set(), cost, 0, rand=lambda: 0.5, prefix=blocks)


def test_prefix_blocks_share_leading_hashes_only_behind_the_same_prefix():
    one, two = prefix_blocks(prompt(SECTION_A, "first")), prefix_blocks(prompt(SECTION_A, "second"))
    shared = sum(1 for a, b in zip(one, two) if a == b)
    assert shared >= len(SECTION_A) // BLOCK_CHARS - 1 and one != two
    assert shared == next(i for i, (a, b) in enumerate(zip(one, two)) if a != b)  # a prefix, then nothing
    # The same text behind a different start matches nowhere (each hash covers all before it).
    other = prefix_blocks([{"role": "system", "content": "Other instructions."}, prompt(SECTION_A, "first")[1]])
    assert not set(one) & set(other)
    # Roles count; a prompt shorter than one block has no blocks.
    user_only = prefix_blocks([{"role": "user", "content": m["content"]} for m in prompt(SECTION_A, "first")])
    assert user_only[0] != one[0]
    assert prefix_blocks([{"role": "user", "content": "short"}]) == ()


def test_prefix_memory_matches_leading_blocks_and_forgets_the_least_recent():
    memory = PrefixMemory(capacity=4)
    memory.remember([1, 2, 3])
    assert memory.matched([1, 2, 3, 4]) == 3
    assert memory.matched([1, 9, 3]) == 1  # the first miss ends the match
    assert memory.matched([2, 3]) == 2
    memory.remember([7, 8])  # 5 blocks for 4 places: block 1, the least recently sent, goes
    assert len(memory) == 4 and memory.matched([1, 2]) == 0 and memory.matched([7, 8]) == 2


def test_a_request_goes_where_its_section_was_sent_while_the_fleet_is_balanced():
    blocks = prefix_blocks(prompt(SECTION_A, "next chunk"))
    a, b = replica("a", in_flight=10, outstanding=5000), replica("b", in_flight=2, outstanding=1000)
    a.prefixes.remember(prefix_blocks(prompt(SECTION_A, "earlier chunk")))
    assert name(pick([a, b], blocks)) == "a"  # more load, but it holds the section
    assert name(pick([a, b], ())) == "b"  # no prompt blocks: least outstanding work
    # Another section's request is routed on load.
    assert name(pick([a, b], prefix_blocks(prompt(SECTION_B, "x")))) == "b"


def test_affinity_yields_to_balance_and_to_a_full_replica():
    blocks = prefix_blocks(prompt(SECTION_A, "next chunk"))
    held = prefix_blocks(prompt(SECTION_A, "earlier chunk"))
    # More than BALANCE_ABS requests more than the least loaded, and over BALANCE_REL times it: load wins.
    a = replica("a", in_flight=routing.BALANCE_ABS + 3)
    b = replica("b", in_flight=2)
    a.prefixes.remember(held)
    assert name(pick([a, b], blocks)) == "b"
    # The same gap in absolute terms on a busy fleet is within BALANCE_REL: affinity holds.
    a, b = replica("a", in_flight=60, cap=128), replica("b", in_flight=42, cap=128)
    a.prefixes.remember(held)
    assert name(pick([a, b], blocks)) == "a"
    # A full replica is no candidate, whatever it holds.
    a, b = replica("a", in_flight=64), replica("b", in_flight=0)
    a.prefixes.remember(held)
    assert name(pick([a, b], blocks)) == "b"


def test_a_small_match_or_an_equal_one_leaves_the_choice_to_load():
    # Only the instructions and the first block in common: under CACHE_MATCH_MIN of the prompt.
    long_chunk = "zulu " * 2000
    blocks = prefix_blocks(prompt(SECTION_A, long_chunk))
    a, b = replica("a", in_flight=5, outstanding=3000), replica("b", in_flight=1, outstanding=500)
    a.prefixes.remember(prefix_blocks(prompt(SECTION_A, "other")))
    assert a.prefixes.matched(blocks) < routing.CACHE_MATCH_MIN * len(blocks)
    assert name(pick([a, b], blocks)) == "b"
    # Both hold the section: either hit is as good, so load decides.
    blocks = prefix_blocks(prompt(SECTION_A, "next"))
    for state in (a, b):
        state.prefixes.remember(prefix_blocks(prompt(SECTION_A, "earlier")))
    assert name(pick([a, b], blocks)) == "b"


def waiters(*sections: str | None, passed: int = 0) -> list[tuple[tuple[int, ...], int]]:
    return [(prefix_blocks(prompt(s, f"chunk {i}")) if s else (), passed) for i, s in enumerate(sections)]


def test_a_freed_slot_goes_to_a_waiter_its_replica_holds_then_to_a_new_section_then_the_oldest():
    a, b = replica("a"), replica("b")
    a.prefixes.remember(prefix_blocks(prompt(SECTION_A, "sent")))
    b.prefixes.remember(prefix_blocks(prompt(SECTION_B, "sent")))
    queue = waiters(SECTION_A, SECTION_A, SECTION_B, "charlie " * 400)
    assert next_waiter(queue, b, [a, b]) == 2  # b holds section B
    assert next_waiter(queue, a, [a, b]) == 0  # a holds A: the oldest of those
    c = replica("c")
    assert next_waiter(queue, c, [a, b, c]) == 3  # c holds nothing: the waiter no replica holds
    assert next_waiter(waiters(SECTION_A, SECTION_A), c, [a, b, c]) == 0  # only A's waiters: the oldest
    assert next_waiter([], a, [a, b]) is None
    assert next_waiter(waiters(None, None), a, [a, b]) == 0  # no blocks (short prompts): first come


def test_no_waiter_is_passed_over_forever_and_the_lookahead_is_bounded():
    a, b = replica("a"), replica("b")
    b.prefixes.remember(prefix_blocks(prompt(SECTION_B, "sent")))
    starved = waiters(SECTION_A, passed=routing.WAITER_MAX_PASSED) + waiters(SECTION_B)
    assert next_waiter(starved, b, [a, b]) == 0
    far = waiters(*[SECTION_A] * routing.WAITER_LOOKAHEAD, SECTION_B)
    a.prefixes.remember(prefix_blocks(prompt(SECTION_A, "sent")))
    assert next_waiter(far, b, [a, b]) == 0  # B's waiter is beyond the lookahead


def run_on_own_loop(coroutine_factory):
    """Run a coroutine on a fresh event loop in a thread of its own (another test's loop may be
    running in this thread)."""
    out: dict = {}

    def main() -> None:
        try:
            out["value"] = asyncio.run(coroutine_factory())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = exc

    thread = threading.Thread(target=main)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the slots' coroutine did not finish"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_the_queue_hands_a_freed_slot_to_the_request_its_replica_holds():
    """Two replicas of one slot each, both taken by requests of sections A and B; a request of A
    queues first, then one of B. The slot freed on B's replica goes to B's request, although A's
    waits longer; A's request then takes the slot freed on A's replica."""

    def request(section: str, chunk: str) -> FleetRequest:
        return FleetRequest(messages=prompt(section, chunk), est_prompt_tokens=100, max_tokens=10, label=chunk)

    async def scenario() -> list[str]:
        a, b = replica("a", cap=1), replica("b", cap=1)
        slots = Slots(FleetConfig(replicas=[a.config, b.config], metrics_interval_s=0), [a, b])
        slots.metrics_fresh.set()
        first_a = await slots.acquire(request(SECTION_A, "a1"), set())
        first_b = await slots.acquire(request(SECTION_B, "b1"), set())
        assert {name(first_a), name(first_b)} == {"a", "b"}
        order: list[str] = []

        async def wait_for(req: FleetRequest) -> None:
            state = await slots.acquire(req, set())
            order.append(f"{req.label}->{'home' if state is (first_a if req.label == 'a2' else first_b) else 'other'}")

        waiting_a = asyncio.ensure_future(wait_for(request(SECTION_A, "a2")))
        while slots.waiting < 1:
            await asyncio.sleep(0)
        waiting_b = asyncio.ensure_future(wait_for(request(SECTION_B, "b2")))
        while slots.waiting < 2:
            await asyncio.sleep(0)
        await slots.release(first_b, 110)
        await waiting_b
        await slots.release(first_a, 110)
        await waiting_a
        return order

    assert run_on_own_loop(scenario) == ["b2->home", "a2->home"]


def test_a_single_replica_fleet_hashes_no_prompts():
    """With one replica there is nothing to choose: no prompt is hashed or remembered on the request path."""

    async def scenario() -> ReplicaState:
        only = replica("only", cap=4)
        slots = Slots(FleetConfig(replicas=[only.config], metrics_interval_s=0), [only])
        slots.metrics_fresh.set()
        request = FleetRequest(messages=prompt(SECTION_A, "c"), est_prompt_tokens=100, max_tokens=10, label="c")
        state = await slots.acquire(request, set())
        assert "prefix" not in vars(request)  # the cached property was never computed
        return state

    state = run_on_own_loop(scenario)
    assert name(state) == "only" and len(state.prefixes) == 0


def test_a_new_request_waits_for_its_sections_full_replica_while_others_queue_for_the_free_slots():
    held = prefix_blocks(prompt(SECTION_A, "earlier chunk"))
    blocks = prefix_blocks(prompt(SECTION_A, "next chunk"))
    a, b = replica("a", cap=8, in_flight=8), replica("b", cap=8, in_flight=6)  # a, which holds A, is full
    a.prefixes.remember(held)

    def choose(waiting: int, wait_for_home: bool) -> str | None:
        return name(pick_replica([a, b], set(), 100, waiting, rand=lambda: 0.5, prefix=blocks,
                                 wait_for_home=wait_for_home))

    assert choose(waiting=3, wait_for_home=True) is None  # queued requests take b's slots; this one waits for a
    assert choose(waiting=0, wait_for_home=True) == "b"  # nobody else would use b's room: no slot goes unused
    assert choose(waiting=3, wait_for_home=False) == "b"  # a queued request takes the slot it was woken for
    # A home far more loaded than the rest, or one that is failing, is not waited for.
    a.in_flight, b.in_flight, b.limit, a.limit = 40, 2, 64, 40
    assert choose(waiting=3, wait_for_home=True) == "b"
    a.in_flight, b.in_flight, a.limit, b.limit = 8, 6, 8, 8
    a.breaker.record_failure()
    assert choose(waiting=3, wait_for_home=True) == "b"


def test_room_opened_by_a_metrics_read_goes_to_the_waiters_each_replica_holds_not_in_queue_order():
    """Four waiters, two per section, oldest first A, A, B, B; the limits rise by one slot on each
    replica (a holds A, b holds B): the waiters woken are one of A's for a and one of B's for b, never
    the two oldest (both A's), which would send one A prompt to b, where its prefix is not cached."""
    from contextual_assets.fleet.slots import Waiter

    async def scenario() -> list[int]:
        a, b = replica("a", cap=1, in_flight=1), replica("b", cap=1, in_flight=1)
        a.prefixes.remember(prefix_blocks(prompt(SECTION_A, "sent")))
        b.prefixes.remember(prefix_blocks(prompt(SECTION_B, "sent")))
        slots = Slots(FleetConfig(replicas=[a.config, b.config], metrics_interval_s=0), [a, b])
        queue = [Waiter(prefix_blocks(prompt(s, f"chunk {i}"))) for i, s in enumerate((SECTION_A, SECTION_A,
                                                                                          SECTION_B, SECTION_B))]
        slots.queue.extend(queue)
        a.limit = b.limit = 2  # a read raised both limits by one
        slots.offer_room()
        return [i for i, w in enumerate(queue) if w.woken.is_set()]

    assert run_on_own_loop(scenario) == [0, 2]
