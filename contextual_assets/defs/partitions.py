"""The `documents` partitions and how several of them share one run.

One partition per document; a run holds a contiguous range of partitions (in the partitions' own
order), so its documents are pipelined together against the header fleet.
"""

from __future__ import annotations

import dagster as dg

# The run tags that make a run cover a partition range, as backfills set them (Dagster documents them
# as strings, not as a public constant; tests/unit/test_partition_tags.py checks them against the
# installed Dagster so an upgrade that renames them fails there).
ASSET_PARTITION_RANGE_START_TAG = "dagster/asset_partition_range_start"
ASSET_PARTITION_RANGE_END_TAG = "dagster/asset_partition_range_end"

documents_partitions = dg.DynamicPartitionsDefinition(name="documents")


def partition_ranges(ordered: list[str], keys: list[str], per_run: int) -> list[list[str]]:
    """`keys` as runs of consecutive partitions in `ordered`, each at most `per_run` long."""
    position = {key: i for i, key in enumerate(ordered)}
    missing = [k for k in keys if k not in position]
    if missing:
        raise ValueError(f"not registered as partitions: {missing[:5]}")
    groups: list[list[str]] = []
    for key in sorted(set(keys), key=position.__getitem__):
        last = groups[-1] if groups else None
        if last and position[key] == position[last[-1]] + 1 and len(last) < per_run:
            last.append(key)
        else:
            groups.append([key])
    return groups


def range_run_tags(keys: list[str]) -> dict[str, str]:
    """Run tags that make one run cover the partition range `keys[0]..keys[-1]`."""
    return {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}
