"""Evaluation assets: `retrieval_eval` (candidate vs production, side by side), the blocking
`eval_gate` check, `gold_hygiene` and `header_diagnostics` checks, and `promoted_index`."""

# No `from __future__ import annotations` here: Dagster (1.13) cannot resolve a string annotation
# on an asset's `config` parameter to its Config class.
import os

import dagster as dg

from contextual_assets.defs.resources import (
    ChunkStoreResource,
    EmbedderResource,
    EvalGateResource,
    HeaderSourceResource,
    ParsingResource,
    RerankerResource,
)
from contextual_assets.errors import ContextualError, DependencyUnavailable
from contextual_assets.index_version import current_index_version
from contextual_assets.lifecycle.coverage import production_lag
from contextual_assets.names import CHUNK_EMBEDDINGS, EVALUATION_GROUP, RETRIEVAL_EVAL
from eval_assets.candidate import CandidateEvaluation, EvaluationRefused, evaluate_candidate
from eval_assets.dashboard import comparison_table, metric_metadata, regressions_table
from eval_assets.diagnostics import header_diagnostics
from eval_assets.evaluate import section_diagnostics
from eval_assets.gold.gold_set import GoldSet, load_gold


class RetrievalEvalConfig(dg.Config):
    gold_path: str = ""  # empty: the gate resource's gold_path (CTX_GOLD_FILE)
    index_version: str = ""  # the candidate; empty: the version the current settings build


def refusal(description: str, exc: ContextualError) -> dg.Failure:
    """A one-line failure (no traceback) that says whether a dependency was down (store, fleet, embedding or
    rerank endpoint): `ctx eval` exits 3 for those, 2 for what a setting or the input must change."""
    return dg.Failure(description=description, metadata={
        "cause": type(exc).__name__, "dependency_unavailable": isinstance(exc, DependencyUnavailable)})


@dg.asset(
    deps=[CHUNK_EMBEDDINGS],
    group_name=EVALUATION_GROUP,
    kinds={"python"},
    description="The gold set against the candidate index version and the promoted one, side by side, each "
                "searched with its own embedder; the candidate's coverage of the live documents.",
)
def retrieval_eval(
    context: dg.AssetExecutionContext,
    config: RetrievalEvalConfig,
    store: ChunkStoreResource,
    embedder: EmbedderResource,
    headers: HeaderSourceResource,
    parsing: ParsingResource,
    gate: EvalGateResource,
    reranker: RerankerResource,
) -> dg.MaterializeResult:
    gold_path = config.gold_path or gate.gold_path or os.environ.get("CTX_GOLD_FILE", "")
    if not gold_path:
        raise dg.Failure(description="no gold file: set CTX_GOLD_FILE or the gold_path run config")
    gold = load_gold(gold_path)
    try:
        candidate = config.index_version or current_index_version(headers, embedder, parsing)
        exceptions, policy = gate.exceptions(), gate.policy()  # a bad exceptions file or floor: refused here
        search = {"weights": gate.weights(), "reranker": reranker.get() if gate.rerank else None,
                  "rerank_candidates": reranker.candidates}
        if gate.rerank and search["reranker"] is None:
            raise ContextualError("CTX_GATE_RERANK is on but no reranker is configured: set CTX_RERANK_BASE_URL and "
                                  "CTX_RERANK_MODEL, or CTX_RERANK_MODEL_DIR")
    except ContextualError as exc:
        raise refusal(str(exc), exc) from None
    chunk_store = store.open()
    if chunk_store.corpus.count_chunks(candidate) == 0:
        raise dg.Failure(description=f"index version {candidate} holds no chunks; ingest documents first")
    try:
        evaluation = evaluate_candidate(chunk_store, embedder, gold, candidate, gate, policy, exceptions, search)
    except EvaluationRefused as exc:
        raise refusal(str(exc), exc.cause) from None
    metadata = evaluation_metadata(evaluation, gold, policy.mode)
    context.log.info(f"gate {'passed' if evaluation.decision.passed else 'FAILED'} for {candidate}: "
                     f"{metadata['gate_reasons']}")
    return dg.MaterializeResult(metadata=metadata)


