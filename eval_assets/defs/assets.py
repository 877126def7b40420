"""The promotion step: `candidate_evaluation` (every document partition of the candidate's
`retrieval_eval`, decided as a whole) with its blocking `eval_gate` and `header_integrity` checks and the
`gold_hygiene` and `header_diagnostics` warnings; `promoted_index`, which moves the production alias only
after the gate passed, and the `production_freshness` check."""

# No `from __future__ import annotations` here: Dagster (1.13) cannot resolve a string annotation
# on an asset's `config` parameter to its Config class.
import dagster as dg

from contextual_assets.defs.resources import (
    ChunkStoreResource,
    EmbedderResource,
    EvalGateResource,
    HeaderSourceResource,
    ParsingResource,
    RerankerResource,
)
from contextual_assets.errors import AliasMoved
from contextual_assets.lifecycle.coverage import production_lag
from contextual_assets.names import (
    BASE_MOVED,
    CANDIDATE_EVALUATION,
    DOCUMENTS_PARTITIONS,
    EVALUATION_GROUP,
    RETRIEVAL_EVAL,
    STALE_EVALUATION,
)
from eval_assets.candidate import CandidateEvaluation, EvaluationRefused, EvaluationStale, decide_candidate
from eval_assets.dashboard import comparison_table, documents_table, metric_metadata, regressions_table
from eval_assets.diagnostics import header_diagnostics, header_sample, remembered
from eval_assets.gold.gold_set import GoldSet
from eval_assets.header_integrity import header_integrity

from eval_assets.defs.retrieval_eval import EvaluationConfig, prepare, refusal


@dg.asset(
    deps=[RETRIEVAL_EVAL],
    group_name=EVALUATION_GROUP,
    kinds={"python"},
    description="Every document partition of the candidate's retrieval_eval, decided as a whole: the gate's rules "
                "on the union of their tasks plus each document's verdict, side by side with production; refused "
                "while a partition is missing or was evaluated against another state.",
)
def candidate_evaluation(
    context: dg.AssetExecutionContext,
    config: EvaluationConfig,
    store: ChunkStoreResource,
    embedder: EmbedderResource,
    headers: HeaderSourceResource,
    parsing: ParsingResource,
    gate: EvalGateResource,
    reranker: RerankerResource,
) -> dg.MaterializeResult:
    run = prepare(config, store, gate, headers, embedder, parsing, reranker)
    partitions = context.instance.get_dynamic_partitions(DOCUMENTS_PARTITIONS)
    try:
        evaluation = decide_candidate(run.store, embedder, run.gold, run.candidate, partitions, gate, run.policy,
                                      run.exceptions, run.search)
    except EvaluationStale as exc:
        raise refusal(str(exc), exc, **{STALE_EVALUATION: True}) from None
    except EvaluationRefused as exc:
        raise refusal(str(exc), exc.cause) from None
    metadata = evaluation_metadata(evaluation, run.gold, run.policy.mode)
    context.log.info(f"gate {'passed' if evaluation.decision.passed else 'FAILED'} for {run.candidate}: "
                     f"{metadata['gate_reasons']}")
    return dg.MaterializeResult(metadata=metadata)


