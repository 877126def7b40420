"""What Dagster wrote for a benchmark's ingest runs, counted from the instance afterwards, and the
figures read off the orchestration path (`bench.ingest` platform and stream modes).

* `events_per_document`: every event the runs stored (run, step, planned, materialization, observation,
  log), over the documents they ingested;
* `planned_events_per_run`: `ASSET_MATERIALIZATION_PLANNED` events per run (by default Dagster writes one
  per partition and asset before the run is launched, so it grows with the run's partitions);
* `cpu_ms_per_event`: the step thread's CPU time per stored materialization on the instance's storage,
  measured by the benchmark itself (`bench.dagster_events`; process time, not wall).
"""

from __future__ import annotations

from collections.abc import Sequence


def event_counts(instance, run_ids: Sequence[str], documents: int) -> dict:
    """Events of `run_ids` in the instance's event log, per document and planned per run."""
    import dagster as dg

    planned_type = dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED
    total, planned = 0, []
    for run_id in run_ids:
        records = instance.all_logs(run_id)
        total += len(records)
        planned.append(sum(1 for r in records if r.dagster_event is not None
                           and r.dagster_event.event_type == planned_type))
    return {"events_total": total,
            "events_per_document": round(total / documents, 2) if documents else None,
            "planned_events_per_run": planned,
            "planned_events_per_run_max": max(planned, default=0)}


def cpu_ms_per_event(storage: str, documents: int = 50) -> float:
    """The CPU milliseconds one materialization costs the thread that writes it, on a fresh instance of
    `storage` in this process, now (`bench.dagster_events.measure`: 3 per document)."""
    from bench.dagster_events import measure

    _, cpu_s = measure(storage, documents)
    return round(cpu_s * 1000, 2)


def first_request_after(first_request_t: float | None, submitted: float) -> float | None:
    """Seconds from a submission (wall clock) to the fleet's first admitted request (`first_request_t`,
    already on the wall clock)."""
    return round(first_request_t - submitted, 2) if first_request_t is not None else None
