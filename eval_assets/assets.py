"""Evaluation assets: `retrieval_eval` (candidate vs production, side by side), the blocking
`eval_gate` check, `gold_hygiene` and `header_diagnostics` checks, and `promoted_index`."""

# No `from __future__ import annotations` here: Dagster (1.13) cannot resolve a string annotation
# on an asset's `config` parameter to its Config class.
import os

import dagster as dg

from contextual_assets.defs.resources import (
    ChunkStoreResource,
    EmbedderResource,
    HeaderSourceResource,
    ParsingResource,
    current_index_version,
)

from .dashboard import comparison_table, metric_metadata, regressions_table
from .diagnostics import header_diagnostics
from .evaluate import evaluate, save_report, section_diagnostics
from .gate import decide
from .gold.gold_set import load_gold
from .ranking_metrics import worst_regressions
from .resources import EvalGateResource

EVAL_GROUP = "evaluation"


class RetrievalEvalConfig(dg.Config):
    gold_path: str = ""  # empty: the gate resource's gold_path (CTX_GOLD_FILE)
    index_version: str = ""  # the candidate; empty: the version the current settings build


@dg.asset(
    deps=["chunk_embeddings"],
    group_name=EVAL_GROUP,
    kinds={"python"},
    description="The gold set against the candidate index version and the promoted one, side by side.",
)
def retrieval_eval(
    context: dg.AssetExecutionContext,
    config: RetrievalEvalConfig,
    store: ChunkStoreResource,
    embedder: EmbedderResource,
    headers: HeaderSourceResource,
    parsing: ParsingResource,
    gate: EvalGateResource,
) -> dg.MaterializeResult:
    gold_path = config.gold_path or gate.gold_path or os.environ.get("CTX_GOLD_FILE", "")
    if not gold_path:
        raise dg.Failure(description="no gold file: set CTX_GOLD_FILE or the gold_path run config")
    gold = load_gold(gold_path)
    candidate = config.index_version or current_index_version(headers, embedder, parsing)
    chunk_store = store.open()
    if chunk_store.count_chunks(candidate) == 0:
        raise dg.Failure(description=f"index version {candidate} holds no chunks; ingest documents first")
    model = embedder.get()
    report = evaluate(chunk_store, model, gold, candidate)
    production_version = chunk_store.get_alias(gate.alias)
    baseline = None
    if production_version and production_version != candidate and chunk_store.count_chunks(production_version):
        baseline = evaluate(chunk_store, model, gold, production_version)  # same evaluator, same gold
        save_report(chunk_store, baseline)
    policy = gate.policy()
    decision = decide(report.rows(), baseline.rows() if baseline else None, policy, gate.exceptions())
    save_report(chunk_store, report, gate=decision.model_dump(mode="json"))
    ranks = lambda r: {t.task_id: t.first_rank for t in r.tasks if t.mode == policy.mode and t.status == "living"}  # noqa: E731
    regressions = worst_regressions(ranks(baseline), ranks(report), {t.id: t.query for t in gold.tasks}) if baseline else []
    confusion, spread = section_diagnostics(report, gold)
    metadata = {
        "within_section_confusion": round(confusion, 4),
        "score_spread": round(spread, 6) if spread is not None else 0.0,
        "candidate_version": candidate,
        "production_version": production_version or "none",
        "run_id": report.run_id,
        "evaluator_id": report.evaluator_id,
        "evaluator": dg.MetadataValue.json(report.evaluator),
        "gold_set": gold.name,
        "gold_sha256": gold.sha256[:16],
        "n_tasks": len(gold.tasks),
        "n_living": report.metrics[policy.mode].n_queries,
        "n_stale": len(report.stale),
        "n_broken": len(report.broken),
        "unhealthy_share": round(report.unhealthy_share, 4),
        "gate_passed": decision.passed,
        "gate_reasons": "; ".join(decision.reasons) or "none",
        "comparison": dg.MetadataValue.md(comparison_table(report, baseline, decision)),
        "worst_regressions": dg.MetadataValue.md(regressions_table(regressions)),
        **metric_metadata(report),
    }
    context.log.info(f"gate {'passed' if decision.passed else 'FAILED'} for {candidate}: {metadata['gate_reasons']}")
    return dg.MaterializeResult(metadata=metadata)


def _latest_eval(context, store: ChunkStoreResource) -> tuple[dict, dict]:
    event = context.instance.get_latest_materialization_event(dg.AssetKey("retrieval_eval"))
    if event is None:
        raise dg.Failure(description="retrieval_eval has not been materialized")
    metadata = event.asset_materialization.metadata
    run = store.open().latest_eval_run(metadata["candidate_version"].value, metadata["evaluator_id"].value)
    if run is None or run["run_id"] != metadata["run_id"].value:
        raise dg.Failure(description="the latest evaluation run is missing from the store")
    return run, {k: v.value for k, v in metadata.items()}


