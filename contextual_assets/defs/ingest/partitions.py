"""The `documents` partitions and how several of them share one run.

One partition per document; a run holds a contiguous range of partitions (in the partitions' own
order), so its documents are pipelined together against the header fleet.
"""

from __future__ import annotations

import dagster as dg

from contextual_assets.ingest.partition_ranges import partition_ranges
from contextual_assets.names import DOCUMENTS_PARTITIONS

# The run tags that make a run cover a partition range, as backfills set them (Dagster documents them
# as strings, not as a public constant; tests/unit/test_partition_tags.py checks them against the
# installed Dagster so an upgrade that renames them fails there).
ASSET_PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
ASSET_PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"

documents_partitions = dg.DynamicPartitionsDefinition(name=DOCUMENTS_PARTITIONS)

__all__ = ["documents_partitions", "partition_ranges", "range_run_tags"]


def range_run_tags(keys: list[str]) -> dict[str, str]:
    """Run tags that make one run cover the partition range `keys[0]..keys[-1]`."""
    return {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}
