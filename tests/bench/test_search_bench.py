"""`bench.search` at tiny scale on DuckDB (and Postgres once): it runs end to end (real `ctx search` processes, a real
`ctx serve`) and writes the keys the issue names. Correctness properties only, never timings."""

from __future__ import annotations

import json

from bench import search


def run(tmp_path, *extra: str, backend: str = "duckdb") -> dict:
    out = tmp_path / "search.json"
    assert search.main(["--backends", backend, "--clients", "2", "--duration", "2", "--cold-runs", "1",
                        "--queries", "20", "--open-rates", "0.5,1", "--open-duration", "2",
                        "--workdir", str(tmp_path / "work"), "--json", str(out), *extra]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert {"backend", "chunks", "cold_cli_s", "cold_cli_small_s", "service_p50_ms", "service_p95_ms", "qps",
            "recall_at_10", "service_recall_at_10"} <= set(row)
    assert row["backend"] == backend
    if backend == "duckdb":
        assert row["recall_at_10"] == 1.0, "DuckDB searches exactly: recall against numpy brute force is 1"
    assert row["service_errors"] == 0 and row["qps"] > 0
    assert 0 < row["service_p50_ms"] <= row["service_p95_ms"]
    assert [o["offered_qps"] for o in row["open_loop"]] == [round(row["qps"] * f, 2) for f in (0.5, 1)]
    assert all(o["errors"] == 0 and o["requests"] == o["sent"] > 0 for o in row["open_loop"])
    return row


def test_search_bench_tiny_synthetic(tmp_path):
    row = run(tmp_path, "--chunks", "1500")
    assert row["chunks"] == 1500
    assert row["service_recall_at_10"] is None  # synthetic query texts say nothing about its vectors


def test_search_bench_tiny_real(tmp_path):
    """Real text and MiniLM vectors: the service's exact in-memory dense search and its hybrid fusion
    return what exact search over the same vectors returns (ties between identical texts aside)."""
    row = run(tmp_path, "--chunks", "3000", "--real")
    assert row["chunks"] == 3000
    assert row["service_recall_at_10"] >= 0.95
    assert row["service_hybrid_recall_at_10"] >= 0.95


def test_search_bench_tiny_postgres_sweeps_hnsw_ef_search(tmp_path):
    """On Postgres the row carries the HNSW sweep: recall@10 per hnsw.ef_search, never falling as the
    candidate list widens past what 1,500 chunks hold (the walk then sees every reachable node)."""
    row = run(tmp_path, "--chunks", "1500", backend="postgres")
    sweep = row["hnsw_ef_sweep"]
    assert [e["ef_search"] for e in sweep] == list(search.EF_SWEEP)
    assert all(0 < e["recall_at_10"] <= 1 and 0 < e["p50_ms"] <= e["p95_ms"] for e in sweep)
    assert sweep[-1]["recall_at_10"] >= sweep[0]["recall_at_10"]
