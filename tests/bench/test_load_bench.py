"""`bench.load` at tiny scale, on both back-ends (Postgres from pgserver): it runs end to end and
reports what it claims. Correctness properties only, never wall-clock thresholds."""

from __future__ import annotations

import json

from bench import load


def test_load_bench_tiny(tmp_path, pg_url, capsys):
    out = tmp_path / "load.json"
    assert load.main(["--docs", "50", "--chunks", "2000", "--chunks-per-doc", "250", "--queries", "20",
                      "--backends", "duckdb,postgres", "--ef-sweep", "10,40", "--pg-url", pg_url,
                      "--workdir", str(tmp_path / "work"), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert "inbox sensor, 50 documents" in printed

    sensor = result["sensor"]
    first, unchanged, changed = sensor["first_tick"], sensor["unchanged_tick"], sensor["one_changed_tick"]
    assert first["partitions_added"] == 50, "the first tick adds every document"
    # A small first run (an eighth of CTX_PARTITIONS_PER_RUN: 25), then one run over the rest of the range.
    assert first["run_requests"] == 2, "and requests runs over their partition range (pipelined)"
    assert (unchanged["run_requests"], unchanged["partitions_added"]) == (0, 0)
    assert (changed["run_requests"], changed["partitions_added"]) == (1, 0)
    # The state is in the store: a tick writes the entries that changed, the cursor does not grow.
    assert (first["entries_written"], unchanged["entries_written"], changed["entries_written"]) == (50, 0, 1)
    assert 0 < first["cursor_bytes"] < 120 and 0 < unchanged["cursor_bytes"] < 120
    assert len(unchanged["tick_s_each"]) == 3
    assert "| unchanged tick, duckdb | 50 |" in printed
    assert sensor["list_partitions"]["partitions"] == 50
    assert sensor["sources_registered"] == 50
    assert sensor["unchanged_parts"]["files"] == sensor["unchanged_parts"]["entries"] == 50
    for name in ("first_tick", "unchanged_tick", "one_changed_tick"):
        assert sensor[name]["tick_s"] >= 0 and sensor[name]["apply_partitions_s"] >= 0
    assert sensor["register_sources_bulk_s"] >= 0

    stores = result["stores"]
    assert set(stores) == {"duckdb", "postgres"}
    for name, s in stores.items():
        assert s["chunks"] == 2000 and s["documents"] == 8, name
        for mode in ("dense", "hybrid"):
            assert 0 <= s[mode]["p50_ms"] <= s[mode]["p95_ms"], (name, mode)
        assert 0.0 <= s["dense"]["recall_at_10"] <= 1.0
        assert s["live_write"]["chunks"] > 0
    # DuckDB searches exactly: its recall against numpy brute force checks the ground truth itself.
    assert stores["duckdb"]["dense"]["recall_at_10"] >= 0.99
    pg = stores["postgres"]
    assert pg["dense_plan_uses_hnsw"] is True and pg["hnsw_build_s"] >= 0
    assert [row["ef_search"] for row in pg["ef_sweep"]] == [10, 40]
    assert all(0.0 <= row["recall_at_10"] <= 1.0 for row in pg["ef_sweep"])
