"""Retrieval quality on the published codebase benchmark, ingested through the assets, and the
`retrieval_eval` and `candidate_evaluation` assets on the sample corpus."""

from __future__ import annotations

import json

import dagster as dg

from bench.retrieval import REFERENCE, run
from contextual_assets.cli.ingest_runs import (
    collect_sources,
    ingest_partitions,
    register_sources,
)
from contextual_assets.definitions import build_definitions
from contextual_assets.defs.resources import build_resources
from tests.support import shared_dataset


def test_codebase_benchmark_meets_reference(tmp_path):
    dataset = shared_dataset("anthropic-codebase")
    result = run(dataset, dataset / "evaluation_set.dev.jsonl", "none", tmp_path)
    assert result["chunks"] == 737
    hybrid = result["modes"]["hybrid"]
    assert hybrid["n_queries"] == 124
    for key, reference in zip(("pass_at_5", "pass_at_10", "pass_at_20"), REFERENCE["hybrid"]):
        assert hybrid[key] >= reference, (key, hybrid[key], reference)
    dense = result["modes"]["dense"]
    # Same embedder, same chunks, no headers: dense search reproduces the reference within noise.
    for key, reference in zip(("pass_at_5", "pass_at_10", "pass_at_20"), REFERENCE["dense"]):
        assert abs(dense[key] - reference) <= 1.0, (key, dense[key], reference)
    assert set(result["modes"]) == {"dense", "lexical", "hybrid"}


def test_retrieval_eval_asset_reports_metrics(tmp_path, samples_dir, settings_factory):
    from contextual_assets.samples import SAMPLE_QUERIES

    settings = settings_factory()
    sources, _ = collect_sources([samples_dir], inbox=tmp_path / "inbox", source_root=samples_dir.parent)
    store = build_resources(settings)["store"].open()
    defs = build_definitions(settings)
    with dg.instance_for_test() as instance:
        register_sources(store, instance, sources)
        outcomes = ingest_partitions(defs, instance, sources, log_level="ERROR")
        assert all(o.success for o in outcomes)
        # Gold keyed to raw text spans that answer each query.
        gold = tmp_path / "gold.jsonl"
        tasks = [
            (SAMPLE_QUERIES[0][0], "0.5 percent of the Milestone Fee for each Business Day of delay"),
            (SAMPLE_QUERIES[3][0], "left max_slot_wal_keep_size at its default of -1"),
            (SAMPLE_QUERIES[4][0], "EUR 210 per night in London"),
            (SAMPLE_QUERIES[8][0], "class TokenBucket"),
            ("what does REM-1 change on the PostgreSQL clusters", "REM-1: set max_slot_wal_keep_size to 200 GB"),
        ]
        with gold.open("w") as handle:
            for query, span in tasks:
                handle.write(json.dumps({"query": query, "evidence": [{"text": span}]}) + "\n")
        from contextual_assets.cli.evaluation_runs import evaluate_and_promote

        result = evaluate_and_promote(defs, instance, str(gold), log_level="ERROR").result
        assert result.success
        (materialization,) = result.asset_materializations_for_node("candidate_evaluation")
        metadata = materialization.metadata
        assert metadata["n_tasks"].value == 5 and metadata["n_living"].value == 5
        for mode in ("dense", "lexical", "hybrid"):
            for name in ("pass_at_5", "pass_at_10", "pass_at_20", "mrr", "ndcg_at_10"):
                assert 0.0 <= metadata[f"{mode}_{name}"].value <= 1.0
        assert metadata["hybrid_pass_at_10"].value >= 0.8
        assert "| candidate hybrid |" in metadata["comparison"].value and metadata["gate_passed"].value
