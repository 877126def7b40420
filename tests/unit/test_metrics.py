"""Graders on hand-made rankings (each ranking position lists the gold items it satisfies)."""

from __future__ import annotations

import math

import pytest

from eval_assets.gold.gold_set import Evidence, GoldTask, load_gold
from eval_assets.ranking_metrics import (
    first_gold_rank,
    ndcg_at_k,
    pass_at_k,
    reciprocal_rank,
)
from tests.support import shared_dataset


def test_pass_at_k_counts_share_of_gold_found():
    ranking = [[], [0], [], [1], []]
    assert pass_at_k(ranking, 2, 1) == 0.0
    assert pass_at_k(ranking, 2, 2) == 0.5
    assert pass_at_k(ranking, 2, 4) == 1.0
    assert pass_at_k([[0], [0]], 2, 5) == 0.5, "the same gold item found twice counts once"


def test_reciprocal_rank_and_first_rank():
    assert reciprocal_rank([[], [], [0]]) == pytest.approx(1 / 3)
    assert reciprocal_rank([[], []]) == 0.0
    assert first_gold_rank([[], [1]]) == 2 and first_gold_rank([[]]) is None


def test_ndcg_binary():
    assert ndcg_at_k([[0]], 1, 10) == 1.0
    assert ndcg_at_k([[], [0]], 1, 10) == pytest.approx(1 / math.log2(3))
    # Two gold items at ranks 1 and 3 against an ideal of ranks 1 and 2.
    expected = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k([[0], [], [1]], 2, 10) == pytest.approx(expected)
    assert ndcg_at_k([[], [], [0]], 1, 2) == 0.0


def test_grading_uses_raw_content_not_headers():
    task = GoldTask(id="t", query="q", evidence=[Evidence(text="The  penalty is\n5%.", whole_chunk=False)])
    assert task.satisfied_by("Clause 4. The penalty is 5%. Nothing else.") == [0]
    assert task.satisfied_by("The penalty is 6%.") == []
    whole = GoldTask(id="w", query="q", evidence=[Evidence(text="fn a() {}", whole_chunk=True)])
    assert whole.satisfied_by("fn a() {}") == [0]
    # A re-chunked, larger chunk that contains the gold content still satisfies it; a fragment does not.
    assert whole.satisfied_by("fn z() {}\nfn a() {}") == [0] and whole.satisfied_by("fn a()") == []


def test_anthropic_gold_loader():
    gold = load_gold(shared_dataset("anthropic-codebase", "evaluation_set.dev.jsonl"))
    assert len(gold.tasks) == 124
    assert all(t.evidence and all(e.whole_chunk for e in t.evidence) for t in gold.tasks)
    assert len(gold.sha256) == 64
