"""The partition-range run tags spelled as strings in defs/partitions.py are Dagster's own (an upgrade
that renames them must fail here, not silently run every partition of a range as one)."""

from __future__ import annotations

from contextual_assets.defs.partitions import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    range_run_tags,
)


def test_range_tags_match_the_installed_dagster():
    # Private, on purpose: the comparison is the point.
    from dagster._core.storage import tags

    assert ASSET_PARTITION_RANGE_START_TAG == tags.ASSET_PARTITION_RANGE_START_TAG
    assert ASSET_PARTITION_RANGE_END_TAG == tags.ASSET_PARTITION_RANGE_END_TAG


def test_range_run_tags_cover_first_to_last():
    assert range_run_tags(["a", "b", "c"]) == {ASSET_PARTITION_RANGE_START_TAG: "a", ASSET_PARTITION_RANGE_END_TAG: "c"}
