"""Diagnostic graders on hand-made inputs with exact expected numbers."""

from __future__ import annotations

import math

import pytest

from eval_assets import (
    diagnostics as graders,  # the module whose NEAR_DUPLICATE_CAP a test patches
)
from eval_assets.diagnostics import header_diagnostics
from eval_assets.ranking_metrics import (
    ndcg_at_k,
    rank_shift,
    score_spread,
    within_section_confusion,
    worst_regressions,
)

BEFORE = {"a": 1, "b": None, "c": 3, "d": 2, "e": 30, "f": 5}
AFTER = {"a": 4, "b": 2, "c": None, "e": None, "f": 5, "x": 1}


def test_rank_shift_counts_missing_as_depth_plus_one():
    assert rank_shift(BEFORE, AFTER, depth=20) == {
        "a": 3,  # 1 -> 4
        "b": -19,  # missing (21) -> 2
        "c": 18,  # 3 -> missing (21)
        "e": 0,  # 30 is deeper than the depth: missing on both sides
        "f": 0,
    }
    assert rank_shift(BEFORE, AFTER, depth=5)["c"] == 3
    assert rank_shift({}, AFTER) == {}


def test_worst_regressions_lists_only_worse_tasks_worst_first():
    rows = worst_regressions(BEFORE, AFTER, {"a": "query a", "c": "query c"}, n=5, depth=20)
    assert rows == [
        {"task_id": "c", "query": "query c", "rank_before": 3, "rank_after": None, "shift": 18},
        {"task_id": "a", "query": "query a", "rank_before": 1, "rank_after": 4, "shift": 3},
    ]
    assert [r["task_id"] for r in worst_regressions(BEFORE, AFTER, {}, n=1)] == ["c"]
    # Ties are broken by task id; unknown queries come back empty.
    tied = worst_regressions({"z": 1, "y": 1}, {"z": 2, "y": 2}, {}, n=5)
    assert [(r["task_id"], r["query"], r["shift"]) for r in tied] == [("y", "", 1), ("z", "", 1)]
    assert worst_regressions(AFTER, AFTER, {}) == []


def test_within_section_confusion():
    a, b = ("Terms",), ("Terms", "Payment")
    tasks = [
        [("d1", a, False), ("d1", a, True)],  # sibling above gold: confused
        [("d1", a, False), ("d1", b, True)],  # other section above: not
        [("d2", a, False), ("d1", a, True)],  # same path, other document: not
        [("d1", a, False)],  # no gold at all: left out
        [("d1", a, True), ("d1", a, False)],  # gold first: not
        [("d1", b, False), ("d1", a, False), ("d1", a, True), ("d1", a, True)],  # confused
        [("d1", b, True), ("d1", a, False), ("d1", a, True)],  # only the first gold counts: not
    ]
    assert within_section_confusion(tasks) == pytest.approx(2 / 6)
    # Section paths given as lists compare equal to tuples.
    assert within_section_confusion([[("d1", ["S"], False), ("d1", ("S",), True)]]) == 1.0
    assert within_section_confusion([]) == 0.0
    assert within_section_confusion([[("d1", a, False)]]) == 0.0


def test_score_spread():
    tasks = [
        [(0.9, True), (0.7, False), (0.8, False)],  # +0.1
        [(0.4, True), (0.6, False), (0.3, True)],  # -0.2
        [(1.0, True)],  # no non-gold: left out
        [(0.2, False)],  # no gold: left out
    ]
    assert score_spread(tasks) == pytest.approx(-0.05)
    assert score_spread([[(0.5, True)], []]) is None
    assert score_spread([]) is None


# --------------------------------------------------------------------------------------------
# header_diagnostics
# --------------------------------------------------------------------------------------------


