"""Run a gold set against one index version and grade the rankings against raw chunk text."""

from __future__ import annotations

import hashlib
import json
import statistics
import uuid

from pydantic import BaseModel

from contextual_assets.embedding import Embedder
from contextual_assets.fusion import FusionWeights
from contextual_assets.models import HeaderedChunk, SearchHit
from contextual_assets.rerank import Reranker
from contextual_assets.store import ChunkStore

from .gold.gold_set import GoldSet
from .gold.hygiene import BROKEN, LIVING, STALE, classify
from .ranking_metrics import (
    first_gold_rank,
    ndcg_at_k,
    pass_at_k,
    reciprocal_rank,
    score_spread,
    within_section_confusion,
)

MODES = ("dense", "lexical", "hybrid")
GRADER_VERSION = "graders-v2"
DEPTH = 20


class TaskResult(BaseModel):
    task_id: str
    mode: str
    status: str
    first_rank: int | None
    pass_at_5: float
    pass_at_10: float
    pass_at_20: float
    reciprocal_rank: float
    ndcg_at_10: float


class ModeMetrics(BaseModel):
    mode: str
    n_queries: int  # living tasks graded
    pass_at_5: float
    pass_at_10: float
    pass_at_20: float
    mrr: float
    ndcg_at_10: float


class EvalReport(BaseModel):
    run_id: str
    index_version: str
    gold_set: str
    gold_sha256: str
    evaluator_id: str
    evaluator: dict
    metrics: dict[str, ModeMetrics]
    tasks: list[TaskResult]
    stale: list[str]
    broken: list[str]
    hybrid_hits: dict[str, list[SearchHit]] = {}

    @property
    def unhealthy_share(self) -> float:
        total = len({t.task_id for t in self.tasks})
        return (len(self.stale) + len(self.broken)) / total if total else 0.0

    def rows(self) -> list[dict]:
        return [t.model_dump() for t in self.tasks]


def evaluator_identity(embedder: Embedder, gold: GoldSet, modes: tuple[str, ...],
                       weights: FusionWeights | None = None, reranker: Reranker | None = None,
                       rerank_candidates: int = 50) -> tuple[str, dict]:
    """Who graded: results of different evaluators (embedder, fusion weights, reranker, graders, gold)
    are never compared as if equal."""
    weights = weights or FusionWeights()
    identity = {
        "embedder": embedder.identity, "modes": list(modes), "depth": DEPTH, "rrf_constant": weights.constant,
        "hybrid_candidates": weights.candidates, "grader_version": GRADER_VERSION, "gold_sha256": gold.sha256,
    }
    identity["fusion_weights"] = {"dense": weights.dense, "lexical": weights.lexical}
    if reranker is not None:
        identity["rerank"] = {"reranker": reranker.identity, "candidates": rerank_candidates}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16], identity


def evaluate(store: ChunkStore, embedder: Embedder, gold: GoldSet, index_version: str,
             modes: tuple[str, ...] = MODES, weights: FusionWeights | None = None,
             reranker: Reranker | None = None, rerank_candidates: int = 50,
             chunks: list[HeaderedChunk] | None = None) -> EvalReport:
    """Every task in every mode; with a reranker, the hybrid lists are reranked (its top
    `rerank_candidates`) before grading. `chunks`: the version's chunks when the caller has read them."""
    # Gold hygiene reads every chunk of the version: evaluation, not the query path.
    statuses = classify(gold, chunks if chunks is not None else store.corpus.chunks(index_version))
    queries = [t.query for t in gold.tasks]
    vectors = embedder.embed(queries) if any(m != "lexical" for m in modes) else [[]] * len(queries)
    results: list[TaskResult] = []
    hybrid_hits: dict[str, list[SearchHit]] = {}
    for mode in modes:
        for task, vector in zip(gold.tasks, vectors):
            if mode == "dense":
                hits = store.search.dense(vector, index_version, DEPTH)
            elif mode == "lexical":
                hits = store.search.lexical(task.query, index_version, DEPTH)
            else:
                depth = max(DEPTH, rerank_candidates) if reranker is not None else DEPTH
                hits = store.search.hybrid(task.query, vector, index_version, depth, weights=weights)
                if reranker is not None:
                    hits = reranker.rerank(task.query, hits[:depth], DEPTH)
                hybrid_hits[task.id] = hits
            ranking = [task.satisfied_by(h.text) for h in hits]
            n_gold = len(task.evidence)
            results.append(TaskResult(
                task_id=task.id, mode=mode, status=statuses[task.id], first_rank=first_gold_rank(ranking),
                pass_at_5=pass_at_k(ranking, n_gold, 5), pass_at_10=pass_at_k(ranking, n_gold, 10),
                pass_at_20=pass_at_k(ranking, n_gold, 20), reciprocal_rank=reciprocal_rank(ranking),
                ndcg_at_10=ndcg_at_k(ranking, n_gold, 10),
            ))
    evaluator_id, identity = evaluator_identity(embedder, gold, modes, weights, reranker, rerank_candidates)
    return report_of(index_version, gold, evaluator_id, identity, results, hybrid_hits=hybrid_hits)


def report_of(index_version: str, gold: GoldSet, evaluator_id: str, evaluator: dict, results: list[TaskResult],
              hybrid_hits: dict[str, list[SearchHit]] | None = None) -> EvalReport:
    """A report over per-task results (one evaluation, or the union of a candidate's document partitions)."""
    modes = list(dict.fromkeys(r.mode for r in results)) or list(evaluator.get("modes", MODES))
    metrics = {}
    for mode in modes:
        rows = [r for r in results if r.mode == mode and r.status == LIVING]
        mean = (lambda name: statistics.mean(getattr(r, name) for r in rows)) if rows else (lambda name: 0.0)
        metrics[mode] = ModeMetrics(mode=mode, n_queries=len(rows), pass_at_5=mean("pass_at_5"),
                                    pass_at_10=mean("pass_at_10"), pass_at_20=mean("pass_at_20"),
                                    mrr=mean("reciprocal_rank"), ndcg_at_10=mean("ndcg_at_10"))
    statuses = {r.task_id: r.status for r in results}
    return EvalReport(
        run_id=uuid.uuid4().hex, index_version=index_version, gold_set=gold.name, gold_sha256=gold.sha256,
        evaluator_id=evaluator_id, evaluator=evaluator, metrics=metrics, tasks=results,
        stale=sorted(t for t, s in statuses.items() if s == STALE),
        broken=sorted(t for t, s in statuses.items() if s == BROKEN), hybrid_hits=hybrid_hits or {},
    )


def section_diagnostics(report: EvalReport, gold: GoldSet) -> tuple[float, float | None]:
    """(within-section confusion, score spread) over the hybrid rankings of living tasks."""
    living = {t.task_id for t in report.tasks if t.status == LIVING}
    graded = [[(h, bool(task.satisfied_by(h.text))) for h in report.hybrid_hits[task.id]]
              for task in gold.tasks if task.id in living and task.id in report.hybrid_hits]
    confusion = within_section_confusion([[(h.doc_id, tuple(h.section_path), ok) for h, ok in rows] for rows in graded])
    return confusion, score_spread([[(h.score, ok) for h, ok in rows] for rows in graded])


def save_report(store: ChunkStore, report: EvalReport, gate: dict | None = None) -> None:
    store.eval_runs.save(
        {"run_id": report.run_id, "index_version": report.index_version, "evaluator_id": report.evaluator_id,
         "evaluator": report.evaluator, "gold_sha256": report.gold_sha256,
         "metrics": {m: v.model_dump() for m, v in report.metrics.items()}, "gate": gate},
        report.rows(),
    )
