"""`retrieval_eval`, one partition per document: the gold tasks whose evidence lies in the document,
searched in the whole candidate index and the whole production index; per-document metrics, each task's
rank in both, and the `document_gate` check per partition (failed when the document regressed, a
warning when no gold task lies in it). With a gold file configured, a document's partition is evaluated
again after each ingest of it (an eager automation condition), so the dashboards follow ingest."""

# No `from __future__ import annotations` here: Dagster (1.13) cannot resolve a string annotation
# on an asset's `config` parameter to its Config class.
import os
from dataclasses import dataclass
from typing import Any

import dagster as dg

from contextual_assets.defs.ingest.partitions import documents_partitions
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
from contextual_assets.names import (
    CHUNK_EMBEDDINGS,
    DOCUMENT_GATE,
    EVALUATION_FOLLOWS_INGEST,
    EVALUATION_GROUP,
    RETRIEVAL_EVAL,
)
from contextual_assets.configuration import active_settings
from contextual_assets.store import ChunkStore
from eval_assets.candidate import EvaluationRefused, PartitionEvaluation, evaluate_partitions
from eval_assets.documents import TOP_K
from eval_assets.gate import GatePolicy, ReviewedException
from eval_assets.gold.gold_set import GoldSet, load_gold


class EvaluationConfig(dg.Config):
    gold_path: str = ""  # empty: the gate resource's gold_path (CTX_GOLD_FILE)
    index_version: str = ""  # the candidate; empty: the version the current settings build


def refusal(description: str, exc: ContextualError, **flags: bool) -> dg.Failure:
    """A one-line failure (no traceback) that says whether a dependency was down (store, fleet, embedding or
    rerank endpoint): `ctx eval` exits 3 for those, 2 for what a setting or the input must change."""
    return dg.Failure(description=description, metadata={
        "cause": type(exc).__name__, "dependency_unavailable": isinstance(exc, DependencyUnavailable), **flags})


@dataclass
class Evaluation:
    """What both evaluation steps read from their config and resources, refused before any search."""

    store: ChunkStore
    gold: GoldSet
    candidate: str
    policy: GatePolicy
    exceptions: list[ReviewedException]
    search: dict[str, Any]


def prepare(config: EvaluationConfig, store: ChunkStoreResource, gate: EvalGateResource,
            headers: HeaderSourceResource, embedder: EmbedderResource, parsing: ParsingResource,
            reranker: RerankerResource) -> Evaluation:
    gold_path = config.gold_path or gate.gold_path or os.environ.get("CTX_GOLD_FILE", "")
    if not gold_path:
        raise dg.Failure(description="no gold file: set CTX_GOLD_FILE or the gold_path run config")
    try:
        gold = load_gold(gold_path)
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
    return Evaluation(chunk_store, gold, candidate, policy, exceptions, search)


def ranks_table(evaluation: PartitionEvaluation) -> str:
    lines = ["| task | document | production rank | candidate rank | status | query |", "|---|---|---|---|---|---|"]
    for r in evaluation.ranks[:100]:
        lines.append(f"| {r['task_id']} | {r['document']} | {r['production'] or '-'} | {r['candidate'] or '-'} "
                     f"| {r['status']} | {r['query'][:80].replace('|', '/')} |")
    return "\n".join(lines)


def partition_metadata(evaluation: PartitionEvaluation) -> dict:
    record, metrics = evaluation.record, evaluation.record["metrics"]
    metadata = {"candidate_version": record["index_version"],
                "production_version": record["production_version"] or "none",
                "gold_tasks": metrics["tasks"], "verdict": "regressed" if not record["passed"] else
                "no gold task" if not metrics["tasks"] else "ok",
                "reasons": "; ".join(record["reasons"]) or "none",
                f"lost_top_{TOP_K}": metrics["lost_top_k"], f"gained_top_{TOP_K}": metrics["gained_top_k"]}
    for name in (f"candidate_pass_at_{TOP_K}", f"production_pass_at_{TOP_K}", "within_section_confusion",
                 "score_spread"):
        if metrics.get(name) is not None:
            metadata[name] = round(metrics[name], 6)
    if metrics["tasks"]:
        metadata["ranks"] = dg.MetadataValue.md(ranks_table(evaluation))
    return metadata