def test_header_diagnostics_basic_counts_and_templates():
    headers = [
        "This chunk is from the Acme contract, section 1.",
        "This chunk is from the Acme contract, section 2.",
        "This chunk is from the Acme contract, section 3.",
        "",
        "Explains overtime pay rules for weekend shifts.",
    ]
    texts = [
        "Payment falls due within thirty days.",
        "Deliveries arrive on Mondays.",
        "Either party may terminate.",
        "Orphan text.",
        "Weekend shifts are paid at double rate under the overtime rules.",
    ]
    result = header_diagnostics(headers, texts)
    assert result["n"] == 5
    assert result["mean_header_words"] == pytest.approx((9 * 3 + 0 + 7) / 5)
    assert result["empty_rate"] == pytest.approx(1 / 5)
    assert result["templated_rate"] == pytest.approx(3 / 5)
    assert result["header_dominance"] is None
    # The three "Acme" headers share the template "this chunk is from the acme contract, section 0."
    # but are not near-duplicates of each other (6 of 8 shingles shared, Jaccard 0.75).
    # Token Jaccard, empty header left out: no shared words in the first three pairs,
    # overtime/rules/weekend/shifts in the last (4 of 14 distinct words).
    jaccards = [0.0, 0.0, 0.0, 4 / 14]
    assert result["header_chunk_similarity"] == pytest.approx(sum(jaccards) / 4)


def test_templates_ignore_words_taken_from_the_chunk_and_digits():
    headers = [
        "Summary of clause on payment terms",
        "Summary of clause on warranty period",
        "Summary of clause on liability cap",
    ]
    texts = [
        "The payment terms are 30 days.",
        "The warranty period is 24 months.",
        "Total liability is subject to a cap.",
    ]
    # Shingle Jaccard between any two is 2/6, so only the shared template "summary of clause on" counts.
    assert header_diagnostics(headers, texts)["templated_rate"] == 1.0
    # Two headers sharing a template are not enough.
    assert header_diagnostics(headers[:2], texts[:2])["templated_rate"] == 0.0
    # Digits are folded: "Part 7", "Part 12", "Part 3" share the template "part 0".
    numbered = header_diagnostics(["Part 7", "Part 12", "Part 3"], ["a", "b", "c"])
    assert numbered["templated_rate"] == 1.0
    # A header made only of its chunk's words has an empty template, which is never "shared".
    own_words = header_diagnostics(["alpha", "beta", "gamma"], ["alpha x", "beta y", "gamma z"])
    assert own_words["templated_rate"] == 0.0


def test_near_duplicate_headers_are_templated():
    headers = [
        "The supplier must replace failed sensors within five business days of notice",
        "The supplier must replace failed sensors within five business days of notification",
        "Annual leave carries over until the end of March",
    ]
    texts = ["x", "y", "z"]
    # 10 shingles each, 9 shared: Jaccard 9/11 >= 0.8.
    assert header_diagnostics(headers, texts)["templated_rate"] == pytest.approx(2 / 3)
    # 12 vs 12 words with two changes in the middle: shingle Jaccard 6/14, not a near-duplicate.
    far = [
        "The supplier must replace failed sensors within five business days of notice",
        "The supplier must repair broken sensors within five business days of notice",
        "Annual leave carries over until the end of March",
    ]
    assert header_diagnostics(far, texts)["templated_rate"] == 0.0


def test_near_duplicate_cap_samples_deterministically(monkeypatch):
    monkeypatch.setattr(graders, "NEAR_DUPLICATE_CAP", 3)
    headers = [f"distinct header number {w} about topic {w}" for w in "abcdefgh"] + ["same words here"] * 2
    texts = ["-"] * len(headers)
    first = header_diagnostics(headers, texts)
    assert first == header_diagnostics(headers, texts)
    # Exact duplicates are caught even beyond the cap.
    assert first["templated_rate"] == pytest.approx(2 / 10)


def _bag_of_words(vocabulary: list[str]):
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return [[float(t.split().count(word)) for word in vocabulary] for t in texts]

    return embed, calls