def evaluation_metadata(evaluation: CandidateEvaluation, gold: GoldSet, mode: str) -> dict:
    """The materialization's metadata: the side-by-side table, the worst regressions, coverage, gold
    health, and one numeric entry per mode and metric (the UI plots them over time)."""
    report, baseline, decision, coverage = evaluation.report, evaluation.baseline, evaluation.decision, \
        evaluation.coverage
    confusion, spread = section_diagnostics(report, gold)
    return {
        "within_section_confusion": round(confusion, 4),
        "score_spread": round(spread, 6) if spread is not None else 0.0,
        "candidate_version": evaluation.candidate,
        "production_version": evaluation.production_version or "none",
        "run_id": report.run_id,
        "evaluator_id": report.evaluator_id,
        "evaluator": dg.MetadataValue.json(report.evaluator),
        "production_evaluator_id": baseline.evaluator_id if baseline else "none",
        "gold_set": gold.name,
        "gold_sha256": gold.sha256[:16],
        "n_tasks": len(gold.tasks),
        "n_living": report.metrics[mode].n_queries,
        "n_stale": len(report.stale),
        "n_broken": len(report.broken),
        "unhealthy_share": round(report.unhealthy_share, 4),
        "coverage": dg.MetadataValue.json(coverage.metadata()),
        "coverage_share": round(coverage.share, 4),
        "gate_passed": decision.passed,
        "gate_reasons": "; ".join(decision.reasons) or "none",
        "comparison": dg.MetadataValue.md(comparison_table(report, baseline, decision)),
        "worst_regressions": dg.MetadataValue.md(regressions_table(evaluation.regressions)),
        **metric_metadata(report),
    }


def _latest_eval(context, store: ChunkStoreResource) -> tuple[dict, dict]:
    """The evaluation this run materialized (a concurrent run's must never be read as ours); a check
    executed on its own reads the latest one and says so."""
    key, latest, record, cursor = dg.AssetKey(RETRIEVAL_EVAL), None, None, None
    for _ in range(20):  # newest first, 100 per page: this run's own record is near the top
        page = context.instance.fetch_materializations(key, limit=100, cursor=cursor)
        latest = latest or (page.records[0] if page.records else None)
        record = next((r for r in page.records if r.run_id == context.run.run_id), None)
        if record is not None or not page.has_more:
            break
        cursor = page.cursor
    record = record or latest
    if record is None:
        raise dg.Failure(description="retrieval_eval has not been materialized")
    metadata = record.asset_materialization.metadata
    run = store.open().eval_runs.get(metadata["run_id"].value)
    if run is None:
        raise dg.Failure(description="the evaluation run is missing from the store")
    values = {k: v.value for k, v in metadata.items()}
    values["evaluated_in_run"] = record.run_id
    return run, values


@dg.asset_check(asset=retrieval_eval, blocking=True,
                description="Floors, coverage, stale+broken ceiling, and no regression against production "
                            "(tolerance and significance).")
def eval_gate(context: dg.AssetCheckExecutionContext, store: ChunkStoreResource) -> dg.AssetCheckResult:
    run, evaluation = _latest_eval(context, store)
    gate = run["gate"]
    verdicts = {v["metric"]: v for v in gate["verdicts"]}
    metadata = {
        "candidate_version": run["index_version"],
        "evaluated_in_run": evaluation["evaluated_in_run"],
        "compared_tasks": gate["compared_tasks"],
        "excepted_tasks": ", ".join(gate["excepted_tasks"]) or "none",
        "ignored_exceptions": "; ".join(gate.get("ignored_exceptions") or []) or "none",
        "lost_tasks": ", ".join(gate.get("lost_tasks") or []) or "none",
        "coverage_share": evaluation.get("coverage_share", 0.0),
        "reasons": "; ".join(gate["reasons"]) or "none",
    }
    for metric, verdict in verdicts.items():
        metadata[f"{metric}_raw"] = round(verdict["candidate_raw"], 4)
        metadata[f"{metric}_with_exceptions"] = round(verdict["candidate"], 4)
        if verdict["delta"] is not None:
            metadata[f"{metric}_delta"] = round(verdict["delta"], 4)
        if verdict.get("ci_high") is not None:
            metadata[f"{metric}_delta_ci"] = f"{verdict['ci_low']:+.4f}..{verdict['ci_high']:+.4f}"
            metadata[f"{metric}_sign_p"] = round(verdict["p_sign"], 4)
    return dg.AssetCheckResult(passed=gate["passed"], severity=dg.AssetCheckSeverity.ERROR, metadata=metadata)


