"""The `documents` partitions and how several of them share one run.

One partition per document; a run holds a contiguous range of partitions (in the partitions' own
order), so its documents are pipelined together against the header fleet.
"""

from __future__ import annotations

import dagster as dg

from contextual_assets.ingest.inbox.partition_ranges import partition_ranges
from contextual_assets.names import (  # noqa: F401 - the range tags are read from here too
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    DOCUMENTS_PARTITIONS,
)

documents_partitions = dg.DynamicPartitionsDefinition(name=DOCUMENTS_PARTITIONS)

__all__ = ["documents_partitions", "partition_ranges", "range_run_tags"]


def range_run_tags(keys: list[str]) -> dict[str, str]:
    """Run tags that make one run cover the partition range `keys[0]..keys[-1]`."""
    return {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}
