"""Document partitions grouped into contiguous ranges: one run per range pipelines its documents."""

from __future__ import annotations


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
