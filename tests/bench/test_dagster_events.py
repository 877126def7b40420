"""bench.dagster_events runs end to end: three partitioned materializations per document, timed per event."""

from __future__ import annotations

import json

from bench import dagster_events


def test_dagster_events_times_each_documents_three_materializations(tmp_path):
    out = tmp_path / "events.json"
    assert dagster_events.main(["--documents", "4", "--runs", "1", "--storages", "sqlite", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["events_per_document"] == 3 and result["documents"] == 4
    (row,) = result["storages"]
    assert row["storage"] == "sqlite" and row["ms_per_event"] > 0
    assert 0 < row["cpu_ms_per_event"] <= row["ms_per_event"] * 1.05, "the step thread's CPU, within its wall"
    assert abs(row["ms_per_document"] - 3 * row["ms_per_event"]) < 0.05


def test_the_step_yields_every_documents_materializations(tmp_path):
    import dagster as dg

    with dg.DagsterInstance.ephemeral(tempdir=str(tmp_path)) as instance:
        dagster_events.seconds_per_event(instance, 3)
        for asset in dagster_events.ASSETS:
            assert instance.get_materialized_partitions(dg.AssetKey(asset)) == {f"doc-{i:05d}.md" for i in range(3)}


def test_run_events_measures_the_cpu_cost_of_an_event():
    from bench.run_events import cpu_ms_per_event

    assert 0 < cpu_ms_per_event("sqlite", documents=5) < 1000


def test_run_events_counts_planned_events_per_run(tmp_path):
    import dagster as dg

    from bench.run_events import event_counts

    with dg.DagsterInstance.ephemeral(tempdir=str(tmp_path)) as instance:
        dagster_events.seconds_per_event(instance, 3)
        (run,) = instance.get_runs()
        counts = event_counts(instance, [run.run_id], documents=3)
    assert counts["planned_events_per_run"] == [9], "one per partition and asset, Dagster's default"
    assert counts["events_total"] >= 9 + 9 and counts["events_per_document"] == round(counts["events_total"] / 3, 2)
