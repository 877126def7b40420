"""`bench.search` at tiny scale on DuckDB: it runs end to end (real `ctx search` processes, a real
`ctx serve`) and writes the keys the issue names. Correctness properties only, never timings."""

from __future__ import annotations

import json

from bench import search


def test_search_bench_tiny(tmp_path):
    out = tmp_path / "search.json"
    assert search.main(["--chunks", "1500", "--backends", "duckdb", "--clients", "2", "--duration", "2",
                        "--cold-runs", "1", "--queries", "20", "--workdir", str(tmp_path / "work"),
                        "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert {"backend", "chunks", "cold_cli_s", "cold_cli_small_s", "service_p50_ms", "service_p95_ms", "qps",
            "recall_at_10"} <= set(row)
    assert row["backend"] == "duckdb" and row["chunks"] == 1500
    assert row["recall_at_10"] == 1.0, "DuckDB searches exactly: recall against numpy brute force is 1"
    assert row["service_errors"] == 0 and row["qps"] > 0
    assert 0 < row["service_p50_ms"] <= row["service_p95_ms"]
