"""The evaluation gate: absolute floors, a ceiling on stale+broken gold, and no regression against the
promoted version, per metric, judged both by a tolerance and by paired significance. Reviewed
exceptions are scoped and expire; they never rewrite a raw score."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from contextual_assets.errors import ConfigurationError
from contextual_assets.settings import PlatformSettings

from .significance import bootstrap_mean_ci, paired_deltas, sign_counts, sign_test_p

GATED_METRICS = ("pass_at_5", "pass_at_10", "pass_at_20", "mrr", "ndcg_at_10")
LIVING = "living"


def _default_floors() -> dict[str, float]:
    return json.loads(PlatformSettings.default("gate_floors_json"))


class GatePolicy(BaseModel):
    mode: str = "hybrid"
    floors: dict[str, float] = Field(default_factory=_default_floors)  # e.g. {"pass_at_10": 0.6}
    tolerance: float = PlatformSettings.default("gate_tolerance")  # largest drop per metric against production
    max_unhealthy_increase: float = 0.05  # stale+broken share may not grow more than this
    max_unhealthy_share: float = PlatformSettings.default("gate_max_unhealthy_share")  # absolute ceiling
    confidence: float = Field(0.95, gt=0, lt=1)
    bootstrap_samples: int = Field(2000, ge=100)

    @field_validator("floors")
    @classmethod
    def _known_metrics(cls, floors: dict[str, float]) -> dict[str, float]:
        # A misspelt metric would be a floor that silently never applies.
        unknown = sorted(set(floors) - set(GATED_METRICS))
        if unknown:
            raise ValueError(f"unknown metric(s) {', '.join(unknown)} in floors; gated: {', '.join(GATED_METRICS)}")
        return floors


class ReviewedException(BaseModel):
    task_id: str
    reason: str = Field(min_length=1)
    reviewer: str = Field(min_length=1)
    date: date
    expires: date | None = None
    index_version: str | None = None
    header_model: str | None = None
    evaluator_id: str | None = None


class ExceptionScope(BaseModel):
    """What is being gated: an exception applies only to the version, header model and evaluator it names."""

    index_version: str
    header_model: str
    evaluator_id: str
    today: date


def _why_not(exception: ReviewedException, scope: ExceptionScope) -> list[str]:
    problems = []
    if exception.expires is None:
        problems.append("no expiry date")
    elif exception.expires < scope.today:
        problems.append(f"expired on {exception.expires.isoformat()}")
    if exception.index_version is None and exception.header_model is None:
        problems.append("no scope: name index_version or header_model")
    if exception.index_version is not None and exception.index_version != scope.index_version:
        problems.append(f"scoped to version {exception.index_version}, this is {scope.index_version}")
    if exception.header_model is not None and exception.header_model != scope.header_model:
        problems.append(f"scoped to header model {exception.header_model}, this is {scope.header_model}")
    if exception.evaluator_id is None:
        problems.append("no evaluator_id: name the evaluator it was reviewed under")
    elif exception.evaluator_id != scope.evaluator_id:
        problems.append(f"scoped to evaluator {exception.evaluator_id}, this is {scope.evaluator_id}")
    return problems


def applicable_exceptions(exceptions: Sequence[ReviewedException],
                          scope: ExceptionScope | None) -> tuple[list[ReviewedException], list[str]]:
    """(the exceptions that apply, one line per other exception saying why not)."""
    if scope is None:
        return [], [f"{e.task_id}: no scope given" for e in exceptions]
    applied, ignored = [], []
    for exception in exceptions:
        problems = _why_not(exception, scope)
        if problems:
            ignored.append(f"{exception.task_id}: {'; '.join(problems)}")
        else:
            applied.append(exception)
    return applied, ignored


def load_exceptions(path: str | None) -> list[ReviewedException]:
    """Reviewed exceptions from YAML (a list of mappings) or JSONL (one object a line). Fields:
    task_id, reason, reviewer, date (YYYY-MM-DD), and to apply at all: expires (YYYY-MM-DD, not in
    the past), evaluator_id, and index_version and/or header_model. For example, in YAML:

        - {task_id: t3, reason: gold chunk reworded, reviewer: qa, date: 2026-05-01,
           expires: 2026-06-30, index_version: iv-1a2b, evaluator_id: 9f3c0e12ab34cd56}
    """
    if not path:
        return []
    file = Path(path)
    if not file.exists():
        raise ConfigurationError(f"reviewed-exceptions file {file} not found (CTX_GATE_EXCEPTIONS)")
    try:
        text = file.read_text(encoding="utf-8")
        items = ([json.loads(line) for line in text.splitlines() if line.strip()] if file.suffix == ".jsonl"
                 else (yaml.safe_load(text) or []))
        if not isinstance(items, list):
            raise TypeError("expected a list of exceptions")
        return [ReviewedException.model_validate(item) for item in items]
    except (ValueError, TypeError, ValidationError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"{file}: invalid reviewed exception ({str(exc)[:200]})") from None


class MetricVerdict(BaseModel):
    metric: str
    candidate_raw: float  # graded tasks, no exception applied
    candidate: float  # with reviewed exceptions applied: what the floor is checked against
    production: float | None
    delta: float | None  # mean paired delta over the compared tasks
    floor: float | None
    passed: bool
    reason: str = ""
    candidate_compared: float | None = None  # the candidate on the compared tasks: delta = this - production
    ci_low: float | None = None
    ci_high: float | None = None
    p_sign: float | None = None
    effective_tolerance: float | None = None
    significant_drop: bool = False


class GateDecision(BaseModel):
    passed: bool
    mode: str
    compared_tasks: int
    excepted_tasks: list[str]
    verdicts: list[MetricVerdict]
    unhealthy_share_candidate: float
    unhealthy_share_production: float | None
    reasons: list[str]
    lost_tasks: list[str] = []
    ignored_exceptions: list[str] = []
    notes: list[str] = []


def _value(row: dict, metric: str) -> float:
    return row["reciprocal_rank" if metric == "mrr" else metric]  # MRR is the mean of per-task reciprocal ranks


def _mean(rows: list[dict], metric: str) -> float:
    return statistics.mean(_value(r, metric) for r in rows) if rows else 0.0


def _miss(task_id: str, mode: str) -> dict:
    """A task whose evidence the candidate lost: graded as not found at all."""
    return {"task_id": task_id, "mode": mode, "status": "lost", "first_rank": None, "pass_at_5": 0.0,
            "pass_at_10": 0.0, "pass_at_20": 0.0, "reciprocal_rank": 0.0, "ndcg_at_10": 0.0}


def _unhealthy(rows: dict[str, dict]) -> float:
    return sum(1 for r in rows.values() if r["status"] != LIVING) / len(rows) if rows else 0.0


def _listed(ids: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", ... ({len(ids) - limit} more)" if len(ids) > limit else "")


def _regression(metric: str, cand: list[dict], prod: list[dict], policy: GatePolicy) -> dict:
    """Paired comparison on the same tasks: the point drop against an effective tolerance, and significance."""
    deltas = paired_deltas([_value(r, metric) for r in cand], [_value(r, metric) for r in prod])
    delta = statistics.mean(deltas)
    low, high = bootstrap_mean_ci(deltas, policy.confidence, policy.bootstrap_samples)
    p_sign = sign_test_p(*sign_counts(deltas))
    # On a tiny gold set one task flipping moves the mean by 1/n: that alone is not a regression.
    tolerance = max(policy.tolerance, 1 / len(deltas))
    over = -delta > tolerance + 1e-12
    significant = high < 0
    reason = ""
    if over or significant:
        judged = (f"over the tolerance {tolerance:.3f}" if over else f"within the tolerance {tolerance:.3f}")
        judged += (" and a significant drop" if over else " but a significant drop") if significant else \
            ", not significant"
        reason = (f"{metric} fell {-delta:.3f} against production ({judged}: {policy.confidence:.0%} CI "
                  f"{low:+.3f}..{high:+.3f}, sign test p={p_sign:.3g})")
    return {"candidate_compared": _mean(cand, metric), "production": _mean(prod, metric), "delta": delta,
            "ci_low": low, "ci_high": high, "p_sign": p_sign, "effective_tolerance": tolerance,
            "significant_drop": significant, "reason": reason}


def _verdict(metric: str, graded_rows: dict[str, dict], graded: list[str], kept: list[str],
             kept_compared: list[str], prod: dict[str, dict] | None,
             policy: GatePolicy) -> tuple[MetricVerdict, list[str]]:
    """One metric against its floor and, when there is a production, against production; with its reasons."""
    raw = _mean([graded_rows[t] for t in graded], metric)
    with_exceptions = _mean([graded_rows[t] for t in kept], metric)
    floor = policy.floors.get(metric)
    metric_reasons = []
    if floor is not None and with_exceptions < floor:
        metric_reasons.append(f"{metric} {with_exceptions:.3f} below the floor {floor:.3f}")
    comparison: dict = {"production": None, "delta": None}
    if prod is not None and kept_compared:
        comparison = _regression(metric, [graded_rows[t] for t in kept_compared],
                                 [prod[t] for t in kept_compared], policy)
        if comparison["reason"]:
            metric_reasons.append(comparison["reason"])
    comparison.pop("reason", None)
    return MetricVerdict(metric=metric, candidate_raw=raw, candidate=with_exceptions, floor=floor,
                         passed=not metric_reasons, reason="; ".join(metric_reasons), **comparison), metric_reasons


def decide(candidate: list[dict], production: list[dict] | None, policy: GatePolicy,
           exceptions: Sequence[ReviewedException], scope: ExceptionScope | None = None,
           blocking: Sequence[str] = ()) -> GateDecision:
    """`candidate` / `production` are per-task rows (task_id, mode, status, metrics...). `blocking`:
    reasons the caller found (coverage, ...) that fail the gate whatever the metrics say."""
    cand = {r["task_id"]: r for r in candidate if r["mode"] == policy.mode}
    prod = {r["task_id"]: r for r in production if r["mode"] == policy.mode} if production is not None else None
    applied, ignored = applicable_exceptions(exceptions, scope)
    excused = {e.task_id for e in applied}
    notes: list[str] = []

    cand_living = {t for t, r in cand.items() if r["status"] == LIVING}
    # Lost evidence: living in production, not in the candidate. A miss of the candidate, not a dropped task.
    prod_living = {t for t, r in prod.items() if r["status"] == LIVING} if prod is not None else set()
    lost = sorted(prod_living - cand_living)
    graded_rows = {t: cand[t] for t in cand_living} | {t: _miss(t, policy.mode) for t in lost}
    graded = sorted(graded_rows)  # floors: the candidate's living tasks plus its lost ones
    compared = sorted(prod_living) if prod is not None else graded
    excepted = sorted(excused & (set(graded) | set(compared)))
    kept = [t for t in graded if t not in excused]
    kept_compared = [t for t in compared if t not in excused]
    if lost:
        notes.append(f"the candidate lost the evidence of {len(lost)} tasks living in production ({_listed(lost)})")
    if prod is not None and not prod_living:
        notes.append("production has no living gold task: the candidate is judged on floors only")

    judged = [_verdict(metric, graded_rows, graded, kept, kept_compared, prod, policy) for metric in GATED_METRICS]
    verdicts = [verdict for verdict, _ in judged]
    reasons = [reason for _, metric_reasons in judged for reason in metric_reasons]
    share_c = _unhealthy(cand)
    share_p = _unhealthy(prod) if prod is not None else None
    if share_c > policy.max_unhealthy_share:
        reasons.append(f"stale+broken gold share {share_c:.3f} is above the ceiling {policy.max_unhealthy_share:.3f}")
    if share_p is not None and share_c - share_p > policy.max_unhealthy_increase:
        reasons.append(f"stale+broken gold share rose from {share_p:.3f} to {share_c:.3f}: the candidate lost evidence")
    if not graded:
        reasons.append("no living gold task to compare on")
    elif not kept:
        reasons.append("every living task is under a reviewed exception: nothing left to compare on")
    elif prod_living and not kept_compared:
        reasons.append("every task living in production is under a reviewed exception: nothing to compare against")
    elif all(v.candidate == 0 for v in verdicts):
        # Whatever the floors are set to, a candidate that finds nothing is broken, not promotable.
        reasons.append(f"the candidate found no gold evidence on any of {len(kept)} graded tasks")
    reasons += list(blocking)
    return GateDecision(passed=not reasons, mode=policy.mode,
                        compared_tasks=len(kept_compared) if prod is not None else len(kept),
                        excepted_tasks=excepted, verdicts=verdicts, unhealthy_share_candidate=share_c,
                        unhealthy_share_production=share_p, reasons=reasons, lost_tasks=lost,
                        ignored_exceptions=ignored, notes=notes)
