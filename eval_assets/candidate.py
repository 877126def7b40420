"""One evaluation of a candidate index version: the gold set against the candidate and against
production (each searched with the embedder it was built with), the candidate's coverage of the live
documents, and the gate's decision. Saved in the store; the Dagster asset reports it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Protocol

from contextual_assets.embedding import Embedder
from contextual_assets.errors import ContextualError
from contextual_assets.lifecycle.coverage import VersionCoverage, coverage_of, live_documents
from contextual_assets.store import ChunkStore

from .evaluate import EvalReport, evaluate, save_report
from .gate import ExceptionScope, GateDecision, GatePolicy, ReviewedException, decide
from .gate_config import GateConfig
from .gold.gold_set import GoldSet
from .ranking_metrics import worst_regressions


class EvaluationRefused(ContextualError):
    """A version that cannot be evaluated (its embedder cannot be loaded, a dependency is down)."""

    def __init__(self, message: str, cause: ContextualError):
        super().__init__(message)
        self.cause = cause


class Embedders(Protocol):
    def get(self) -> Embedder: ...

    def for_identity(self, identity: str, recipe: dict[str, str] | None = None) -> Embedder: ...


@dataclass
class CandidateEvaluation:
    candidate: str
    production_version: str | None
    report: EvalReport
    baseline: EvalReport | None
    coverage: VersionCoverage
    decision: GateDecision
    regressions: list[Any]


def version_embedder(store: ChunkStore, embedders: Embedders, index_version: str, role: str) -> Embedder:
    """The embedder `index_version` was built with; the evaluation is refused rather than scored with another."""
    record = store.corpus.index_version(index_version)
    if record is None:
        return embedders.get()  # an unregistered version holds no chunks; the caller reports that
    try:
        return embedders.for_identity(record["fingerprint"]["embedder"], (record["recipe"] or {}).get("embedder"))
    except ContextualError as exc:
        raise EvaluationRefused(f"cannot evaluate the {role} {index_version}: {exc}", exc) from None


def _scored(store: ChunkStore, embedders: Embedders, gold: GoldSet, version: str, role: str, label: str,
            search: dict[str, Any]) -> EvalReport:
    embedder = version_embedder(store, embedders, version, role)
    try:
        return evaluate(store, embedder, gold, version, **search)
    except ContextualError as exc:  # e.g. the reranker is down: one line, not a traceback
        raise EvaluationRefused(f"cannot evaluate {label} {version}: {exc}", exc) from None


def evaluate_candidate(store: ChunkStore, embedders: Embedders, gold: GoldSet, candidate: str, gate: GateConfig,
                       policy: GatePolicy, exceptions: Sequence[ReviewedException],
                       search: dict[str, Any]) -> CandidateEvaluation:
    """Scores `candidate` and production on `gold`, decides with `policy` (read from `gate` by the caller,
    which refuses a bad one before any search), and saves both reports with the decision."""
    report = _scored(store, embedders, gold, candidate, "candidate", "the candidate", search)
    production_version = store.aliases.get(gate.alias)
    baseline = None
    if production_version and production_version != candidate and store.corpus.count_chunks(production_version):
        # Production scored with its own embedder against its own vectors, on the same gold.
        baseline = _scored(store, embedders, gold, production_version, "production", "production", search)
        save_report(store, baseline)
    coverage = coverage_of(store, candidate, live_documents(store, production_version))
    short = coverage.share < gate.min_coverage or (gate.min_coverage >= 1.0 and not coverage.complete)
    hint = f"CTX_GATE_MIN_COVERAGE {gate.min_coverage:g}; ingest them, or remove files that cannot be ingested"
    blocking = [f"{coverage.summary()} ({hint})"] if short else []
    record = store.corpus.index_version(candidate)
    scope = ExceptionScope(index_version=candidate, evaluator_id=report.evaluator_id, today=date.today(),
                           header_model=record["fingerprint"]["header_model"] if record else "")
    decision = decide(report.rows(), baseline.rows() if baseline else None, policy, exceptions, scope=scope,
                      blocking=blocking)
    save_report(store, report, gate=decision.model_dump(mode="json"))

    def ranks(r: EvalReport) -> dict[str, int | None]:
        return {t.task_id: t.first_rank for t in r.tasks if t.mode == policy.mode and t.status == "living"}

    regressions = worst_regressions(ranks(baseline), ranks(report), {t.id: t.query for t in gold.tasks}) \
        if baseline else []
    return CandidateEvaluation(candidate, production_version, report, baseline, coverage, decision, regressions)
