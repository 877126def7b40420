"""The evaluation gate on a real benchmark: ingest the codebase corpus through the assets (good
version, structural headers), then derive deliberately degraded versions (headers swapped between
neighbouring chunks; chunks truncated to their first line), run `evaluate_and_promote` on each, and
print what the gate decided and where `production` points.

    python -m bench.gate --json bench/out/gate.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import dagster as dg

from bench.corpora import derive_version
from bench.report import write_json
from contextual_assets.app.ingest_runs import ingest_partitions, register_sources
from contextual_assets.defs.definitions import build_definitions, build_resources
from contextual_assets.settings import PlatformSettings

CANDIDATES = ("good", "swap_headers", "truncate_first_line")


def run(dataset: Path, gold: Path, workdir: Path, floors: dict[str, float], tolerance: float) -> dict:
    settings = PlatformSettings(home=str(workdir), inbox=str(workdir / "inbox"), duckdb_path=str(workdir / "gate.duckdb"),
                                header_source="structural", gate_floors_json=json.dumps(floors),
                                gate_tolerance=tolerance)
    defs, resources = build_definitions(settings), build_resources(settings)
    store = resources["store"].open()
    corpus = dataset / "codebase_chunks.json"
    rows = []
    with dg.DagsterInstance.ephemeral() as instance:
        register_sources(store, instance, [(corpus.name, corpus)])
        (outcome,) = ingest_partitions(defs, instance, [(corpus.name, corpus)], log_level="ERROR")
        if not outcome.success:
            raise SystemExit(f"ingest failed: {outcome.error}")
        (good,) = [v["index_version"] for v in store.index_versions()]
        for name in CANDIDATES:
            version = good if name == "good" else derive_version(store, resources["embedder"].get(), good, name)
            result = defs.resolve_job_def("evaluate_and_promote").execute_in_process(
                instance=instance, raise_on_error=False,
                run_config={"ops": {"retrieval_eval": {"config": {"gold_path": str(gold), "index_version": version}}},
                            "loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})
            gate = next(e.asset_check_evaluation_data for e in result.all_events
                        if e.event_type_value == "ASSET_CHECK_EVALUATION"
                        and e.asset_check_evaluation_data.check_name == "eval_gate")
            evaluation = next(e.step_materialization_data.materialization.metadata
                              for e in result.get_asset_materialization_events()
                              if e.step_materialization_data.materialization.asset_key.path[-1] == "retrieval_eval")
            rows.append({
                "candidate": name, "index_version": version, "gate_passed": gate.passed,
                "promoted": bool(result.asset_materializations_for_node("promoted_index")),
                "production_after": store.get_alias("production"),
                "reasons": gate.metadata["reasons"].value,
                **{k: evaluation[f"hybrid_{k}"].value for k in ("pass_at_5", "pass_at_10", "pass_at_20", "mrr",
                                                                  "ndcg_at_10")},
                "n_living": evaluation["n_living"].value, "n_broken": evaluation["n_broken"].value,
            })
    return {"dataset": str(corpus), "gold": str(gold), "floors": floors, "tolerance": tolerance, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=Path("../shared/datasets/anthropic-codebase"))
    parser.add_argument("--gold", type=Path, default=None)
    parser.add_argument("--floors", default='{"pass_at_10": 0.6}')
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    gold = args.gold or args.dataset / "evaluation_set.dev.jsonl"
    with tempfile.TemporaryDirectory(prefix="ctx-gate-") as tmp:
        result = run(args.dataset, gold, Path(tmp), json.loads(args.floors), args.tolerance)
    print(f"{'candidate':20s} {'P@5':>6s} {'P@10':>6s} {'P@20':>6s} {'MRR':>6s} {'nDCG':>6s} {'living':>6s} "
          f"{'broken':>6s}  gate    promoted  reasons")
    for row in result["rows"]:
        print(f"{row['candidate']:20s} {100 * row['pass_at_5']:6.1f} {100 * row['pass_at_10']:6.1f} "
              f"{100 * row['pass_at_20']:6.1f} {100 * row['mrr']:6.1f} {100 * row['ndcg_at_10']:6.1f} "
              f"{row['n_living']:6d} {row['n_broken']:6d}  {'pass' if row['gate_passed'] else 'FAIL':6s}  "
              f"{'yes' if row['promoted'] else 'no':8s}  {row['reasons'][:90]}")
    print(f"production -> {result['rows'][-1]['production_after']} (the good version: "
          f"{result['rows'][-1]['production_after'] == result['rows'][0]['index_version']})")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