def evaluation_metadata(evaluation: CandidateEvaluation, gold: GoldSet, mode: str) -> dict:
    """The materialization's metadata: the side-by-side table, the worst regressions, the documents that
    regressed, coverage, gold health, and one numeric entry per mode and metric (the UI plots them)."""
    report, baseline, decision, coverage = evaluation.report, evaluation.baseline, evaluation.decision, \
        evaluation.coverage
    regressed = sorted(d for d, r in evaluation.documents.items() if not r["passed"])
    return {
        "candidate_version": evaluation.candidate,
        "production_version": evaluation.production_version or "none",
        "run_id": report.run_id,
        "evaluator_id": report.evaluator_id,
        "evaluator": dg.MetadataValue.json(report.evaluator),
        "gold_set": gold.name,
        "gold_sha256": gold.sha256[:16],
        "n_tasks": len(gold.tasks),
        "n_living": report.metrics[mode].n_queries if mode in report.metrics else 0,
        "n_stale": len(report.stale),
        "n_broken": len(report.broken),
        "unhealthy_share": round(report.unhealthy_share, 4),
        "documents": len(evaluation.documents),
        "documents_regressed": len(regressed),
        "regressed_documents": dg.MetadataValue.md(documents_table(evaluation.documents, regressed)),
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
    key, latest, record, cursor = dg.AssetKey(CANDIDATE_EVALUATION), None, None, None
    for _ in range(20):  # newest first, 100 per page: this run's own record is near the top
        page = context.instance.fetch_materializations(key, limit=100, cursor=cursor)
        latest = latest or (page.records[0] if page.records else None)
        record = next((r for r in page.records if r.run_id == context.run.run_id), None)
        if record is not None or not page.has_more:
            break
        cursor = page.cursor
    record = record or latest
    if record is None:
        raise dg.Failure(description="candidate_evaluation has not been materialized")
    metadata = record.asset_materialization.metadata
    run = store.open().eval_runs.get(metadata["run_id"].value)
    if run is None:
        raise dg.Failure(description="the evaluation run is missing from the store")
    values = {k: v.value for k, v in metadata.items()}
    values["evaluated_in_run"] = record.run_id
    return run, values


@dg.asset_check(asset=candidate_evaluation, blocking=True,
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


@dg.asset_check(asset=candidate_evaluation, description="Stale and broken gold tasks, listed by id.")
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


@dg.asset_check(asset=candidate_evaluation, name="header_diagnostics",
                description="Templated or dominating headers in the candidate version.")
def header_diagnostics_check(context: dg.AssetCheckExecutionContext, store: ChunkStoreResource,
                             embedder: EmbedderResource) -> dg.AssetCheckResult:
    run, _ = _latest_eval(context, store)
    sample = header_sample(store.open().corpus.chunks(run["index_version"]))
    if not any(c.header for c in sample):
        return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.WARN,
                                   metadata={"headers": 0, "note": "this index version has no headers"})
    diagnostics = header_diagnostics([c.header for c in sample], [c.text for c in sample],
                                     embed=remembered(embedder.get()))
    templated = diagnostics["templated_rate"]
    dominance = diagnostics["header_dominance"] or 0.0
    return dg.AssetCheckResult(
        passed=templated <= 0.5 and dominance <= 0.5, severity=dg.AssetCheckSeverity.WARN,
        metadata={k: (round(v, 4) if isinstance(v, float) else v) for k, v in diagnostics.items() if v is not None},
    )


@dg.asset_check(asset=candidate_evaluation, name="header_integrity", blocking=True,
                description="Headers that contradict their chunks: instructions, another language, another "
                            "document's title, no better fit to their chunk than to another document's, one "
                            "template. Blocks promotion.")
def header_integrity_check(context: dg.AssetCheckExecutionContext, store: ChunkStoreResource,
                           embedder: EmbedderResource) -> dg.AssetCheckResult:
    run, _ = _latest_eval(context, store)
    chunks = store.open().corpus.chunks(run["index_version"])
    sample = [c for c in header_sample(chunks) if c.header]
    if not sample:
        return dg.AssetCheckResult(passed=True, metadata={"headers": 0, "note": "this index version has no headers"})
    titles = {c.source_doc: c.title for c in chunks}
    signals = header_integrity([c.header for c in sample], [c.text for c in sample], [c.source_doc for c in sample],
                               titles, embed=remembered(embedder.get()))
    metadata = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in signals.items()
                if v is not None and k not in ("reasons", "examples")}
    metadata["reasons"] = "; ".join(signals["reasons"]) or "none"
    metadata["examples"] = dg.MetadataValue.md("\n".join(f"- {e}" for e in signals["examples"]) or "none")
    return dg.AssetCheckResult(passed=not signals["reasons"], severity=dg.AssetCheckSeverity.ERROR,
                               description="; ".join(signals["reasons"]) or None, metadata=metadata)


@dg.asset(
    deps=[candidate_evaluation],
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
                                     "evaluate_and_promote (retrieval_eval, candidate_evaluation and its checks, "
                                     "promoted_index) together")
    if not run["gate"] or not run["gate"]["passed"]:
        reasons = "; ".join(run["gate"]["reasons"]) if run["gate"] else "no gate decision"
        raise dg.Failure(description=f"gate failed for {candidate} ({reasons}); {gate.alias} is unchanged")
    chunk_store = store.open()
    # Ingest wrote into the candidate after it was evaluated: what would be promoted was never judged.
    if list(chunk_store.corpus.revision(candidate)) != run["gate"].get("candidate_revision"):
        raise dg.Failure(description=f"{candidate} changed (ingest wrote to it) after it was evaluated; "
                                     f"{gate.alias} is unchanged: evaluate it again",
                         metadata={STALE_EVALUATION: True})
    compared = metadata["production_version"] if metadata["production_version"] != "none" else None
    previous, action = promote(chunk_store, gate.alias, candidate, compared,
                               reason=f"gate passed (eval run {run['run_id']})")
    history = chunk_store.aliases.history(gate.alias)
    return dg.MaterializeResult(metadata={
        "alias": gate.alias, "index_version": candidate, "previous_version": previous or "none", "action": action,
        "eval_run": run["run_id"], "history_length": len(history),
        "history": dg.MetadataValue.md("\n".join(
            ["| # | action | version | previous |", "|---|---|---|---|"]
            + [f"| {h['seq']} | {h['action']} | {h['index_version']} | {h['previous_version'] or '-'} |"
               for h in history[-10:]])),
    })


def promote(chunk_store, alias: str, candidate: str, compared: str | None, reason: str) -> tuple[str | None, str]:
    """(the version the alias held, what happened). A candidate another evaluation promoted meanwhile is
    already production (no second move); any other move voids this comparison (`ctx eval` evaluates again)."""
    if compared == candidate:
        return candidate, "already production"
    try:
        return chunk_store.aliases.set(alias, candidate, reason=reason, expected=compared), "promoted"
    except AliasMoved as exc:
        if exc.current == candidate:
            return candidate, "already production"
        raise dg.Failure(description=str(exc), metadata={BASE_MOVED: True}) from None


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

