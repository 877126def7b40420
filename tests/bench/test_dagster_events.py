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
    assert abs(row["ms_per_document"] - 3 * row["ms_per_event"]) < 0.05


def test_the_step_yields_every_documents_materializations(tmp_path):
    import dagster as dg

    with dg.DagsterInstance.ephemeral(tempdir=str(tmp_path)) as instance:
        dagster_events.seconds_per_event(instance, 3)
        for asset in dagster_events.ASSETS:
            assert instance.get_materialized_partitions(dg.AssetKey(asset)) == {f"doc-{i:05d}.md" for i in range(3)}
