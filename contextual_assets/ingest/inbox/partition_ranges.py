"""Partition ranges: which documents share a run. A run holds a contiguous range of partitions (in the
partitions' own order), so its documents are pipelined together against the header fleet."""

from __future__ import annotations

from collections.abc import Callable


# The first run of a batch holds at most 1/8 of a full run: Dagster writes one planned event per partition
# and asset before a run is launched (~7 ms each on SQLite, 4 s for 200 documents), so a small first run
# reaches the fleet seconds sooner, and the full runs behind it are created while it works.
FIRST_RUN_SHARE = 8


def first_run_size(per_run: int) -> int:
    return max(1, per_run // FIRST_RUN_SHARE)


def partition_ranges(ordered: list[str], keys: list[str], per_run: int,
                     cost: Callable[[str], float] | None = None, first_run: int | None = None) -> list[list[str]]:
    """`keys` as runs of consecutive partitions in `ordered`, each at most `per_run` long (the first at
    most `first_run`, when given).

    With `cost` (a document's estimated work, e.g. its file size), a run also ends where the next
    document would take it past an even share of its stretch's cost (the cost over the runs a count
    alone would make): runs that overlap end closer together, and a heavy document is not the long
    pole of a run full of others."""
    position = {key: i for i, key in enumerate(ordered)}
    missing = [k for k in keys if k not in position]
    if missing:
        raise ValueError(f"not registered as partitions: {missing[:5]}")
    stretches: list[list[str]] = []
    for key in sorted(set(keys), key=position.__getitem__):
        last = stretches[-1] if stretches else None
        if last and position[key] == position[last[-1]] + 1:
            last.append(key)
        else:
            stretches.append([key])
    runs = [run for stretch in stretches for run in _cut(stretch, per_run, cost)]
    if first_run is not None and runs and len(runs[0]) > first_run:
        runs[:1] = [runs[0][:first_run], runs[0][first_run:]]
    return runs


def _cut(stretch: list[str], per_run: int, cost: Callable[[str], float] | None) -> list[list[str]]:
    runs = -(-len(stretch) // per_run)
    if cost is None or runs == 1:
        return [stretch[i: i + per_run] for i in range(0, len(stretch), per_run)]
    weights = [max(0.0, float(cost(k))) for k in stretch]
    share = (sum(weights) or 1.0) / runs
    groups: list[list[str]] = [[]]
    filled = 0.0  # cost of the current run
    for key, weight in zip(stretch, weights):
        # A new run when this document would take the current one past its share (or it is full).
        if groups[-1] and (len(groups[-1]) == per_run or filled + weight > share * (1 + 1e-9)):
            groups.append([])
            filled = 0.0
        groups[-1].append(key)
        filled += weight
    return groups