def document_check(evaluation: PartitionEvaluation) -> dg.AssetCheckEvaluation:
    record = evaluation.record
    if not record["passed"]:
        passed, severity, description = False, dg.AssetCheckSeverity.ERROR, "; ".join(record["reasons"])
    elif not record["task_ids"]:
        passed, severity = False, dg.AssetCheckSeverity.WARN
        description = "no gold task has its evidence in this document: its retrieval is not measured"
    else:
        passed, severity, description = True, dg.AssetCheckSeverity.ERROR, None
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey(RETRIEVAL_EVAL), check_name=DOCUMENT_GATE, passed=passed, severity=severity,
        partition=record["doc_id"], description=description,
        metadata={"candidate_version": record["index_version"], "gold_tasks": len(record["task_ids"]),
                  "reasons": "; ".join(record["reasons"]) or "none"})


def build_retrieval_eval(automatic: bool) -> dg.AssetsDefinition:
    @dg.multi_asset(
        name=RETRIEVAL_EVAL,
        specs=[dg.AssetSpec(
            RETRIEVAL_EVAL, deps=[CHUNK_EMBEDDINGS], group_name=EVALUATION_GROUP, kinds={"python"},
            automation_condition=dg.AutomationCondition.eager() if automatic else None,
            description="Per document: the gold tasks whose evidence lies in it, searched in the whole candidate "
                        "and the whole production index; per-document metrics and every task's rank in both.")],
        check_specs=[dg.AssetCheckSpec(
            DOCUMENT_GATE, asset=RETRIEVAL_EVAL, partitions_def=documents_partitions,
            description="Fails when the document regressed against production (the per-document rule); warns "
                        "when no gold task lies in it.")],
        partitions_def=documents_partitions,
        # Every document of a candidate in one run: one embedder load, one read of each index.
        backfill_policy=dg.BackfillPolicy.single_run(),
        can_subset=True,
    )
    def retrieval_eval(
        context: dg.AssetExecutionContext,
        config: EvaluationConfig,
        store: ChunkStoreResource,
        embedder: EmbedderResource,
        headers: HeaderSourceResource,
        parsing: ParsingResource,
        gate: EvalGateResource,
        reranker: RerankerResource,
    ):
        run = prepare(config, store, gate, headers, embedder, parsing, reranker)
        try:
            evaluations = evaluate_partitions(run.store, embedder, run.gold, run.candidate, context.partition_keys,
                                              gate, run.policy, run.exceptions, run.search)
        except EvaluationRefused as exc:
            raise refusal(str(exc), exc.cause) from None
        for evaluation in evaluations:
            context.add_asset_metadata(partition_metadata(evaluation), partition_key=evaluation.record["doc_id"])
            yield document_check(evaluation)
        regressed = [e.record["doc_id"] for e in evaluations if not e.record["passed"]]
        if regressed:
            context.log.warning(f"{len(regressed)} document(s) regressed against production: "
                                f"{', '.join(regressed[:10])}")
        yield dg.MaterializeResult(asset_key=RETRIEVAL_EVAL, metadata={
            "gold_set": run.gold.name, "documents_evaluated": len(evaluations),
            "documents_regressed": len(regressed)})

    return retrieval_eval


@dg.definitions
def retrieval_eval_assets() -> dg.Definitions:
    automatic = bool(active_settings().gold_path)  # without a gold file there is nothing to evaluate
    sensors = [dg.AutomationConditionSensorDefinition(
        EVALUATION_FOLLOWS_INGEST, target=dg.AssetSelection.assets(RETRIEVAL_EVAL),
        default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=30,
        description="Evaluates a document's retrieval_eval partition after each ingest of it (its eager "
                    "automation condition), so the per-document dashboards follow ingest.")] if automatic else []
    return dg.Definitions(assets=[build_retrieval_eval(automatic)], sensors=sensors)
