"""The partition-range run tags spelled as strings in defs/partitions.py are Dagster's own (an upgrade
that renames them must fail here, not silently run every partition of a range as one)."""

from __future__ import annotations

from contextual_assets.defs.ingest.partitions import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    range_run_tags,
)
from contextual_assets.names import PARTITION_TAG


def test_range_tags_match_the_installed_dagster():
    # Private, on purpose: the comparison is the point.
    from dagster._core.storage import tags

    assert ASSET_PARTITION_RANGE_START_TAG == tags.ASSET_PARTITION_RANGE_START_TAG
    assert ASSET_PARTITION_RANGE_END_TAG == tags.ASSET_PARTITION_RANGE_END_TAG
    assert PARTITION_TAG == tags.PARTITION_NAME_TAG


def test_range_run_tags_cover_first_to_last():
    assert range_run_tags(["a", "b", "c"]) == {ASSET_PARTITION_RANGE_START_TAG: "a", ASSET_PARTITION_RANGE_END_TAG: "c"}


def test_ranges_are_contiguous_and_at_most_per_run_long():
    from contextual_assets.defs.ingest.partitions import partition_ranges

    order = [f"k{i:02d}" for i in range(10)]
    assert partition_ranges(order, ["k00", "k01", "k02", "k05", "k06"], 2) == [["k00", "k01"], ["k02"], ["k05", "k06"]]


def test_ranges_by_cost_cut_where_the_cost_evens_out():
    from contextual_assets.defs.ingest.partitions import partition_ranges

    order = [f"k{i}" for i in range(8)]
    size = dict(zip(order, [1, 1, 1, 1, 1, 1, 1, 13]))  # the last document is as heavy as the rest twice over
    # By count: two runs of four, the second one four times heavier (16 vs 4).
    assert partition_ranges(order, order, 4) == [order[:4], order[4:]]
    # By cost: the heavy one apart (the longest run costs 13, not 16).
    assert partition_ranges(order, order, 4, cost=size.__getitem__) == [order[:4], order[4:7], order[7:]]
    first = dict(zip(order, [13, 1, 1, 1, 1, 1, 1, 1]))
    assert partition_ranges(order, order, 4, cost=first.__getitem__) == [order[:1], order[1:5], order[5:]]
    even = dict.fromkeys(order, 1)
    assert partition_ranges(order, order, 4, cost=even.__getitem__) == [order[:4], order[4:]]
    assert all(len(r) <= 3 for r in partition_ranges(order, order, 3, cost=size.__getitem__))


def test_the_first_run_is_small_and_the_rest_keep_their_cut():
    from contextual_assets.ingest.inbox.partition_ranges import first_run_size, partition_ranges

    order = [f"k{i:02d}" for i in range(20)]
    assert partition_ranges(order, order, 16, first_run=2) == [order[:2], order[2:16], order[16:]]
    assert partition_ranges(order, order[:2], 16, first_run=2) == [order[:2]], "already small: not cut"
    assert partition_ranges(order, order, 16) == [order[:16], order[16:]]
    assert first_run_size(200) == 25 and first_run_size(3) == 1