@dg.asset_check(asset=retrieval_eval, description="Stale and broken gold tasks, listed by id.")
def gold_hygiene(context: dg.AssetCheckExecutionContext, store: ChunkStoreResource,
                 gate: EvalGateResource) -> dg.AssetCheckResult:
    run, _ = _latest_eval(context, store)
    tasks = [t for t in store.open().eval_runs.tasks(run["run_id"]) if t["mode"] == gate.mode]
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
    chunks = store.open().corpus.chunks(run["index_version"])
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
    group_name=EVALUATION_GROUP,
    kinds={"python"},
    description="Points the production alias at the candidate version, only after the gate passed.",
)
def promoted_index(context: dg.AssetExecutionContext, store: ChunkStoreResource,
                   gate: EvalGateResource) -> dg.MaterializeResult:
    run, metadata = _latest_eval(context, store)
    candidate = run["index_version"]
    if metadata["evaluated_in_run"] != context.run.run_id:
        raise dg.Failure(description="promoted_index promotes only the evaluation of its own run: run "
                                     "evaluate_and_promote (retrieval_eval + its checks + promoted_index) together")
    if not run["gate"] or not run["gate"]["passed"]:
        reasons = "; ".join(run["gate"]["reasons"]) if run["gate"] else "no gate decision"
        raise dg.Failure(description=f"gate failed for {candidate} ({reasons}); {gate.alias} is unchanged")
    chunk_store = store.open()
    compared = metadata["production_version"] if metadata["production_version"] != "none" else None
    previous = chunk_store.aliases.set(gate.alias, candidate, reason=f"gate passed (eval run {run['run_id']})",
                                       expected=compared)
    history = chunk_store.aliases.history(gate.alias)
    return dg.MaterializeResult(metadata={
        "alias": gate.alias, "index_version": candidate, "previous_version": previous or "none",
        "eval_run": run["run_id"], "history_length": len(history),
        "history": dg.MetadataValue.md("\n".join(
            ["| # | action | version | previous |", "|---|---|---|---|"]
            + [f"| {h['seq']} | {h['action']} | {h['index_version']} | {h['previous_version'] or '-'} |"
               for h in history[-10:]])),
    })


@dg.asset_check(asset=promoted_index, description="Documents missing from or outdated in the promoted version "
                                                   "(ingest keeps it fresh while its recipe still builds it).")
def production_freshness(store: ChunkStoreResource, gate: EvalGateResource) -> dg.AssetCheckResult:
    lag = production_lag(store.open(), gate.alias)
    if lag is None:
        return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.WARN,
                                   metadata={"note": f"nothing is promoted to {gate.alias} yet"})
    return dg.AssetCheckResult(
        passed=lag.complete, severity=dg.AssetCheckSeverity.WARN,
        description=None if lag.complete else lag.summary(gate.alias),
        metadata={"index_version": lag.index_version, "live": lag.live, "covered": lag.covered,
                  "missing": len(lag.missing), "outdated": len(lag.outdated),
                  "missing_ids": ", ".join(lag.missing[:50]) or "none",
                  "outdated_ids": ", ".join(lag.outdated[:50]) or "none"},
    )

