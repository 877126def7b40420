"""The pure rules behind `ctx rollback` and guarded inbox deletions: the walk-back stack replayed from an
alias's history, the versions a rollback can reach, and the removal guard's decision."""

from __future__ import annotations

import pytest

from contextual_assets.ingest.inbox.tick_plan import removal_guard
from contextual_assets.settings import PlatformSettings
from contextual_assets.store.aliases import rollback_targets, walk_back_stack


def promote(*versions: str) -> list[tuple[str, str]]:
    return [("promote", v) for v in versions]


def test_promotes_push_and_rollbacks_pop_so_repeated_rollbacks_walk_back():
    history = promote("A", "B", "C")
    assert walk_back_stack(history) == ["A", "B", "C"] and rollback_targets(["A", "B", "C"]) == ["B", "A"]
    history.append(("rollback", "B"))
    assert walk_back_stack(history) == ["A", "B"], "C, rolled back from, is never returned to"
    history.append(("rollback", "A"))
    assert walk_back_stack(history) == ["A"] and rollback_targets(walk_back_stack(history)) == []
    # A promotion after rollbacks pushes onto what is left.
    history += promote("D")
    assert walk_back_stack(history) == ["A", "D"] and rollback_targets(walk_back_stack(history)) == ["A"]


def test_a_rollback_to_a_deeper_version_pops_down_to_it():
    history = promote("A", "B", "C", "D") + [("rollback", "B")]
    assert walk_back_stack(history) == ["A", "B"]
    assert rollback_targets(walk_back_stack(history)) == ["A"]


def test_the_same_version_twice_in_a_row_is_one_step_and_targets_are_distinct_and_not_current():
    assert walk_back_stack(promote("A", "A", "B", "B")) == ["A", "B"]
    # Promoted again after another: A is current, B below it; A deeper down is reached through B.
    stack = walk_back_stack(promote("A", "B", "A"))
    assert stack == ["A", "B", "A"] and rollback_targets(stack) == ["B"]
    assert walk_back_stack(promote("A", "B", "A") + [("rollback", "B")]) == ["A", "B"]
    assert walk_back_stack([]) == [] and rollback_targets([]) == []


def test_history_written_when_a_second_rollback_went_forward_again_still_replays():
    # promote A, promote B, rollback -> A, rollback -> B (the old behaviour): B counts as promoted again.
    stack = walk_back_stack(promote("A", "B") + [("rollback", "A"), ("rollback", "B")])
    assert stack == ["A", "B"] and rollback_targets(stack) == ["A"]


DEFAULTS = (PlatformSettings.default("inbox_max_remove"), PlatformSettings.default("inbox_max_remove_share"))


def test_the_default_guard_values():
    assert DEFAULTS == (20, 0.2)


@pytest.mark.parametrize(("missing", "documents", "held_for"), [
    (0, 0, None),
    (0, 50, None),
    (1, 2, None),  # one document may always go (a small inbox is not stuck on every deletion)
    (1, 10, None),
    (2, 10, None),  # 0.2 of 10
    (3, 10, "CTX_INBOX_MAX_REMOVE_SHARE"),
    (2, 3, "CTX_INBOX_MAX_REMOVE_SHARE"),
    (20, 1000, None),
    (21, 1000, "CTX_INBOX_MAX_REMOVE"),
    (1, 1, "all 1"),  # an empty folder where one document was: an unmounted share looks just like that
    (5, 5, "all 5"),
    (300, 300, "all 300"),
])
def test_the_removal_guard_holds_a_tick_over_the_count_the_share_or_everything(missing, documents, held_for):
    reason = removal_guard(missing, documents, *DEFAULTS)
    if held_for is None:
        assert reason is None
    else:
        assert reason is not None and held_for in reason and "\n" not in reason


def test_the_guard_settings_loosen_and_tighten_it():
    assert removal_guard(1, 100, 0, 0.2) is not None, "CTX_INBOX_MAX_REMOVE=0: every removal is confirmed"
    assert removal_guard(5, 5, 100, 1.0) is None, "CTX_INBOX_MAX_REMOVE_SHARE=1: no share limit, not even all"
    assert removal_guard(50, 100, 100, 0.5) is None and removal_guard(51, 100, 100, 0.5) is not None
