"""A candidate index version evaluated per document, then decided as a whole.

`evaluate_partitions`: the gold tasks whose evidence lies in the given document partitions, searched in
the whole candidate and the whole production index (each with the embedder it was built with); per
document, the per-document rule; saved per (candidate, document) with what it was evaluated against.
`decide_candidate`: every partition of the candidate, refused while one is missing or was evaluated
against another state (candidate content, production, gold, search); then the gate's rules on the
union plus each document's verdict. The Dagster assets report both."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol

from contextual_assets.embedding import Embedder
from contextual_assets.errors import ContextualError
from contextual_assets.lifecycle.coverage import (
    VersionCoverage,
    coverage_of,
    live_documents,
)
from contextual_assets.store import ChunkStore

from .documents import TOP_K, TaskPlacement, document_verdicts, place_tasks
from .evaluate import (
    MODES,
    EvalReport,
    TaskResult,
    evaluate,
    evaluator_identity,
    report_of,
    save_report,
    section_diagnostics,
)
from .gate import (
    ExceptionScope,
    GateDecision,
    GatePolicy,
    ReviewedException,
    applicable_exceptions,
    decide,
)
from .gate_config import GateConfig
from .gold.gold_set import GoldSet
from .ranking_metrics import worst_regressions

_BASELINES: OrderedDict[tuple, tuple[ChunkStore, EvalReport]] = OrderedDict()
BASELINES_KEPT = 8


class EvaluationRefused(ContextualError):
    """A version that cannot be evaluated (its embedder cannot be loaded, a dependency is down)."""

    def __init__(self, message: str, cause: ContextualError):
        super().__init__(message)
        self.cause = cause


class EvaluationStale(ContextualError):
    """Some document partition of the candidate has no evaluation, or one made against another state:
    the gate does not decide on it (evaluate every partition again)."""


class Embedders(Protocol):
    def get(self) -> Embedder: ...

    def for_identity(self, identity: str, recipe: dict[str, str] | None = None) -> Embedder: ...


@dataclass
class PartitionEvaluation:
    """One document partition's evaluation: its record (as stored) and its tasks' ranks."""

    record: dict[str, Any]
    ranks: list[dict[str, Any]] = field(default_factory=list)  # task_id, query, production, candidate


@dataclass
class CandidateEvaluation:
    candidate: str
    production_version: str | None
    report: EvalReport
    baseline: EvalReport | None
    coverage: VersionCoverage
    decision: GateDecision
    regressions: list[Any]
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)


def version_embedder(store: ChunkStore, embedders: Embedders, index_version: str, role: str) -> Embedder:
    """The embedder `index_version` was built with; the evaluation is refused rather than scored with another."""
    record = store.corpus.index_version(index_version)
    if record is None:
        return embedders.get()  # an unregistered version holds no chunks; the caller reports that
    try:
        return embedders.for_identity(record["fingerprint"]["embedder"], (record["recipe"] or {}).get("embedder"))
    except ContextualError as exc:
        raise EvaluationRefused(f"cannot evaluate the {role} {index_version}: {exc}", exc) from None


def comparison_base(store: ChunkStore, candidate: str, alias: str) -> str | None:
    """The production version the candidate is compared with: none on a first promotion, or when
    production already is the candidate."""
    production = store.aliases.get(alias)
    if production and production != candidate and store.corpus.count_chunks(production):
        return production
    return None


def _scored(store: ChunkStore, embedder: Embedder, gold: GoldSet, version: str, label: str,
            search: dict[str, Any], chunks: list) -> EvalReport:
    try:
        return evaluate(store, embedder, gold, version, chunks=chunks, **search)
    except ContextualError as exc:  # e.g. the reranker is down: one line, not a traceback
        raise EvaluationRefused(f"cannot evaluate {label} {version}: {exc}", exc) from None


class _Evaluation:
    """What both steps share: the candidate, its comparison base, their embedders and the basis."""

    def __init__(self, store: ChunkStore, embedders: Embedders, gold: GoldSet, candidate: str, gate: GateConfig,
                 policy: GatePolicy, exceptions: Sequence[ReviewedException], search: dict[str, Any]):
        self.store, self.gold, self.candidate, self.gate, self.policy = store, gold, candidate, gate, policy
        self.exceptions, self.search = list(exceptions), search
        self.production = store.aliases.get(gate.alias)  # where the alias points now: promotion expects it there
        self.base = comparison_base(store, candidate, gate.alias)
        self.embedder = version_embedder(store, embedders, candidate, "candidate")
        self.base_embedder = version_embedder(store, embedders, self.base, "production") if self.base else None
        self.evaluator_id, self.evaluator = evaluator_identity(self.embedder, gold, MODES, **search)
        record = store.corpus.index_version(candidate)
        self.header_model = record["fingerprint"]["header_model"] if record else ""
        self._chunks: dict[str, list] = {}

    def chunks(self, version: str) -> list:
        if version not in self._chunks:
            self._chunks[version] = self.store.corpus.chunks(version)
        return self._chunks[version]

    def basis(self) -> dict[str, Any]:
        """What a document's evaluation depends on beyond its own tasks: any write to either index can move
        any task's rank, so both versions' content revisions are part of it."""
        exceptions = json.dumps([e.model_dump(mode="json") for e in self.exceptions], sort_keys=True)
        return {"candidate_revision": list(self.store.corpus.revision(self.candidate)),
                "production_version": self.base,
                "production_revision": list(self.store.corpus.revision(self.base)) if self.base else None,
                "gold_sha256": self.gold.sha256, "evaluator_id": self.evaluator_id, "mode": self.policy.mode,
                "top_k": TOP_K, "exceptions_sha256": hashlib.sha256(exceptions.encode()).hexdigest()[:16]}

    def scope(self) -> ExceptionScope:
        return ExceptionScope(index_version=self.candidate, evaluator_id=self.evaluator_id, today=date.today(),
                              header_model=self.header_model)

    def placements(self) -> dict[str, TaskPlacement]:
        return place_tasks(self.gold, self.chunks(self.candidate), *([self.chunks(self.base)] if self.base else []))

    def reports(self, task_ids: set[str]) -> tuple[EvalReport | None, EvalReport | None]:
        """The candidate's and production's reports on these tasks (saved), or (None, None) for none."""
        if not task_ids:
            return None, None
        subset = GoldSet(name=self.gold.name, sha256=self.gold.sha256,
                         tasks=[t for t in self.gold.tasks if t.id in task_ids])
        report = _scored(self.store, self.embedder, subset, self.candidate, "the candidate", self.search,
                         self.chunks(self.candidate))
        save_report(self.store, report)
        baseline = None
        if self.base:
            # Production scored with its own embedder against its own vectors, on the same tasks; once per
            # state of production in this process (a session evaluating several candidates against it).
            key = (id(self.store), self.base, tuple(self.store.corpus.revision(self.base)), self.gold.sha256,
                   evaluator_identity(self.base_embedder, self.gold, MODES, **self.search)[0], frozenset(task_ids))
            remembered = _BASELINES.get(key)
            baseline = remembered[1] if remembered else None
            if baseline is None:
                baseline = _scored(self.store, self.base_embedder, subset, self.base, "production", self.search,
                                   self.chunks(self.base))
                save_report(self.store, baseline)
                _BASELINES[key] = (self.store, baseline)  # the store kept alive: its id stays its own
                while len(_BASELINES) > BASELINES_KEPT:
                    _BASELINES.popitem(last=False)
        return report, baseline


def evaluate_partitions(store: ChunkStore, embedders: Embedders, gold: GoldSet, candidate: str,
                        partitions: Sequence[str], gate: GateConfig, policy: GatePolicy,
                        exceptions: Sequence[ReviewedException], search: dict[str, Any]) -> list[PartitionEvaluation]:
    """Evaluates the tasks of `partitions` (document partition keys) and saves one record per partition."""
    run = _Evaluation(store, embedders, gold, candidate, gate, policy, exceptions, search)
    placements = run.placements()
    wanted = set(partitions)
    task_ids = {t for t, p in placements.items() if p.partition in wanted}
    report, baseline = run.reports(task_ids)
    rows = report.rows() if report else []
    base_rows = baseline.rows() if baseline else None
    applied, _ = applicable_exceptions(run.exceptions, run.scope())
    verdicts = document_verdicts(rows, base_rows, {t: placements[t].document for t in task_ids}, policy.mode,
                                 excused={e.task_id for e in applied})
    basis = run.basis()
    queries = {t.id: t.query for t in gold.tasks}
    cand_rows = {r["task_id"]: r for r in rows if r["mode"] == policy.mode}
    prod_rows = {r["task_id"]: r for r in base_rows or [] if r["mode"] == policy.mode}
    evaluations = []
    for key in partitions:
        ids = sorted(t for t in task_ids if placements[t].partition == key)
        documents = sorted({placements[t].document for t in ids})
        failed = [verdicts[d] for d in documents if d in verdicts and not verdicts[d].passed]
        ranks = [{"task_id": t, "query": queries[t], "document": placements[t].document,
                  "production": prod_rows[t]["first_rank"] if t in prod_rows else None,
                  "candidate": cand_rows[t]["first_rank"] if t in cand_rows else None,
                  "status": cand_rows[t]["status"] if t in cand_rows else "lost"} for t in ids]
        graded = [r for r in ranks if r["status"] == "living"]
        placed = set(ids)
        confusion, spread = section_diagnostics(report, GoldSet(name=gold.name, sha256=gold.sha256, tasks=[
            t for t in gold.tasks if t.id in placed])) if ids else (None, None)
        metrics = {"tasks": len(ids), "documents": len(documents),
                   f"candidate_pass_at_{TOP_K}": _share(graded, "candidate"),
                   f"production_pass_at_{TOP_K}": _share(ranks, "production") if run.base else None,
                   "lost_top_k": sum(len(verdicts[d].lost) for d in documents if d in verdicts),
                   "gained_top_k": sum(len(verdicts[d].gained) for d in documents if d in verdicts),
                   "within_section_confusion": confusion, "score_spread": spread}
        record = {"index_version": candidate, "doc_id": key, "run_id": report.run_id if ids else None,
                  "baseline_run_id": baseline.run_id if ids and baseline else None, "production_version": run.base,
                  "basis": basis, "task_ids": ids, "passed": not failed, "reasons": [v.reason for v in failed],
                  "metrics": metrics}
        evaluations.append(PartitionEvaluation(record, ranks))
    store.eval_runs.save_documents([e.record for e in evaluations])
    return evaluations


def _share(ranks: list[dict], role: str) -> float | None:
    found = [r[role] for r in ranks]
    return round(sum(1 for x in found if x is not None and x <= TOP_K) / len(found), 4) if found else None


def _listed(keys: Sequence[str]) -> str:
    return ", ".join(keys[:5]) + (f", ... ({len(keys) - 5} more)" if len(keys) > 5 else "")


def _rows(store: ChunkStore, runs: dict[str, set[str]]) -> list[dict]:
    return [row for run_id, ids in runs.items() for row in store.eval_runs.tasks(run_id) if row["task_id"] in ids]


def decide_candidate(store: ChunkStore, embedders: Embedders, gold: GoldSet, candidate: str,
                     partitions: Sequence[str], gate: GateConfig, policy: GatePolicy,
                     exceptions: Sequence[ReviewedException], search: dict[str, Any]) -> CandidateEvaluation:
    """The gate on every document partition of `candidate`; raises EvaluationStale when a partition has no
    evaluation or one against another state. Saves the union report with the decision."""
    run = _Evaluation(store, embedders, gold, candidate, gate, policy, exceptions, search)
    records = store.eval_runs.documents(candidate)
    basis = run.basis()
    missing = [k for k in partitions if k not in records]
    stale = [k for k in partitions if k in records and records[k]["basis"] != basis]
    if missing or stale:
        parts = ([f"{len(missing)} document partition(s) of retrieval_eval not evaluated for {candidate} "
                  f"({_listed(missing)})"] if missing else []) + \
                ([f"{len(stale)} evaluated against another state of the candidate, production, gold or search "
                  f"({_listed(stale)})"] if stale else [])
        raise EvaluationStale("; ".join(parts) + ": materialize every partition of retrieval_eval for this "
                                                 "candidate first (`ctx eval` does both)")
    wanted = [records[k] for k in partitions]
    covered = {t for r in wanted for t in r["task_ids"]}
    cand_runs: dict[str, set[str]] = {}
    base_runs: dict[str, set[str]] = {}
    for record in wanted:
        if record["run_id"]:
            cand_runs.setdefault(record["run_id"], set()).update(record["task_ids"])
        if record["baseline_run_id"]:
            base_runs.setdefault(record["baseline_run_id"], set()).update(record["task_ids"])
    rows, base_rows = _rows(store, cand_runs), _rows(store, base_runs)
    # Tasks whose evidence no partition holds (stale or broken gold, or a document outside the partitions).
    report, baseline = run.reports({t.id for t in gold.tasks} - covered)
    rows += report.rows() if report else []
    base_rows += baseline.rows() if baseline else []

    coverage = coverage_of(store, candidate, live_documents(store, run.production))
    short = coverage.share < gate.min_coverage or (gate.min_coverage >= 1.0 and not coverage.complete)
    hint = f"CTX_GATE_MIN_COVERAGE {gate.min_coverage:g}; ingest them, or remove files that cannot be ingested"
    blocking = [f"{coverage.summary()} ({hint})"] if short else []
    blocking += [reason for r in wanted for reason in r["reasons"]]
    decision = decide(rows, base_rows if run.base else None, policy, exceptions, scope=run.scope(), blocking=blocking)
    union = report_of(candidate, gold, run.evaluator_id, run.evaluator, [TaskResult(**r) for r in rows])
    union_base = report_of(run.base, gold, run.evaluator_id, run.evaluator,
                           [TaskResult(**r) for r in base_rows]) if run.base else None
    # The candidate's content as judged: promotion refuses a candidate that changed after this decision.
    save_report(store, union, gate={**decision.model_dump(mode="json"),
                                    "candidate_revision": basis["candidate_revision"]})

    def ranks(r: EvalReport) -> dict[str, int | None]:
        return {t.task_id: t.first_rank for t in r.tasks if t.mode == policy.mode and t.status == "living"}

    regressions = worst_regressions(ranks(union_base), ranks(union), {t.id: t.query for t in gold.tasks}) \
        if union_base else []
    return CandidateEvaluation(candidate, run.production, union, union_base, coverage, decision, regressions,
                               documents={r["doc_id"]: r for r in wanted})
