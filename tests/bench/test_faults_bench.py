"""A fast subset of the fault-injection bench (bench/faults.py) on tiny corpora: real `ctx ingest`
runs against the fleet simulator with a replica killed, 5xx answers, malformed answers, and the same
document submitted twice at once. Each scenario must hold every check: nothing lost, no duplicates,
no partial document, no bad header stored."""

from __future__ import annotations

import pytest

from bench import faults


@pytest.mark.parametrize("name, kwargs", [
    ("replica_killed", {"n_docs": 4}),
    ("errors_5xx", {"n_docs": 3}),
    ("malformed", {"n_docs": 1, "modes": ("echo", "bad_json")}),
    ("same_document_twice", {}),
    # Issue 39's (bench/fault_crashes.py): nothing stuck, nothing wrong.
    ("killed_in_commit_duckdb", {"n_docs": 4}),
    ("killed_runs_then_sensor", {"n_inbox": 2}),
    ("emptied_inbox", {"n_docs": 4}),
    ("shared_header_cache", {}),
])
def test_fault_scenario(name, kwargs, tmp_path):
    result = faults.run_scenario(name, tmp_path, **kwargs)
    assert result.passed, result.detail
    assert result.chunks_lost == 0, result.detail
    assert result.duplicates == 0, result.detail
    assert result.chunks_committed == result.chunks_expected, result.detail


class CountingFleet:
    """Stands in for faults.Fleet: each look at the completed count finds one more answer."""

    def __init__(self) -> None:
        self.answers = 0

    def completed(self) -> int:
        self.answers += 1
        return self.answers


def test_completion_trigger_applies_once_at_its_threshold():
    applied = []
    trigger = faults.CompletionTrigger(CountingFleet(), threshold=5, apply=lambda: applied.append(1),
                                       poll_s=0.001).start()
    trigger._thread.join(5)
    trigger.stop()
    assert applied == [1] and trigger.completed_when_fired == 5 and trigger.fired_after_s is not None

    never = faults.CompletionTrigger(CountingFleet(), threshold=10**9, apply=lambda: applied.append(2),
                                     poll_s=0.001).start()
    never.stop()
    assert applied == [1] and never.fired_after_s is None


def test_tail_scenarios_are_registered():
    assert {"stalled_replica", "slow_tail"} <= set(faults.SCENARIOS)
    assert all(name in faults.__doc__ for name in faults.SCENARIOS)