@dg.asset_check(asset=retrieval_eval, blocking=True, description="Floors and no regression against production.")
def eval_gate(context: dg.AssetCheckExecutionContext, store: ChunkStoreResource) -> dg.AssetCheckResult:
    run, _ = _latest_eval(context, store)
    gate = run["gate"]
    verdicts = {v["metric"]: v for v in gate["verdicts"]}
    metadata = {
        "candidate_version": run["index_version"],
        "compared_tasks": gate["compared_tasks"],
        "excepted_tasks": ", ".join(gate["excepted_tasks"]) or "none",
        "reasons": "; ".join(gate["reasons"]) or "none",
    }
    for metric, verdict in verdicts.items():
        metadata[f"{metric}_raw"] = round(verdict["candidate_raw"], 4)
        metadata[f"{metric}_with_exceptions"] = round(verdict["candidate"], 4)
        if verdict["delta"] is not None:
            metadata[f"{metric}_delta"] = round(verdict["delta"], 4)
    return dg.AssetCheckResult(passed=gate["passed"], severity=dg.AssetCheckSeverity.ERROR, metadata=metadata)


@dg.asset_check(asset=retrieval_eval, description="Stale and broken gold tasks, listed by id.")
def gold_hygiene(context: dg.AssetCheckExecutionContext, store: ChunkStoreResource,
                 gate: EvalGateResource) -> dg.AssetCheckResult:
    run, _ = _latest_eval(context, store)
    tasks = [t for t in store.open().eval_tasks(run["run_id"]) if t["mode"] == gate.mode]
    stale = sorted(t["task_id"] for t in tasks if t["status"] == "stale")
    broken = sorted(t["task_id"] for t in tasks if t["status"] == "broken")
    share = (len(stale) + len(broken)) / len(tasks) if tasks else 0.0
    return dg.AssetCheckResult(
        passed=share <= gate.hygiene_warn_share, severity=dg.AssetCheckSeverity.WARN,
        metadata={"stale": len(stale), "broken": len(broken), "unhealthy_share": round(share, 4),
                  "stale_ids": ", ".join(stale[:50]) or "none", "broken_ids": ", ".join(broken[:50]) or "none"},
    )


@dg.asset_check(asset=retrieval_eval, name="header_diagnostics",
                description="Templated or dominating headers in the candidate version.")
def header_diagnostics_check(context: dg.AssetCheckExecutionContext, store: ChunkStoreResource,
                             embedder: EmbedderResource) -> dg.AssetCheckResult:
    run, _ = _latest_eval(context, store)
    chunks = store.open().chunks(run["index_version"])
    sample = chunks[:: max(1, len(chunks) // 500)]  # bounded cost on large indexes
    if not any(c.header for c in sample):
        return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.WARN,
                                   metadata={"headers": 0, "note": "this index version has no headers"})
    model = embedder.get()
    diagnostics = header_diagnostics([c.header for c in sample], [c.text for c in sample], embed=model.embed)
    templated = diagnostics["templated_rate"]
    dominance = diagnostics["header_dominance"] or 0.0
    return dg.AssetCheckResult(
        passed=templated <= 0.5 and dominance <= 0.5, severity=dg.AssetCheckSeverity.WARN,
        metadata={k: (round(v, 4) if isinstance(v, float) else v) for k, v in diagnostics.items() if v is not None},
    )


@dg.asset(
    deps=[retrieval_eval],
    group_name=EVAL_GROUP,
    kinds={"python"},
    description="Points the production alias at the candidate version, only after the gate passed.",
)
def promoted_index(context: dg.AssetExecutionContext, store: ChunkStoreResource,
                   gate: EvalGateResource) -> dg.MaterializeResult:
    run, metadata = _latest_eval(context, store)
    candidate = run["index_version"]
    event = context.instance.get_latest_materialization_event(dg.AssetKey("retrieval_eval"))
    if event.run_id != context.run.run_id:
        raise dg.Failure(description="promoted_index promotes only the evaluation of its own run: run "
                                     "evaluate_and_promote (retrieval_eval + its checks + promoted_index) together")
    if not run["gate"] or not run["gate"]["passed"]:
        reasons = "; ".join(run["gate"]["reasons"]) if run["gate"] else "no gate decision"
        raise dg.Failure(description=f"gate failed for {candidate} ({reasons}); {gate.alias} is unchanged")
    chunk_store = store.open()
    compared = metadata["production_version"] if metadata["production_version"] != "none" else None
    previous = chunk_store.set_alias(gate.alias, candidate, reason=f"gate passed (eval run {run['run_id']})",
                                     expected=compared)
    history = chunk_store.alias_history(gate.alias)
    return dg.MaterializeResult(metadata={
        "alias": gate.alias, "index_version": candidate, "previous_version": previous or "none",
        "eval_run": run["run_id"], "history_length": len(history),
        "history": dg.MetadataValue.md("\n".join(
            ["| # | action | version | previous |", "|---|---|---|---|"]
            + [f"| {h['seq']} | {h['action']} | {h['index_version']} | {h['previous_version'] or '-'} |"
               for h in history[-10:]])),
    })


eval_assets_list = [retrieval_eval, promoted_index]
eval_checks = [eval_gate, gold_hygiene, header_diagnostics_check]
