"""Run a gold set against one index version and grade the rankings."""

from __future__ import annotations

import statistics

from pydantic import BaseModel

from contextual_assets.embedding import Embedder
from contextual_assets.store import ChunkStore

from .gold import GoldSet
from .metrics import first_gold_rank, ndcg_at_k, pass_at_k, reciprocal_rank

MODES = ("dense", "lexical", "hybrid")
GRADER_VERSION = "graders-v1"


class TaskResult(BaseModel):
    task_id: str
    mode: str
    first_gold_rank: int | None
    pass_at_5: float
    pass_at_10: float
    pass_at_20: float
    reciprocal_rank: float
    ndcg_at_10: float


class ModeMetrics(BaseModel):
    mode: str
    n_queries: int
    pass_at_5: float
    pass_at_10: float
    pass_at_20: float
    mrr: float
    ndcg_at_10: float


class EvalReport(BaseModel):
    index_version: str
    gold_set: str
    gold_sha256: str
    grader_version: str = GRADER_VERSION
    embedder: str
    metrics: dict[str, ModeMetrics]
    tasks: list[TaskResult]


def evaluate(store: ChunkStore, embedder: Embedder, gold: GoldSet, index_version: str,
             modes: tuple[str, ...] = MODES, depth: int = 20) -> EvalReport:
    queries = [t.query for t in gold.tasks]
    vectors = embedder.embed(queries) if any(m != "lexical" for m in modes) else [[]] * len(queries)
    results: list[TaskResult] = []
    for mode in modes:
        for task, vector in zip(gold.tasks, vectors):
            if mode == "dense":
                hits = store.search_dense(vector, index_version, depth)
            elif mode == "lexical":
                hits = store.search_lexical(task.query, index_version, depth)
            else:
                hits = store.search_hybrid(task.query, vector, index_version, depth)
            ranking = [task.satisfied_by(h.text) for h in hits]
            n_gold = len(task.evidence)
            results.append(TaskResult(
                task_id=task.id, mode=mode, first_gold_rank=first_gold_rank(ranking),
                pass_at_5=pass_at_k(ranking, n_gold, 5), pass_at_10=pass_at_k(ranking, n_gold, 10),
                pass_at_20=pass_at_k(ranking, n_gold, 20), reciprocal_rank=reciprocal_rank(ranking),
                ndcg_at_10=ndcg_at_k(ranking, n_gold, 10),
            ))
    metrics = {}
    for mode in modes:
        rows = [r for r in results if r.mode == mode]
        metrics[mode] = ModeMetrics(
            mode=mode, n_queries=len(rows),
            pass_at_5=statistics.mean(r.pass_at_5 for r in rows),
            pass_at_10=statistics.mean(r.pass_at_10 for r in rows),
            pass_at_20=statistics.mean(r.pass_at_20 for r in rows),
            mrr=statistics.mean(r.reciprocal_rank for r in rows),
            ndcg_at_10=statistics.mean(r.ndcg_at_10 for r in rows),
        )
    return EvalReport(index_version=index_version, gold_set=gold.name, gold_sha256=gold.sha256,
                      embedder=embedder.identity, metrics=metrics, tasks=results)