def test_header_diagnostics_with_embeddings():
    embed, calls = _bag_of_words(["alpha", "beta", "gamma"])
    headers = ["alpha beta", "", "alpha alpha alpha"]
    texts = ["beta gamma", "gamma", "gamma"]
    result = header_diagnostics(headers, texts, embed=embed)
    # cos([1,1,0],[0,1,1]) = 1/2 and cos([3,0,0],[0,0,1]) = 0.
    assert result["header_chunk_similarity"] == pytest.approx(0.25)
    # Joint [1,2,1] is equally close to both (not dominant); joint [3,0,1] is closer to the header.
    assert result["header_dominance"] == pytest.approx(0.5)
    assert len(calls) == 3 and all(len(batch) == 2 for batch in calls), "empty headers are not embedded"
    assert calls[2] == ["alpha beta\n\nbeta gamma", "alpha alpha alpha\n\ngamma"]


def test_header_diagnostics_edge_cases():
    assert header_diagnostics([], []) == {
        "n": 0, "mean_header_words": 0.0, "empty_rate": 0.0, "templated_rate": 0.0,
        "header_chunk_similarity": None, "header_dominance": None,
    }
    only_empty = header_diagnostics(["", "  "], ["a", "b"], embed=lambda texts: [[1.0]] * len(texts))
    assert only_empty["empty_rate"] == 1.0 and only_empty["header_chunk_similarity"] is None
    assert only_empty["header_dominance"] is None
    # A zero vector has cosine 0 instead of NaN.
    zero = header_diagnostics(["h"], ["t"], embed=lambda texts: [[0.0, 0.0]] * len(texts))
    assert zero["header_chunk_similarity"] == 0.0 and zero["header_dominance"] == 0.0
    with pytest.raises(ValueError):
        header_diagnostics(["a"], [])


# --------------------------------------------------------------------------------------------
# ndcg_at_k agrees with scikit-learn
# --------------------------------------------------------------------------------------------


def _sklearn_ndcg(ranking: list[list[int]], n_gold: int, k: int) -> float:
    """The same ranking as scikit-learn inputs: one candidate per retrieved position (relevant when
    it satisfies a gold item), padded with irrelevant candidates to at least k, then one candidate
    per unfound gold item scored below everything retrieved."""
    from sklearn.metrics import ndcg_score

    relevance = [1.0 if hits else 0.0 for hits in ranking]
    relevance += [0.0] * max(0, k - len(relevance))
    found = {g for hits in ranking for g in hits}
    relevance += [1.0] * (n_gold - len(found))
    scores = [float(len(relevance) - i) for i in range(len(relevance))]  # strictly decreasing, no ties
    return float(ndcg_score([relevance], [scores], k=k))


@pytest.mark.parametrize(
    ("ranking", "n_gold", "k"),
    [
        ([[0]], 1, 10),
        ([[], [0]], 1, 10),
        ([[0], [], [1]], 2, 10),
        ([[], [], [1], [], [0], []], 2, 5),
        ([[], [], [0]], 1, 2),  # gold below the top k
        ([[], [], [], [], [], [0], [1]], 2, 5),  # all gold below the top k
        ([[2], [], [0]], 4, 10),  # more gold items than found
        ([[], [1], [], [], [], [], [], [], [], [], [0]], 3, 10),  # one below k, one never found
        ([[], []], 2, 3),  # nothing found
        ([[0], [1], [2]], 3, 2),  # n_gold above k: the ideal is capped at k
    ],
)
def test_ndcg_matches_sklearn(ranking, n_gold, k):
    assert ndcg_at_k(ranking, n_gold, k) == pytest.approx(_sklearn_ndcg(ranking, n_gold, k), abs=1e-12)


def test_ndcg_matches_sklearn_on_seeded_random_rankings():
    import random

    rng = random.Random(7)
    for _ in range(200):
        n_gold = rng.randint(1, 5)
        depth = rng.randint(1, 15)
        k = rng.randint(1, 12)
        n_found = rng.randint(0, min(n_gold, depth))
        positions = rng.sample(range(depth), n_found)
        ranking: list[list[int]] = [[] for _ in range(depth)]
        for gold, position in enumerate(positions):
            ranking[position] = [gold]
        expected = _sklearn_ndcg(ranking, n_gold, k)
        assert ndcg_at_k(ranking, n_gold, k) == pytest.approx(expected, abs=1e-12), (ranking, n_gold, k)
    assert math.isclose(ndcg_at_k([[0]], 1, 1), 1.0)
